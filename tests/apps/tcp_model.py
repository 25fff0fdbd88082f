"""A Python model of the TCP engine (its RX and TX tiles) and of the memory tiles holding its
rings, as an application tile sees them at its NoC port.

:class:`TcpEngineModel` keeps each flow's receive and send rings in two ``bytearray`` memories
(laid out as :class:`~beehive.proto.tcp.config.TcpConfig` says: ring ``slot`` of each at
``base + slot * ring``), takes the application's messages (:meth:`TcpEngineModel.receive`,
one message's flits), answers them as the engine and the memory tiles do
(:mod:`beehive.proto.tcp.app`, :mod:`apiary.os.memory_tile`), and plays the peers: bytes
delivered into the receive rings as room allows, the send rings drained (or not) as a peer reads.
A test moves it on a cycle at a time (:meth:`TcpEngineModel.tick`) and takes its messages for
the tile from :meth:`TcpEngineModel.next_message` (one of its sources, picked at random: the RX
tile, the TX tile, the memory tiles; each in order, or the memory acks in any order with
``mem_any_order``, as from several memory tiles). Memory acks may be held back ``mem_latency``
cycles. It records how many flows at most were under way at once (:attr:`max_busy`: a
``TCP_TX_MSG_REQ`` or a ``LOAD_MEM`` whose answer has not reached the tile yet) and how many
at most had a memory request unanswered (:attr:`max_memory`: a ``LOAD_MEM`` or a
``STORE_MEM``).

It fails (:class:`ModelError`) on anything the interface forbids: a message to the wrong tile,
sub-port or from the wrong sub-port; two requests of a kind outstanding for a flow (memory
requests included; with ``loads_per_flow`` more than one, up to that many ``LOAD_MEM`` may be
outstanding for a flow, the most seen at once in :attr:`max_loads`), or a request for a
connection while a memory request of an earlier one in its slot is unanswered (the tiles
promise one job per flow slot at a time); a read
outside what a response reported; a store outside the room granted; a pointer that moves
back, beyond what was granted, or over bytes not yet read (receive: no ``LOAD_MEM_ACK``
delivered for them) or written (send: no ``STORE_MEM_ACK`` delivered); anything after a close;
and a step taken for a flow on an answer that reached the tile after the flow's end did (a
``LOAD_MEM`` or ``STORE_MEM`` after its ``TCP_TX_MSG_RESP`` or ``LOAD_MEM_ACK``, a
``TCP_TX_ADJUST_PTR`` after its ``STORE_MEM_ACK``). The test tells it when each of its
messages reached the tile by calling the ``delivered`` callback :meth:`next_message` gives.
"""

from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace

from apiary.noc.header import Fbits, Message
from apiary.os.memory_tile import (LOAD_MEM, LOAD_MEM_ACK, STORE_MEM, STORE_MEM_ACK,
                                   decode_mem_message, mem_message_flits)
from beehive.proto.messages import MsgType
from beehive.proto.tcp.app import (BufferKind, Status, app_message_flits, decode_app_message,
                                   flow_handle, handle_slot)
from beehive.proto.tcp.config import TcpConfig


__all__ = ["ModelError", "Flow", "TcpEngineModel", "RX_REQUESTS", "TX_REQUESTS",
           "beside_a_frozen_peer"]


#: Requests the RX tile takes (at LOCAL2), and those the TX tile takes (at LOCAL0).
RX_REQUESTS = tuple(t.value for t in (MsgType.TCP_RX_MSG_REQ, MsgType.TCP_RX_ADJUST_PTR,
                                      MsgType.TCP_OPEN_REQ))
TX_REQUESTS = tuple(t.value for t in (MsgType.TCP_TX_MSG_REQ, MsgType.TCP_TX_ADJUST_PTR,
                                      MsgType.TCP_CLOSE_REQ))


class ModelError(AssertionError):
    """The application broke the interface."""


