"""IP over a serial line: SLIP (RFC 1055) framing on a UART, in place of Ethernet.

On the line, each IPv4 datagram is sent as its bytes with two substitutions, ``END`` (0xC0) →
``ESC ESC_END`` (0xDB 0xDC) and ``ESC`` (0xDB) → ``ESC ESC_ESC`` (0xDB 0xDD), followed by
``END``; senders (Linux's ``slip`` line discipline, and :class:`SlipTxTile`) also put an ``END``
before each datagram, so that line noise before it ends up in a frame of its own.

Message out of :class:`SlipRxTile` (``ETH_RX_FRAME``, to the next hop for key 0x0800): the
decoded datagram, metadata ``ethertype`` = 0x0800 (IPv4) and every other field zero
(:data:`~beehive.proto.messages.PACKET_META`). That is what Ethernet RX sends the IPv4 RX tile,
which therefore works unchanged (SLIP carries nothing but IPv4, and no padding).

Message into :class:`SlipTxTile` (any ``msg_type``; IPv4 TX sends ``ETH_TX_FRAME``): its payload
is sent as one SLIP frame; the metadata (IPv4 TX sets ``ethertype``, ``peer_mac`` is zero) is
ignored.

Both tiles take the clock frequency from the design's ``settings["clock_hz"]`` (the frequency
of the clock the design runs on, one value for the whole chip, as ``settings["mac"]`` is one
address for it; a board build passes it to the design function, which puts it there) and their
line rate from their own ``baud`` parameter.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib.wiring import In, Out

from apiary.stream.packet_buffer import PacketBuffer
from apiary.tile import Tile

from ..proto.ethernet import EtherType
from ..proto.layer import RxLayerTile, buffered_packets, packet_input
from ..proto.messages import MsgType
from .uart import UartRx, UartTx, baud_divisor
from apiary.stream.counters import count


__all__ = ["SlipRxTile", "SlipTxTile", "END", "ESC", "ESC_END", "ESC_ESC", "slip_encode",
           "slip_decode", "clock_of"]

END, ESC, ESC_END, ESC_ESC = 0xC0, 0xDB, 0xDC, 0xDD


def slip_encode(packet):
    """The bytes of one SLIP frame for ``packet``: ``END``, the escaped bytes, ``END``."""
    body = bytes(packet).replace(bytes([ESC]), bytes([ESC, ESC_ESC]))
    body = body.replace(bytes([END]), bytes([ESC, ESC_END]))
    return bytes([END]) + body + bytes([END])


def slip_decode(stream_bytes):
    """``(frames, bad)``: the packets in a byte stream, as :class:`SlipRxTile` decodes it (empty
    frames skipped, a frame with a bad escape left out and counted in ``bad``); bytes after the
    last ``END`` are not a frame yet."""
    frames, bad, cur, esc, broken = [], 0, bytearray(), False, False
    for b in bytes(stream_bytes):
        if b == END:
            if esc and not broken:
                bad += 1
                broken = True
            if cur and not broken:
                frames.append(bytes(cur))
            cur, esc, broken = bytearray(), False, False
        elif esc:
            esc = False
            if b in (ESC_END, ESC_ESC):
                cur.append(END if b == ESC_END else ESC)
            elif not broken:
                bad += 1
                broken = True
        elif b == ESC:
            esc = True
        else:
            cur.append(b)
    return frames, bad


def clock_of(env, who):
    """The design's clock frequency in Hz, ``env.settings["clock_hz"]``."""
    clock_hz = env.settings.get("clock_hz")
    if clock_hz is None:
        raise ValueError(f"{who} needs the design's clock frequency: set "
                         f"d.settings['clock_hz'] (in Hz) in the design function")
    return clock_hz


