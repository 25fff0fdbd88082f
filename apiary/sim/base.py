"""The testbench API both back ends implement: :class:`Sim`."""

from collections import deque

from .core import Frame, SimError, threshold
from .impair import Impairment


__all__ = ["Sim", "DEFAULT_CLOCK_HZ", "DEFAULT_MAX_CYCLES", "DEFAULT_IDLE_CYCLES",
           "default_clock_mhz"]


#: The reference clock for converting cycles to time (the Beehive paper's 250 MHz, Alveo U200).
DEFAULT_CLOCK_HZ = 250_000_000
#: The clock of a 64-bit data plane (gigabit Ethernet's MAC clock, the small boards').
SMALL_CLOCK_HZ = 125_000_000


def default_clock_mhz(width: int) -> float:
    """The clock, in MHz, that the command line converts cycles to time at for a ``width``-bit
    data plane when no ``--clock-mhz`` is given: 125 MHz at 64 bits (gigabit Ethernet's MAC
    clock, the project's small boards), else 250 MHz (the Beehive paper's clock at 512 bits;
    128 and 256 bits, which have no board of their own, share it)."""
    return (SMALL_CLOCK_HZ if width <= 64 else DEFAULT_CLOCK_HZ) / 1e6
DEFAULT_MAX_CYCLES = 1_000_000
DEFAULT_IDLE_CYCLES = 1000