def _check(cond, what):
    if not cond:
        raise ModelError(what)


def _covered(ranges, start, end):
    """Whether ``[start, end)`` is covered by the union of ``ranges``."""
    pos = start
    for lo, hi in sorted(ranges):
        if lo > pos:
            break
        pos = max(pos, hi)
    return pos >= end


@dataclass
class Flow:
    """One connection: its two rings' stream state (offsets from the stream's first byte)."""
    handle: int
    peer: tuple
    state: str = "open"             # "open", or "reset" (ended; the application was told)
    # Receive side: the peer's bytes, those still to enter the ring, the ring's pointers.
    received: bytearray = field(default_factory=bytearray)
    incoming: bytearray = field(default_factory=bytearray)
    rcv: int = 0                    # bytes in the ring (readable below this)
    head: int = 0                   # the application's read pointer
    fin_pending: bool = False
    fin: bool = False               # the peer's FIN is in (after all its bytes)
    rx_req: int | None = None
    reported: int = 0               # end of what a response said may be read
    loads: list = field(default_factory=list)       # ranges whose LOAD_MEM_ACK was delivered
    loads_out: int = 0              # LOAD_MEMs whose ack has not reached the tile
    # Send side.
    tail: int = 0                   # the application's write pointer
    una: int = 0                    # what the peer has read
    granted: int = 0                # end of the room a response granted
    tx_req: int | None = None
    tx_req_since: int = 0
    tx_out: bool = False            # a TCP_TX_MSG_REQ whose answer has not reached the tile
    stores: list = field(default_factory=list)      # ranges whose STORE_MEM_ACK was delivered
    stores_out: int = 0             # STORE_MEMs whose ack has not reached the tile
    sent: bytearray = field(default_factory=bytearray)   # what the peer read
    drain: bool = True              # the peer reads
    closed_at: int | None = None    # tail when TCP_CLOSE_REQ came
    late: int = 0                   # requests after the end (in flight when it was told)
    # When (in the order the tile got them) the end and the latest answers reached the tile.
    end_seen: int | None = None
    tx_seen: int = 0
    load_seen: int = 0
    store_seen: int = 0
    rx_seen: list = field(default_factory=list)     # when each OK or EOF RX_MSG_RESP did

    @property
    def slot(self):
        return handle_slot(self.handle)


