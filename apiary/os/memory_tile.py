"""The DRAM buffer tile: Beehive's ``LOAD_MEM`` / ``STORE_MEM`` over a LiteDRAM-style port.

Messages (every one carries :data:`MEM_META` as ``meta_bits=`` metadata: inline in the header
flit at 512 bits, in metadata flits after the header below, see
:func:`~apiary.noc.framing.meta_plan`):

================  ====  ==========================  ===========================  ================
message           type  metadata                    payload                      goes to
================  ====  ==========================  ===========================  ================
``LOAD_MEM``      19    ``addr``, ``size``,         none (any is ignored)        the tile
                        ``wrap``
``LOAD_MEM_ACK``  24    same ``addr``, ``size``,    ``size`` bytes read at       the request's
                        ``wrap``; ``error``         ``addr`` (none if ``error``) ``src_x/y/fbits``
``STORE_MEM``     20    ``addr``, ``size``,         ``size`` bytes to write at   the tile
                        ``wrap``                    ``addr``
``STORE_MEM_ACK`` 25    same ``addr``, ``size``,    none                         the request's
                        ``wrap``; ``error``                                      ``src_x/y/fbits``
================  ====  ==========================  ===========================  ================

``MEM_META`` is 93 bits: ``addr`` (bits 0-47) is a byte address, ``size`` (48-77) a byte count
(0 allowed), ``error`` (78), ``wrap`` (79-84), ``tag`` (85-92: copied from request to ack
untouched, for the requester's own use; an Apiary monitor keeps the capability handle there);
neither ``addr`` nor ``size`` need be word aligned.
A request's ``error`` bit is ignored.

``wrap = 0`` (as in every Beehive message and earlier user) is a plain access to
``[addr, addr + size)``. ``wrap = k > 0`` makes it an access to a circular buffer of ``2**k``
bytes, the aligned region ``[ring_base, ring_base + 2**k)`` with ``ring_base = addr & ~(2**k -
1)``: byte *i* of the access is at ``ring_base + (addr + i) % 2**k``, so an access that runs
past the ring's end continues at its start. It needs ``2**k >= width / 8`` (a ring of at least
one memory word) and ``size <= 2**k``.

An ack has ``error`` set, and touched no memory, when the request's ``wrap`` breaks those rules
(counted in ``bad_wrap``), or its range does not fit in the memory (``addr + size >
size_bytes``, or with ``wrap`` the ring: ``ring_base + 2**k > size_bytes``; ``out_of_range``),
or (``bad_length``) when a store's payload is not ``size`` bytes long, or a load asks for more
than one message can carry (4 MiB - 1); a request that breaks several rules is counted once, in
the first of these three counters that applies.
"""

from amaranth import Module, Signal, Mux
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ..noc.framing import MessageReceiver, MessageSender, decode_meta_message, meta_message_flits
from ..noc.header import Fbits, NocHeader, noc_header
from ..noc.msgtype import register_msg_types
from ..noc.spec import register_formats
from ..stream.format import Field, Format
from ..tile import Receive, Send, Tile, TileEnv
from .memory import MemoryModel, memory_port_signature
from .memory_access import MemoryLoad, MemoryStore
from ..stream.counters import count
from ..stream.queue import Queue


__all__ = ["MemoryTile", "MemRequest", "MemMsgType", "MEM_FORMAT", "MEM_META", "LOAD_MEM",
           "STORE_MEM", "LOAD_MEM_ACK", "STORE_MEM_ACK", "DUPLEX_STORE_ACKS", "DUPLEX_LOADS",
           "mem_meta",
           "unpack_mem_meta", "mem_message_flits", "decode_mem_message"]


@register_msg_types
class MemMsgType(enum.Enum, shape=8):
    """The memory messages, with Beehive's values."""
    LOAD_MEM      = 19
    STORE_MEM     = 20
    LOAD_MEM_ACK  = 24
    STORE_MEM_ACK = 25


LOAD_MEM = MemMsgType.LOAD_MEM.value
STORE_MEM = MemMsgType.STORE_MEM.value
LOAD_MEM_ACK = MemMsgType.LOAD_MEM_ACK.value
STORE_MEM_ACK = MemMsgType.STORE_MEM_ACK.value

