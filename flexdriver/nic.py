"""A ConnectX-style NIC, in Python, for simulation: what FlexDriver drives.

The NIC reaches its driver (FLD on the FPGA, or a test) only through a memory-mapped,
PCIe-like interface, :class:`Bus`: it reads descriptors and packet data and writes packets and
completions there, each request completing ``latency`` cycles (plus a seeded ``jitter``) after
it is issued, in order; the driver rings doorbells (MMIO writes, arriving ``latency`` cycles
later) with its producer indexes. Time is cycles; :meth:`NicModel.advance` runs the NIC up to a
cycle.

Queues (created by the control plane: :meth:`~NicModel.create_cq`, :meth:`~NicModel.create_sq`,
:meth:`~NicModel.create_rq`, :meth:`~NicModel.share_rq`), each a ring of a power-of-two number of
entries at a base address:

- **Send queues**: the driver writes 64-byte WQEs (:class:`~flexdriver.formats.TxWqe`) and rings
  the doorbell with its producer index; the NIC fetches each WQE, then the packet's bytes (up to
  ``prefetch`` WQEs ahead, in ring order on the wire), fills
  in the checksums the WQE asks for (``L3_CSUM``, ``L4_CSUM``), puts the frame on the wire (not
  before the queue's rate allows: ``rate`` bytes per cycle) and writes a completion if it is
  ``SIGNALED``. A WQE with another opcode, or a packet over ``max_frame`` bytes, completes with
  an error and sends nothing.
- **Receive queues**: the driver writes 16-byte descriptors (:class:`~flexdriver.formats.RxDesc`)
  and rings the doorbell with its producer index; a received frame takes the next one, its bytes
  are written to the buffer and a completion says where. A frame that finds no descriptor is
  dropped and counted (``out_of_buffer``, per queue); one longer than its buffer is dropped and
  completes with ``ERR_LENGTH`` (counted in ``rx_length_errors``).
- **Striding receive queues** (``create_rq(..., stride_bytes=...)``, ConnectX's multi-packet
  RQ): a descriptor's buffer holds several frames, each from a stride boundary and taking
  ``ceil(len / stride_bytes)`` strides, its completion naming its first ``stride``. The NIC
  fetches a descriptor once, when a frame needs it (later frames wait for the read, in order),
  and keeps it while frames fill it; a frame that does not fit in what is left first closes the
  buffer with a :data:`~flexdriver.formats.CQE_FILLER` completion (``counter`` the descriptor,
  ``stride`` its first unused stride, ``length`` the bytes left, ``queue`` the ring's RQ) and
  takes the next descriptor; one that fills the buffer to its last stride closes it without a
  filler; one longer than a whole buffer completes with ``ERR_LENGTH`` and takes no stride.
  A ring's completions are written in the order its frames arrived.
- **Shared receive queues** (:meth:`~NicModel.share_rq`, ConnectX's SRQ): a receive queue with no
  ring of its own takes its buffers from another queue's ring (striding or not) and completes
  on that queue's completion queue, naming itself in ``queue``; its frames are counted under its
  own number. The ring's doorbell is its owner's.
- **Completion queues**: 64-byte :class:`~flexdriver.formats.Cqe` entries whose ``owner`` bit
  flips on each wrap; the driver says how far it has read (:meth:`~NicModel.cq_doorbell`), and
  a completion that would overwrite an unread one is dropped and counted (``cq_overrun``).

Receive offloads, reported in the completion: the IPv4 header checksum and the TCP or UDP
checksum verified (``IP_OK``, ``L4_OK``); the queue chosen by the first steering rule
(:class:`Rule`) that matches, which may also tag the packet with a context ID and take a VXLAN
header off (``DECAPPED``; the inner frame is what is delivered and checked), else by RSS: the
Toeplitz hash of the IPv4 addresses and ports (:func:`toeplitz`, Microsoft's key) through an
indirection table. Only the trusted control plane may install a rule that sets a context ID
(:meth:`~NicModel.add_rule`), so a tenant cannot forge one.
"""

