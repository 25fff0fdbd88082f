"""What both simulation back ends share: frames, ports, the stall generator, the cycle rules.

The cycle rules (implemented identically in :mod:`apiary.sim.pysim` and in the C++ harness, so
that both back ends give the same frames on the same cycles):

Cycles are numbered from 0; *cycle t* ends with the t-th rising clock edge (counting from 0), and
a word "moves on cycle t" when ``valid`` and ``ready`` are both high just before that edge. Before
each edge, for each Ethernet port in order:

1. Step the port's two xorshift32 generators once each (``rx`` then ``tx``), whether or not the
   values are used.
2. ``mac_rx``: if no word is being offered and a frame is waiting, the bench starts offering its
   next word unless the ``rx`` value is below the gap threshold (an idle gap). A word once offered
   (``valid`` high) stays offered until it is taken, as streams require.
3. ``mac_tx``: ``ready`` is low if the ``tx`` value is below the stall threshold, else high.

A frame of ``n`` bytes is ``max(1, ceil(n / (width/8)))`` words on the port's ``rx`` stream (a
:class:`~apiary.stream.mac.MacPort` with ``tkeep`` byte enables), byte ``i`` of a word in lane
``i``, every word full but the last, which has ``keep`` set for its ``n`` valid bytes and
``last`` set; ``error`` is 0.

Stamps: an input frame's ``cycle_first``/``cycle_last`` are the cycles its first and last words
were taken by the design; an output frame's are the cycles its first and last words left the
design on ``mac_tx``. The latency of a loopback is therefore ``out.cycle_first - in.cycle_last``
(store-and-forward) or ``out.cycle_last - in.cycle_last``.

*Idle*: every input queue is empty, no input word is being offered, and no ``mac_tx`` has had
``valid`` high for the last ``idle_cycles`` cycles.
"""

from dataclasses import dataclass


__all__ = ["Frame", "FramePort", "SimError", "BuildError", "Xorshift32", "seed_state",
           "threshold", "frame_words", "find_ports"]


class SimError(Exception):
    """A simulation could not be set up or driven as asked (bad port, bad argument, no ports)."""


class BuildError(SimError):
    """A tool needed to build the simulation model is missing or failed.

    ``str(error)`` names the tool and quotes the last lines of its output.

    Attributes
    ----------
    tool : str
    log : str
        The tool's whole output, if it ran.
    """

    def __init__(self, tool, message, log=""):
        self.tool = tool
        self.log = log
        tail = "\n".join(log.strip().splitlines()[-25:])
        text = f"{tool}: {message}"
        if tail:
            text += "\n--- last lines of its output ---\n" + tail
        super().__init__(text)


@dataclass(frozen=True)
class Frame:
    """An Ethernet frame seen at a port, with the cycles its first and last words moved.

    ``cycle_first``/``cycle_last``: for a frame sent into the design, the cycles its first and
    last words were taken by ``mac_rx``; for a frame out of the design, the cycles its first and
    last words left on ``mac_tx`` (see :mod:`apiary.sim.core` for the cycle numbering).
    """
    data: bytes
    cycle_first: int
    cycle_last: int
    port: str = ""

    def __len__(self):
        return len(self.data)


@dataclass(frozen=True)
class FramePort:
    """One Ethernet-facing port of a design: the top-level :class:`~apiary.stream.mac.MacPort`
    ``member`` (``<name>_mac``), frames into the design on its ``rx``, out on its ``tx``."""
    name: str
    width: int
    member: str


_MASK = 0xFFFFFFFF


def seed_state(seed, k):
    """The initial state of generator ``k`` (``2*port`` for rx, ``2*port+1`` for tx)."""
    x = (seed ^ ((k + 1) * 0x9E3779B9)) & _MASK
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & _MASK
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & _MASK
    x ^= x >> 16
    return x or 0x6A09E667


class Xorshift32:
    """Marsaglia's xorshift32 (13, 17, 5); the C++ harness has the same one."""

    def __init__(self, state):
        self.state = state & _MASK or 0x6A09E667

    def next(self):
        x = self.state
        x ^= (x << 13) & _MASK
        x ^= x >> 17
        x ^= (x << 5) & _MASK
        self.state = x
        return x


def threshold(p, what):
    """A probability as a 32-bit threshold: an event happens when a generator value is below it."""
    if not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise SimError(f"{what} must be a probability from 0 up to (not including) 1, not {p!r}")
    return min(int(p * 2 ** 32), _MASK)


def frame_words(data, nb):
    """The words of a frame: a list of ``(data_int, nbytes, last)`` (``keep`` is
    ``(1 << nbytes) - 1``)."""
    n = max(1, -(-len(data) // nb))
    words = []
    for i in range(n):
        chunk = data[i * nb:(i + 1) * nb]
        words.append((int.from_bytes(chunk, "little"), len(chunk), int(i == n - 1)))
    return words


def find_ports(top):
    """The :class:`FramePort`\\ s of an elaborated :class:`~apiary.top.DesignTop`, one per MAC port
    (:attr:`~apiary.top.DesignTop.mac_ports`), in declaration order."""
    return [FramePort(p.name, top.design.width, p.member) for p in top.mac_ports]
