"""The frameworks every protocol tile is written in: a receive layer and a transmit layer.

A protocol file (:mod:`beehive.proto.ethernet`, ``arp``, ``ipv4``, ``icmp``, ``udp``) holds its
header table and its tiles, each a subclass of one of these two that says only what is
particular to its protocol; everything about streams, framing, queues, next hops and counters
is here, once.

A **receive layer** (:class:`RxLayerTile`) takes packets (from the NoC, or from the MAC for
Ethernet), peeks at the first ``head_bytes`` of each, decides from them whether to forward it,
where to (its next-hop table, keyed by the EtherType, protocol or port it parsed), how many header
bytes to strip and what to add to the packet's metadata, then streams the rest of the packet on,
cut-through. Optionally it first stores each packet whole while an Internet checksum is summed
over it (``verify_offset``), so that a packet with a bad checksum is never forwarded (unless the
design's ``verify_checksums`` setting is off: :func:`verify_checksums`). A subclass
writes :meth:`RxLayerTile.parse` and names its drop reasons; the rest is here::

    source ─▶ [PacketBuffer + checksum] ─▶ PayloadPeek ─▶ StreamStrip ─▶ [patch] ─▶ MessageSender
     (hdr) ─▶ [   metadata queue     ] ─▶ parse() ─▶ descriptor / strip queues ─────┘

A **transmit layer** (:class:`TxLayerTile`) takes messages from the NoC and puts the header that
:meth:`TxLayerTile.build` makes from the packet's metadata in front of the payload; it never
waits for more than the header. A fixed header shorter than the head payload bytes of the
message it sends goes to the sender with the descriptor, into the header flit's head lanes
(``prefix_bytes`` of :class:`~apiary.noc.framing.MessageSender`), so the payload is realigned
once; otherwise a :class:`~apiary.stream.realign.StreamInsert` puts it in front.

Both keep one counter per drop reason, plus ``forwarded``; a packet is counted once, under the
first reason that applies, so the counters add up to the packets received.

On small FPGAs (:func:`pipelined_headers`: 64-bit planes and below, by default) both cut their
header logic into register stages (:mod:`apiary.stream.hold`): a subclass marks where its long
arithmetic may be cut (``p.stage``, ``stage``; a checksum's adder tree takes ``stage=``), the
framework registers the drop conditions and key, or the header, once more and waits until all
have settled. A receive layer's verdict then comes 1 to 3 cycles later, a transmit layer's
header 1 to 2, and every message waits a cycle in a two-flit queue at the tile's NoC input
(:func:`receive`); from 128 bits up nothing is registered: a receive layer decides in the
cycle its header is complete, takes the next packet's header in the cycle of that verdict and
hands its strip count to the strip in the same cycle, so a two-word packet passes every 2
cycles; a packet buffer's first word leaves with its descriptor. With the design setting
:func:`low_latency` (area for cycles) every queue a packet waits in when the tile is busy also
passes it straight through when it is empty (the descriptor queue, a transmit layer's header
and word queues), and a message whose payload fits in its header flit gives its packet in the
header's cycle (``packet_with_header`` of :class:`~apiary.noc.framing.MessageReceiver`): a
one-word packet then crosses a transmit layer in the cycle it arrives, and a receive layer in 2
(IPv4 RX, 512 bits) to 5 (UDP RX, which stores it whole while it sums its checksum).
"""

from types import SimpleNamespace

from amaranth import Module, Signal, Cat, Const, Mux, Value
from amaranth.hdl import unsigned
from amaranth.lib import data, stream
from amaranth.lib.wiring import connect

from apiary.noc.framing import MessageReceiver, MessageSender, meta_plan
from apiary.noc.header import header_flits, noc_header
from apiary.noc.nexthop import NextHopTable
from apiary.noc.spec import head_bytes, head_counts, message_specs
from apiary.stream.checksum import InternetChecksum
from apiary.stream.header import header_signal
from apiary.stream.hold import HeldStages
from apiary.stream.layout import payload_layout
from apiary.stream.packet_buffer import PacketBuffer
from apiary.stream.peek import PayloadPeek
from apiary.stream.queue import Queue
from apiary.stream.realign import StreamInsert, StreamStrip
from apiary.tile import Receive, Send, Tile, TileEnv

from .messages import META_BITS, PACKET_LEVELS, PACKET_META, MsgType, packet_format
from apiary.stream.counters import count


__all__ = ["RxLayerTile", "TxLayerTile", "Parse", "packet_layout", "packet_receiver",
           "packet_input", "packet_output", "declare_packet_ports",
           "packet_sender", "packet_descriptor", "packet_heads", "level_meta", "receive",
           "received_packets", "hold_packet", "buffered_packets", "verified_packets",
           "bytes_queue", "decide", "data_port", "send", "send_prefix",
           "patch_stream", "LENGTH_BITS", "pipelined_headers", "low_latency", "early_first_word",
           "verify_checksums",
           "header_queue_depth", "registered_inputs"]


LENGTH_BITS = noc_header(64).width("payload_bytes")


def pipelined_headers(env):
    """Whether a tile's header logic is cut into register stages (:mod:`apiary.stream.hold`):
    the design setting ``pipelined_headers``, by default on at 64 bits and below. On, a receive
    layer takes its verdict and a transmit layer its header a few cycles later (3 for IPv4 RX's
    checksum), so that the core closes timing at a small FPGA's clock; off (the default from
    128 bits up), both are taken in the cycle their inputs arrive, and a 512-bit tile keeps its
    one packet per cycle or two."""
    return bool(env.settings.get("pipelined_headers", env.width <= 64))