import dataclasses
import heapq
import ipaddress
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from apiary.stream.integers import power_of_two

from .formats import (CQE_BYTES, CQE_ERROR, CQE_FILLER, CQE_RECV, CQE_SEND, DECAPPED, ERR_LENGTH,
                      ERR_OPCODE, IP_OK, IS_IPV4, IS_TCP, IS_UDP, L3_CSUM, L4_CSUM, L4_OK, OP_SEND,
                      RX_DESC_BYTES, SIGNALED, WQE_BYTES, Cqe, RxDesc, TxWqe)


__all__ = ["Bus", "HostMemory", "NicModel", "Rule", "NicError", "toeplitz", "RSS_KEY"]

#: Microsoft's RSS key (the one its specification's verification vectors use).
RSS_KEY = bytes.fromhex("6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c"
                        "6a42b73bbeac01fa")
VXLAN_PORT = 4789


class NicError(Exception):
    """A control-plane request the NIC refuses (a bad queue, a forged context ID)."""


class Bus(Protocol):
    """What the NIC's DMA reaches (the driver's memory, through PCIe). A bus whose reads are
    answered later (by hardware in a simulation) also has ``submit_read(address, length,
    answer)``, and calls ``answer(data)`` when it has the data: the NIC then goes on from
    there, and its own latency comes first."""

    def read(self, address: int, length: int) -> bytes: ...

    def write(self, address: int, data: bytes) -> None: ...


class HostMemory:
    """A sparse byte-addressed memory (a :class:`Bus`): unwritten bytes read as zero."""

    def __init__(self) -> None:
        self.bytes: dict[int, int] = {}

    def read(self, address: int, length: int) -> bytes:
        return bytes(self.bytes.get(address + i, 0) for i in range(length))

    def write(self, address: int, data: bytes) -> None:
        for i, b in enumerate(data):
            self.bytes[address + i] = b