class Sim:
    """A running simulation of a design, driven through its Ethernet-facing ports.

    Open one with :func:`apiary.sim.open_sim`. The same calls work on every back end and, for the
    same design, seed and stall settings, give the same frames on the same cycles::

        with open_sim(design, "verilator", seed=1, stall=0.2) as sim:
            sim.send(Ether() / IP() / UDP())
            sim.run()
            for frame in sim.received():
                print(frame.cycle_last, frame.data.hex())

    Attributes
    ----------
    backend : str
        ``"pysim"`` or ``"verilator"``.
    design : Design
    ports : list of FramePort
        The design's Ethernet ports (its MAC ports, ``<name>_mac``), in declaration order.
    counter_names : list of str
        The design's counter bank (:class:`~apiary.counters.CounterBank`), in its order.
    clock_hz : float
        The clock that cycles convert to time at (pcap timestamps, waveform time).
    impairment : Impairment or None
        The lossy link between the testbench and every port (``None``: a perfect one). Frames
        given to :meth:`send_many` pass its ``to_design`` direction before they are queued;
        frames the design sends pass ``from_design`` before :meth:`received` sees them. A frame
        held back for reordering enters when the next :meth:`run` starts; one leaving the design
        is released when the run ends. :meth:`link` has the counts.
    """

    backend: str | None = None

    def __init__(self, design, top, ports, counter_names, *, seed, stall, gaps, clock_hz,
                 idle_cycles, impair=None):
        if not ports:
            raise SimError(f"design {design.name!r} has no Ethernet port: no tile with a "
                           f"FrameStream pair (mac_rx / mac_tx, as FramePortTile or the Ethernet "
                           f"RX and TX tiles have)")
        if not isinstance(clock_hz, (int, float)) or clock_hz <= 0:
            raise SimError(f"clock_hz must be a positive number, not {clock_hz!r}")
        if not isinstance(idle_cycles, int) or idle_cycles < 1:
            raise SimError(f"idle_cycles must be a positive integer, not {idle_cycles!r}")
        if seed is None:
            seed = 1
        if not isinstance(seed, int) or not 0 <= seed < 2 ** 32:
            raise SimError(f"seed must be an integer from 0 to 2**32-1, not {seed!r}")
        if impair is not None and not isinstance(impair, Impairment):
            raise SimError(f"impair must be an apiary.sim.Impairment, not {impair!r}")
        self.design = design
        self.top = top
        self.ports = ports
        self.counter_names = counter_names
        self.seed = seed
        self.stall = stall
        self.gaps = stall if gaps is None else gaps
        self.stall_threshold = threshold(stall, "stall")
        self.gap_threshold = threshold(self.gaps, "gaps")
        self.clock_hz = clock_hz
        self.idle_cycles = idle_cycles
        self._index = {p.name: i for i, p in enumerate(ports)}
        self._received: list[list[Frame]] = [[] for _ in ports]
        self._sent: list[list[Frame]] = [[] for _ in ports]
        self._queued = [0] * len(ports)   # frames handed to the back end, not yet taken
        self._closed = False
        # One impaired link per port (named after the port when there are several), or None.
        self.impairment = impair or None
        self._links = None if not impair else [
            impair.link(p.name if len(ports) > 1 else None) for p in ports]

    # -- the back end implements these ----------------------------------------------------------

    def _push(self, index, frames):           # list of bytes
        raise NotImplementedError

    def _run(self, cycles, until_idle, max_cycles):  # -> cycles run
        raise NotImplementedError

    def _collect(self):                      # -> (received, sent): per port, lists of Frame
        raise NotImplementedError

    def _read_counters(self):                # -> list of int, counter_names order
        raise NotImplementedError

    @property
    def cycle(self):
        """Cycles simulated so far (the number of the next cycle)."""
        raise NotImplementedError

    @property
    def idle(self):
        """Whether the design is idle by the rule of :mod:`apiary.sim.core`."""
        raise NotImplementedError

    def _close(self):
        pass

    # -- the API -----------------------------------------------------------------------------

    def port(self, name=None):
        """The :class:`FramePort` called ``name``; with ``None``, the design's only port."""
        return self.ports[self._port_index(name)]

    def _port_index(self, name):
        if name is None:
            if len(self.ports) != 1:
                raise SimError(f"design {self.design.name!r} has {len(self.ports)} Ethernet ports "
                               f"({', '.join(p.name for p in self.ports)}); name one with port=")
            return 0
        if name not in self._index:
            raise SimError(f"design {self.design.name!r} has no Ethernet port {name!r}; its ports "
                           f"are {', '.join(p.name for p in self.ports)}")
        return self._index[name]

    def send(self, frame, port=None):
        """Queue one frame (``bytes`` or a scapy packet) for ``port``; it enters when run."""
        self.send_many([frame], port)

    def send_many(self, frames, port=None):
        """Queue several frames for ``port`` at once (one call into the back end)."""
        self._check_open()
        index = self._port_index(port)
        raw = []
        for f in frames:
            try:
                raw.append(bytes(f))
            except Exception as e:  # noqa: BLE001 -- anything that is not a frame
                raise SimError(f"cannot send {type(f).__name__} as a frame: {e}") from None
        if self._links:
            raw = self._links[index].to_design.apply(raw)
        self._enqueue(index, raw)

    def _enqueue(self, index, raw):
        self._push(index, raw)
        self._queued[index] += len(raw)

    def run(self, cycles=None, *, until_idle=None, max_cycles=DEFAULT_MAX_CYCLES):
        """Simulate.

        ``run(n)`` simulates exactly ``n`` cycles. ``run()`` simulates until the design is idle
        (every queued frame has entered and no word has moved in or out for ``idle_cycles``
        cycles), at most ``max_cycles`` cycles. ``run(n, until_idle=True)`` stops at idle or after
        ``n`` cycles, whichever is first. Returns the number of cycles simulated.
        """
        self._check_open()
        if until_idle is None:
            until_idle = cycles is None
        limit = max_cycles if cycles is None else cycles
        if not isinstance(limit, int) or limit < 0:
            raise SimError(f"cycles must be a non-negative integer, not {limit!r}")
        for i, link in enumerate(self._links or ()):
            held = link.to_design.flush()
            if held:
                self._enqueue(i, held)
        ran = self._run(limit, bool(until_idle), limit)
        self._pull()
        return ran

    def _pull(self):
        received, sent = self._collect()
        for i in range(len(self.ports)):
            if self._links:
                impaired = self._links[i].from_design
                received[i] = impaired.apply(received[i]) + impaired.flush()
            self._received[i].extend(received[i])
            self._sent[i].extend(sent[i])
            self._queued[i] -= len(sent[i])

    def received(self, port=None, *, clear=False):
        """Frames that left the design on ``port`` so far, in order (see :class:`Frame`).
        With ``clear=True`` they are also forgotten, so the next call returns only newer ones."""
        index = self._port_index(port)
        frames = list(self._received[index])
        if clear:
            self._received[index].clear()
        return frames

    def sent(self, port=None, *, clear=False):
        """Frames the design has taken on ``port`` so far, with the cycles they entered."""
        index = self._port_index(port)
        frames = list(self._sent[index])
        if clear:
            self._sent[index].clear()
        return frames

    def pending(self, port=None):
        """Frames queued for ``port`` that have not entered the design yet (with any the
        impaired link holds back)."""
        index = self._port_index(port)
        return self._queued[index] + (self._links[index].to_design.held if self._links else 0)

    def link(self, port=None):
        """The :class:`~apiary.sim.impair.ImpairedLink` of ``port``, with its counts
        (``link().summary()``); ``None`` without an impairment."""
        index = self._port_index(port)
        return self._links[index] if self._links else None

    def counters(self):
        """Every counter of the design's counter bank (``<tile>_<counter>``,
        ``<plane>_route_dropped``...), by name, as of the end of the last run."""
        self._check_open()
        return dict(zip(self.counter_names, self._read_counters()))

    def seconds(self, cycle):
        """A cycle number as simulated time in seconds at :attr:`clock_hz`."""
        return cycle / self.clock_hz

    def close(self):
        """Finish: write the waveform file, if any, and release the model."""
        if not self._closed:
            self._closed = True
            self._close()

    def _check_open(self):
        if self._closed:
            raise SimError("this simulation has been closed")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"<{type(self).__name__} {self.design.name!r} on {self.backend}, cycle "
                f"{self.cycle}, ports {', '.join(p.name for p in self.ports)}>")


class PortState:
    """The cycle rules of :mod:`apiary.sim.core` for one port, in Python (pysim's bench).
    ``harness.cpp`` implements the same rules in C++."""

    def __init__(self, nb, rx_rng, tx_rng):
        self.nb = nb
        self.rx_rng = rx_rng
        self.tx_rng = tx_rng
        self.queue: deque[bytes] = deque()
        self.words: list | None = None     # the frame being sent, as words
        self.frame = b""
        self.word = 0
        self.offering = False
        self.first = 0
        self.out = bytearray()
        self.out_first = 0
        self.received = []
        self.sent = []