#: The metadata of every memory message, ``addr`` in the least significant bits.
MEM_FORMAT = Format("mem_meta", [
    Field("addr", 48, "byte address (need not be word aligned)"),
    Field("size", 30, "byte count (0 allowed)"),
    Field("error", 1, "in an ack: the request was refused, no memory touched"),
    Field("wrap", 6, "k > 0: an access to the ring of 2**k bytes around addr"),
    Field("tag", 8, "copied from request to ack (a monitor keeps the capability handle here)"),
], order="lsb", doc="The metadata of every memory message (Beehive's LOAD_MEM / STORE_MEM).")
MEM_META = MEM_FORMAT.layout()
register_formats([MemMsgType.LOAD_MEM, MemMsgType.STORE_MEM_ACK], MEM_FORMAT)
register_formats([MemMsgType.STORE_MEM], MEM_FORMAT, payload="the bytes to store")
register_formats([MemMsgType.LOAD_MEM_ACK], MEM_FORMAT, payload="the bytes read")

_PAYLOAD_BITS = noc_header(64).width("payload_bytes")
#: Store acks a duplex tile holds while a load's answer is on its way out.
DUPLEX_STORE_ACKS = 16
#: Loads a duplex tile takes in while it serves another (so that the stores behind them go on).
DUPLEX_LOADS = 4


# -- Python model of the messages (tests, traces) --------------------------------------------------

def mem_meta(addr, size, error=0, wrap=0, tag=0):
    """The metadata as an int (``addr`` in the low 48 bits, ``size`` above, then ``error``,
    ``wrap`` and ``tag``)."""
    return MEM_FORMAT.pack(addr=addr, size=size, error=error, wrap=wrap, tag=tag)


def unpack_mem_meta(value):
    """``{"addr", "size", "error", "wrap", "tag"}`` from the metadata int."""
    return MEM_FORMAT.unpack(value)


def mem_message_flits(width, msg_type, addr, size, payload=b"", *, dst=(0, 0),
                      src=(0, 0), dst_fbits=Fbits.LOCAL0, src_fbits=Fbits.LOCAL0, error=0,
                      wrap=0, tag=0):
    """The flits (``(data, last)`` pairs) of a memory message at ``width`` bits."""
    hdr = NocHeader(dst_x=dst[0], dst_y=dst[1], dst_fbits=dst_fbits, msg_type=int(msg_type),
                    src_x=src[0], src_y=src[1], src_fbits=src_fbits)
    return meta_message_flits(width, hdr, mem_meta(addr, size, error, wrap, tag), MEM_META.size,
                              payload)


def decode_mem_message(flits, width):
    """``(header, meta, payload)`` of a memory message's flits: a :class:`NocHeader`, the
    :func:`unpack_mem_meta` dict and the payload bytes."""
    header, meta, payload = decode_meta_message(flits, width, MEM_META.size)
    return header, unpack_mem_meta(meta), payload


# -- the tile --------------------------------------------------------------------------------------