class TcpEngineModel:
    """The engine and its memories at an application's port (see the module docstring).

    Parameters
    ----------
    config : TcpConfig
    width : int
        The NoC width.
    app, rx, tx, rx_mem, tx_mem : (x, y)
        Where the application, the RX tile, the TX tile and the two memory tiles are.
    rng : random.Random
        For the peers: when bytes arrive and how many (up to ``burst`` at a time, with
        probability ``arrive`` a cycle), when the send rings are read (``read`` a cycle).
    mem_latency : int
        Cycles a memory ack waits before it may go to the tile.
    mem_any_order : bool
        Memory acks go to the tile in any order (a random one of those waiting).
    loads_per_flow : int
        ``LOAD_MEM`` a flow may have outstanding at once (default 1: one request of a kind).
    """

    def __init__(self, config: TcpConfig, width: int, *, app=(1, 1), rx=(2, 1), tx=(3, 1),
                 rx_mem=(0, 2), tx_mem=(3, 2), rng, burst=64, arrive=0.1, read=0.2,
                 mem_latency=0, mem_any_order=False, loads_per_flow=1):
        self.config, self.width, self.rng = config, width, rng
        self.loads_per_flow = loads_per_flow
        self.max_loads = 0                          # most LOAD_MEMs of one flow out at once
        self.app, self.rx, self.tx, self.rx_mem, self.tx_mem = app, rx, tx, rx_mem, tx_mem
        self.burst, self.arrive, self.read = burst, arrive, read
        self.mem_latency, self.mem_any_order = mem_latency, mem_any_order
        self.mem_pending: deque = deque()           # (due cycle, flits, delivered)
        self.every: list[Flow] = []                 # every connection announced
        self.max_busy = self.max_memory = 0
        self.rx_memory = bytearray(config.rx_memory_bytes())
        self.tx_memory = bytearray(config.tx_memory_bytes())
        self.flows: dict[int, Flow] = {}            # slot → its latest connection
        self.queues = {"rx": deque(), "tx": deque(), "mem": deque()}
        self.opens: list = []                       # (cycle, fields) of each TCP_OPEN_REQ
        self.open_answers: deque = deque()          # statuses for the next opens (else OK)
        self.answered: list = []                    # (cycle delivered, status) of open answers
        self.received: list = []                    # (cycle, msg_type, fields) from the app
        self.sent: list = []                        # (msg_type, fields) to it, as queued
        self.cycle = 0
        self.seen = 0                               # messages that reached the tile

    def _seen(self):
        self.seen += 1
        return self.seen

    # -- the peers -------------------------------------------------------------------------------

    def announce(self, slot, gen, *, peer=(0x0A000001, 5000, 7), to=Fbits.LOCAL0):
        """A new connection in ``slot``: its two notifications (RECEIVE, then SEND)."""
        old = self.flows.get(slot)
        _check(old is None or old.state == "reset" or old.closed_at is not None,
               f"slot {slot} reused while its connection is open")
        flow = Flow(flow_handle(slot, gen), peer)
        self.flows[slot] = flow
        self.every.append(flow)
        peer_ip, peer_port, local_port = peer
        for kind in (BufferKind.RECEIVE, BufferKind.SEND):
            send = kind == BufferKind.SEND
            ring = self.config.tx_ring if send else self.config.rx_ring
            base = (self.config.tx_base if send else self.config.rx_base) + slot * ring
            mem = self.tx_mem if send else self.rx_mem
            self._to_app("rx", MsgType.TCP_NEW_FLOW_NOTIF, to, flow=flow.handle,
                         status=Status.OK, kind=kind, addr=base,
                         size_log2=ring.bit_length() - 1, mem_x=mem[0], mem_y=mem[1],
                         peer_ip=peer_ip, peer_port=peer_port, local_port=local_port)
        return flow

    def deliver(self, flow, data, fin=False):
        """The peer sends ``data`` (and then FIN)."""
        flow.received += data
        flow.incoming += data
        flow.fin_pending |= fin

    def deliver_now(self, flow, data, fin=False):
        """:meth:`deliver`, every byte that fits in the receive ring there at once (not a
        random burst a cycle)."""
        self.deliver(flow, data, fin)
        cfg = self.config
        k = min(len(flow.incoming), cfg.rx_ring - (flow.rcv - flow.head))
        self._ring_write(self.rx_memory, cfg.rx_base, cfg.rx_ring, flow.slot, flow.rcv,
                         flow.incoming[:k])
        del flow.incoming[:k]
        flow.rcv += k

    def reset(self, flow, status=Status.RESET):
        """The connection ends under the application: its pending requests are dropped (the
        TX tile never answers its ``TCP_TX_MSG_REQ``) and the RX tile tells it once."""
        flow.state = "reset"
        flow.rx_req = flow.tx_req = None
        flow.tx_out = False

        def seen():
            flow.end_seen = self._seen()
        self._to_app("rx", MsgType.TCP_RX_MSG_RESP, Fbits.LOCAL0, flow=flow.handle,
                     status=status, delivered=seen)

    def inject(self, source, flits):
        """A message of the test's for the tile, from ``source``."""
        self.queues[source].append((flits, None))

    # -- time ------------------------------------------------------------------------------------

    def tick(self):
        """One cycle: bytes arrive, send rings are read, waiting requests are answered."""
        self.cycle += 1
        cfg = self.config
        while self.mem_pending and self.mem_pending[0][0] <= self.cycle:
            self.queues["mem"].append(self.mem_pending.popleft()[1:])
        for flow in list(self.flows.values()):
            if flow.state != "open":
                continue
            room = cfg.rx_ring - (flow.rcv - flow.head)
            if flow.incoming and room and self.rng.random() < self.arrive:
                k = min(len(flow.incoming), room, self.rng.randint(1, self.burst))
                self._ring_write(self.rx_memory, cfg.rx_base, cfg.rx_ring, flow.slot, flow.rcv,
                                 flow.incoming[:k])
                del flow.incoming[:k]
                flow.rcv += k
            if not flow.incoming and flow.fin_pending:
                flow.fin = True
            if flow.drain and flow.una != flow.tail and self.rng.random() < self.read:
                flow.sent += self._ring_read(self.tx_memory, cfg.tx_base, cfg.tx_ring,
                                             flow.slot, flow.una, flow.tail - flow.una)
                flow.una = flow.tail
            avail = flow.rcv - flow.head
            if flow.rx_req is not None and (avail >= flow.rx_req or flow.fin):
                flow.rx_req = None
                flow.reported = flow.head + avail
                self._to_app("rx", MsgType.TCP_RX_MSG_RESP, Fbits.LOCAL0, flow=flow.handle,
                             delivered=lambda flow=flow: flow.rx_seen.append(self._seen()),
                             status=Status.EOF if flow.fin else Status.OK, ptr=flow.head,
                             addr=cfg.rx_base + flow.slot * cfg.rx_ring
                             + flow.head % cfg.rx_ring,
                             size_log2=cfg.rx_ring_log2, length=avail)
            free = cfg.tx_ring - (flow.tail - flow.una)
            if flow.tx_req is not None and free >= flow.tx_req:
                flow.tx_req = None
                flow.granted = flow.tail + free
                self._to_app("tx", MsgType.TCP_TX_MSG_RESP, Fbits.LOCAL0, flow=flow.handle,
                             delivered=self._tx_answered(flow),
                             status=Status.OK, ptr=flow.tail,
                             addr=cfg.tx_base + flow.slot * cfg.tx_ring
                             + flow.tail % cfg.tx_ring,
                             size_log2=cfg.tx_ring_log2, length=free)

    def next_message(self):
        """``(flits, delivered)`` for the tile from one of the sources, or ``None``; call
        ``delivered()`` (if not ``None``) once its last flit is taken."""
        ready = [q for q in self.queues.values() if q]
        if not ready:
            return None
        queue = self.rng.choice(ready)
        if queue is self.queues["mem"] and self.mem_any_order:
            queue.rotate(-self.rng.randrange(len(queue)))
        return queue.popleft()

    # -- the application's messages ----------------------------------------------------------------

    def receive(self, flits):
        """One message from the application (its flits, as it sent them)."""
        header = Message.from_flits(flits, self.width).header
        t = header.msg_type
        _check((header.src_x, header.src_y) == self.app,
               f"message {t} from ({header.src_x}, {header.src_y}), not the tile {self.app}")
        if t in (LOAD_MEM, STORE_MEM):
            _, meta, payload = decode_mem_message(flits, self.width)
            _check(header.src_fbits == Fbits.LOCAL1, "a memory request not answered to LOCAL1")
            _check(header.dst_fbits == Fbits.LOCAL0, "a memory request not to LOCAL0")
            self.received.append((self.cycle, t, dict(meta)))
            return self._load(header, meta) if t == LOAD_MEM else \
                self._store(header, meta, payload)
        _check(t in RX_REQUESTS or t in TX_REQUESTS, f"a message of type {t} from the tile")
        header, fields = decode_app_message(flits, self.width)
        _check(header.payload_bytes == 0, f"a request ({t}) with a payload")
        _check(header.src_fbits == Fbits.LOCAL0, f"a request ({t}) not answered to LOCAL0")
        to_rx = t in RX_REQUESTS
        where = (self.rx, Fbits.LOCAL2) if to_rx else (self.tx, Fbits.LOCAL0)
        _check(((header.dst_x, header.dst_y), header.dst_fbits) == where,
               f"{MsgType(t).name} to ({header.dst_x}, {header.dst_y}) fbits "
               f"{header.dst_fbits:#x}, not {where}")
        self.received.append((self.cycle, t, fields))
        if t == MsgType.TCP_OPEN_REQ.value:
            return self._open(fields)
        flow = self.flows.get(handle_slot(fields["flow"]))
        ours = flow is not None and flow.handle == fields["flow"]
        name = MsgType(t).name
        if ours:
            _check(flow.closed_at is None, f"{name} for flow {flow.handle:#x} after its close")
        if not ours or flow.state != "open":
            if flow is not None and ours:
                flow.late += 1
                if t == MsgType.TCP_TX_ADJUST_PTR.value:
                    self._after_end(flow, flow.store_seen, name)
            if t in (MsgType.TCP_RX_MSG_REQ.value, MsgType.TCP_TX_MSG_REQ.value):
                source = "rx" if to_rx else "tx"
                resp = (MsgType.TCP_RX_MSG_RESP if to_rx else MsgType.TCP_TX_MSG_RESP)
                self._to_app(source, resp, Fbits.LOCAL0, flow=fields["flow"],
                             status=Status.CLOSED)
            return None
        ptr, length = fields["ptr"], fields["length"]
        if t == MsgType.TCP_RX_MSG_REQ.value:
            _check(flow.rx_req is None, f"two RX_MSG_REQ outstanding for {flow.handle:#x}")
            flow.rx_req = max(1, length)
        elif t == MsgType.TCP_RX_ADJUST_PTR.value:
            _check(flow.head <= ptr <= flow.rcv,
                   f"RX_ADJUST_PTR to {ptr}: outside [{flow.head}, {flow.rcv}]")
            _check(_covered(flow.loads, flow.head, ptr),
                   f"RX_ADJUST_PTR to {ptr} over bytes not read (read: {flow.loads})")
            flow.head = ptr
        elif t == MsgType.TCP_TX_MSG_REQ.value:
            _check(flow.tx_req is None, f"two TX_MSG_REQ outstanding for {flow.handle:#x}")
            self._slot_free(flow, "TX_MSG_REQ")
            flow.tx_req, flow.tx_req_since = max(1, length), self.cycle
            flow.tx_out = True
            self._note_busy()
        elif t == MsgType.TCP_TX_ADJUST_PTR.value:
            _check(flow.tail <= ptr <= flow.granted,
                   f"TX_ADJUST_PTR to {ptr}: outside [{flow.tail}, {flow.granted}]")
            _check(_covered(flow.stores, flow.tail, ptr),
                   f"TX_ADJUST_PTR to {ptr} over bytes not written (stored: {flow.stores})")
            flow.tail = ptr
        else:
            flow.closed_at = flow.tail
        return None

    def _open(self, fields):
        self.opens.append((self.cycle, fields))
        status = self.open_answers.popleft() if self.open_answers else Status.OK
        peer = (fields["peer_ip"], fields["peer_port"], fields["local_port"])
        if status != Status.OK:
            self._to_app("rx", MsgType.TCP_NEW_FLOW_NOTIF, Fbits.LOCAL0, status=status,
                         peer_ip=peer[0], peer_port=peer[1], local_port=peer[2],
                         delivered=lambda: self.answered.append((self.cycle, status)))
            return None
        slot = next(s for s in range(self.config.flows) if s not in self.flows)
        return self.announce(slot, 1 + len(self.opens), peer=peer)

    def _locate(self, addr, base, ring, what):
        """``(flow, offset in ring)`` of an address in the rings at ``base``."""
        slot, offset = divmod(addr - base, ring)
        flow = self.flows.get(slot)
        _check(addr >= base and flow is not None, f"{what} at {addr:#x}: no flow's ring")
        return flow, offset

    def _position(self, start, offset, ring):
        """The stream position in ``[start, start + ring)`` whose ring offset is ``offset``."""
        return start + (offset - start) % ring

    def _load(self, header, meta):
        cfg = self.config
        _check((header.dst_x, header.dst_y) == self.rx_mem, "LOAD_MEM not to the receive rings")
        _check(meta["wrap"] == cfg.rx_ring_log2, f"LOAD_MEM with wrap {meta['wrap']}")
        flow, offset = self._locate(meta["addr"], cfg.rx_base, cfg.rx_ring, "LOAD_MEM")
        self._after_end(flow, flow.tx_seen, "LOAD_MEM")
        pos = self._position(flow.head, offset, cfg.rx_ring)
        end = pos + meta["size"]
        _check(0 < meta["size"] and end <= flow.reported,
               f"LOAD_MEM of [{pos}, {end}) beyond what was reported ({flow.reported})")
        data = self._ring_read(self.rx_memory, cfg.rx_base, cfg.rx_ring, flow.slot, pos,
                               meta["size"])
        many = "two" if self.loads_per_flow == 1 else f"more than {self.loads_per_flow}"
        _check(flow.loads_out < self.loads_per_flow,
               f"{many} LOAD_MEM outstanding for {flow.handle:#x}")
        self._slot_free(flow, "LOAD_MEM")
        flow.loads_out += 1
        self.max_loads = max(self.max_loads, flow.loads_out)
        self._note_busy()
        def loaded():
            flow.loads.append((pos, end))
            flow.load_seen = self._seen()
            flow.loads_out -= 1
        self._to_mem((mem_message_flits(
            self.width, LOAD_MEM_ACK, meta["addr"], meta["size"], data, dst=self.app,
            src=self.rx_mem, dst_fbits=header.src_fbits, wrap=meta["wrap"]), loaded))

    def _store(self, header, meta, payload):
        cfg = self.config
        _check((header.dst_x, header.dst_y) == self.tx_mem, "STORE_MEM not to the send rings")
        _check(meta["wrap"] == cfg.tx_ring_log2, f"STORE_MEM with wrap {meta['wrap']}")
        _check(len(payload) == meta["size"] > 0, "STORE_MEM whose payload is not its size")
        flow, offset = self._locate(meta["addr"], cfg.tx_base, cfg.tx_ring, "STORE_MEM")
        self._after_end(flow, max(flow.tx_seen, flow.load_seen), "STORE_MEM")
        pos = self._position(flow.tail, offset, cfg.tx_ring)
        end = pos + meta["size"]
        _check(end <= flow.granted,
               f"STORE_MEM of [{pos}, {end}) beyond the room granted ({flow.granted})")
        self._ring_write(self.tx_memory, cfg.tx_base, cfg.tx_ring, flow.slot, pos, payload)
        _check(not flow.stores_out, f"two STORE_MEM outstanding for {flow.handle:#x}")
        self._slot_free(flow, "STORE_MEM")
        flow.stores_out += 1
        self._note_busy()
        def stored():
            flow.stores.append((pos, end))
            flow.store_seen = self._seen()
            flow.stores_out -= 1
        self._to_mem((mem_message_flits(
            self.width, STORE_MEM_ACK, meta["addr"], meta["size"], dst=self.app,
            src=self.tx_mem, dst_fbits=header.src_fbits, wrap=meta["wrap"]), stored))

    # -- helpers ---------------------------------------------------------------------------------

    def _tx_answered(self, flow):
        """The ``delivered`` callback of a ``TCP_TX_MSG_RESP``: when it reached the tile."""
        def delivered():
            flow.tx_seen = self._seen()
            flow.tx_out = False
        return delivered

    def _slot_free(self, flow, what):
        """``what`` for ``flow``: no earlier connection in its slot awaits a memory ack."""
        for old in self.every:
            _check(old is flow or old.slot != flow.slot or not (old.loads_out or old.stores_out),
                   f"{what} for flow {flow.handle:#x} while a memory request of {old.handle:#x} "
                   f"(its slot's earlier connection) is unanswered")

    def _note_busy(self):
        """A flow's job got under way: update :attr:`max_busy` and :attr:`max_memory`."""
        busy = sum(f.tx_out or f.loads_out > 0 for f in self.every)
        self.max_busy = max(self.max_busy, busy)
        memory = sum(f.loads_out > 0 or f.stores_out > 0 for f in self.every)
        self.max_memory = max(self.max_memory, memory)

    def _to_mem(self, item):
        """A memory ack, to the tile now or ``mem_latency`` cycles later."""
        if self.mem_latency:
            self.mem_pending.append((self.cycle + self.mem_latency, *item))
        else:
            self.queues["mem"].append(item)

    @staticmethod
    def _after_end(flow, trigger, what):
        """``what`` for ``flow`` follows an answer that reached the tile when (``trigger``):
        not after the flow's end did."""
        if flow.end_seen is not None:
            _check(trigger < flow.end_seen,
                   f"{what} for flow {flow.handle:#x} on an answer that reached the tile after "
                   f"its end")

    def _to_app(self, source, msg_type, dst_fbits, delivered=None, **fields):
        src, src_fbits = (self.rx, Fbits.LOCAL2) if source == "rx" else (self.tx, Fbits.LOCAL0)
        self.sent.append((msg_type.value, fields))
        self.queues[source].append((app_message_flits(
            self.width, msg_type.value, dst=self.app, src=src, dst_fbits=dst_fbits,
            src_fbits=src_fbits, **{k: int(v) for k, v in fields.items()}), delivered))

    @staticmethod
    def _ring_write(memory, base, ring, slot, pos, data):
        for k, byte in enumerate(data):
            memory[base + slot * ring + (pos + k) % ring] = byte

    @staticmethod
    def _ring_read(memory, base, ring, slot, pos, size):
        return bytes(memory[base + slot * ring + (pos + k) % ring] for k in range(size))

    def written(self, flow):
        """The bytes the application has handed over on ``flow``'s send side so far."""
        cfg = self.config
        return bytes(flow.sent) + self._ring_read(self.tx_memory, cfg.tx_base, cfg.tx_ring,
                                                  flow.slot, flow.una, flow.tail - flow.una)

    def idle(self):
        """Nothing waits to go to the tile."""
        return not any(self.queues.values()) and not self.mem_pending


