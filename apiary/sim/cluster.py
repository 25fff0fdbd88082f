"""Several boards in one simulation, joined by Ethernet links with a latency and, optionally,
seeded loss: multi-board designs (Enzian: "Don't just think in single units").

::

    cluster = Cluster()
    cluster.add_board("w0", open_sim(design0, "verilator"))
    cluster.add_board("w1", open_sim(design1, "verilator"))
    leader = cluster.add_host("leader")              # a Python end: a client, a VR leader
    cluster.add_switch("sw")                         # an Ethernet switch (learns MACs)
    cluster.link("leader", "sw", latency=100)
    cluster.link("w0", "sw", latency=100, loss=0.01, seed=7)
    cluster.link("w1", "sw", latency=100)
    leader.send(frame)
    cluster.run()                                    # until every board is idle and no frame flies
    leader.received()                                # [Frame(data, cycle_first, cycle_last)]

An *end* is a board's Ethernet port (``"w0"``, or ``"w0:eth"`` on a board with several), a
host or a switch port (each :meth:`Cluster.link` to a switch adds one). Every board is an open
:class:`~apiary.sim.Sim` of its own design, on either back end, all at one clock: cycle *t* is
the same instant on every board.

A link carries frames both ways, in order, each direction on its own: a frame whose last word
left one end on cycle *t* starts entering the other end on cycle ``t + latency`` (a host's frame
leaves on the cycle it is sent); with ``loss`` it is dropped instead, with that probability,
by a generator seeded from ``seed`` and the direction (``random.Random(f"{seed}:{a}>{b}")``,
one draw per frame), so a seed gives the same losses on every run and back end. A switch
forwards a frame on the cycle it arrives: to the port its destination MAC was last seen on,
else to every other port.

The cluster runs the boards in lockstep, in steps no longer than the shortest link's latency:
a frame that leaves a board during a step is due at the other end after the step, so each
board is run up to the exact cycle each frame is due, the frame is queued, and the board runs
on (conservative synchronisation, as a co-simulation of separate simulators would do).
"""

import heapq
import itertools
import random
from dataclasses import dataclass, field
from typing import Any

from .base import DEFAULT_MAX_CYCLES
from .core import Frame, SimError


__all__ = ["Cluster", "Host", "Link", "LinkCounts"]

#: Cycles per step of a cluster without links (nothing to keep in step).
_UNLINKED_STEP = 1000


@dataclass
class LinkCounts:
    """One direction of a link: frames offered, lost, delivered."""
    frames: int = 0
    lost: int = 0
    delivered: int = 0


@dataclass
class Link:
    """A link between ends ``a`` and ``b``: ``latency`` cycles, ``loss`` probability per
    frame, ``seed``; ``counts[(a, b)]`` and ``counts[(b, a)]`` per direction."""
    a: str
    b: str
    latency: int
    loss: float
    seed: int
    counts: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = {(x, y): random.Random(f"{self.seed}:{x}>{y}")
                     for x, y in ((self.a, self.b), (self.b, self.a))}
        self.counts = {key: LinkCounts() for key in self._rng}

    def carries(self, src: str, dst: str) -> bool:
        """Count a frame from ``src`` to ``dst`` and draw whether it gets there."""
        counts = self.counts[(src, dst)]
        counts.frames += 1
        if self._rng[(src, dst)].random() < self.loss:
            counts.lost += 1
            return False
        counts.delivered += 1
        return True


class Host:
    """A Python end: what the test (a client, a VR leader) sends and receives, with the
    testbench calls of a :class:`~apiary.sim.Sim` (``send``, ``run``, ``received``, ``sent``,
    ``cycle``), so code written for one simulated board (``beehive.vr.links.SimWitness``)
    talks to a cluster through it unchanged."""

    def __init__(self, cluster: "Cluster", name: str) -> None:
        self.cluster = cluster
        self.name = name
        self._received: list[Frame] = []
        self._sent: list[Frame] = []

    @property
    def cycle(self) -> int:
        return self.cluster.cycle

    def send(self, frame: Any) -> None:
        """Send ``frame`` (bytes or a scapy packet) on the host's link, now."""
        if self.name not in self.cluster._peer:
            raise SimError(f"host {self.name!r} has no link to send on; cluster.link() it "
                           f"first")
        raw = bytes(frame)
        self._sent.append(Frame(raw, self.cycle, self.cycle, self.name))
        self.cluster._emit(self.name, raw, self.cycle)

    def run(self, cycles: int | None = None, **kwargs: Any) -> int:
        """:meth:`Cluster.run`."""
        return self.cluster.run(cycles, **kwargs)

    def received(self, clear: bool = False) -> list[Frame]:
        """Frames delivered to the host, with the cycle each arrived."""
        frames = list(self._received)
        if clear:
            self._received.clear()
        return frames

    def sent(self, clear: bool = False) -> list[Frame]:
        """Frames the host sent, with the cycle each left."""
        frames = list(self._sent)
        if clear:
            self._sent.clear()
        return frames