class SlipRxTile(RxLayerTile):
    """Receive SLIP frames on the UART pin ``uart_rx`` and send each datagram to the next hop
    for key 0x0800 (IPv4) as an ``ETH_RX_FRAME`` with ``ethertype`` 0x0800 (see the module
    docstring).

    UART (:class:`~beehive.serial.uart.UartRx`, 8N1 at ``baud``) → SLIP decoder → bytes packed
    into payload words (byte ``k`` of a word in lane ``k``, one byte per cycle at most, so the
    packer is a register of one word written a lane at a time, the same at every width) → a
    :class:`~apiary.stream.packet_buffer.PacketBuffer`. The NoC header needs a datagram's length
    before its payload, and a frame's length is known at its closing ``END``, so each frame is
    stored whole first (store-and-forward, like Ethernet RX; one frame's bytes, at line rate, of
    latency). The UART is never back-pressured: the buffer takes every word at once.

    Decoding: ``END`` ends a frame; frames with no bytes (back-to-back ``END``\\ s) are
    skipped without counting; ``ESC ESC_END`` and ``ESC ESC_ESC`` are 0xC0 and 0xDB.

    Drops, each frame counted once, under the first that applies: ``bad_escape`` (``ESC``
    followed by anything but ``ESC_END`` or ``ESC_ESC``, ``END`` included: the frame is dropped
    up to its ``END``), ``oversized`` (more than ``max_packet`` bytes: dropped up to its
    ``END``), ``no_room`` (the buffer is full, or ``max_queued`` frames wait in it: the NoC
    side is stalled), then those of every receive layer: ``no_route``, else ``forwarded``.
    ``framing_errors`` counts bytes the UART lost to a bad stop bit (the frame they belonged to
    then most likely fails IPv4's or UDP's checksum further on).

    Parameters
    ----------
    env : TileEnv
        ``settings["clock_hz"]`` is the design's clock frequency (required).
    baud : int
        Line rate (default 115200); ``clock_hz / baud`` must be within 2 % of an integer of at
        least 4 (:func:`~beehive.serial.uart.baud_divisor`).
    max_packet : int
        Longest datagram accepted, in bytes (default 1500: any MTU up to Ethernet's; Linux's
        ``sl0`` starts at 296, RFC 1055 suggests 1006).
    buffer_bytes : int or None
        Receive buffer (default ``2 * max_packet``).
    max_queued : int
        Frames that may wait in the buffer at once (default 8).

    Members
    -------
    uart_rx : In(1)
        The serial line from the host (idle high).

    Counters: ``no_route``, ``forwarded``, ``framing_errors``, ``bad_escape``, ``oversized``,
    ``no_room`` (see above).
    """

    head_bytes = 1
    max_strip = 0
    key_width = 16
    msg_type = MsgType.ETH_RX_FRAME
    inputs = ()                     # frames come from the UART, not the NoC
    drop_reasons: dict[str, str] = {}

    def __init__(self, env=None, *, baud=115200, max_packet=1500, buffer_bytes=None,
                 max_queued=8):
        super().__init__(env, {"uart_rx": In(1, init=1)}, counters={
            "framing_errors": "bytes the UART lost to a bad stop bit",
            "bad_escape": "frames with an ESC followed by neither ESC_END nor ESC_ESC",
            "oversized": "frames over max_packet bytes",
            "no_room": "frames finding the buffer full",
        })
        self.divisor = baud_divisor(clock_of(self.env, "SlipRxTile"), baud, "SlipRxTile")
        if isinstance(max_packet, bool) or not isinstance(max_packet, int) or max_packet < 1:
            raise ValueError(f"SlipRxTile: max_packet must be a positive integer, not "
                             f"{max_packet!r}")
        self.baud = baud
        self.max_packet = max_packet
        self.buffer_bytes = buffer_bytes if buffer_bytes is not None else 2 * max_packet
        self.max_queued = max_queued

    def source(self, m):
        width = self.env.width
        nb = width // 8
        shift = nb.bit_length() - 1

        m.submodules.uart = uart = UartRx(self.divisor)
        m.d.comb += [
            uart.rx.eq(self.uart_rx),
            uart.o.ready.eq(1),
            self.counters.framing_errors.eq(uart.framing_errors),
        ]
        m.submodules.frames = buf = PacketBuffer(
            width, max_bytes=self.max_packet, buffer_bytes=self.buffer_bytes,
            max_queued=self.max_queued, verdict=True, always_ready=True)

        # The frame being decoded: its bytes so far (saturating past max_packet), the word
        # being filled (lane `length % nb`; a full word is sent when the next byte comes or at
        # END, so that the word sent at END is never empty), and why it is being dropped.
        length = Signal(range(self.max_packet + 1))
        word = Signal(width)
        esc = Signal()          # the previous byte was ESC
        bad = Signal()          # a bad escape: dropped up to END
        long = Signal()         # over max_packet: dropped up to END
        lane = length[:shift] if shift else 0
        full = (length != 0) & (lane == 0)      # `word` holds nb bytes not yet sent

        byte = uart.o.payload
        got = uart.o.valid
        data = Signal(8)
        data_valid = Signal()
        frame_end = Signal()
        m.d.comb += frame_end.eq(got & (byte == END))
        with m.If(got):
            with m.If(byte == END):
                m.d.sync += [length.eq(0), esc.eq(0), bad.eq(0), long.eq(0)]
                with m.If(esc & ~bad & ~long):
                    count(m, self.counters.bad_escape)
            with m.Elif(esc):
                m.d.sync += esc.eq(0)
                with m.If(byte == ESC_END):
                    m.d.comb += [data.eq(END), data_valid.eq(1)]
                with m.Elif(byte == ESC_ESC):
                    m.d.comb += [data.eq(ESC), data_valid.eq(1)]
                with m.Else():
                    m.d.sync += bad.eq(1)
                    with m.If(~bad & ~long):
                        count(m, self.counters.bad_escape)
            with m.Elif(byte == ESC):
                m.d.sync += esc.eq(1)
            with m.Else():
                m.d.comb += [data.eq(byte), data_valid.eq(1)]

        store = Signal()
        m.d.comb += store.eq(data_valid & ~bad & ~long)
        with m.If(store):
            with m.If(length == self.max_packet):
                m.d.sync += [long.eq(1), self.counters.oversized.eq(self.counters.oversized + 1)]
            with m.Else():
                m.d.sync += [length.eq(length + 1), word.word_select(lane, 8).eq(data)]

        # To the buffer: a full word when a byte for the next one comes, the last word at END.
        # A dropped frame whose words already went in is closed at END and rejected.
        good = ~bad & ~long & ~esc
        m.d.comb += [
            buf.i.payload.data.eq(word),
            buf.i.payload.last.eq(frame_end),
            buf.i.payload.nbytes.eq(Mux(full, nb, lane)),
            buf.i.valid.eq(Mux(frame_end, length != 0,
                               store & full & (length != self.max_packet))),
            buf.verdict.valid.eq(buf.accepted),
            buf.verdict.payload.ok.eq(good),
        ]
        with m.If(buf.i_dropped & good):
            count(m, self.counters.no_room)

        return buffered_packets(m, buf)

    def parse(self, m, p):
        p.key = EtherType.IPV4.value
        p.set_meta(ethertype=EtherType.IPV4.value)


