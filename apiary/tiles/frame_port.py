"""The MAC-facing edge of a design: Ethernet frames in and out as payload streams."""

from amaranth import Module, Signal
from amaranth.lib import fifo
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect, flipped

from ..noc.flit import payload_signature
from ..noc.framing import MessageSender, MessageReceiver
from ..noc.header import MsgType, noc_header
from ..tile import Tile
from .forward import next_hop_fields


__all__ = ["FramePortTile"]


class FramePortTile(Tile):
    """A design's Ethernet port, as the MAC sees it, until the real Ethernet tiles exist.

    **Receive** (``mac_rx`` → NoC): frames arrive as payload words, every word full but the last,
    which carries ``nbytes`` valid bytes (a last word with ``nbytes == 0`` ends the frame without
    adding bytes). The NoC header needs the payload length up front, so each frame is stored
    whole in a ring buffer of ``buffer_bytes`` (store-and-forward) and then sent as one NoC
    message (type ``ETH_RX_FRAME``, header then the frame bytes) to the tile's single declared
    next hop. ``mac_rx.ready`` is always 1: like a real MAC, the wire is never back-pressured.

    **Transmit** (NoC → ``mac_tx``): the payload of every NoC message delivered to the tile leaves
    on ``mac_tx`` as one frame (header-only messages give none). ``mac_tx`` honours ``ready``.

    Latency: RX, the first header flit leaves for the NoC 4 cycles after the cycle the frame's
    last word was taken on ``mac_rx`` (store-and-forward: the whole frame is stored first). TX,
    0 cycles from the NoC (combinational through :class:`MessageReceiver`). Through
    ``examples/frame_loopback.py`` at 512 bits (two routers each way) a frame's first word leaves
    8 cycles after its last word entered.
    Throughput: one word per cycle each way; RX adds ``header_flits(width)`` NoC flits per frame
    (2 at 64 bits, 1 above) and sends frames back to back, so back-to-back minimum-size frames
    arrive faster than they leave and fill the buffer (then they are dropped and counted).

    Drops, each counted once in ``rx_dropped`` and never wedging the port: frames longer than
    ``max_frame`` bytes; frames that do not fit in the free part of the buffer (the NoC is
    back-pressuring); empty frames; malformed words (a word before the last that is not full,
    or ``nbytes`` above the width); more than ``max_queued`` frames waiting; and every frame when
    the tile has no single next hop. A dropped frame's words are discarded up to its ``last``.

    Parameters
    ----------
    env : TileEnv
    max_frame : int
        Longest frame accepted, in bytes (default 2048).
    buffer_bytes : int or None
        Receive buffer size in bytes (rounded up to a power of two of words); default
        ``2 * max_frame``, so one frame can be received while the previous one is sent.
    max_queued : int
        Frames that may wait in the buffer at once (depth of the length queue).

    Members
    -------
    mac_rx : In(payload_signature(width))
        Frames from the wire into the design.
    mac_tx : Out(payload_signature(width))
        Frames from the design to the wire.
    rx_frames, tx_frames, rx_dropped : Out(32)
        Frames sent into the NoC, frames sent on ``mac_tx`` (counted at their last word), frames
        dropped on receive.
    """

    #: Its NoC input (to ``mac_tx``) never waits for its NoC output (from ``mac_rx``): the two
    #: directions are independent, so the tile adds no in→out dependency to the deadlock check.
    streaming = False

    def __init__(self, env=None, *, max_frame=2048, buffer_bytes=None, max_queued=16):
        super().__init__(env, {
            "mac_rx": In(payload_signature(env.width if env else 512)),
            "mac_tx": Out(payload_signature(env.width if env else 512)),
            "rx_frames": Out(32),
            "tx_frames": Out(32),
            "rx_dropped": Out(32),
        })
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

    def elaborate(self, platform):
        m = Module()
        width = self.env.width
        nb = width // 8
        depth = self.buffer_words
        abits = (depth - 1).bit_length()
        len_bits = (self.max_frame).bit_length()

        # ---- TX: NoC message -> frame ------------------------------------------------------
        m.submodules.receiver = receiver = MessageReceiver(width)
        connect(m, tile=flipped(self.noc_in), receiver=receiver.i)
        m.d.comb += receiver.o_hdr.ready.eq(1)
        connect(m, receiver=receiver.o_data, tile=flipped(self.mac_tx))
        with m.If(self.mac_tx.valid & self.mac_tx.ready & self.mac_tx.payload.last):
            m.d.sync += self.tx_frames.eq(self.tx_frames + 1)

        # ---- RX: frame -> ring buffer ------------------------------------------------------
        m.submodules.mem = mem = Memory(shape=width, depth=depth, init=[])
        wr = mem.write_port()
        rd = mem.read_port(transparent_for=())
        m.submodules.lengths = lengths = fifo.SyncFIFOBuffered(width=len_bits,
                                                               depth=self.max_queued)

        # Pointers carry one extra bit so that a full buffer differs from an empty one.
        wptr = Signal(abits + 1)      # next word of the frame being written
        commit = Signal(abits + 1)    # first word not yet part of a complete frame
        rptr = Signal(abits + 1)      # next word to read for the NoC
        used = Signal(abits + 1)
        m.d.comb += used.eq(wptr - rptr)
        fbytes = Signal(range(self.max_frame + nb + 1))   # bytes of the frame so far
        dropping = Signal()

        rx = self.mac_rx
        m.d.comb += rx.ready.eq(1)
        word = rx.payload
        nbytes = Signal(range(nb + 1))
        m.d.comb += nbytes.eq(word.nbytes)
        total = fbytes + nbytes
        bad = ((nbytes > nb) | (~word.last & (nbytes != nb)) | (total > self.max_frame)
               | ((nbytes != 0) & (used == depth)) | (word.last & (total == 0))
               | (word.last & ~lengths.w_rdy))
        if self._fields is None:
            bad = Signal(init=1)
        m.d.comb += [
            wr.addr.eq(wptr[:abits]),
            wr.data.eq(word.data),
            lengths.w_data.eq(total),
        ]
        with m.If(rx.valid):
            with m.If(dropping):
                with m.If(word.last):
                    m.d.sync += dropping.eq(0)
            with m.Elif(bad):
                m.d.sync += [
                    self.rx_dropped.eq(self.rx_dropped + 1),
                    wptr.eq(commit),
                    fbytes.eq(0),
                    dropping.eq(~word.last),
                ]
            with m.Else():
                with m.If(nbytes != 0):
                    m.d.comb += wr.en.eq(1)
                with m.If(word.last):
                    m.d.comb += lengths.w_en.eq(1)
                    m.d.sync += [
                        wptr.eq(wptr + (nbytes != 0)),
                        commit.eq(wptr + (nbytes != 0)),
                        fbytes.eq(0),
                        self.rx_frames.eq(self.rx_frames + 1),
                    ]
                with m.Else():
                    m.d.sync += [wptr.eq(wptr + 1), fbytes.eq(total)]

        if self._fields is None:
            return m

        # ---- RX: ring buffer -> NoC message ------------------------------------------------
        m.submodules.sender = sender = MessageSender(width)
        connect(m, sender=sender.o, tile=flipped(self.noc_out))

        # The fetcher reads a frame's words into a one-word output register (`out`) feeding the
        # sender; the next frame's descriptor waits in `desc` while the previous frame's words
        # still flow, so frames follow each other without a bubble.
        desc_valid = Signal()
        desc_len = Signal(len_bits)
        left = Signal(range(-(-self.max_frame // nb) + 1))   # words still to fetch
        out_valid = Signal()
        out_last = Signal()
        data_in = sender.i_data
        hdr = sender.i_hdr

        m.d.comb += [
            hdr.valid.eq(desc_valid),
            hdr.payload.payload_bytes.eq(desc_len),
            hdr.payload.msg_type.eq(MsgType.ETH_RX_FRAME.value),
        ]
        for name, value in self._fields.items():
            m.d.comb += getattr(hdr.payload, name).eq(value)
        with m.If(hdr.valid & hdr.ready):
            m.d.sync += desc_valid.eq(0)

        start = Signal()
        m.d.comb += [
            start.eq((left == 0) & lengths.r_rdy & (~desc_valid | (hdr.valid & hdr.ready))),
            lengths.r_en.eq(start),
        ]
        with m.If(start):
            m.d.sync += [
                desc_valid.eq(1),
                desc_len.eq(lengths.r_data),
                left.eq((lengths.r_data + nb - 1) // nb),
            ]

        advance = ~out_valid | data_in.ready
        fetch = advance & (left != 0)
        m.d.comb += [
            rd.en.eq(advance),
            rd.addr.eq(rptr[:abits]),
            data_in.valid.eq(out_valid),
            data_in.payload.data.eq(rd.data),
            data_in.payload.nbytes.eq(nb),
            data_in.payload.last.eq(out_last),
        ]
        with m.If(advance):
            m.d.sync += [out_valid.eq(fetch), out_last.eq(left == 1)]
        with m.If(fetch):
            m.d.sync += [rptr.eq(rptr + 1), left.eq(left - 1)]
        return m
