"""The MAC-facing edge of a design: Ethernet frames in and out as payload streams."""

from amaranth import Module
from amaranth.lib.wiring import In, Out, connect, flipped

from ..noc.header import noc_header
from ..noc.msgtype import UNTYPED
from ..stream.mac import FrameStream
from ..stream.packet_buffer import PacketBuffer
from ..tile import Receive, Send, Tile
from .forward import next_hop_fields
from ..stream.counters import count


__all__ = ["FramePortTile"]


class FramePortTile(Tile):
    """A design's Ethernet port, as the MAC sees it, until the real Ethernet tiles exist.

    **Receive** (``mac_rx`` → NoC): frames arrive as payload words, every word full but the last,
    which carries ``nbytes`` valid bytes (a last word with ``nbytes == 0`` ends the frame without
    adding bytes). The NoC header needs the payload length up front, so each frame is stored
    whole in a :class:`~apiary.stream.packet_buffer.PacketBuffer` of ``buffer_bytes``
    (store-and-forward, no verdict) and then sent as one NoC message (of type ``msg_type``,
    header then the frame bytes) to the tile's single declared next hop. ``mac_rx.ready`` is
    always 1: like a real MAC, the wire is never back-pressured.

    **Transmit** (NoC → ``mac_tx``): the payload of every NoC message delivered to the tile leaves
    on ``mac_tx`` as one frame (header-only messages give none). ``mac_tx`` honours ``ready``.

    Latency: RX, the first header flit is valid on ``noc_out`` 2 cycles after the cycle the
    frame's last word was taken on ``mac_rx`` (store-and-forward: the whole frame is stored
    first; the 2 cycles are the buffer's, :class:`MessageSender` adds none). TX, 0 cycles from
    the NoC (combinational through :class:`MessageReceiver`). Through
    ``examples/frame_loopback.py`` at 512 bits (two routers each way) a frame's first word leaves
    7 cycles after its last word entered (8 at 64 bits, where the header is two flits).
    Throughput: one word per cycle each way; RX adds ``header_flits(width)`` NoC flits per frame
    (2 at 64 bits, 1 above) and sends frames back to back, so back-to-back minimum-size frames
    arrive faster than they leave and fill the buffer (then they are dropped and counted).

    Drops, each counted once in ``rx_dropped`` (at the frame's last word) and never wedging the
    port: frames longer than ``max_frame`` bytes; frames that do not fit in the free part of the
    buffer (the NoC is back-pressuring); empty frames; malformed words (a word before the last
    that is not full, or ``nbytes`` above the width); frames ending while ``max_queued`` frames
    wait behind the one being sent; and every frame when the tile has no single next hop. A
    dropped frame's words are discarded up to its ``last``.

    Parameters
    ----------
    env : TileEnv
    max_frame : int
        Longest frame accepted, in bytes (default 2048).
    buffer_bytes : int or None
        Receive buffer size in bytes (rounded up to a power of two of words); default
        ``2 * max_frame``, so one frame can be received while the previous one is sent.
    max_queued : int
        Frames that may wait in the buffer at once, besides the one being sent.
    msg_type : int or enum member
        Type of the messages it sends (default :data:`~apiary.noc.msgtype.UNTYPED`).

    Members
    -------
    mac_rx : In(FrameStream(width))
        Frames from the wire into the design.
    mac_tx : Out(FrameStream(width))
        Frames from the design to the wire.

    Counters: ``rx_frames`` and ``tx_frames`` (frames sent into the NoC, and on ``mac_tx``, each
    counted at its last word), ``rx_dropped`` (frames dropped on receive), ``rx_bad_fcs`` (frames
    the MAC marked bad, dropped).

    Message ports: ``to_mac`` in (any type) and ``from_mac`` out (of type ``msg_type``; none
    without a single next hop), framed with no metadata and no payload bytes in the header
    flit (``head=0``).
    """

    #: Its NoC input (to ``mac_tx``) never waits for its NoC output (from ``mac_rx``): the two
    #: directions are independent, so the tile adds no in→out dependency to the deadlock check.
    streaming = False
    inputs: tuple[Receive, ...] = (Receive("to_mac", head=0),)
    outputs: tuple[Send, ...] = (Send("from_mac", head=0),)

    def __init__(self, env=None, *, max_frame=2048, buffer_bytes=None, max_queued=16,
                 msg_type=UNTYPED):
        super().__init__(env, {
            "mac_rx": In(FrameStream(env.width if env else 512)),
            "mac_tx": Out(FrameStream(env.width if env else 512)),
        }, counters={
            "rx_frames": "frames sent into the NoC",
            "tx_frames": "frames sent to the MAC",
            "rx_dropped": "frames dropped on receive: too long, malformed, no room, or no route",
            "rx_bad_fcs": "frames the MAC marked bad (FCS error), dropped",
        })
        self.msg_type = int(getattr(msg_type, "value", msg_type))
        limit = (1 << noc_header(self.env.width).width("payload_bytes")) - 1
        if not isinstance(max_frame, int) or not 1 <= max_frame <= limit:
            raise ValueError(f"max_frame must be an integer from 1 to {limit}, not {max_frame!r}")
        if buffer_bytes is None:
            buffer_bytes = 2 * max_frame
        if not isinstance(buffer_bytes, int) or buffer_bytes < max_frame:
            raise ValueError(f"buffer_bytes ({buffer_bytes!r}) must be an integer of at least "
                             f"max_frame ({max_frame})")
        if not isinstance(max_queued, int) or max_queued < 1:
            raise ValueError(f"max_queued must be a positive integer, not {max_queued!r}")
        self.max_frame = max_frame
        self.max_queued = max_queued
        nb = self.env.width // 8
        words = -(-buffer_bytes // nb)
        self.buffer_words = 1 << max(1, (words - 1).bit_length())
        self.buffer_bytes = self.buffer_words * nb
        self._fields = next_hop_fields(self.env)
        self.outputs = ((Send("from_mac", self.msg_type, head=0),) if self._fields is not None
                        else ())

    def elaborate(self, platform):
        m = Module()
        width = self.env.width
        ports = self.message_ports(m)

        # ---- TX: NoC message -> frame ------------------------------------------------------
        receiver = ports.to_mac
        m.d.comb += receiver.o_hdr.ready.eq(1)
        connect(m, receiver=receiver.o_data, tile=flipped(self.mac_tx))
        with m.If(self.mac_tx.valid & self.mac_tx.ready & self.mac_tx.payload.last):
            count(m, self.counters.tx_frames)

        # ---- RX: frame -> NoC message ------------------------------------------------------
        rx = self.mac_rx
        if self._fields is None:
            # Nowhere to send frames: take every word and count every frame as dropped.
            m.d.comb += rx.ready.eq(1)
            with m.If(rx.valid & rx.payload.last):
                count(m, self.counters.rx_dropped)
            return m

        m.submodules.buffer = buf = PacketBuffer(
            width, max_bytes=self.max_frame, buffer_bytes=self.buffer_bytes,
            max_queued=self.max_queued, min_bytes=1, verdict=False, always_ready=True)
        connect(m, tile=flipped(rx), buffer=buf.i)
        m.d.comb += [
            self.counters.rx_frames.eq(buf.packets),
            self.counters.rx_dropped.eq(buf.overflow),
            self.counters.rx_bad_fcs.eq(buf.aborted),
        ]

        sender = ports.from_mac
        hdr = sender.i_hdr
        m.d.comb += [
            hdr.valid.eq(buf.o_desc.valid),
            hdr.payload.payload_bytes.eq(buf.o_desc.payload.bytes),
            hdr.payload.msg_type.eq(self.msg_type),
            buf.o_desc.ready.eq(hdr.ready),
        ]
        for name, value in self._fields.items():
            m.d.comb += getattr(hdr.payload, name).eq(value)
        connect(m, buffer=buf.o, sender=sender.i_data)
        return m