class SlipTxTile(Tile):
    """Send the payload of every message it receives as a SLIP frame on the UART pin
    ``uart_tx`` (8N1 at ``baud``): ``END``, the bytes with 0xC0 and 0xDB escaped, ``END``.

    One byte at a time straight from the message's payload word (a byte multiplexer on the
    word, held on the NoC while its bytes leave: no copy of it, at any width). The NoC is
    back-pressured at line rate; nothing is dropped. A message without payload gives
    ``END END``.

    Parameters
    ----------
    env : TileEnv
        ``settings["clock_hz"]`` is the design's clock frequency (required).
    baud : int
        Line rate (default 115200), as for :class:`SlipRxTile`.

    Members
    -------
    uart_tx : Out(1)
        The serial line to the host (idle high).

    Counters: ``forwarded``, frames sent (counted at their closing ``END``).
    """

    #: Packet messages of any type in (their metadata is ignored); nothing out on the NoC.
    inputs = (packet_input(),)

    def __init__(self, env=None, *, baud=115200):
        super().__init__(env, {"uart_tx": Out(1, init=1)},
                         counters={"forwarded": "frames sent (at their closing END)"})
        self.divisor = baud_divisor(clock_of(self.env, "SlipTxTile"), baud, "SlipTxTile")
        self.baud = baud

    def elaborate(self, platform):
        m = Module()
        width = self.env.width
        nb = width // 8
        rx = getattr(self.message_ports(m), self.inputs[0].name)     # packet_input()'s
        m.d.comb += rx.o_hdr.ready.eq(1)
        m.submodules.uart = uart = UartTx(self.divisor)
        m.d.comb += self.uart_tx.eq(uart.tx)

        in_frame = Signal()     # the opening END is sent
        closing = Signal()      # the packet's bytes are sent: the closing END is next
        index = Signal(range(nb))
        esc = Signal()          # the ESC of the current byte is sent
        w = rx.o_data.payload
        byte = w.data.word_select(index, 8) if nb > 1 else w.data
        special = (byte == END) | (byte == ESC)
        out = uart.i
        sent = out.valid & out.ready
        with m.If(~in_frame):
            m.d.comb += [out.valid.eq(rx.o_data.valid), out.payload.eq(END)]
            with m.If(sent):
                m.d.sync += [in_frame.eq(1), index.eq(0), esc.eq(0)]
        with m.Elif(closing):
            m.d.comb += [out.valid.eq(1), out.payload.eq(END)]
            with m.If(sent):
                m.d.sync += [in_frame.eq(0), closing.eq(0),
                             self.counters.forwarded.eq(self.counters.forwarded + 1)]
        with m.Elif(w.nbytes == 0):
            # An empty packet's one word (only with valid: `w` is meaningless otherwise).
            m.d.comb += rx.o_data.ready.eq(1)
            with m.If(rx.o_data.valid):
                m.d.sync += closing.eq(1)
        with m.Else():
            m.d.comb += [
                out.valid.eq(rx.o_data.valid),
                out.payload.eq(Mux(esc, Mux(byte == END, ESC_END, ESC_ESC),
                                   Mux(special, ESC, byte))),
            ]
            with m.If(sent):
                with m.If(special & ~esc):
                    m.d.sync += esc.eq(1)
                with m.Else():
                    m.d.sync += [esc.eq(0), index.eq(index + 1)]
                    with m.If(index + 1 == w.nbytes):
                        m.d.comb += rx.o_data.ready.eq(1)
                        m.d.sync += index.eq(0)
                        with m.If(w.last):
                            m.d.sync += closing.eq(1)
        return m
