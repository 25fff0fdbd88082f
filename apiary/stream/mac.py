"""The MAC edge: where a design's frame streams meet a MAC (LiteEth, Xilinx CMAC, a simulator).

Inside a design, frames travel as payload streams (``nbytes`` on the last word,
:mod:`apiary.stream.layout`). MACs speak byte enables instead: AXI-Stream's ``tkeep`` (one bit per
valid byte) or LiteEth's ``last_be`` (one-hot, the last valid byte), plus an error flag for a
frame whose FCS was wrong. :class:`MacEdge` is the one converter between the two, used by every
consumer of a design: the simulators, the LiteX SoC and the Vivado wrapper.

* :class:`FrameStream`: how a tile declares the stream it exchanges with a MAC (``In`` on the
  receive side, ``Out`` on the transmit side). The design's top level finds these by signature
  and puts a :class:`MacEdge` in front of each pair.
* :class:`MacPort`: the MAC-facing side, both directions: ``rx`` (frames from the wire) and
  ``tx`` (frames to it), each a stream of :func:`mac_word_layout` words.
* :class:`MacOptions`: what a platform asks of the edge: which byte enables, padding, whether
  the MAC side runs in a clock domain of its own.

The frames on both sides exclude preamble and FCS.
"""

from dataclasses import dataclass

from typing import Any

from amaranth import Module, Mux, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from .lanes import lane_mask
from .layout import abort_nbytes, check_width, payload_layout


__all__ = ["BYTE_ENABLES", "mac_word_layout", "FrameStream", "MacPort", "MacOptions", "MacEdge"]

#: The byte-enable conventions a :class:`MacPort` can use.
BYTE_ENABLES = ("keep", "last_be")


def mac_word_layout(width: int, byte_enables: str = "keep") -> data.StructLayout:
    """``{data: width, <byte_enables>: width/8, last: 1, error: 1}``: one word at a MAC.

    ``keep`` has a bit per valid byte on every word (all ones but on a frame's last word);
    ``last_be`` is zero but on the last word, where it has the bit of the last valid byte. On
    receive, ``error`` on any word of a frame marks the whole frame bad (a wrong FCS).
    """
    check_width(width)
    if byte_enables not in BYTE_ENABLES:
        raise ValueError(f"byte_enables must be one of {', '.join(BYTE_ENABLES)}, "
                         f"not {byte_enables!r}")
    return data.StructLayout({
        "data": unsigned(width),
        byte_enables: unsigned(width // 8),
        "last": unsigned(1),
        "error": unsigned(1),
    })


class FrameStream(wiring.Signature):
    """A payload stream of Ethernet frames exchanged with a MAC: a tile's ``mac_rx`` (``In``)
    or ``mac_tx`` (``Out``).

    Its members are those of ``stream.Signature(payload_layout(width))``, so it connects to any
    payload stream; its type is what tells the design's top level that a MAC goes there.
    """

    def __init__(self, width: int):
        self.width = check_width(width)
        super().__init__({
            "payload": Out(payload_layout(width)),
            "valid": Out(1),
            "ready": In(1),
        })

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.width == self.width

    def __hash__(self) -> int:
        return hash((type(self), self.width))

    def __repr__(self) -> str:
        return f"FrameStream({self.width})"


class MacPort(wiring.Signature):
    """A MAC's frame interface as the design presents it: ``rx`` (``In``, frames from the wire)
    and ``tx`` (``Out``, frames to the wire), streams of :func:`mac_word_layout` words.

    Parameters
    ----------
    width : int
        Data bits per word.
    byte_enables : "keep" or "last_be"
        AXI-Stream ``tkeep`` (Xilinx MACs, the simulators) or LiteEth's ``last_be``.
    """

    def __init__(self, width: int, *, byte_enables: str = "keep"):
        layout = mac_word_layout(width, byte_enables)
        self.width = width
        self.byte_enables = byte_enables
        super().__init__({
            "rx": In(stream.Signature(layout)),
            "tx": Out(stream.Signature(layout)),
        })

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and other.width == self.width
                and other.byte_enables == self.byte_enables)

    def __hash__(self) -> int:
        return hash((type(self), self.width, self.byte_enables))

    def __repr__(self) -> str:
        return f"MacPort({self.width}, byte_enables={self.byte_enables!r})"