def low_latency(env):
    """Whether the tiles trade area for latency (from 128 bits up, never with
    :func:`pipelined_headers`): the design setting ``low_latency``, off by default. On, every
    queue a packet or request waits in while its tile is busy passes it straight through when
    it is empty (a receive layer's descriptor queue, a transmit layer's header and word queues;
    TCP's outboxes, application requests and segment stores), and a receiver gives a one-flit
    message's head bytes in its header's cycle (``packet_with_header`` of
    :class:`~apiary.noc.framing.MessageReceiver`). Each is a multiplexer in front of a queue's
    output, as wide as what it holds: at 512 bits the 1-byte UDP echo takes 24 cycles instead
    of 33, the UDP echo design about 2,700 LUTs more (docs/performance.md)."""
    return bool(env.settings.get("low_latency", False)) and not pipelined_headers(env)


def early_first_word(env):
    """Whether a packet buffer gives a packet's first word with its descriptor, in the same
    cycle (``first_word_with_desc`` of :class:`~apiary.stream.packet_buffer.PacketBuffer`),
    and TCP RX takes a commit in its store acknowledgement's cycle: wherever headers are not
    pipelined (:func:`pipelined_headers`), so by default from 128 bits up. Cheap, unlike
    :func:`low_latency`: about 60 LUTs and 2 cycles of the UDP echo at 512 bits."""
    return not pipelined_headers(env)


def verify_checksums(env):
    """Whether the layers that can verify a checksum over the whole packet (UDP RX, ICMP) do:
    the design setting ``verify_checksums``, on by default. Off, such a layer is cut-through:
    no packet buffer, no ``bad_checksum`` or ``overflow`` counter, and a packet with a wrong
    checksum goes on like any other (UDP RX then marks its payload's sum unknown, so a UDP
    reply built from it carries checksum 0, "none"). IPv4 RX verifies its header checksum
    either way. For the smallest FPGAs (at 64 bits about 1,100 LUT4s, 210 LUT RAM cells and
    4 block RAMs fewer: docs/performance.md), as LiteEth, which checks no UDP or ICMP checksum."""
    return bool(env.settings.get("verify_checksums", True))


def header_queue_depth(env):
    """How many packets a layer tile holds decided but not yet sent (its descriptor, strip
    count and patch queues; a transmit layer's received headers): the design setting
    ``header_queue_depth``, 2 by default, so that the next packet is decided while one is
    sent. At 1 each queue is a register with no multiplexer in front, and a transmit layer
    queues 2 payload words in registers instead of 4 in LUT RAM, for the smallest FPGAs
    (docs/performance.md gives the area and the cycles); a verdict then waits until the
    sender has taken the previous packet's descriptor."""
    depth = env.settings.get("header_queue_depth", 2)
    if depth not in (1, 2):
        raise ValueError(f"the design setting header_queue_depth is 1 or 2, not {depth!r}")
    return depth


def message_overhead(width):
    """Flits a protocol message spends before its payload: header flit(s), and metadata flits
    unless the metadata rides in the header (at 512 bits)."""
    flits, _, _ = meta_plan(width, meta_bits=META_BITS)
    return header_flits(width) + flits


def packet_heads(width, msg_type=None):
    """The ``head=`` of a sender or receiver of packet messages of ``msg_type`` (a
    :class:`~.messages.MsgType`), or of any type (``None``): the payload bytes each type
    carries in its header flit (the Ethernet and IPv4 levels, from 256 bits up)."""
    return head_counts(width, None if msg_type is None else [msg_type])


def packet_receiver(width, **kwargs):
    """A :class:`MessageReceiver` of packet messages, at whichever level each is
    (:data:`~.messages.PACKET_LEVELS`): ``meta`` is :data:`PACKET_META`'s value, the fields a
    message does not carry zero, and the head payload bytes of each type in front of its
    payload (:func:`packet_heads`)."""
    return MessageReceiver(width, meta_bits=META_BITS, short_meta=True,
                           head=packet_heads(width), **kwargs)


def packet_sender(width, msg_type=None, **kwargs):
    """A :class:`MessageSender` of packet messages; its descriptors
    (:func:`packet_descriptor`) say how many metadata flits each carries (:func:`level_meta`).
    ``msg_type``: the one type it sends, if one (:func:`packet_heads`)."""
    return MessageSender(width, meta_bits=META_BITS, short_meta=True,
                         head=packet_heads(width, msg_type),
                         head_types_only=msg_type is not None, **kwargs)


def packet_descriptor(width, prefix_bytes=0):
    """The descriptor layout of a :func:`packet_sender` (with ``prefix_bytes``, of one built
    with them)."""
    return MessageSender.descriptor_layout(width, meta_bits=META_BITS, short_meta=True,
                                           prefix_bytes=prefix_bytes)


def level_meta(width, msg_type, meta):
    """``(meta, flits)``: the :data:`PACKET_META` value ``meta`` as a message of ``msg_type``
    carries it (the fields of its level, :func:`~.messages.packet_format`, the rest zero) and
    the metadata flits that takes at ``width`` bits, for a :func:`packet_sender`'s descriptor.
    ``msg_type`` is a :class:`~.messages.MsgType` (both are then constants) or a value (then
    chosen by it)."""
    most, _, _ = meta_plan(width, meta_bits=META_BITS)

    def of(fmt):
        flits = min(most, meta_plan(width, meta_bits=fmt.size)[0])
        return Cat(meta[:fmt.size], Const(0, META_BITS - fmt.size)), Const(flits, range(most + 1))

    if not isinstance(msg_type, Value):
        return of(packet_format(msg_type))
    value, flits = of(PACKET_META)
    for fmt in reversed(PACKET_LEVELS[:-1]):
        types = [v for v, spec in message_specs().items() if spec.meta is fmt]
        v, f = of(fmt)
        hit = msg_type.matches(*types)
        value, flits = Mux(hit, v, value), Mux(hit, f, flits)
    return value, flits


def packet_layout(msg_type=False):
    """What travels with each packet between a layer's stages: its length and metadata (and,
    with ``msg_type``, the type of the message it came in)."""
    return data.StructLayout({"length": unsigned(LENGTH_BITS),
                              **({"msg_type": unsigned(8)} if msg_type else {}),
                              "meta": PACKET_META.layout()})


