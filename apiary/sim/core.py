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

A frame of ``n`` bytes is ``max(1, ceil(n / (width/8)))`` words, byte ``i`` of a word in lane
``i``, every word full but the last, which has ``nbytes`` valid bytes and ``last`` set.

Stamps: an input frame's ``cycle_first``/``cycle_last`` are the cycles its first and last words
were taken by the design; an output frame's are the cycles its first and last words left the
design on ``mac_tx``. The latency of a loopback is therefore ``out.cycle_first - in.cycle_last``
(store-and-forward) or ``out.cycle_last - in.cycle_last``.

*Idle*: every input queue is empty, no input word is being offered, and no ``mac_tx`` has had
``valid`` high for the last ``idle_cycles`` cycles.
"""

import os
from dataclasses import dataclass

from amaranth.hdl import Shape, Value
from amaranth.lib.wiring import Flow

from ..noc.flit import payload_layout


__all__ = ["Frame", "FramePort", "SimError", "BuildError", "Xorshift32", "seed_state",
           "threshold", "frame_words", "find_ports", "find_counters"]


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
    """One Ethernet-facing port of a design: the top-level payload streams ``rx`` (into the
    design, ``<tile>_mac_rx``) and ``tx`` (out of it, ``<tile>_mac_tx``)."""
    name: str
    width: int
    rx: str
    tx: str


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
    """The payload words of a frame: a list of ``(data_int, nbytes, last)``."""
    n = max(1, -(-len(data) // nb))
    words = []
    for i in range(n):
        chunk = data[i * nb:(i + 1) * nb]
        words.append((int.from_bytes(chunk, "little"), len(chunk), int(i == n - 1)))
    return words


def _is_payload_stream(member, width):
    if not member.is_signature:
        return False
    members = member.signature.members
    return (set(members.keys()) == {"payload", "valid", "ready"}
            and members["payload"].is_port and members["payload"].shape == payload_layout(width))


def find_ports(top):
    """The :class:`FramePort`\\ s of an elaborated design top, in declaration order.

    A port is a top-level payload stream ``<tile>_mac_rx`` into the design and one
    ``<tile>_mac_tx`` out of it. One tile with both is a port named after the tile. A design
    with its MAC split over two tiles (``eth_rx`` with ``mac_rx``, ``eth_tx`` with ``mac_tx``,
    as Beehive has it) has one port named after what their names share (``eth``), provided
    exactly one receive and one transmit stream are left unpaired.
    """
    members = top.signature.members
    width = top.design.width
    rx = [k[:-len("_mac_rx")] for k, m in members.items() if k.endswith("_mac_rx")
          and m.flow == Flow.In and _is_payload_stream(m, width)]
    tx = [k[:-len("_mac_tx")] for k, m in members.items() if k.endswith("_mac_tx")
          and m.flow == Flow.Out and _is_payload_stream(m, width)]
    ports = [FramePort(name, width, f"{name}_mac_rx", f"{name}_mac_tx")
             for name in rx if name in tx]
    lone_rx = [name for name in rx if name not in tx]
    lone_tx = [name for name in tx if name not in rx]
    if len(lone_rx) == 1 and len(lone_tx) == 1:
        a, b = lone_rx[0], lone_tx[0]
        shared = os.path.commonprefix([a, b]).rstrip("_") or f"{a}_{b}"
        ports.append(FramePort(shared, width, f"{a}_mac_rx", f"{b}_mac_tx"))
    return ports


def find_counters(top):
    """Names of the top-level outputs that are plain signals of at most 64 bits (counters)."""
    names = []
    for key, member in top.signature.members.items():
        if member.is_port and member.flow == Flow.Out:
            if isinstance(getattr(top, key), Value) and Shape.cast(member.shape).width <= 64:
                names.append(key)
    return names