def beside_a_frozen_peer(model, frozen, a_bytes, b_bytes, *, wait=50, now=True):
    """Issue 38's frozen peer: connection A (slot 0) and, with ``frozen``, connection B (slot 1)
    whose peer does not read, ``b_bytes`` in its receive ring at once. Returns ``(flows, s,
    script)``: ``script(model)`` (each cycle) gives A ``a_bytes`` and its FIN (all in the ring
    at once with ``now``) once B's ``TCP_TX_MSG_REQ`` has waited ``wait`` cycles, at once
    without B, and notes that cycle in ``s.start``; ``s.b_waits()`` says whether B's request
    made before it is still unanswered."""
    flows = {"A": model.announce(0, 1)}
    if frozen:
        flows["B"] = b = model.announce(1, 1)
        b.drain = False
        model.deliver_now(b, b_bytes)
    s = SimpleNamespace(start=None if frozen else 0)
    s.b_waits = lambda: b.tx_req is not None and b.tx_req_since < s.start

    def script(model):
        b = flows.get("B")
        if s.start is None and b.tx_req is not None and model.cycle > b.tx_req_since + wait:
            s.start = model.cycle
        if s.start is not None and not flows["A"].received:
            s.start = model.cycle
            (model.deliver_now if now else model.deliver)(flows["A"], a_bytes, fin=True)
    return flows, s, script