def packet_input(receives=None):
    """The input of a tile that takes packet messages (:class:`~apiary.noc.ports.Receive`
    ``"inbound"``): exactly the level of ``receives`` (a :class:`~.messages.MsgType`; a message
    with other metadata is dropped and counted in the receiver's ``errors``), or with ``None``
    any level (:func:`packet_receiver`); one packet per message, header-only ones too."""
    if receives is None:
        return Receive("inbound", meta=PACKET_META, short_meta=True, empty_packets=True)
    return Receive("inbound", receives, meta=packet_format(receives), empty_packets=True)


def packet_output(msg_type=None):
    """The output of a tile that sends packet messages of ``msg_type`` (any, with ``None``),
    each at its own level (:func:`packet_sender`): :class:`~apiary.noc.ports.Send`
    ``"outbound"``."""
    types = () if msg_type is None else (msg_type,)
    return Send("outbound", *types, meta=PACKET_META, short_meta=True, empty_packets=True)


def declare_packet_ports(cls):
    """Give a layer class its message ports from what it says at its top, unless it declares
    them itself: ``inputs`` the :func:`packet_input` of ``receives``, ``outputs`` the
    :func:`packet_output` of ``msg_type``. A class that takes its packets from elsewhere (a
    MAC, a UART) or sends them there sets ``inputs = ()`` or ``outputs = ()``."""
    if "inputs" not in vars(cls):
        cls.inputs = (packet_input(cls.receives),)
    if "outputs" not in vars(cls):
        cls.outputs = (packet_output(cls.msg_type),)


def registered_inputs(env):
    """Whether a layer tile's NoC input passes a two-flit queue in registers before its
    receiver (a cycle of latency, no path from the router's arbitration into the tile's
    logic, or back): the design setting ``registered_inputs``, by default
    :func:`pipelined_headers`. Off, on the smallest FPGAs, each layer tile is about 75 LUT4s
    smaller and the core's clock closes lower (docs/performance.md)."""
    return bool(env.settings.get("registered_inputs", pipelined_headers(env)))


def data_port(m, tile, direction, **options):
    """The message port of ``tile``'s one declared data-plane input (``direction="in"``) or
    output (``"out"``), built with ``options`` (:meth:`~apiary.tile.Tile.message_ports`'s
    overrides: ``registered``, ``clean_tail``, ``prefix_bytes``...) and joined to its link."""
    declared = tile.inputs if direction == "in" else tile.outputs
    port, = [p for p in declared if p.plane == "data"]
    ports = tile.message_ports(m, direction=direction,
                               overrides={port.name: options} if options else None)
    return getattr(ports, port.name)


def receive(m, tile):
    """The receiver of ``tile``'s one declared data-plane input (``tile.inputs``, e.g.
    :func:`packet_input`), built and joined to ``tile.noc_in``; with
    :func:`registered_inputs` behind a two-flit queue in registers."""
    return data_port(m, tile, "in", registered=registered_inputs(tile.env),
                     packet_with_header=low_latency(tile.env))


def received_packets(m, rx, msg_type=False):
    """``(hdr, data)`` for :meth:`RxLayerTile.source` from a :class:`MessageReceiver` ``rx`` of
    messages carrying :data:`PACKET_META`: its headers become :func:`packet_layout` headers
    (length and metadata, and with ``msg_type`` the message type), its payload stream the
    data."""
    hdr = stream.Signature(packet_layout(msg_type)).create()
    m.d.comb += [
        hdr.valid.eq(rx.o_hdr.valid),
        hdr.payload.length.eq(rx.o_hdr.payload.payload_bytes),
        hdr.payload.meta.eq(rx.o_hdr.payload.meta[:PACKET_META.size]),  # fields not carried: 0
        rx.o_hdr.ready.eq(hdr.ready),
    ]
    if msg_type:
        m.d.comb += hdr.payload.msg_type.eq(rx.o_hdr.payload.msg_type)
    return hdr, rx.o_data


def hold_packet(m, hdr):
    """``(cur, cur_valid)``: the header of the packet being decided, taken from the stream
    ``hdr`` when none is held and held until its verdict clears ``cur_valid``."""
    cur = Signal(hdr.payload.shape())
    cur_valid = Signal()
    m.d.comb += hdr.ready.eq(~cur_valid)
    with m.If(hdr.valid & hdr.ready):
        m.d.sync += [cur.eq(hdr.payload), cur_valid.eq(1)]
    return cur, cur_valid


def buffered_packets(m, buf):
    """``(hdr, data)`` for :meth:`RxLayerTile.source` from a :class:`PacketBuffer` ``buf`` that
    stores whole packets arriving from outside (a MAC, a serial line): its descriptors become
    :func:`packet_layout` headers (no metadata yet), its output the payload stream."""
    hdr = stream.Signature(packet_layout()).create()
    m.d.comb += [
        hdr.valid.eq(buf.o_desc.valid),
        hdr.payload.length.eq(buf.o_desc.payload.bytes),
        buf.o_desc.ready.eq(hdr.ready),
    ]
    return hdr, buf.o