@dataclass(frozen=True)
class MacOptions:
    """What a platform asks of every :class:`MacEdge` of a design.

    Attributes
    ----------
    byte_enables : "keep" or "last_be"
        The :class:`MacPort` convention.
    pad_to : int
        Zero-pad transmitted frames shorter than this many bytes (60 for a MAC that does not
        pad, as the CMAC; 0 for none, as LiteEth's MAC pads itself and a TAP device needs none).
    domain : str or None
        The clock domain the MAC side runs in; ``None``: the design's own (``sync``). Otherwise
        the edge crosses domains with an asynchronous FIFO of ``fifo_depth`` words each way.
        The design's top level does not create the domain, so its clock and reset become
        top-level ports, ``<domain>_clk`` and ``<domain>_rst``.
    fifo_depth : int
        Words of each crossing FIFO (a power of two).
    """

    byte_enables: str = "keep"
    pad_to: int = 0
    domain: str | None = None
    fifo_depth: int = 16

    def __post_init__(self) -> None:
        if self.byte_enables not in BYTE_ENABLES:
            raise ValueError(f"byte_enables must be one of {', '.join(BYTE_ENABLES)}, "
                             f"not {self.byte_enables!r}")
        if not isinstance(self.pad_to, int) or not 0 <= self.pad_to <= 1 << 14:
            raise ValueError(f"pad_to must be a number of bytes from 0 to 16384, "
                             f"not {self.pad_to!r}")
        if self.domain is not None and (not isinstance(self.domain, str)
                                        or not self.domain.isidentifier()
                                        or self.domain == "sync"):
            raise ValueError(f"domain must be None or the name of a clock domain other than "
                             f"'sync', not {self.domain!r}")
        if (not isinstance(self.fifo_depth, int) or self.fifo_depth < 2
                or self.fifo_depth & (self.fifo_depth - 1)):
            raise ValueError(f"fifo_depth must be a power of two of at least 2, "
                             f"not {self.fifo_depth!r}")