class MemoryTile(Tile):
    """A buffer in DRAM that other tiles load from and store to with messages (see the module
    docstring for the formats).

    The memory is outside the tile, on the port ``mem`` (master side of
    :func:`~apiary.os.memory.memory_port_signature`, shaped like LiteDRAM's native user port),
    which becomes the design's top-level port ``<tile>_mem``; the simulators attach a
    :class:`~apiary.os.memory.MemoryModel` to it instead (an :class:`apiary.top.Attachment`).
    With ``bram=True`` the memory is inside the tile instead: an on-chip Amaranth ``Memory``
    (block RAM on an FPGA) behind the same port logic, a
    :class:`~apiary.os.memory.MemoryModel` of read latency 1, all words zero at start; the tile
    then has no ``mem`` port, the design no top-level memory port, and the simulators attach
    nothing (``memory_latency=`` does not apply to it). For small boards without DRAM and for
    tests; the memory's size is what the FPGA's block RAM allows.

    With ``duplex=True`` (on-chip only) the memory is a simple dual-port RAM and the tile serves
    a load and a store at once, each on a port of its own: a store streams in while a load's
    answer streams out, so the tile moves a word a cycle each way (a receive ring written by
    the TCP engine while its application reads it). Each kind is served in arrival order, and
    a load waits for the store before it to be written (it reads what was stored before it),
    then waits (up to :data:`DUPLEX_LOADS` of them) for the load path while the stores behind
    it go on; a store does not wait for a load before it, so a requester must not store over
    bytes it is still loading (the TCP engine never does: it stores only where the application
    has read).
    A store's ack leaves as soon as the store is done (up to :data:`DUPLEX_STORE_ACKS` wait
    while a load's answer is leaving), so acks may overtake a load's. Each path costs its own
    request registers, so the tile is larger.

    Without ``duplex``, requests are served one at a time, in arrival order::

        noc_in ─▶ MessageReceiver ─▶ (STORE payload) StreamInsert ─▶ cmd + write queue ─▶ mem
                        │ header                                                         │
                        ▼                                                                ▼
                   controller ─▶ read commands (credit: read buffer)     mem.rdata ─▶ read buffer
                        │ descriptor                                                     │
                        ▼                                                                ▼
        noc_out ◀─ MessageSender ◀───────────────────────────────────────── StreamStrip ◀┘

    The controller keeps the request in a :class:`MemRequest` (decoder, registers, the ack's
    descriptor); the two data paths are :class:`~apiary.os.memory_access.MemoryStore` (insert,
    byte enables, write queue) and :class:`~apiary.os.memory_access.MemoryLoad` (read
    commands, read buffer, strip).

    A store's payload is shifted up by ``addr % (width/8)`` lanes (a
    :class:`~apiary.stream.realign.StreamInsert` of that many pad bytes) so that each word lands on
    a memory word, and written with byte enables that leave the lanes before ``addr`` and after
    ``addr + size`` untouched. A load reads the words that hold its range and strips the first
    ``addr % (width/8)`` bytes (:class:`~apiary.stream.realign.StreamStrip`).

    A wrapped access (``wrap = k > 0``) is the same run of words, lane shift and byte enables;
    only the word address wraps within the ring's words, ``base | (addr + 1) & mask``. Its first
    and last word may be the same memory word (``addr % (width/8) + size > 2**k``, e.g. a whole
    ring from an unaligned start): the first write enables lanes ``addr % (width/8)`` up, the
    last the lanes below ``(addr + size) % (width/8)``, which is no higher, so the bytes
    between them (outside the access) are untouched and the word is read twice for a load.
    Wrapping costs no cycle: latency and throughput are those of an unwrapped access of the
    same ``addr % (width/8)`` and ``size``.

    Latency: a request whose last header/metadata flit is taken on cycle *t* is decoded on *t*
    and its first read or write command is offered on *t* + 1. The ack's header flit is offered
    on ``noc_out`` on *t* + 1 for a load (before its data is read) and for a failed request, and
    for a store on the cycle after its last word's write command and data were both taken by
    the memory (2 cycles after its last payload flit came in, 3 if its last word needs a flush).
    A load's first payload flit leaves 1 cycle after its first read word arrives (the read
    buffer), or 2 when its first output word spans two memory words (the strip). With
    ``MemoryModel(latency=L)`` at 512 bits that is ``L + 2`` (or ``L + 3``) cycles after the
    request flit; at 64 bits the ack's 4 header and metadata flits hide part of it.

    Throughput: one payload word per cycle each way once a request is under way, as long as the
    memory keeps up: reads are issued ahead, up to ``read_buffer`` in flight (so read latencies
    up to about ``read_buffer - 2`` cycles do not slow a load down), writes are issued as the
    payload arrives, up to 4 ahead of their data. Between requests the tile spends 1 to 3 idle
    cycles.

    Drops: a message of any type but ``LOAD_MEM`` or ``STORE_MEM`` is taken whole and dropped,
    counted in ``bad_type``, and the next one is served normally. Malformed messages (wrong
    ``metadata_flits``, truncated) are dropped by the :class:`MessageReceiver` and counted in
    ``malformed``.

    Parameters
    ----------
    env : TileEnv
    size_bytes : int
        Size of the memory in bytes, a multiple of the word size; the port's word address is
        ``ceil(log2(size_bytes / (data_width / 8)))`` bits.
    data_width : int or None
        The memory port's word width; must be the NoC width (the default).
    read_buffer : int
        Words of read data the tile can hold, and hence reads in flight at once.
    bram : bool
        The memory is on-chip, inside the tile (read latency 1), instead of behind ``mem``.
    duplex : bool
        With ``bram``: a load and a store served at once (above).

    Members
    -------
    mem : Out(memory_port_signature(data_width, addr_width, depth_words=...))
        The memory (external); absent with ``bram=True``.

    Counters: ``loads`` and ``stores`` (requests answered, with or without ``error``),
    ``bad_wrap`` (a ``wrap`` whose ring is smaller than a word or than ``size``: ``error``),
    ``out_of_range`` (a range, or ring, outside the memory, answered with ``error``),
    ``bad_length`` (a store whose payload is not ``size`` bytes, a load larger than a message:
    ``error``),
    ``bad_type`` (messages of another type, dropped), ``malformed`` (messages the receiver
    dropped or reframed).

    Raises
    ------
    ValueError
        If ``data_width`` is not the NoC width, or ``size_bytes`` not a positive multiple of
        the word size below 2**48, or ``duplex`` is asked for without ``bram``.
    """

    #: The tile holds a request's input while its reply leaves.
    streaming = True

    inputs = (Receive("requests", MemMsgType.LOAD_MEM, MemMsgType.STORE_MEM, meta=MEM_FORMAT,
                      empty_packets=True),)
    outputs = (Send("acks", MemMsgType.LOAD_MEM_ACK, MemMsgType.STORE_MEM_ACK, meta=MEM_FORMAT),)

    def __init__(self, env: TileEnv | None = None, *, size_bytes: int = 1 << 20,
                 data_width: int | None = None, read_buffer: int = 64,
                 bram: bool = False, duplex: bool = False) -> None:
        env = env if env is not None else TileEnv()
        width = env.width
        data_width = width if data_width is None else data_width
        if data_width != width:
            raise ValueError(f"MemoryTile's memory port must be as wide as the NoC ({width} "
                             f"bits), not {data_width!r} bits")
        nb = data_width // 8
        if (not isinstance(size_bytes, int) or isinstance(size_bytes, bool) or size_bytes < nb
                or size_bytes % nb or size_bytes >= 1 << 48):
            raise ValueError(f"size_bytes must be a positive multiple of the {nb}-byte word "
                             f"below 2**48, not {size_bytes!r}")
        if not isinstance(read_buffer, int) or isinstance(read_buffer, bool) or read_buffer < 2:
            raise ValueError(f"read_buffer must be an integer of at least 2, not {read_buffer!r}")
        self.size_bytes = size_bytes
        self.data_width = data_width
        self.depth_words = size_bytes // nb
        self.addr_width = max(1, (self.depth_words - 1).bit_length())
        self.read_buffer = read_buffer
        if not isinstance(bram, bool):
            raise ValueError(f"bram must be True or False, not {bram!r}")
        self.bram = bram
        if not isinstance(duplex, bool):
            raise ValueError(f"duplex must be True or False, not {duplex!r}")
        if duplex and not bram:
            raise ValueError("duplex=True needs the on-chip memory (bram=True): its two ports "
                             "read and write at once, where an external port takes one "
                             "command a cycle")
        self.duplex = duplex
        members = {} if bram else {
            "mem": Out(memory_port_signature(data_width, self.addr_width,
                                             depth_words=self.depth_words)),
        }
        super().__init__(env, members, counters={
            "loads": "LOAD_MEM requests answered (with or without error)",
            "stores": "STORE_MEM requests answered (with or without error)",
            "out_of_range": "requests whose range, or ring, falls outside the memory (answered "
                            "with error)",
            "bad_length": "stores whose payload is not size bytes, loads larger than a message "
                          "(answered with error)",
            "bad_type": "messages of another type, dropped",
            "malformed": "messages the receiver dropped or reframed",
            "bad_wrap": "requests whose ring (wrap) is smaller than a memory word or than "
                        "their size (answered with error)",
        })

    def elaborate(self, platform):
        m = Module()
        width = self.env.width
        aw = self.addr_width
        if self.bram:
            # On-chip: the memory model (an Amaranth Memory) as the memory, latency 1.
            m.submodules.bram = bram = MemoryModel(width, aw, depth_words=self.depth_words,
                                                   latency=1, duplex=self.duplex)
            memory = bram.port                      # the memory's side of the port
        else:
            memory = flipped(self.mem)

        ports = self.message_ports(m)
        rx, tx = ports.requests, ports.acks
        counters = self.counters
        m.d.comb += counters.malformed.eq(rx.errors)
        if self.duplex:
            self._duplex(m, rx, tx, memory, bram.rport)
            return m

        m.submodules.request = request = MemRequest(width, size_bytes=self.size_bytes,
                                                    addr_width=aw, src=(self.env.x, self.env.y))
        m.submodules.load = load = MemoryLoad(width, addr_width=aw,
                                              read_buffer=self.read_buffer)
        m.submodules.store = store = MemoryStore(width, addr_width=aw)
        take = Signal()                             # the request on offer is taken
        m.d.comb += [
            take.eq(rx.o_hdr.valid & rx.o_hdr.ready),
            request.hdr.eq(rx.o_hdr.payload),
            request.take.eq(take),
            tx.i_hdr.payload.eq(request.ack),
        ]
        for path in (load, store):
            m.d.comb += [path.addr.eq(request.first_word), path.wmask.eq(request.wmask),
                         path.off.eq(request.off), path.start.eq(take),
                         path.cmd_ready.eq(memory.cmd.ready)]
        m.d.comb += [load.words.eq(request.words), load.tail.eq(request.tail)]
        connect(m, memory=memory.rdata, load=load.rdata)
        connect(m, load=load.o, sender=tx.i_data)
        connect(m, receiver=rx.o_data, store=store.i)
        connect(m, store=store.wdata, memory=memory.wdata)
        # The memory's command stream: reads while loading, writes while storing.
        m.d.comb += [
            memory.cmd.valid.eq(load.read_cmd | store.write_cmd),
            memory.cmd.payload.we.eq(store.write_cmd),
            memory.cmd.payload.addr.eq(Mux(store.write_cmd, store.write_addr, load.read_addr)),
        ]
        desc_taken = tx.i_hdr.valid & tx.i_hdr.ready
        load_done = tx.i_data.valid & tx.i_data.ready & tx.i_data.payload.last

        with m.FSM(name="memory_tile"):
            with m.State("IDLE"):
                m.d.comb += rx.o_hdr.ready.eq(store.idle)
                with m.If(take):
                    self._serve(m, request, load, store)
            with m.State("LOAD"):
                m.d.comb += [request.with_data.eq(1), tx.i_hdr.valid.eq(1)]
                with m.If(desc_taken):
                    m.next = "LOAD_DATA"
            with m.State("LOAD_DATA"):
                with m.If(load_done):
                    m.next = "IDLE"
            with m.State("STORE"):
                m.d.comb += tx.i_hdr.valid.eq(store.done)
                with m.If(desc_taken):
                    m.next = "IDLE"
            with m.State("ACK"):
                m.d.comb += tx.i_hdr.valid.eq(1)
                with m.If(desc_taken):
                    m.next = "IDLE"
        return m

    def _count_errors(self, m, request):
        """Count what is wrong with a load or store being taken, once (the first that
        applies)."""
        counters = self.counters
        with m.If(request.is_load | request.is_store):
            with m.If(request.bad_wrap):
                count(m, counters.bad_wrap)
            with m.Elif(request.out_of_range):
                count(m, counters.out_of_range)
            with m.Elif(request.bad_length):
                count(m, counters.bad_length)

    def _serve(self, m, request, load, store):
        """The cycle a request is taken (in state ``IDLE``): count it, start its load, its
        store or the discarding of its payload, and go on to the state that acks it."""
        counters = self.counters
        self._count_errors(m, request)
        with m.If(request.is_load):
            count(m, counters.loads)
            m.d.comb += store.drain.eq(1)
            with m.If(request.reads):
                m.d.comb += load.read.eq(1)
                m.next = "LOAD"
            with m.Else():
                m.next = "ACK"
        with m.Elif(request.is_store):
            count(m, counters.stores)
            with m.If(request.error):
                m.d.comb += store.drain.eq(1)
                m.next = "ACK"
            with m.Else():
                m.d.comb += store.store.eq(1)
                m.next = "STORE"
        with m.Else():
            count(m, counters.bad_type)
            m.d.comb += store.drain.eq(1)


    def _duplex(self, m, rx, tx, wport, rport):
        """``duplex``: a load and a store at once, each path on a port of its own (the class
        docstring). Stores take turns on two store paths, so that the next store comes in
        while the last one's final words are written: the write port takes the older path's
        commands and data first, and the acks leave in the stores' order."""
        width, aw, counters = self.env.width, self.addr_width, self.counters
        src = (self.env.x, self.env.y)

        def request():
            return MemRequest(width, size_bytes=self.size_bytes, addr_width=aw, src=src)

        sreqs = [request(), request()]
        stores = [MemoryStore(width, addr_width=aw), MemoryStore(width, addr_width=aw)]
        for k in range(2):
            m.submodules[f"request{k}"] = sreqs[k]
            m.submodules[f"store{k}"] = stores[k]
        m.submodules.load_request = lreq = request()
        m.submodules.load = load = MemoryLoad(width, addr_width=aw,
                                              read_buffer=self.read_buffer)
        desc = MessageSender.descriptor_layout(width, meta_bits=MEM_META.size)
        m.submodules.store_acks = store_acks = Queue(desc, DUPLEX_STORE_ACKS)
        m.submodules.loads_waiting = loads_waiting = Queue(
            MessageReceiver.header_layout(width, meta_bits=MEM_META.size), DUPLEX_LOADS)

        turn = Signal()             # the store path that takes the next message
        oldest = Signal()           # the store path whose store is the older (acked first)
        feeding = Signal()          # the store path the receiver's payload goes to
        busy = Signal(2)            # a path holds a store (or a refused one) until its ack
        refused = Signal(2)         # ... a refused one: its ack has error set, nothing written
        # What the older path still has to do before the other may write: a path whose store
        # is refused or done has nothing, one that has issued its last command only data.
        old_issued = Signal()
        old_written = Signal()
        m.d.comb += [
            old_issued.eq(~busy.bit_select(oldest, 1) | refused.bit_select(oldest, 1)
                          | Mux(oldest, stores[1].issued, stores[0].issued)),
            old_written.eq(~busy.bit_select(oldest, 1) | refused.bit_select(oldest, 1)
                           | Mux(oldest, stores[1].done, stores[0].done)),
        ]

        hdr = rx.o_hdr
        is_load = sreqs[0].is_load
        inputs_idle = stores[0].idle & stores[1].idle
        # A load waits for every store before it to be written, then for the load path among
        # the loads waiting; a store for its path to be free. Every message's payload (a
        # load's: none, or ignored) goes through the path whose turn it is.
        m.d.comb += hdr.ready.eq(inputs_idle & Mux(is_load, (busy == 0) & loads_waiting.i.ready,
                                                   ~busy.bit_select(turn, 1)))
        take_load = hdr.valid & hdr.ready & is_load
        take_other = hdr.valid & hdr.ready & ~is_load
        load_free = Signal()
        serve_load = loads_waiting.o.valid & load_free
        m.d.comb += [lreq.hdr.eq(loads_waiting.o.payload),
                     loads_waiting.i.payload.eq(hdr.payload), loads_waiting.i.valid.eq(take_load),
                     loads_waiting.o.ready.eq(load_free), lreq.take.eq(serve_load)]
        m.d.comb += [load.addr.eq(lreq.first_word), load.wmask.eq(lreq.wmask),
                     load.off.eq(lreq.off), load.start.eq(serve_load),
                     load.words.eq(lreq.words), load.tail.eq(lreq.tail),
                     load.cmd_ready.eq(rport.cmd.ready)]
        connect(m, memory=rport.rdata, load=load.rdata)
        connect(m, load=load.o, sender=tx.i_data)
        m.d.comb += [
            rport.cmd.valid.eq(load.read_cmd), rport.cmd.payload.we.eq(0),
            rport.cmd.payload.addr.eq(load.read_addr),
            rport.wdata.valid.eq(0), wport.rdata.ready.eq(1),
            wport.cmd.payload.we.eq(1),
        ]
        with m.If(take_load | take_other):
            m.d.sync += feeding.eq(turn)
        with m.If(serve_load):
            self._count_errors(m, lreq)

        for k, (sreq, store) in enumerate(zip(sreqs, stores)):
            mine = turn == k
            older = oldest == k
            m.d.comb += [
                sreq.hdr.eq(hdr.payload), sreq.take.eq(take_other & mine),
                store.addr.eq(sreq.first_word), store.wmask.eq(sreq.wmask),
                store.off.eq(sreq.off), store.start.eq(take_other & mine),
                # the payload on offer, to the path it is for
                store.i.payload.eq(rx.o_data.payload),
                store.i.valid.eq(rx.o_data.valid & (feeding == k)),
            ]
            with m.If(feeding == k):
                m.d.comb += rx.o_data.ready.eq(store.i.ready)
            # The write port: the older path's commands and data, the younger's once the
            # older has issued (commands) and written (data) all of its own.
            may_issue = older | old_issued
            may_write = older | old_written
            m.d.comb += store.cmd_ready.eq(may_issue & wport.cmd.ready)
            with m.If(may_issue & store.write_cmd):
                m.d.comb += [wport.cmd.valid.eq(1), wport.cmd.payload.addr.eq(store.write_addr)]
            with m.If(may_write & store.wdata.valid):
                m.d.comb += [wport.wdata.valid.eq(1), wport.wdata.payload.eq(store.wdata.payload)]
            m.d.comb += store.wdata.ready.eq(may_write & wport.wdata.ready)

            with m.If(take_other & mine):
                self._count_errors(m, sreq)
                with m.If(sreq.is_store):
                    count(m, counters.stores)
                    m.d.sync += [busy.bit_select(k, 1).eq(1), turn.eq(~turn),
                                 refused.bit_select(k, 1).eq(sreq.error)]
                    with m.If(sreq.error):
                        m.d.comb += store.drain.eq(1)
                    with m.Else():
                        m.d.comb += store.store.eq(1)
                with m.Else():
                    count(m, counters.bad_type)
                    m.d.comb += store.drain.eq(1)
            with m.If(take_load & mine):
                m.d.comb += store.drain.eq(1)
            # Its ack, in the stores' order, once written (at once if refused).
            with m.If(older & busy[k] & (refused[k] | store.done)):
                m.d.comb += [store_acks.i.valid.eq(1), store_acks.i.payload.eq(sreq.ack)]
                with m.If(store_acks.i.ready):
                    m.d.sync += [busy.bit_select(k, 1).eq(0), oldest.eq(~oldest)]

        # Acks out: a store's from its queue first, else the load's (its data then follows).
        load_offer = Signal()
        with m.If(store_acks.o.valid):
            m.d.comb += [tx.i_hdr.valid.eq(1), tx.i_hdr.payload.eq(store_acks.o.payload),
                         store_acks.o.ready.eq(tx.i_hdr.ready)]
        with m.Else():
            m.d.comb += [tx.i_hdr.valid.eq(load_offer), tx.i_hdr.payload.eq(lreq.ack)]
        load_taken = load_offer & ~store_acks.o.valid & tx.i_hdr.ready
        load_done = tx.i_data.valid & tx.i_data.ready & tx.i_data.payload.last

        with m.FSM(name="loads"):
            with m.State("IDLE"):
                m.d.comb += load_free.eq(1)
                with m.If(serve_load):
                    count(m, counters.loads)
                    with m.If(lreq.reads):
                        m.d.comb += load.read.eq(1)
                        m.next = "LOAD"
                    with m.Else():
                        m.next = "ACK"
            with m.State("LOAD"):
                m.d.comb += [lreq.with_data.eq(1), load_offer.eq(1)]
                with m.If(load_taken):
                    m.next = "LOAD_DATA"
            with m.State("LOAD_DATA"):
                with m.If(load_done):
                    m.next = "IDLE"
            with m.State("ACK"):
                m.d.comb += load_offer.eq(1)
                with m.If(load_taken):
                    m.next = "IDLE"