def verified_packets(m, width, hdr, data_, *, max_packet, offset, initial, verify, counters,
                     always_ready=False, buffer_bytes=None, max_queued=16, pipelined=False,
                    clean_tail=False, first_word_with_desc=False, word_with_header=False):
    """Store each packet whole while an Internet checksum is summed over it, and pass it on with
    its metadata only if ``verify`` says so: ``(hdr, data)`` in, ``(hdr, data)`` out, streams of
    :func:`packet_layout` and payload words.

    ``initial(m, length, meta)`` gives the 16-bit value the sum starts from, ``offset`` the
    bytes not summed; ``verify(m, v)`` returns ``(ok, {meta field: value})`` from ``v.sum``,
    ``v.first`` (the packet's first word), ``v.length`` and ``v.meta``. ``counters`` gets
    ``bad_checksum`` (counted) and ``overflow`` (packets over ``max_packet`` bytes, or, with
    ``always_ready``, that found no room: the input then never waits). ``buffer_bytes`` and
    ``max_queued`` size the buffer (:class:`~apiary.stream.packet_buffer.PacketBuffer`).

    ``pipelined``: the sums wait in a queue and ``verify`` may cut its arithmetic into register
    stages with ``v.stage`` (:class:`~apiary.stream.hold.HeldStages`); ``ok`` is registered once
    more, and each verdict is given once all have settled (a few cycles later than without).
    ``clean_tail``: ``data_``'s lanes past each word's ``nbytes`` are zero (a receiver's).
    ``first_word_with_desc``: a packet's first word may come out with its header, in the same
    cycle (:class:`~apiary.stream.packet_buffer.PacketBuffer`), a cycle earlier.
    ``word_with_header``: ``data_``'s first word may come in with its header, in the same
    cycle (a receiver's ``packet_with_header``): the sum's start value then passes
    combinationally in that cycle.
    """
    info = data.Layout.cast(packet_layout()).size
    m.submodules.verify_buffer = buf = PacketBuffer(width, max_bytes=max_packet, info_width=info,
                                                    always_ready=always_ready,
                                                    buffer_bytes=buffer_bytes,
                                                    max_queued=max_queued, late_verdicts=pipelined,
                                                    first_word_with_desc=first_word_with_desc)
    m.submodules.verify_sum = tap = InternetChecksum(width, max_offset=offset,
                                                     clean_tail=clean_tail)
    # Packets whose checksum is being computed, oldest first.
    m.submodules.verify_pending = pend = Queue(packet_layout(), 4)
    m.submodules.verify_first = first = Queue(unsigned(width), 4)

    # A packet's length and metadata are queued when its header is taken (no later than its
    # first word), its first word when that is taken.
    held = Signal(16, name="start")
    header_now = hdr.valid & hdr.ready
    with m.If(header_now):
        value = initial(m, hdr.payload.length, hdr.payload.meta)
        m.d.sync += held.eq(value)
    start = Mux(header_now, value, held) if word_with_header else held
    in_packet = Signal()        # past the first word of the current packet
    take = data_.valid & data_.ready
    connect(m, source=hdr, pending=pend.i)
    m.d.comb += [
        buf.i.valid.eq(data_.valid & first.i.ready),
        buf.i.payload.eq(data_.payload),
        data_.ready.eq(buf.i.ready & first.i.ready),
        tap.i.valid.eq(take),
        tap.i.payload.eq(data_.payload),
        tap.offset.eq(offset),
        tap.initial.eq(start),
        first.i.valid.eq(take & ~in_packet),
        first.i.payload.eq(data_.payload.data),
    ]
    with m.If(take):
        m.d.sync += in_packet.eq(~data_.payload.last)

    # A verdict is given when the sum of the packet at the head of `pend` is known: the
    # checksum's one-cycle result, or with stages, the head of a queue of results that holds
    # still (with `pend` and `first`) until the staged arithmetic over it has settled.
    stages = HeldStages(m, enabled=pipelined)
    if pipelined:
        m.submodules.verify_sums = sums = Queue(unsigned(16), 4)
        m.d.comb += [sums.i.valid.eq(tap.o.valid), sums.i.payload.eq(tap.o.payload.sum)]
        packet_sum = sums.o.payload
    else:
        packet_sum = tap.o.payload.sum
    v = SimpleNamespace(sum=packet_sum, first=first.o.payload, length=pend.o.payload.length,
                        meta=pend.o.payload.meta, stage=stages.stage)
    ok, meta_out = verify(m, v)
    ok, = stages.outputs(ok)
    if pipelined:
        pop = Signal()
        m.d.comb += [pop.eq(stages.settled(sums.o.valid, restart=pop)), sums.o.ready.eq(pop)]
    else:
        pop = tap.o.valid
    result = Signal(packet_layout())
    m.d.comb += result.eq(pend.o.payload)
    for name, value in meta_out.items():
        m.d.comb += getattr(result.meta, name).eq(value)
    # The checksum has a result for every packet, the buffer wants a verdict only for those
    # it stored (not those it dropped itself, too long): which they were, oldest first.
    m.submodules.verify_stored = stored = Queue(unsigned(1), 4)
    m.d.comb += [
        stored.i.valid.eq(buf.accepted | buf.i_dropped),
        stored.i.payload.eq(buf.accepted),
        stored.o.ready.eq(pop),
    ]
    m.d.comb += [
        buf.verdict.valid.eq(pop & stored.o.payload),
        buf.verdict.payload.ok.eq(ok),
        buf.verdict.payload.info.eq(result),
        pend.o.ready.eq(pop),
        first.o.ready.eq(pop),
    ]
    with m.If(buf.verdict.valid & ~ok):
        count(m, counters.bad_checksum)
    m.d.comb += counters.overflow.eq(buf.overflow)

    out_hdr = stream.Signature(packet_layout()).create()
    m.d.comb += [
        out_hdr.valid.eq(buf.o_desc.valid),
        out_hdr.payload.eq(buf.o_desc.payload.info),
        buf.o_desc.ready.eq(out_hdr.ready),
    ]
    return out_hdr, buf.o