def toeplitz(data: bytes, key: bytes = RSS_KEY) -> int:
    """The Toeplitz hash of ``data`` (RSS): for each set bit of the input, XOR in the key's 32
    bits starting there."""
    k = int.from_bytes(key, "big")
    kbits = 8 * len(key)
    result = 0
    for i in range(8 * len(data)):
        if data[i // 8] >> (7 - i % 8) & 1:
            result ^= k >> (kbits - 32 - i) & 0xFFFF_FFFF
    return result


@dataclass(frozen=True)
class Rule:
    """A steering rule: packets whose fields equal every one of ``match`` (any of ``dst_ip``,
    ``src_ip``, ``proto``, ``dst_port``, ``src_port``, ``vni``; of the inner packet after a
    decapsulation) go to receive queue ``queue``, tagged with ``context`` (0: none); with
    ``decap``, a VXLAN packet's outer headers are taken off first."""
    match: dict[str, int]
    queue: int
    context: int = 0
    decap: bool = False


@dataclass
class _Ring:
    number: int
    base: int
    entries: int
    size: int                   # bytes per entry
    producer: int = 0           # (as the driver last rang it)
    consumer: int = 0

    def address(self, index: int) -> int:
        return self.base + (index % self.entries) * self.size


@dataclass
class _Cq(_Ring):
    read: int = 0               # how far the driver has read (cq_doorbell)


@dataclass
class _Sq(_Ring):
    cq: int = 0
    rate: float | None = None   # bytes per cycle, or unshaped
    free_at: float = 0.0        # when the wire is the queue's again (shaping)
    fetched: int = 0            # the next ring position to fetch (mod 2**16)
    inflight: int = 0           # WQEs fetched or being fetched, not yet completed
    ready: dict[int, tuple[TxWqe, bytes | None]] = field(default_factory=dict)
    sending: bool = False       # a frame is on its way to the wire


@dataclass
class _Rq(_Ring):
    cq: int = 0
    ring: "_Rq | None" = None   # the queue whose ring it shares (share_rq); None: its own
    stride_bytes: int | None = None     # a striding queue's
    desc: RxDesc | None = None  # striding: the descriptor being filled,
    index: int = 0              # its ring position,
    stride: int = 0             # its first free stride
    fetching: bool = False      # striding: a descriptor read is in flight
    waiting: list[tuple["_Rq", bytes, int, int, int]] = field(default_factory=list)
    completing: list[list] = field(default_factory=list)   # [Cqe, ready], in arrival order


@dataclass
class NicCounters:
    """Per-queue counters: ``tx_packets``, ``tx_errors`` by send queue; ``rx_packets``,
    ``out_of_buffer``, ``rx_length_errors`` by receive queue; ``cq_overrun`` by completion
    queue; ``rx_unsteered`` (no queue for the packet)."""
    tx_packets: dict[int, int] = field(default_factory=dict)
    tx_errors: dict[int, int] = field(default_factory=dict)
    rx_packets: dict[int, int] = field(default_factory=dict)
    out_of_buffer: dict[int, int] = field(default_factory=dict)
    rx_length_errors: dict[int, int] = field(default_factory=dict)
    cq_overrun: dict[int, int] = field(default_factory=dict)
    rx_unsteered: int = 0

    def bump(self, name: str, queue: int) -> None:
        table = getattr(self, name)
        table[queue] = table.get(queue, 0) + 1


class NicModel:
    """The NIC (see the module docstring). ``bus`` is the driver's memory; each DMA request and
    doorbell takes ``latency`` cycles plus up to ``jitter`` more (seeded by ``seed``), in
    order, several outstanding at once; ``max_frame`` bytes at most on the wire; each send
    queue fetches up to ``prefetch`` WQEs (and their packets) ahead of the one it sends."""

    def __init__(self, bus: Bus, *, latency: int = 100, jitter: int = 0, seed: int = 1,
                 max_frame: int = 1518, prefetch: int = 8) -> None:
        self.bus, self.latency, self.jitter, self.max_frame = bus, latency, jitter, max_frame
        self.prefetch = prefetch
        self._rng = random.Random(seed)
        self.now = 0
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._last_done = 0
        self.cqs: dict[int, _Cq] = {}
        self.sqs: dict[int, _Sq] = {}
        self.rqs: dict[int, _Rq] = {}
        self.rules: list[Rule] = []
        self.rss_table: list[int] = []
        self.wire: list[tuple[int, bytes]] = []         # (cycle, frame) sent
        self.arrived: list[tuple[int, bytes]] = []      # (cycle, frame) received
        self.counters = NicCounters()

    # -- the control plane ---------------------------------------------------------------------
    def create_cq(self, number: int, base: int, entries: int) -> None:
        self.cqs[number] = _Cq(number, base, _entries(entries), CQE_BYTES)

    def create_sq(self, number: int, base: int, entries: int, cq: int, *,
                  rate: float | None = None) -> None:
        self._known(self.cqs, cq, "completion")
        self.sqs[number] = _Sq(number, base, _entries(entries), WQE_BYTES, cq=cq, rate=rate)

    def create_rq(self, number: int, base: int, entries: int, cq: int, *,
                  stride_bytes: int | None = None) -> None:
        """A receive queue with a ring of its own; with ``stride_bytes``, a striding one (each
        buffer holds several frames, see the module docstring)."""
        self._known(self.cqs, cq, "completion")
        if stride_bytes is not None and stride_bytes <= 0:
            raise NicError(f"a stride is a positive number of bytes, not {stride_bytes!r}")
        self.rqs[number] = _Rq(number, base, _entries(entries), RX_DESC_BYTES, cq=cq,
                               stride_bytes=stride_bytes)

    def share_rq(self, number: int, ring: int) -> None:
        """Receive queue ``number`` with no ring of its own: its frames take buffers from
        receive queue ``ring``'s ring and complete on that queue's completion queue."""
        self._known(self.rqs, ring, "receive")
        owner = self.rqs[ring]
        if owner.ring is not None:
            raise NicError(f"receive queue {ring} shares queue {owner.ring.number}'s ring: "
                           f"share that one")
        self.rqs[number] = _Rq(number, 0, 1, RX_DESC_BYTES, cq=owner.cq, ring=owner)

    def set_rss(self, queues: Sequence[int]) -> None:
        """The indirection table: a packet with hash ``h`` goes to ``queues[h % len]``."""
        for q in queues:
            self._known(self.rqs, q, "receive")
        self.rss_table = list(queues)

    def add_rule(self, rule: Rule, *, trusted: bool = False) -> None:
        """Install a steering rule (first installed, first matched). Only the trusted control
        plane may set a context ID: a tenant's rule that does raises :class:`NicError`."""
        self._known(self.rqs, rule.queue, "receive")
        if rule.context and not trusted:
            raise NicError(f"a tenant's rule may not set a context ID (it asked for "
                           f"{rule.context}); only the trusted control plane tags packets")
        self.rules.append(rule)

    @staticmethod
    def _known(table: dict, number: int, kind: str) -> None:
        if number not in table:
            raise NicError(f"no {kind} queue {number} (queues: {sorted(table) or 'none'})")

    # -- doorbells (MMIO writes from the driver) --------------------------------------------------
    def sq_doorbell(self, queue: int, producer: int) -> None:
        self._known(self.sqs, queue, "send")
        self._after(self._delay(), lambda: self._sq_rung(self.sqs[queue], producer))

    def rq_doorbell(self, queue: int, producer: int) -> None:
        self._known(self.rqs, queue, "receive")
        owner = self.rqs[queue].ring
        if owner is not None:
            raise NicError(f"receive queue {queue} has no ring of its own (it shares queue "
                           f"{owner.number}'s): ring that one's doorbell")

        def rung() -> None:
            self.rqs[queue].producer = producer
        self._after(self._delay(), rung)

    def cq_doorbell(self, queue: int, consumer: int) -> None:
        self._known(self.cqs, queue, "completion")
        self.cqs[queue].read = consumer

    # -- the wire -------------------------------------------------------------------------------
    def receive(self, frame: bytes) -> None:
        """A frame arrives from the wire now."""
        self.arrived.append((self.now, frame))
        self._after(0, lambda: self._received(frame))

    def capture(self, path: str, clock_hz: float) -> int:
        """Write every frame the wire carried, both ways, in time order, to a nanosecond pcap
        (cycles at ``clock_hz``); returns how many."""
        from apiary.sim.pcap import PcapRecord, cycle_ns, write_pcap_records
        frames = sorted(self.arrived + self.wire, key=lambda f: f[0])
        return write_pcap_records(path, [PcapRecord(cycle_ns(t, clock_hz), f, len(f))
                                         for t, f in frames])

    # -- time ------------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Whether the NIC has anything left to do (a DMA, a doorbell, a frame to send)."""
        return bool(self._events)

    def advance(self, until: int) -> None:
        """Run the NIC up to cycle ``until``."""
        while self._events and self._events[0][0] <= until:
            at, _, action = heapq.heappop(self._events)
            self.now = max(self.now, at)
            action()
        self.now = max(self.now, until)

    def _delay(self) -> int:
        """When a request issued now completes: in order, after the latency and jitter."""
        done = max(self.now + self.latency + self._rng.randint(0, self.jitter),
                   self._last_done)
        self._last_done = done
        return done - self.now

    def _after(self, delay: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._events, (int(self.now + delay), next(self._order), action))

    def _dma_read(self, address: int, length: int, then: Callable[[bytes], None]) -> None:
        submit = getattr(self.bus, "submit_read", None)
        if submit is None:
            self._after(self._delay(), lambda: then(self.bus.read(address, length)))
        else:           # the bus answers when it can: go on from there, at the time it does
            self._after(self._delay(), lambda: submit(address, length, lambda data: self._after(
                0, lambda: then(data))))

    def _dma_write(self, address: int, data: bytes, then: Callable[[], None] | None = None
                   ) -> None:
        def land() -> None:
            self.bus.write(address, data)
            if then is not None:
                then()
        self._after(self._delay(), land)

    # -- transmit --------------------------------------------------------------------------------
    def _sq_rung(self, sq: _Sq, producer: int) -> None:
        sq.producer = producer
        self._fetch(sq)

    def _fetch(self, sq: _Sq) -> None:
        """Fetch the posted WQEs (and then their packets) ahead, ``prefetch`` at most."""
        while (sq.producer - sq.fetched) % (1 << 16) and sq.inflight < self.prefetch:
            index = sq.fetched
            sq.fetched = (sq.fetched + 1) % (1 << 16)
            sq.inflight += 1
            self._dma_read(sq.address(index), WQE_BYTES, self._on_wqe(sq, index))

    def _on_wqe(self, sq: _Sq, index: int) -> Callable[[bytes], None]:
        return lambda raw: self._wqe(sq, index, TxWqe.unpack(raw))

    def _wqe(self, sq: _Sq, index: int, wqe: TxWqe) -> None:
        if wqe.opcode != OP_SEND or len(wqe.inline) + wqe.length > self.max_frame:
            self._ready(sq, index, wqe, None)
        elif wqe.length:
            self._dma_read(wqe.address, wqe.length,
                           lambda data: self._ready(sq, index, wqe, wqe.inline + data))
        else:
            self._ready(sq, index, wqe, wqe.inline)

    def _ready(self, sq: _Sq, index: int, wqe: TxWqe, frame: bytes | None) -> None:
        sq.ready[index] = (wqe, frame)
        self._send(sq)

    def _send(self, sq: _Sq) -> None:
        """The next WQE in ring order, if fetched and the wire is free: sent (or completed
        with an error)."""
        if sq.sending or sq.consumer not in sq.ready:
            return
        wqe, frame = sq.ready.pop(sq.consumer)
        if frame is None:
            self.counters.bump("tx_errors", sq.number)
            error = ERR_OPCODE if wqe.opcode != OP_SEND else ERR_LENGTH
            self._complete(sq.cq, Cqe(CQE_ERROR, 0, wqe.index, sq.number, error=error))
            self._done(sq)
            return
        frame = _checksummed(frame, wqe.flags)
        at = max(float(self.now), sq.free_at)
        if sq.rate:
            sq.free_at = at + len(frame) / sq.rate
        sq.sending = True

        def out() -> None:
            self.wire.append((self.now, frame))
            self.counters.bump("tx_packets", sq.number)
            if wqe.flags & SIGNALED:
                self._complete(sq.cq, Cqe(CQE_SEND, 0, wqe.index, sq.number, len(frame)))
            sq.sending = False
            self._done(sq)
        self._after(at - self.now, out)

    def _done(self, sq: _Sq) -> None:
        sq.consumer = (sq.consumer + 1) % (1 << 16)
        sq.inflight -= 1
        self._fetch(sq)
        self._send(sq)

    # -- receive ---------------------------------------------------------------------------------
    def _received(self, frame: bytes) -> None:
        fields, inner, checks = _parse(frame)
        context, queue, rss_hash = 0, None, 0
        for rule in self.rules:
            decap = rule.decap and inner is not None
            look = {**inner[0], "vni": fields["vni"]} if decap and inner else fields
            if all(look.get(k) == v for k, v in rule.match.items()):
                queue, context = rule.queue, rule.context
                if decap and inner:
                    fields, frame, checks = inner[0], inner[1], inner[2] | DECAPPED
                break
        if queue is None:
            if not self.rss_table:
                self.counters.rx_unsteered += 1
                return
            rss_hash = _rss_hash(fields)
            queue = self.rss_table[rss_hash % len(self.rss_table)]
        self._deliver(self.rqs[queue], frame, checks, rss_hash, context)

    def _deliver(self, rq: _Rq, frame: bytes, checks: int, rss_hash: int, context: int) -> None:
        ring = rq.ring or rq
        if ring.stride_bytes is not None:
            ring.waiting.append((rq, frame, checks, rss_hash, context))
            self._fill(ring)
            return
        if ring.consumer == ring.producer:
            self.counters.bump("out_of_buffer", rq.number)
            return
        index = ring.consumer
        ring.consumer += 1

        def described(raw: bytes) -> None:
            desc = RxDesc.unpack(raw)
            if len(frame) > desc.length:
                self.counters.bump("rx_length_errors", rq.number)
                self._complete(ring.cq, Cqe(CQE_ERROR, 0, index, rq.number, len(frame),
                                            error=ERR_LENGTH))
                return
            self.counters.bump("rx_packets", rq.number)
            self._dma_write(desc.address, frame, lambda: self._complete(
                ring.cq, Cqe(CQE_RECV, 0, index, rq.number, len(frame), rss_hash, context,
                             checks)))
        self._dma_read(ring.address(index), RX_DESC_BYTES, described)

    def _fill(self, ring: _Rq) -> None:
        """A striding ring: place the waiting frames, in order, in its buffers."""
        stride_bytes = ring.stride_bytes
        assert stride_bytes is not None
        while ring.waiting:
            rq, frame, checks, rss_hash, context = ring.waiting[0]
            if ring.desc is None:
                if ring.fetching:
                    return                              # (the frames wait for the read)
                if ring.consumer == ring.producer:
                    ring.waiting.pop(0)
                    self.counters.bump("out_of_buffer", rq.number)
                    continue
                ring.fetching = True
                self._dma_read(ring.address(ring.consumer), RX_DESC_BYTES,
                               self._on_desc(ring, ring.consumer))
                ring.consumer += 1
                return
            strides = ring.desc.length // stride_bytes
            need = -(-len(frame) // stride_bytes)
            if need > strides:                          # longer than a whole buffer
                ring.waiting.pop(0)
                self.counters.bump("rx_length_errors", rq.number)
                self._completes(ring, Cqe(CQE_ERROR, 0, ring.index, rq.number, len(frame),
                                          error=ERR_LENGTH, stride=ring.stride))
                continue
            if ring.stride + need > strides:            # does not fit: close the buffer
                self._completes(ring, Cqe(CQE_FILLER, 0, ring.index, ring.number,
                                          ring.desc.length - ring.stride * stride_bytes,
                                          stride=ring.stride))
                ring.desc = None
                continue
            ring.waiting.pop(0)
            self.counters.bump("rx_packets", rq.number)
            cqe = [Cqe(CQE_RECV, 0, ring.index, rq.number, len(frame), rss_hash, context,
                       checks, stride=ring.stride), False]
            ring.completing.append(cqe)
            self._dma_write(ring.desc.address + ring.stride * stride_bytes, frame,
                            self._on_landed(ring, cqe))
            ring.stride += need
            if ring.stride == strides:                  # full: the next frame takes another
                ring.desc = None

    def _on_desc(self, ring: _Rq, index: int) -> Callable[[bytes], None]:
        def described(raw: bytes) -> None:
            ring.desc, ring.index, ring.stride = RxDesc.unpack(raw), index, 0
            ring.fetching = False
            self._fill(ring)
        return described

    def _on_landed(self, ring: _Rq, cqe: list) -> Callable[[], None]:
        def landed() -> None:
            cqe[1] = True
            self._completes(ring)
        return landed

    def _completes(self, ring: _Rq, cqe: Cqe | None = None) -> None:
        """A striding ring's completions, written in the order of its frames: each frame's
        once its bytes have landed, a filler or an error once those before it are written."""
        if cqe is not None:
            ring.completing.append([cqe, True])
        while ring.completing and ring.completing[0][1]:
            self._complete(ring.cq, ring.completing.pop(0)[0])

    # -- completions -----------------------------------------------------------------------------
    def _complete(self, number: int, cqe: Cqe) -> None:
        cq = self.cqs[number]
        if cq.producer - cq.read >= cq.entries:
            self.counters.bump("cq_overrun", number)
            return
        owner = (cq.producer // cq.entries) & 1
        self._dma_write(cq.address(cq.producer), dataclasses.replace(cqe, owner=owner).pack())
        cq.producer += 1


def _entries(n: int) -> int:
    if not power_of_two(n):
        raise NicError(f"a queue's entries are a power of two, not {n!r}")
    return n


_Inner = tuple[dict[str, int], bytes, int]


def _parse(frame: bytes) -> tuple[dict[str, int], _Inner | None, int]:
    """``(fields, inner, checks)`` of a frame: its IPv4 and TCP/UDP fields, the inner frame's
    ``(fields, frame, checks)`` if it is VXLAN, and what its checksums say."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    from scapy.layers.vxlan import VXLAN
    pkt = Ether(frame)
    fields: dict[str, int] = {}
    checks = 0
    inner: _Inner | None = None
    if IP in pkt:
        ip = pkt[IP]
        checks |= IS_IPV4
        fields |= {"src_ip": int(ipaddress.IPv4Address(ip.src)),
                   "dst_ip": int(ipaddress.IPv4Address(ip.dst)), "proto": ip.proto}
        if _ip_ok(bytes(ip)):
            checks |= IP_OK
        for layer, flag in ((TCP, IS_TCP), (UDP, IS_UDP)):
            if layer in ip and ip.frag == 0 and not ip.flags.MF:
                seg = ip[layer]
                checks |= flag
                fields |= {"src_port": seg.sport, "dst_port": seg.dport}
                if _l4_ok(ip):
                    checks |= L4_OK
        if UDP in ip and ip[UDP].dport == VXLAN_PORT and VXLAN in ip:
            fields["vni"] = ip[VXLAN].vni
            inner_frame = bytes(ip[VXLAN].payload)
            inner_fields, _, inner_checks = _parse(inner_frame)
            inner = (inner_fields, inner_frame, inner_checks)
    return fields, inner, checks


def _ip_ok(datagram: bytes) -> bool:
    from apiary.stream.checksum import internet_checksum
    header = datagram[:(datagram[0] & 0xF) * 4]
    return internet_checksum(header) == 0


def _l4_ok(ip: object) -> bool:
    from apiary.stream.checksum import internet_checksum
    from scapy.layers.inet import IP, UDP
    assert isinstance(ip, IP)
    raw = bytes(ip)
    hl = (raw[0] & 0xF) * 4
    total = int.from_bytes(raw[2:4], "big")
    segment = raw[hl:total]
    if UDP in ip and int.from_bytes(segment[6:8], "big") == 0:
        return True                                  # (UDP over IPv4: no checksum sent)
    pseudo = raw[12:20] + bytes([0, raw[9]]) + len(segment).to_bytes(2, "big")
    return internet_checksum(pseudo + segment) == 0


def _checksummed(frame: bytes, flags: int) -> bytes:
    """``frame`` with the checksums ``flags`` asks for filled in."""
    if not flags & (L3_CSUM | L4_CSUM):
        return frame
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    pkt = Ether(frame)
    if IP not in pkt:
        return frame
    if flags & L3_CSUM:
        del pkt[IP].chksum
    if flags & L4_CSUM:
        for layer in (TCP, UDP):
            if layer in pkt:
                del pkt[layer].chksum
    return bytes(pkt)


def _rss_hash(fields: dict[str, int]) -> int:
    """Toeplitz over source and destination address, then ports (TCP or UDP), as RSS does."""
    if "src_ip" not in fields:
        return 0
    data = fields["src_ip"].to_bytes(4, "big") + fields["dst_ip"].to_bytes(4, "big")
    if "src_port" in fields:
        data += fields["src_port"].to_bytes(2, "big") + fields["dst_port"].to_bytes(2, "big")
    return toeplitz(data)