class Cluster:
    """Boards, hosts and switches joined by :class:`Link`\\ s (see the module docstring)."""

    def __init__(self) -> None:
        self.boards: dict[str, Any] = {}
        self.hosts: dict[str, Host] = {}
        self.switches: dict[str, dict[str, str]] = {}    # {switch: {mac: port end}}
        self.links: list[Link] = []
        self._peer: dict[str, tuple[str, Link]] = {}      # {end: (other end, link)}
        self._flying: list[tuple[int, int, str, bytes]] = []  # heap of (due, n, end, frame)
        self._order = itertools.count()
        self.cycle = 0

    # -- building ----------------------------------------------------------------------------

    def _new_name(self, name: str) -> None:
        if not isinstance(name, str) or not name or ":" in name:
            raise SimError(f"a cluster member's name is a non-empty string without ':', not "
                           f"{name!r}")
        if name in self.boards or name in self.hosts or name in self.switches:
            raise SimError(f"the cluster already has a member called {name!r}")

    def add_board(self, name: str, sim: Any) -> Any:
        """Add an open simulation, not yet run, as the board ``name``; returns it."""
        self._new_name(name)
        if sim.cycle != self.cycle:
            raise SimError(f"board {name!r} is at cycle {sim.cycle}, the cluster at "
                           f"{self.cycle}: add boards before running them")
        self.boards[name] = sim
        return sim

    def add_host(self, name: str) -> Host:
        self._new_name(name)
        host = self.hosts[name] = Host(self, name)
        return host

    def add_switch(self, name: str) -> None:
        self._new_name(name)
        self.switches[name] = {}

    def _end(self, end: str) -> str:
        """The full name of an end: ``board:port``, a host, or ``switch:<n>`` (a new port)."""
        name, _, port = end.partition(":")
        if name in self.boards:
            sim = self.boards[name]
            return f"{name}:{sim.port(port or None).name}"
        if name in self.hosts and not port:
            return name
        if name in self.switches and not port:
            return f"{name}:{sum(1 for e in self._peer if e.startswith(name + ':'))}"
        members = ", ".join([*self.boards, *self.hosts, *self.switches]) or "none"
        raise SimError(f"no cluster end {end!r}; members are {members}")

    def link(self, a: str, b: str, *, latency: int, loss: float = 0.0, seed: int = 0) -> Link:
        """Join ends ``a`` and ``b`` (see the module docstring) with a link of ``latency``
        cycles (at least 1) and ``loss`` probability per frame."""
        if isinstance(latency, bool) or not isinstance(latency, int) or latency < 1:
            raise SimError(f"a link's latency is a whole number of cycles, at least 1, not "
                           f"{latency!r}")
        if not isinstance(loss, (int, float)) or not 0.0 <= loss < 1.0:
            raise SimError(f"a link's loss is a probability from 0 up to (not including) 1, "
                           f"not {loss!r}")
        ends = [self._end(a)]
        ends.append(self._end(b))
        for end in ends:
            if end in self._peer:
                raise SimError(f"{end} is already linked to {self._peer[end][0]}")
        link = Link(ends[0], ends[1], latency, float(loss), seed)
        self._peer[ends[0]] = (ends[1], link)
        self._peer[ends[1]] = (ends[0], link)
        self.links.append(link)
        return link

    # -- running -----------------------------------------------------------------------------

    def _emit(self, end: str, frame: bytes, cycle: int) -> None:
        """``frame`` left ``end`` on ``cycle`` (its last word): put it on the end's link."""
        if end not in self._peer:
            return                      # an unlinked port: the frame stays in its board's log
        other, link = self._peer[end]
        if link.carries(end, other):
            heapq.heappush(self._flying, (cycle + link.latency, next(self._order), other, frame))

    def _arrive(self, end: str, frame: bytes, due: int) -> None:
        name, _, port = end.partition(":")
        if name in self.boards:
            sim = self.boards[name]
            sim.run(due - sim.cycle)
            sim.send(frame, port=port if len(sim.ports) > 1 else None)
        elif name in self.hosts:
            self.hosts[name]._received.append(Frame(frame, due, due, name))
        else:
            table = self.switches[name]
            table[frame[6:12].hex()] = end
            out = table.get(frame[:6].hex())
            ports = [out] if out is not None and out != end else [
                e for e in self._peer if e.startswith(name + ":") and e != end]
            for p in ports:
                self._emit(p, frame, due)

    def _quantum(self) -> int:
        return min((link.latency for link in self.links), default=_UNLINKED_STEP)

    def _step(self, cycles: int) -> None:
        end = self.cycle + cycles
        while self._flying and self._flying[0][0] < end:
            due, _, where, frame = heapq.heappop(self._flying)
            self._arrive(where, frame, due)
        for name, sim in self.boards.items():
            sim.run(end - sim.cycle)
            for port in sim.ports:
                for f in sim.received(port.name, clear=True):
                    self._emit(f"{name}:{port.name}", f.data, f.cycle_last)
        self.cycle = end

    @property
    def idle(self) -> bool:
        """No frame on a link and every board idle (:attr:`apiary.sim.Sim.idle`)."""
        return not self._flying and all(sim.idle for sim in self.boards.values())

    def run(self, cycles: int | None = None, *, max_cycles: int = DEFAULT_MAX_CYCLES) -> int:
        """Simulate every board ``cycles`` cycles; with ``None``, until :attr:`idle` (at most
        ``max_cycles``). Returns the cycles simulated."""
        limit = max_cycles if cycles is None else cycles
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise SimError(f"cycles must be a non-negative integer, not {limit!r}")
        start, quantum = self.cycle, self._quantum()
        while self.cycle < start + limit:
            if cycles is None and self.idle and self.cycle > start:
                break
            self._step(min(quantum, start + limit - self.cycle))
        return self.cycle - start