class Parse:
    """What a receive layer's ``parse`` reads (``head``, ``head_len``, ``length``, ``meta``)
    and sets (``drop``, ``key``, ``strip``, ``out_length``, ``set_meta``, ``patch``); shared
    by :class:`RxLayerTile` and :class:`~beehive.nf.base.NfTile`, which adds to it.

    ``stage(value, level)`` registers a value of long arithmetic (:mod:`apiary.stream.hold`;
    a no-op unless :func:`pipelined_headers`); the drop conditions and the key are registered
    once more after the deepest stage, and the verdict waits until all have settled."""

    def __init__(self, tile, m, head, head_len, length, meta):
        self.m = m
        self.stages = HeldStages(m, enabled=pipelined_headers(tile.env))
        self.stage = self.stages.stage
        self.head, self.head_len, self.length, self.meta = head, head_len, length, meta
        self.key = Const(0, tile.key_width)
        self.strip = 0
        self.out_length = None
        self.meta_out = {}
        self.patch_value, self.patch_len = None, 0
        self.drops = []
        self._names = tile.drop_reasons
        self._owner = type(tile).__name__

    def field(self, header, offset=0):
        """The bytes of ``head`` from byte ``offset`` on, as the MSB-first :class:`Header`
        ``header``."""
        return header_signal(self.m, header, self.head, offset)

    def drop(self, reason, condition):
        """Drop the packet, counting it under ``reason``, if ``condition`` (and no earlier
        reason) holds."""
        if reason not in self._names:
            raise ValueError(f"{self._owner}: drop reason {reason!r} is not among the tile's "
                             f"drop_reasons {list(self._names)}")
        self.drops.append((reason, condition))

    def set_meta(self, **fields):
        self.meta_out.update(fields)

    def patch(self, value, nbytes):
        """Replace the first ``nbytes`` bytes of the forwarded payload (after stripping) with
        ``value`` (lane order)."""
        self.patch_value, self.patch_len = value, nbytes

    def out_meta(self):
        """The metadata sent on: ``meta`` with the fields :meth:`set_meta` set."""
        meta = Signal(PACKET_META.layout())
        self.m.d.comb += meta.eq(self.meta)
        for name, value in self.meta_out.items():
            self.m.d.comb += getattr(meta, name).eq(value)
        return meta


def bytes_queue(m, name, max_bytes, depth=2):
    """A :class:`Queue` of ``depth`` entries of up to ``max_bytes`` bytes (``data`` in lane
    order, ``nbytes``), added to ``m`` as submodule ``name``."""
    queue = Queue({"data": unsigned(8 * max_bytes), "nbytes": range(max_bytes + 1)}, depth)
    m.submodules[name] = queue
    return queue


def decide(m, tile, p, *, peek, cur_valid, msg_type, out_length, queues, counts=(),
           prefix_bytes=0):
    """The verdict on each packet of a receive layer (or network function) ``tile``, taken in
    one cycle from ``p`` (a :class:`Parse`): the first drop reason that holds, else no route
    (``tile.routes`` by ``p.key``), else forward. Counts it (``tile.counters``: the reason,
    ``no_route`` or ``forwarded``, and among the forwarded each of ``counts``, ``(name,
    condition)``), tells ``peek`` and, for a packet kept, puts one entry in each of the
    descriptor queue (returned, for a :func:`send`) and ``queues`` (``(writer, value or
    {field: value})``, in packet order). The packet is taken (``cur_valid`` cleared) when the
    verdict is. With ``prefix_bytes`` the descriptor carries ``p``'s patch as its prefix
    (:func:`packet_descriptor`) and ``peek`` forwards nothing: the reply is the patch."""
    counters = tile.counters
    # With stages, the key and every condition are registered after the deepest stage.
    key, *staged = p.stages.outputs(p.key, *(condition for _, condition in p.drops))
    conditions = [(reason, c) for (reason, _), c in zip(p.drops, staged)]
    m.submodules.table = table = NextHopTable(tile.routes, tile.key_width)
    m.d.comb += table.key.eq(key)
    m.submodules.descriptors = descs = Queue(packet_descriptor(tile.env.width, prefix_bytes),
                                             header_queue_depth(tile.env),
                                             fall_through=low_latency(tile.env))
    meta, meta_flits = level_meta(tile.env.width, msg_type, p.out_meta().as_value())
    desc = {
        "dst_x": table.dst_x, "dst_y": table.dst_y, "dst_fbits": table.dst_fbits,
        "src_x": tile.env.x, "src_y": tile.env.y, "msg_type": msg_type,
        "payload_bytes": out_length, "meta": meta, "meta_flits": meta_flits,
    }
    if prefix_bytes:
        desc["prefix"] = p.patch_value
    entries = [(descs.i, desc), *queues]

    decision = Signal(name="decide")
    room = Cat(*(w.ready for w, _ in entries)).all()
    m.d.comb += [
        decision.eq(p.stages.settled(peek.head_valid & cur_valid) & room),
        peek.verdict.valid.eq(decision),
    ]
    # Each condition and running "dropped" is a signal of its own: an expression used twice
    # is elaborated twice, and these are used by every later reason.
    dropped = Const(0)
    for reason, condition in conditions:
        counter = getattr(counters, reason)
        this = Signal(name=f"drop_{reason}")
        m.d.comb += this.eq(condition)
        with m.If(decision & ~dropped & this):
            count(m, counter)
        so_far = Signal(name=f"dropped_{reason}")
        m.d.comb += so_far.eq(dropped | this)
        dropped = so_far
    keep = Signal()
    m.d.comb += keep.eq(~dropped & table.hit)
    with m.If(decision & ~dropped & ~table.hit):
        count(m, counters.no_route)
    with m.If(decision & keep):
        count(m, counters.forwarded)
        for name, condition in counts:
            counter = getattr(counters, name)
            with m.If(condition):
                count(m, counter)
    with m.If(decision):
        m.d.sync += cur_valid.eq(0)

    m.d.comb += [
        peek.verdict.payload.keep.eq(keep & (prefix_bytes == 0)),
        table.lookup.eq(decision & keep),
    ]
    for w, fields in entries:
        m.d.comb += w.valid.eq(decision & keep)
        if isinstance(fields, dict):
            for name, value in fields.items():
                m.d.comb += getattr(w.payload, name).eq(value)
        else:
            m.d.comb += w.payload.eq(fields)
    return descs