class MemRequest(wiring.Component):
    """A :class:`MemoryTile`'s request: decode the one on offer, hold the one being served,
    and build its ack's descriptor.

    Combinational, from ``hdr`` (the header of the request on offer): whether it is a load
    or a store, what is wrong with it (``bad_wrap``, ``out_of_range``, ``bad_length``, as the
    module docstring defines them; ``error`` if any), whether a load of it has words to
    read (``reads``: no error and ``size`` above 0), its first memory word, and ``words``, the
    memory words its range touches. On ``take`` (one cycle) the request is held: ``wmask``
    (the word-address bits that count: the ring's, with ``wrap``), ``off`` (``addr``'s byte
    in its word) and ``tail`` (bytes of the range in its last word, 1 to ``width // 8``) from
    the next cycle on, and ``ack``, the descriptor of its ack: to the request's
    ``src_x/y/fbits`` from ``src``, ``LOAD_MEM_ACK`` for a load (else ``STORE_MEM_ACK``),
    the request's ``addr``, ``size``, ``wrap`` and ``tag``, ``error``, and a payload of
    ``size`` bytes while ``with_data`` is high (else none).

    Parameters
    ----------
    width : int
        The NoC and memory word width.
    size_bytes : int
        The memory's size.
    addr_width : int
        Bits of a word address.
    src : (int, int)
        The tile's coordinates, the acks' source.
    """

    def __init__(self, width, *, size_bytes, addr_width, src):
        self._width = width
        self._size_bytes = size_bytes
        self._addr_width = addr_width
        self._src = src
        log_nb = (width // 8).bit_length() - 1
        super().__init__({
            "hdr": In(MessageReceiver.header_layout(width, meta_bits=MEM_META.size)),
            "take": In(1),
            "is_load": Out(1),
            "is_store": Out(1),
            "bad_wrap": Out(1),
            "out_of_range": Out(1),
            "bad_length": Out(1),
            "error": Out(1),
            "reads": Out(1),
            "first_word": Out(addr_width),
            "words": Out(32 - log_nb),
            "wmask": Out(addr_width),
            "off": Out(max(1, log_nb)),
            "tail": Out(range(width // 8 + 1)),
            "with_data": In(1),
            "ack": Out(MessageSender.descriptor_layout(width, meta_bits=MEM_META.size)),
        })

    def elaborate(self, platform):
        m = Module()
        nb = self._width // 8
        log_nb = nb.bit_length() - 1
        aw = self._addr_width
        hdr = self.hdr
        req = data.View(MEM_META, hdr.meta)
        req_addr = Signal(48)
        req_size = Signal(30)
        m.d.comb += [req_addr.eq(req.addr), req_size.eq(req.size)]
        is_load, is_store = self.is_load, self.is_store
        m.d.comb += [
            is_load.eq(hdr.msg_type == LOAD_MEM),
            is_store.eq(hdr.msg_type == STORE_MEM),
        ]
        end = Signal(49)
        m.d.comb += end.eq(req_addr + req_size)
        # A ring of 2**wrap bytes (wrap > 0): its base, its end, the word-address mask.
        wrapped = Signal()
        ring_bytes = Signal(64)
        ring_mask = Signal(64)
        ring_end = Signal(65)
        m.d.comb += [
            wrapped.eq(req.wrap != 0),
            ring_bytes.eq(1 << req.wrap),
            ring_mask.eq(ring_bytes - 1),
            ring_end.eq((req_addr & ~ring_mask) + ring_bytes),
        ]
        bad_wrap, oor, bad_len = self.bad_wrap, self.out_of_range, self.bad_length
        m.d.comb += bad_wrap.eq(wrapped & ((req.wrap < log_nb) | (req_size > ring_bytes)))
        m.d.comb += oor.eq(Mux(wrapped, ring_end, end) > self._size_bytes)
        req_wmask = Signal(aw)                      # word-address bits that count up and wrap
        m.d.comb += req_wmask.eq(Mux(wrapped, ring_mask[log_nb:], (1 << aw) - 1))
        m.d.comb += bad_len.eq(Mux(is_store, hdr.payload_bytes != req_size,
                                   req_size >= 1 << _PAYLOAD_BITS))
        m.d.comb += [
            self.error.eq(bad_wrap | oor | bad_len),
            self.reads.eq(~self.error & (req_size != 0)),
            self.first_word.eq(req_addr[log_nb:log_nb + aw]),
        ]
        req_off = Signal(max(1, log_nb))
        if log_nb:
            m.d.comb += req_off.eq(req_addr[:log_nb])
        span = Signal(32)                           # bytes of the words the range touches
        m.d.comb += span.eq(req_off + req_size)
        req_words = self.words
        m.d.comb += req_words.eq((span + (nb - 1))[log_nb:])
        req_tail = Signal(range(nb + 1))            # bytes of the last word in the range
        m.d.comb += req_tail.eq(Mux(span[:log_nb] == 0, nb, span[:log_nb]))

        # The request being served, and its ack.
        r_addr = Signal(48)
        r_size = Signal(30)
        r_error = Signal()
        r_wrap = Signal(6)
        r_tag = Signal(8)
        r_type = Signal(8)
        r_dst = Signal(data.StructLayout({"x": 8, "y": 8, "fbits": 4}))
        with m.If(self.take):
            m.d.sync += [
                r_addr.eq(req_addr), r_size.eq(req_size), r_error.eq(self.error),
                r_wrap.eq(req.wrap), r_tag.eq(req.tag), self.wmask.eq(req_wmask),
                self.off.eq(req_off), self.tail.eq(req_tail),
                r_dst.x.eq(hdr.src_x), r_dst.y.eq(hdr.src_y), r_dst.fbits.eq(hdr.src_fbits),
                r_type.eq(Mux(is_load, LOAD_MEM_ACK, STORE_MEM_ACK)),
            ]
        desc = self.ack
        reply = data.View(MEM_META, desc.meta)
        m.d.comb += [
            desc.dst_x.eq(r_dst.x), desc.dst_y.eq(r_dst.y), desc.dst_fbits.eq(r_dst.fbits),
            desc.src_x.eq(self._src[0]), desc.src_y.eq(self._src[1]),
            desc.src_fbits.eq(Fbits.LOCAL0),
            desc.msg_type.eq(r_type),
            desc.payload_bytes.eq(Mux(self.with_data, r_size[:_PAYLOAD_BITS], 0)),
            reply.addr.eq(r_addr), reply.size.eq(r_size), reply.error.eq(r_error),
            reply.wrap.eq(r_wrap), reply.tag.eq(r_tag),
        ]
        return m