class MacEdge(wiring.Component):
    """Convert between a :class:`MacPort` (``mac``) and the design's frame streams (``rx``,
    ``tx``).

    **Receive** (``mac.rx`` → ``rx``): byte enables become ``nbytes`` (``width/8`` on every word
    but the last, which gets the count of its valid bytes, 0 if none). A frame with ``error`` on
    any of its words ends with an *abort* word (``nbytes = width/8 + 1``,
    :func:`~apiary.stream.layout.abort_nbytes`): the first buffer that stores frames whole drops
    it and counts it (Ethernet RX's ``bad_fcs``). ``mac.rx.ready`` is ``rx.ready``.

    **Transmit** (``tx`` → ``mac.tx``): ``nbytes`` becomes byte enables, ``error`` is 0. With
    ``pad_to``, a frame shorter than ``pad_to`` bytes is zero-padded to it: its last word is
    widened, and where the padding does not fit that word, zero words follow it (``tx.ready`` is
    low meanwhile).

    Latency: 0 cycles each way (combinational) without ``domain``; with it, the crossing FIFOs'
    (a few cycles of each clock). Throughput: one word per cycle each way, but for padding words.
    Nothing is dropped here.

    Parameters
    ----------
    width : int
    options : MacOptions
    """

    def __init__(self, width: int, options: MacOptions = MacOptions()):
        self._width = check_width(width)
        self._options = options
        super().__init__({
            "mac": Out(MacPort(width, byte_enables=options.byte_enables)),
            "rx": Out(stream.Signature(payload_layout(width))),
            "tx": In(stream.Signature(payload_layout(width))),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        opts = self._options
        word = mac_word_layout(self._width, opts.byte_enables)
        mac_rx, mac_tx = self.mac.rx, self.mac.tx
        if opts.domain is not None:
            # Convert in the design's domain; the FIFOs carry MAC words across. The domain is
            # not created here: whoever drives it does (a design's top level leaves it to
            # Amaranth, which makes its clock and reset ports).
            depth, size = opts.fifo_depth, data.Layout.cast(word).size
            m.submodules.rx_cdc = rx_cdc = fifo.AsyncFIFO(width=size, depth=depth,
                                                          w_domain=opts.domain, r_domain="sync")
            m.submodules.tx_cdc = tx_cdc = fifo.AsyncFIFO(width=size, depth=depth,
                                                          w_domain="sync", r_domain=opts.domain)
            m.d.comb += [
                rx_cdc.w_en.eq(self.mac.rx.valid),
                rx_cdc.w_data.eq(self.mac.rx.payload),
                self.mac.rx.ready.eq(rx_cdc.w_rdy),
                self.mac.tx.valid.eq(tx_cdc.r_rdy),
                self.mac.tx.payload.eq(tx_cdc.r_data),
                tx_cdc.r_en.eq(self.mac.tx.ready),
            ]
            mac_rx = stream.Signature(word).create()
            mac_tx = stream.Signature(word).flip().create()
            m.d.comb += [
                mac_rx.valid.eq(rx_cdc.r_rdy),
                mac_rx.payload.eq(rx_cdc.r_data),
                rx_cdc.r_en.eq(mac_rx.ready),
                tx_cdc.w_en.eq(mac_tx.valid),
                tx_cdc.w_data.eq(mac_tx.payload),
                mac_tx.ready.eq(tx_cdc.w_rdy),
            ]
        self._receive(m, mac_rx)
        self._transmit(m, mac_tx)
        return m

    def _receive(self, m: Module, mac_rx: Any) -> None:
        nb = self._width // 8
        enables = getattr(mac_rx.payload, self._options.byte_enables)
        count = Signal(range(nb + 1))
        for lane in range(nb):              # keep: the highest valid lane; last_be: the only one
            with m.If(enables[lane]):
                m.d.comb += count.eq(lane + 1)
        bad = Signal()                      # an earlier word of this frame had `error`
        error = bad | mac_rx.payload.error
        with m.If(mac_rx.valid & mac_rx.ready):
            m.d.sync += bad.eq(error & ~mac_rx.payload.last)
        last = mac_rx.payload.last
        m.d.comb += [
            self.rx.valid.eq(mac_rx.valid),
            mac_rx.ready.eq(self.rx.ready),
            self.rx.payload.data.eq(mac_rx.payload.data),
            self.rx.payload.last.eq(last),
            self.rx.payload.nbytes.eq(Mux(last, Mux(error, abort_nbytes(self._width), count),
                                          nb)),
        ]

    def _transmit(self, m: Module, mac_tx: Any) -> None:
        nb = self._width // 8
        pad_to = self._options.pad_to
        tx = self.tx.payload
        nbytes, last, data_, valid = tx.nbytes, tx.last, tx.data, self.tx.valid
        if pad_to:
            # `sent`: bytes of the frame already sent, saturating at pad_to; `pad_left`: zero
            # bytes still owed after the frame's last input word.
            sent = Signal(range(pad_to + 1))
            pad_left = Signal(range(pad_to + 1))
            padding = pad_left != 0
            total = sent + nbytes
            short = last & (total < pad_to)
            fits = (pad_to - sent) <= nb            # the padding ends in this word
            out_nbytes = Signal(range(nb + 1))
            out_last = Signal()
            with m.If(padding):
                m.d.comb += [
                    out_nbytes.eq(Mux(pad_left > nb, nb, pad_left)),
                    out_last.eq(pad_left <= nb),
                ]
            with m.Elif(short):
                m.d.comb += [
                    out_nbytes.eq(Mux(fits, pad_to - sent, nb)),
                    out_last.eq(fits),
                ]
            with m.Else():
                m.d.comb += [out_nbytes.eq(nbytes), out_last.eq(last)]
            moved = mac_tx.valid & mac_tx.ready
            with m.If(moved):
                with m.If(out_last):
                    m.d.sync += [sent.eq(0), pad_left.eq(0)]
                with m.Elif(padding):
                    m.d.sync += pad_left.eq(pad_left - nb)
                with m.Elif(short):
                    m.d.sync += [sent.eq(0), pad_left.eq(pad_to - sent - nb)]
                with m.Else():
                    m.d.sync += sent.eq(Mux(total >= pad_to, pad_to, total))
            data_ = Mux(padding, 0, data_ & lane_mask(m, nb, nbytes))
            valid = valid | padding
            m.d.comb += self.tx.ready.eq(mac_tx.ready & ~padding)
            nbytes, last = out_nbytes, out_last
        else:
            m.d.comb += self.tx.ready.eq(mac_tx.ready)
        enables = getattr(mac_tx.payload, self._options.byte_enables)
        if self._options.byte_enables == "keep":
            m.d.comb += enables.eq(Mux(last, lane_mask(m, nb, nbytes)[::8], (1 << nb) - 1))
        else:
            for lane in range(nb):
                m.d.comb += enables[lane].eq(last & (nbytes == lane + 1))
        m.d.comb += [
            mac_tx.valid.eq(valid),
            mac_tx.payload.data.eq(data_),
            mac_tx.payload.last.eq(last),
            mac_tx.payload.error.eq(0),
        ]