def send(m, tile, descs, words, clean_tail=False, pre_split=False):
    """Frame each packet of the payload stream ``words`` as a NoC message with the descriptor
    at the head of ``descs`` (the queue :func:`decide` returns), out of ``tile.noc_out``
    through the sender of ``tile``'s one declared data-plane output (e.g.
    :func:`packet_output`). ``clean_tail``: each packet of ``words`` is exactly its
    descriptor's length, zero past its end (the sender need not zero it,
    :class:`MessageSender`); ``pre_split``: each starts with its head word (a
    :class:`~apiary.stream.realign.StreamStrip` with ``head=``)."""
    options = {name: True for name, on in (("clean_tail", clean_tail),
                                           ("pre_split", pre_split)) if on}
    sender = data_port(m, tile, "out", **options)
    connect(m, descriptors=descs.o, sender=sender.i_hdr)
    connect(m, words=words, sender=sender.i_data)


def send_prefix(m, tile, descs, prefix_bytes):
    """Send each descriptor at the head of ``descs`` as a message whose payload is its
    ``prefix`` of ``prefix_bytes`` bytes alone, all in the header flit
    (``MessageSender(prefix_only=True)``: no payload path), like :func:`send`."""
    sender = data_port(m, tile, "out", prefix_bytes=prefix_bytes, prefix_only=True)
    connect(m, descriptors=descs.o, sender=sender.i_hdr)


def patch_stream(m, width, max_bytes, source, patch_r):
    """The packets of the payload stream ``source`` with their first ``nbytes`` bytes (at most
    ``max_bytes``) overwritten by the patch at the head of ``patch_r`` (a :func:`bytes_queue`'s
    output, one patch per packet, taken with the packet's last word). Combinational."""
    nb = width // 8
    words = -(-max_bytes // nb)
    patch = patch_r.payload.data
    patch_len = patch_r.payload.nbytes
    index = Signal(range(words + 1))        # word of the packet, saturating
    word = source.payload
    sink = stream.Signature(source.payload.shape()).create()
    lanes = []
    for lane in range(nb):
        byte = word.data[8 * lane:8 * lane + 8]
        for w in range(words):
            pos = w * nb + lane
            if pos < max_bytes:
                byte = Mux((index == w) & (pos < patch_len), patch[8 * pos:8 * pos + 8], byte)
        lanes.append(byte)
    m.d.comb += [
        sink.valid.eq(source.valid & patch_r.valid),
        sink.payload.data.eq(Cat(*lanes)),
        sink.payload.nbytes.eq(word.nbytes),
        sink.payload.last.eq(word.last),
        source.ready.eq(sink.ready & patch_r.valid),
        patch_r.ready.eq(source.valid & source.ready & word.last),
    ]
    with m.If(source.valid & source.ready):
        m.d.sync += index.eq(Mux(word.last, 0, Mux(index == words, index, index + 1)))
    return sink


class RxLayerTile(Tile):
    """Base class of the receive-side protocol tiles (see the module docstring).

    Class attributes a subclass sets: ``head_bytes`` (bytes :meth:`parse` sees), ``max_strip``
    (most bytes it strips), ``strip_counts`` (the only counts a variable strip takes, if few:
    a cheaper realignment), ``key_width`` (bits of its routing key), ``msg_type`` (of the
    messages it sends), ``receives`` (the type of those it takes, if one: its receiver then
    takes exactly that level of metadata, :func:`receive`), ``drop_reasons`` (``{name: what it
    drops}``, in priority order),
    ``patch_bytes`` (most bytes :meth:`Parse.patch` replaces, 0 if never), ``reply_is_patch``
    (every packet sent is its patch alone, ``patch_bytes`` long: where that fits in the header
    flit's head bytes the patch rides to the sender in the descriptor, nothing of the packet
    is forwarded and nothing realigned), and for a tile that verifies a checksum over the whole
    packet, ``verify_offset`` (bytes not summed) with :meth:`verify`.

    Counters (:class:`~apiary.tile.Tile`'s ``counters``): one per drop reason, then
    ``no_route`` (no next hop for the key) and ``forwarded``, with ``verify_offset`` also
    ``bad_checksum`` and ``overflow`` (packets longer than ``max_packet``, or that do not fit),
    then whatever the subclass adds (its ``counters=``).
    """

    head_bytes = 8
    max_strip = 0
    strip_counts: tuple[int, ...] | None = None
    key_width = 1
    msg_type: MsgType | None = None
    receives: MsgType | None = None
    drop_reasons: dict[str, str] = {}
    patch_bytes = 0
    reply_is_patch = False
    verify_offset: int | None = None
    max_packet = 2048

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        declare_packet_ports(cls)

    def __init__(self, env=None, members=None, counters=None):
        env = env if env is not None else TileEnv()
        self.verifies = self.verify_offset is not None and verify_checksums(env)
        super().__init__(env, members,
                         {**self.layer_counters(self.verifies), **(counters or {})})
        self.routes = self.env.next_hops("data")

    @classmethod
    def layer_counters(cls, verifies=None):
        """``{name: description}`` of the counters every receive layer of this class has
        (``verifies``: whether it verifies its checksum; by default, whether the class can)."""
        if verifies is None:
            verifies = cls.verify_offset is not None
        counters = dict(cls.drop_reasons)
        counters.update(no_route="packets with no next hop for their key, dropped",
                        forwarded="packets sent on")
        if verifies:
            counters.update(bad_checksum="packets whose checksum is wrong, dropped",
                            overflow=f"packets over {cls.max_packet} bytes, or that found no "
                                     f"room, dropped")
        return counters

    # -- hooks -----------------------------------------------------------------------------------

    def source(self, m):
        """The packets this layer receives: ``(hdr, data)``, a stream of :func:`packet_layout`
        and a payload stream with one packet per ``hdr`` (taken before its words appear).
        Default: NoC messages through a :class:`MessageReceiver`."""
        return received_packets(m, receive(m, self))

    def verify(self, m, v):
        """With ``verify_offset``: from ``v.sum`` (one's-complement sum of the packet from
        ``verify_offset`` on), ``v.first`` (the packet's first word), ``v.length`` and ``v.meta``,
        return ``(ok, {meta field: value})``."""
        raise NotImplementedError

    def verify_initial(self, m, length, meta):
        """With ``verify_offset``: the 16-bit value the checksum sum starts from."""
        return Const(0, 16)

    def parse(self, m, p):
        """Decide, from ``p.head`` etc., what happens to a packet; see :class:`Parse`."""
        raise NotImplementedError

    # -- structure -------------------------------------------------------------------------------

    def _verify_stage(self, m, hdr, data_):
        return verified_packets(m, self.env.width, hdr, data_, max_packet=self.max_packet,
                                offset=self.verify_offset, initial=self.verify_initial,
                                verify=self.verify, counters=self.counters,
                                pipelined=pipelined_headers(self.env),
                                first_word_with_desc=early_first_word(self.env),
                                word_with_header=low_latency(self.env),
                                # A receiver's words are zero past their bytes.
                                clean_tail=type(self).source is RxLayerTile.source)

    def elaborate(self, platform):
        m = Module()
        width = self.env.width
        hdr, data_ = self.source(m)
        if self.verifies:
            hdr, data_ = self._verify_stage(m, hdr, data_)

        # The packet being decided: its length and metadata, held until its verdict.
        cur, cur_valid = hold_packet(m, hdr)

        # Slack for the words that arrive while the sender's header and metadata flits leave.
        m.submodules.peek = peek = PayloadPeek(width, self.head_bytes,
                                               slack=message_overhead(width))
        connect(m, source=data_, peek=peek.i)

        p = Parse(self, m, peek.head, peek.head_len, cur.length, cur.meta)
        self.parse(m, p)
        strip_n = Signal(range(max(1, self.max_strip) + 1))
        out_length = Signal(LENGTH_BITS)
        m.d.comb += [
            strip_n.eq(p.strip),
            out_length.eq(p.out_length if p.out_length is not None else cur.length - strip_n),
        ]

        # Each packet kept puts one entry in each of these queues, in packet order: its
        # descriptor for the sender, its strip count (only if that varies: a count that is a
        # Python int is the same for every packet, so the strip is fixed, or absent for 0), and
        # its patch.
        queues = []
        fixed_strip = isinstance(p.strip, int)
        # A reply that is its patch alone and fits in the header flit rides in the descriptor.
        whole = self.reply_is_patch and self.patch_bytes <= head_bytes(width, self.msg_type)
        prefix_bytes = self.patch_bytes if whole else 0
        if not fixed_strip:
            # From 128 bits up the count reaches the strip in the cycle of its verdict, with
            # the packet's first word; pipelined, a cycle later.
            m.submodules.cuts = cuts = Queue(range(max(1, self.max_strip) + 1),
                                             header_queue_depth(self.env),
                                             fall_through=not pipelined_headers(self.env))
            queues.append((cuts.i, strip_n))
        if self.patch_bytes and not whole:
            patches = bytes_queue(m, "patches", self.patch_bytes, header_queue_depth(self.env))
            queues.append((patches.i, {"data": 0 if p.patch_value is None else p.patch_value,
                                       "nbytes": p.patch_len}))
        assert self.msg_type is not None, f"{type(self).__name__} sets no msg_type"
        descs = decide(m, self, p, peek=peek, cur_valid=cur_valid,
                       msg_type=self.msg_type.value, out_length=out_length, queues=queues,
                       prefix_bytes=prefix_bytes)
        if not pipelined_headers(self.env):
            # The next packet's header is taken in the cycle of this one's verdict.
            m.d.comb += hdr.ready.eq(~cur_valid | peek.verdict.valid)
            with m.If(hdr.valid & hdr.ready):
                m.d.sync += cur_valid.eq(1)

        # Forwarding: strip, patch, frame.
        if whole:
            send_prefix(m, self, descs, prefix_bytes)
            return m
        # Where the messages sent carry head bytes, the strip also splits them off (one
        # realignment, not the strip's and then the sender's): unless a patch needs the
        # stripped stream whole.
        head = 0 if self.patch_bytes or (fixed_strip and p.strip == 0) else head_bytes(
            width, self.msg_type)
        if fixed_strip and p.strip == 0:
            stripped = peek.o
        elif fixed_strip:
            m.submodules.strip = strip = StreamStrip(width, p.strip, fixed=True, head=head)
            connect(m, peek=peek.o, strip=strip.i)
            stripped = strip.o
        else:
            m.submodules.strip = strip = StreamStrip(width, max(1, self.max_strip),
                                                     counts=self.strip_counts, head=head)
            connect(m, peek=peek.o, strip=strip.i)
            connect(m, cuts=cuts.o, strip=strip.n)
            stripped = strip.o
        if self.patch_bytes:
            stripped = patch_stream(m, width, self.patch_bytes, stripped, patches.o)
        # Untrimmed, the stream is exactly the length sent, its lanes past the end zero (the
        # receiver, buffer, peek and strip zero them; a patch lies inside the packet).
        send(m, self, descs, stripped, clean_tail=p.out_length is None, pre_split=bool(head))
        return m


class TxLayerTile(Tile):
    """Base class of the transmit-side protocol tiles (see the module docstring).

    Class attributes: ``max_header`` (bytes), ``msg_type`` (of the messages sent),
    ``receives`` (of those taken, if one type: see :func:`receive`), ``fixed``
    (every header is ``max_header`` long), ``header_counts`` (otherwise, the only header lengths
    there are, if few: a cheaper realignment). A subclass writes :meth:`build`.

    Counters: ``forwarded`` (messages sent on), ``no_route`` (no next hop: messages dropped),
    then whatever the subclass adds (its ``counters=``).
    """

    max_header = 8
    msg_type: MsgType | None = None
    receives: MsgType | None = None
    fixed = True
    header_counts: tuple[int, ...] | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        declare_packet_ports(cls)

    def __init__(self, env=None, members=None, counters=None):
        super().__init__(env, members, {
            "forwarded": "messages sent on",
            "no_route": "messages dropped for want of a single next hop",
            **(counters or {})})
        self.routes = self.env.next_hops("data")

    def build(self, m, length, meta, stage):
        """Return ``(header, nbytes, {meta field: value})``: the header bytes in lane order,
        their count (ignored with ``fixed``) and metadata changes for the next hop. ``stage``
        registers long arithmetic (:meth:`~apiary.stream.hold.HeldStages.stage`); the header
        and its count are registered once more after the deepest stage."""
        raise NotImplementedError

    def header_in_descriptor(self):
        """The header's bytes when it rides in the descriptor (``prefix``), else 0: a fixed
        header sent by the default :meth:`sink` in a message whose head payload bytes hold it
        and more (from 256 bits up)."""
        if not self.fixed or type(self).sink is not TxLayerTile.sink or self.msg_type is None:
            return 0
        return self.max_header if self.max_header < head_bytes(self.env.width,
                                                               self.msg_type) else 0

    def sink(self, m, desc, o):
        """Where packets with their new header go: by default a :class:`MessageSender` to the
        tile's single next hop. ``desc`` is a stream of descriptors, ``o`` the payload stream
        (with :meth:`header_in_descriptor`, the payload after the header, which is in
        ``desc``'s ``prefix``)."""
        width = self.env.width
        h = self.header_in_descriptor()
        # Its payload is a receiver's or a StreamInsert's: exactly its length, zero past it.
        sender = data_port(m, self, "out", clean_tail=True, **({"prefix_bytes": h} if h else {}))
        hops = {ep for eps in self.routes.values() for ep in eps}
        if len(hops) != 1:
            # No single next hop: count and drop every packet.
            m.d.comb += [desc.ready.eq(1), o.ready.eq(1)]
            with m.If(desc.valid):
                count(m, self.counters.no_route)
            return
        hop, = hops
        assert self.msg_type is not None, f"{type(self).__name__} sets no msg_type"
        meta, meta_flits = level_meta(width, self.msg_type, desc.payload.meta.as_value())
        m.d.comb += [
            sender.i_hdr.valid.eq(desc.valid),
            sender.i_hdr.payload.dst_x.eq(hop.x),
            sender.i_hdr.payload.dst_y.eq(hop.y),
            sender.i_hdr.payload.dst_fbits.eq(hop.fbits),
            sender.i_hdr.payload.src_x.eq(self.env.x),
            sender.i_hdr.payload.src_y.eq(self.env.y),
            sender.i_hdr.payload.msg_type.eq(self.msg_type.value),
            sender.i_hdr.payload.payload_bytes.eq(desc.payload.length),
            sender.i_hdr.payload.meta.eq(meta),
            sender.i_hdr.payload.meta_flits.eq(meta_flits),
            desc.ready.eq(sender.i_hdr.ready),
        ]
        if h:
            m.d.comb += sender.i_hdr.payload.prefix.eq(desc.payload.prefix)
        with m.If(desc.valid & desc.ready):
            count(m, self.counters.forwarded)
        connect(m, insert=o, sender=sender.i_data)

    def elaborate(self, platform):
        m = Module()
        width = self.env.width
        hdr, data_ = received_packets(m, receive(m, self))

        # Messages are queued (length and metadata, and a few payload words) so that the next
        # message's header and metadata flits are taken while this one's payload still leaves:
        # the input never waits for the output's header flits. With one header queued
        # (header_queue_depth) two words are enough, and they are registers, not LUT RAM.
        depth = header_queue_depth(self.env)
        through = low_latency(self.env)
        m.submodules.headers = headers = Queue(packet_layout(), depth, fall_through=through)
        connect(m, received=hdr, headers=headers.i)
        m.submodules.words = words = Queue(payload_layout(width), 2 * depth,
                                           fall_through=through)
        connect(m, receiver=data_, words=words.i)

        # The message being sent: the head of the queue, until both its descriptor and its
        # header are taken.
        cur = headers.o.payload
        cur_valid = headers.o.valid
        desc_done = Signal()
        head_done = Signal()
        stages = HeldStages(m, enabled=pipelined_headers(self.env))
        header, nbytes, meta_out = self.build(m, cur.length, cur.meta, stages.stage)
        if self.fixed:
            header, = stages.outputs(header)
        else:
            header, nbytes = stages.outputs(header, nbytes)
        pop = Signal()
        ready = stages.settled(cur_valid, restart=pop)

        h = self.header_in_descriptor()
        layout = packet_layout()
        if h:
            layout = data.StructLayout({**dict(layout.members), "prefix": unsigned(8 * h)})
        desc = stream.Signature(layout).create()
        m.d.comb += [
            desc.valid.eq(ready & ~desc_done),
            desc.payload.length.eq(cur.length + (self.max_header if self.fixed else nbytes)),
            desc.payload.meta.eq(cur.meta),
        ]
        for name, value in meta_out.items():
            m.d.comb += getattr(desc.payload.meta, name).eq(value)
        if h:
            # The header rides in the descriptor; the payload goes to the sender as it is.
            m.d.comb += desc.payload.prefix.eq(header)
            payload, head_taken = words.o, Const(1)
        else:
            m.submodules.insert = insert = StreamInsert(width, self.max_header, fixed=self.fixed,
                                                        counts=self.header_counts)
            connect(m, words=words.o, insert=insert.i)
            m.d.comb += [insert.hdr.valid.eq(ready & ~head_done),
                         insert.hdr.payload.data.eq(header)]
            if not self.fixed:
                m.d.comb += insert.hdr.payload.nbytes.eq(nbytes)
            payload, head_taken = insert.o, insert.hdr.valid & insert.hdr.ready
        desc_taken = desc.valid & desc.ready
        with m.If(desc_taken):
            m.d.sync += desc_done.eq(1)
        with m.If(head_taken):
            m.d.sync += head_done.eq(1)
        m.d.comb += pop.eq(ready & (desc_done | desc_taken) & (head_done | head_taken))
        with m.If(pop):
            m.d.comb += headers.o.ready.eq(1)
            m.d.sync += [desc_done.eq(0), head_done.eq(0)]

        self.sink(m, desc, payload)
        return m
