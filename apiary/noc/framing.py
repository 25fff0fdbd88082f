"""NoC message framing on the tile side: descriptor + payload bytes ⇄ flits.

A message on a flit stream is ``header_flits(width)`` header flits (the NoC header of
:func:`~apiary.noc.header.noc_header`, flit 0 holding its top bits), then ``metadata_flits``
metadata words, then ``ceil(payload_bytes / (width // 8))`` payload words, ``last`` on the final
flit. :class:`MessageSender` builds such messages from a descriptor and a payload byte stream;
:class:`MessageReceiver` takes them apart again.

Both ends frame the payload by the header's ``payload_bytes``, never by the payload stream's own
``last``: a payload stream that ends early is padded with zero words, one that runs long is cut
and its extra words discarded, and each such message is counted once. One helper,
:class:`PayloadFramer`, does this for both.
"""

from collections.abc import Mapping
from typing import Any, TypeVar

from amaranth import Module, Signal, Cat, Const, Mux, Value
from amaranth.hdl import unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..stream.counters import count
from ..stream.lanes import lane_mask, wire
from ..stream.layout import check_width, payload_signature, payload_words
from ..stream.struct_values import StructValues
from .flit import flit_signature
from .header import Fbits, Message, NocHeader, noc_header, header_flits, spare_bytes


S = TypeVar("S", bound=StructValues)


__all__ = ["MessageSender", "MessageFlits", "MessageReceiver", "PayloadFramer", "meta_plan",
           "length_bits",
           "head_room", "meta_message_flits",
           "decode_meta_message", "offer_message",
           "DESCRIPTOR_FIELDS", "struct_message_flits", "decode_struct_message"]


#: Header fields a tile sets in a :class:`MessageSender` descriptor; the sender fills in
#: ``msg_len`` and ``metadata_flits`` and leaves every other header field zero.
DESCRIPTOR_FIELDS = ("dst_x", "dst_y", "dst_fbits", "msg_type",
                     "src_x", "src_y", "src_fbits", "payload_bytes")


def _check_meta_words(meta_words: object, what: str) -> int:
    limit = (1 << noc_header(64).width("metadata_flits")) - 1
    if not isinstance(meta_words, int) or not 0 <= meta_words <= limit:
        raise ValueError(f"{what} takes between 0 and {limit} metadata words (the width of the "
                         f"header's metadata_flits field), not {meta_words!r}")
    return meta_words


def meta_plan(width: int, meta_words: int = 0,
              meta_bits: int | None = None) -> tuple[int, int, int]:
    """How a message carries its metadata: ``(flits, inline, bits)``.

    With ``meta_bits=None`` the metadata is ``meta_words`` whole flits (``bits`` is
    ``meta_words * width``). With ``meta_bits`` (and ``meta_words`` 0) it is ``meta_bits`` bits:
    *inline* in the header flit's spare low bits when they fit (at 512 bits the header's fields
    take the top 128 bits and leave 384: ``flits`` is 0, ``inline`` is ``meta_bits``), otherwise
    in ``ceil(meta_bits / width)`` flits after the header (``inline`` is 0).
    """
    check_width(width)
    if meta_bits is None:
        meta_words = _check_meta_words(meta_words, "a message")
        return meta_words, 0, meta_words * width
    if meta_words:
        raise ValueError("give metadata as meta_words or as meta_bits, not both")
    if not isinstance(meta_bits, int) or isinstance(meta_bits, bool) or meta_bits < 0:
        raise ValueError(f"meta_bits must be a non-negative number of bits, not {meta_bits!r}")
    hdr = noc_header(width)
    if meta_bits <= hdr.size - hdr.bits:
        return 0, meta_bits, meta_bits
    return _check_meta_words(-(-meta_bits // width), "a message"), 0, meta_bits


def head_room(width: int, meta_bits: int = 0) -> int:
    """Head payload bytes a message with ``meta_bits`` bits of metadata can carry in its header
    flit at ``width`` bits: the :func:`~apiary.noc.header.spare_bytes` its inline metadata
    (:func:`meta_plan`) leaves, in whole bytes (0 at 64 and 128 bits; at 512, 48 less the
    metadata's bytes)."""
    flits, inline, _ = meta_plan(width, meta_bits=meta_bits)
    return 0 if flits else spare_bytes(width) - -(-inline // 8)


def _check_head(width: int, head: "int | Mapping[int, int]", meta_flits: int,
                inline: int, types_only: bool = False) -> dict:
    """``head`` as ``{msg_type: bytes}`` (``None`` for every type), each checked against the
    room a message with ``meta_flits`` metadata flits and ``inline`` bits of inline metadata
    has (:func:`head_room`); a count by type may take the lanes of inline metadata that
    type's messages do not carry (a shorter format, with ``short_meta``). ``types_only``:
    every message is of a type the mapping lists, so one count for all of them holds for
    every message (``{None: count}``)."""
    heads = {None: head} if isinstance(head, int) else dict(head)
    room = 0 if meta_flits else spare_bytes(width)
    if None in heads:
        room -= -(-inline // 8)
    for t, k in heads.items():
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= room:
            raise ValueError(f"a {width}-bit message with this metadata has room for 0 to "
                             f"{room} head payload bytes in its header flit, not {k!r}"
                             + ("" if t is None else f" (msg_type {t})"))
    counts = set(heads.values())
    if types_only and None not in heads and len(counts) == 1:
        return {None: counts.pop()} if 0 not in counts else {}
    return {t: k for t, k in heads.items() if k}


def meta_message_flits(width: int, header: NocHeader, meta: int, meta_bits: int,
                       payload: bytes = b"", head: int = 0) -> list[tuple[int, int]]:
    """The flits (``(data, last)`` pairs) of a message whose ``meta_bits`` bits of metadata
    ``meta`` travel as :func:`meta_plan` says (inline in the header flit, or in flits after it),
    and whose first ``head`` payload bytes ride in the header flit
    (:func:`~apiary.noc.header.head_lanes`), exactly as a :class:`MessageSender` with
    ``meta_bits=`` (and ``head=``) frames them: the Python model of every such message (tests,
    traces)."""
    flits, inline, _ = meta_plan(width, meta_bits=meta_bits)
    if not 0 <= meta < 1 << max(meta_bits, 1):
        raise ValueError(f"metadata {meta:#x} does not fit in {meta_bits} bits")
    _check_head(width, head, flits, inline)
    words = [meta >> (width * k) & (1 << width) - 1 for k in range(flits)]
    out = Message(header, words, bytes(payload)).flits(width, head)
    if inline:
        last_header = header_flits(width) - 1
        out[last_header] = (out[last_header][0] | meta, out[last_header][1])
    return out


def decode_meta_message(flits: list[Any], width: int, meta_bits: int,
                        head: int = 0) -> tuple[NocHeader, int, bytes]:
    """``(header, meta, payload)`` of a message framed as :func:`meta_message_flits` frames it;
    ``meta`` is the ``meta_bits``-bit metadata as an int."""
    msg = Message.from_flits(flits, width, head)
    _, inline, _ = meta_plan(width, meta_bits=meta_bits)
    if inline:
        words = [f[0] if isinstance(f, tuple) else f for f in flits]
        meta = words[header_flits(width) - 1]
    else:
        meta = sum(int(w) << (width * k) for k, w in enumerate(msg.meta))
    return msg.header, meta & (1 << meta_bits) - 1, msg.payload


def struct_message_flits(width: int, msg_type: Any, meta: StructValues, *,
                         dst: tuple = (0, 0), src: tuple = (0, 0), dst_fbits: int = Fbits.LOCAL0,
                         src_fbits: int = Fbits.LOCAL0) -> list[tuple[int, int]]:
    """The flits (``(data, last)`` pairs) of a message with no payload whose metadata is
    ``meta``, a :class:`~apiary.stream.struct_values.StructValues` (the kernel's messages, the
    control plane's), from ``src`` to ``dst`` (``(x, y)``)."""
    hdr = NocHeader(dst_x=dst[0], dst_y=dst[1], dst_fbits=dst_fbits,
                    msg_type=int(getattr(msg_type, "value", msg_type)),
                    src_x=src[0], src_y=src[1], src_fbits=src_fbits)
    return meta_message_flits(width, hdr, meta.pack(), meta.layout.size)


def decode_struct_message(flits: list[Any], width: int,
                          cls: type[S]) -> tuple[NocHeader, S]:
    """``(header, meta)`` of a message framed as :func:`struct_message_flits` frames it, its
    metadata as a ``cls`` (a :class:`~apiary.stream.struct_values.StructValues`)."""
    header, meta, _ = decode_meta_message(flits, width, cls.layout.size)
    return header, cls.unpack(meta)


def offer_message(m: Module, sender: "MessageSender", valid: Any, *, dst: tuple[Any, Any, Any],
                  src: tuple[Any, Any, Any], msg_type: Any, payload_bytes: Any = 0,
                  meta: Any = None) -> Any:
    """Offer a descriptor to ``sender`` (a :class:`MessageSender`) while ``valid``: ``dst`` and
    ``src`` are ``(x, y, fbits)``, each an int or an Amaranth value, ``meta`` the metadata (if
    the sender carries any). Returns ``sender.i_hdr.ready``: the source's ``ready``."""
    return offer_descriptor(m, sender.i_hdr, valid, dst=dst, src=src, msg_type=msg_type,
                            payload_bytes=payload_bytes, meta=meta)


def offer_descriptor(m: Module, descriptors: Any, valid: Any, *, dst: tuple[Any, Any, Any],
                     src: tuple[Any, Any, Any], msg_type: Any, payload_bytes: Any = 0,
                     meta: Any = None) -> Any:
    """:func:`offer_message` to a stream of descriptors (``descriptors``: a sender's ``i_hdr``,
    or a component's member a tile joins to one). Returns ``descriptors.ready``."""
    d = descriptors.payload
    m.d.comb += [
        descriptors.valid.eq(valid),
        d.dst_x.eq(dst[0]), d.dst_y.eq(dst[1]), d.dst_fbits.eq(dst[2]),
        d.src_x.eq(src[0]), d.src_y.eq(src[1]), d.src_fbits.eq(src[2]),
        d.msg_type.eq(msg_type), d.payload_bytes.eq(payload_bytes),
    ]
    if meta is not None:
        m.d.comb += d.meta.eq(meta)
    return descriptors.ready


def length_bits(width: int, max_bytes: int | None = None) -> int:
    """Bits a sender or receiver counts a message's ``payload_bytes`` in: the header field's
    (22) or, for a design whose messages carry at most ``max_bytes`` payload bytes (the design
    setting ``max_message_bytes``), just what that needs."""
    field = noc_header(width).width("payload_bytes")
    if max_bytes is None:
        return field
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or \
            not 1 <= max_bytes < 1 << field:
        raise ValueError(f"max_message_bytes must be an integer from 1 to {(1 << field) - 1}, "
                         f"not {max_bytes!r}")
    return max_bytes.bit_length()


def _head_counts(heads: dict) -> list[int]:
    """The head payload byte counts a message may take by ``heads`` (:func:`_check_head`), in
    increasing order: the one count for every type, or 0 and each type's."""
    if None in heads:
        return [heads[None]]
    return [0, *sorted(set(heads.values()))]


def _head_split(m: Module, heads: dict, msg_type: Any,
                payload_bytes: Any) -> tuple[Any, list[int], Signal]:
    """``(k, ks, rest)``: the head payload bytes of a message of ``msg_type`` by ``heads``
    (:func:`_check_head`; a constant if one count holds for every type), the counts it may
    take, and the payload bytes left for the payload flits."""
    ks = _head_counts(heads)
    if None in heads:
        k: Any = Const(heads[None], range(heads[None] + 1))
    else:
        k = Signal(range(ks[-1] + 1), name="head")
        with m.Switch(msg_type):
            for t, v in heads.items():
                with m.Case(t):
                    m.d.comb += k.eq(v)
    rest = Signal(len(payload_bytes), name="rest")
    m.d.comb += rest.eq(Mux(payload_bytes > k, payload_bytes - k, 0))
    return k, ks, rest


def _below_head(m: Module, width: int, k: Any, ks: list[int]) -> Any:
    """Ones in the lanes of the spare bytes below ``k`` head payload bytes: the inline
    metadata's."""
    spare = spare_bytes(width)
    return _pick(m, k, ks, lambda a: lane_mask(m, spare, spare - a))


def _pick(m: Module, k: Any, ks: list[int], build: Any) -> Any:
    """``build(a)`` for the count ``a`` among ``ks`` that ``k`` holds: a choice among fixed
    shifts (wiring when there is one count), each choice's condition one net in ``m``."""
    if len(ks) == 1:
        return Value.cast(build(ks[0]))
    values = [Value.cast(build(a)) for a in ks]
    size = max(len(v) for v in values)
    out = Const(0, size)
    for a, v in zip(ks, values):
        out = out | (wire(m, k == a, f"head_is_{a}").replicate(size) & v)
    return out


class PayloadFramer(wiring.Component):
    """Pass exactly the number of words a ``payload_bytes`` count calls for, whatever the source's
    ``last`` says.

    Strobe ``load`` with ``load_bytes`` (non-zero) while ``busy`` is low; the framer then copies
    ``i`` to ``o`` until ``o`` has carried ``ceil(load_bytes / (width // 8))`` words, marks the
    final one ``last`` with ``nbytes`` set to the bytes it holds (all other words are full), and
    zeroes the byte lanes of the final word beyond ``nbytes``.

    * ``i`` ends early (``last`` before the final word): the remaining words are sent as zeros
      without taking anything more from ``i``; ``error`` pulses.
    * ``i`` runs long (no ``last`` on the final word): the words after it are taken from ``i`` and
      discarded up to and including the one with ``last``, one per cycle, ``busy`` staying high;
      ``error`` pulses.

    Latency 0 cycles (``o`` is combinational from ``i``); throughput one word per cycle.

    ``length_bits`` is the width of ``load_bytes`` (:func:`length_bits`; the header field's by
    default): a narrower count is a narrower counter.

    With ``early=True`` a payload starts in the cycle of ``load``: ``o`` carries its first word
    then (``o.valid`` follows ``i.valid`` while ``load`` is high), and ``load`` takes effect
    only when that word is taken; keep it high until then.

    Parameters
    ----------
    width : int
        Word width in bits.
    early : bool
        Pass the first word in the cycle of ``load`` (see above).
    zero_tail : bool
        Zero the final word's lanes past ``nbytes`` (as above); off, they pass as they came,
        for a user that moves the bytes and zeroes its own output.
    length_bits : int or None
        Bits of ``load_bytes``.

    Members
    -------
    load : In(1)
        Start a payload of ``load_bytes`` bytes (ignored while ``busy``).
    load_bytes : In(length_bits)
        Payload length in bytes; must not be 0.
    busy : Out(1)
        A payload is being passed, padded or drained.
    i : In(flit_signature(width))
        The source words; only ``data`` and ``last`` matter.
    o : Out(payload_signature(width))
        The framed words.
    error : Out(1)
        Pulses once for a payload whose source length disagreed with ``load_bytes``.
    """

    def __init__(self, width: int, *, early: bool = False, zero_tail: bool = True,
                 length_bits: int | None = None) -> None:
        self._width = check_width(width)
        self._early = bool(early)
        self._zero_tail = bool(zero_tail)
        super().__init__({
            "load": In(1),
            "load_bytes": In(length_bits or noc_header(width).width("payload_bytes")),
            "busy": Out(1),
            "i": In(flit_signature(width)),
            "o": Out(payload_signature(width)),
            "error": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nb = self._width // 8
        words, tail_now = payload_words(self.load_bytes, self._width)
        remaining = Signal(len(self.load_bytes), name="remaining")
        tail = Signal(len(self.o.payload.nbytes), name="tail")
        idle = Signal()
        starting = Signal()             # early: the first word passes in the cycle of `load`
        if self._early:
            m.d.comb += starting.eq(idle & self.load)
        cur_remaining = Mux(starting, words, remaining)
        cur_tail = Mux(starting, tail_now, tail)
        final = Signal()
        m.d.comb += final.eq(cur_remaining == 1)

        # Byte lanes of the final word beyond its last byte are zeroed.
        src = self.i.payload.data
        masked = src
        if self._zero_tail:
            masked = Cat(Mux(~final | (cur_tail > lane), src[8 * lane:8 * lane + 8], 0)
                         for lane in range(nb))
        m.d.comb += [
            self.o.payload.last.eq(final),
            self.o.payload.nbytes.eq(Mux(final, cur_tail, nb)),
        ]
        advance = self.o.valid & self.o.ready
        with m.If(advance):
            m.d.sync += remaining.eq(cur_remaining - 1)

        def copy() -> None:
            m.d.comb += [
                self.o.valid.eq(self.i.valid),
                self.o.payload.data.eq(masked),
                self.i.ready.eq(self.o.ready),
            ]
            with m.If(advance):
                with m.If(final):
                    m.next = "IDLE"
                    with m.If(~self.i.payload.last):
                        m.d.comb += self.error.eq(1)
                        m.next = "DRAIN"
                with m.Elif(self.i.payload.last):
                    m.d.comb += self.error.eq(1)
                    m.next = "PAD"

        with m.FSM(name="framer") as fsm:
            with m.State("IDLE"):
                m.d.comb += idle.eq(1)
                with m.If(self.load):
                    m.d.sync += tail.eq(tail_now)
                    if self._early:
                        m.next = "IDLE"
                        with m.If(advance):
                            m.next = "COPY"
                        copy()
                    else:
                        m.d.sync += remaining.eq(words)
                        m.next = "COPY"
            with m.State("COPY"):
                copy()
            with m.State("PAD"):
                m.d.comb += self.o.valid.eq(1)          # data stays 0
                with m.If(advance & final):
                    m.next = "IDLE"
            with m.State("DRAIN"):
                # The only place the framer drops data: words past the expected length.
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid & self.i.payload.last):
                    m.next = "IDLE"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return m


class MessageSender(wiring.Component):
    """Turn a descriptor and a payload byte stream into a NoC message.

    For each descriptor taken from ``i_hdr`` the sender sends the header flit(s), with ``msg_len``
    and ``metadata_flits`` computed here and every header field not in the descriptor zero, then
    ``meta_words`` metadata words from ``meta`` (word 0, the first sent, in its least significant
    bits), then ``ceil(payload_bytes / (width // 8))`` words taken from ``i_data``. With
    ``payload_bytes == 0`` the message ends after the metadata and nothing is taken from
    ``i_data``. The output equals ``Message(header, meta, payload).flits(width)``; byte lanes past
    ``payload_bytes`` in the final word are sent as zeros whatever ``i_data`` holds there.

    The descriptor is held on ``i_hdr`` (not taken) until its last header/metadata flit is sent.

    Latency: 0 cycles from a valid descriptor to the first header flit on ``o`` (cut-through; it
    does not wait for payload), and 0 cycles from a payload word on ``i_data`` to ``o`` once the
    header and metadata are out. ``o`` is combinational (not registered).
    Throughput: one flit per cycle, back-to-back messages without idle cycles.
    The header and metadata flits come from a :class:`MessageFlits`, the payload words through a
    :class:`PayloadFramer`.

    Errors: framing trusts ``payload_bytes``; ``i_data``'s ``nbytes`` is ignored. If ``i_data``
    ends (``last``) early, the message is completed with zero words; if it does not end on the
    word ``payload_bytes`` calls for, its further words up to its ``last`` are discarded (one per
    cycle, before the next message starts). Either counts once in ``length_errors``.

    With ``empty_packets=True``, ``i_data`` carries exactly one packet per message, so a message
    with ``payload_bytes == 0`` also has one on ``i_data`` (normally a single word with
    ``nbytes == 0``): after its header flits the sender takes and discards that packet's words
    up to its ``last``, and starts no other message meanwhile. This is what a tile whose payload
    comes out of a :class:`~apiary.stream.realign.StreamStrip` needs, as stripping a whole packet
    leaves an empty one.

    Parameters
    ----------
    width : int
        Flit width in bits (64, 128, 256 or 512).
    meta_words : int
        Metadata words per message, 0 to 255.
    meta_bits : int or None
        Instead of ``meta_words``: the metadata's size in bits, carried inline in the header
        flit when it fits there and in flits after it otherwise (:func:`meta_plan`).
    empty_packets : bool
        ``i_data`` has a packet for header-only messages too (see above).
    short_meta : bool
        Each descriptor says in ``meta_flits`` how many of the metadata flits its message
        carries (at most ``meta_words``; the first ones, so the bits of ``meta`` above them are
        not sent): a tile whose messages carry formats of different sizes sends each its own.
        Inline metadata is unaffected.
    head : int or mapping of int to int
        Head payload bytes: the first ``head`` bytes of each message's payload ride in its
        header flit (:func:`~apiary.noc.header.head_lanes`; at most :func:`head_room`), the
        payload flits carry the rest, so a message takes
        ``ceil((payload_bytes - head) / (width // 8))`` of them. A mapping gives the count by
        ``msg_type`` (types not in it: 0). The header flit then waits for the payload's first
        word, which it takes; throughput stays one flit per cycle.
    head_types_only : bool
        Every message is of a type ``head`` (a mapping) lists: when they all carry the same
        count, the sender need not tell types apart (no payload passes unshifted), which is
        smaller. A message of another type would be framed with that count too.
    prefix_bytes : int
        The first ``prefix_bytes`` of every payload come in the descriptor's ``prefix``
        (byte 0 in its low bits), the rest on ``i_data``: a transmit layer's protocol header,
        put in the header flit's head lanes with no realignment of its own. It needs one head
        count for every message (above), larger than ``prefix_bytes``. ``payload_bytes``
        counts the prefix too; ``i_data`` carries the bytes after it, so nothing for a message
        of the prefix alone (with ``empty_packets``, its empty packet).
    prefix_only : bool
        Every payload is its prefix (``payload_bytes <= prefix_bytes``; the head count may then
        equal it): each message is its header and metadata flits, the prefix in the head
        lanes, and ``i_data`` is never read. A reply made whole from registers (ARP's).
    clean_tail : bool
        ``i_data`` carries exactly ``payload_bytes`` per message (less the prefix), its lanes
        past each packet's last byte zero, as a :class:`MessageReceiver`'s, a
        :class:`~apiary.stream.realign.StreamStrip`'s or a
        :class:`~apiary.stream.realign.StreamInsert`'s output does: the sender does not zero
        them again, which saves a multiplexer per bit of the header flit's head lanes and of
        the payload flits. A payload that does not keep to this may then leave its bytes past
        ``payload_bytes`` in the final flit (counted in ``length_errors`` if it runs long).
    length_bits : int or None
        Bits of ``payload_bytes`` the sender counts in (:func:`length_bits`): a descriptor's
        bits above them are neither sent nor counted, so its length must be below
        ``2 ** length_bits``. The header field's width by default.
    pre_split : bool
        With one head count ``k`` for every message: ``i_data`` carries each message's payload
        already split, as a :class:`~apiary.stream.realign.StreamStrip` with ``head=k`` sends
        it: a head word holding the first ``k`` bytes in its top ``k`` lanes (fewer, ``last``,
        if the payload is that short), then the rest from lane 0. The header flit takes the
        head word (and waits for it) and the payload flits are the words after it, with no
        realignment here. Every message, even one of no payload, has its head word. A head word
        that ends its packet where ``payload_bytes`` says more gives zero payload flits, and
        counts in ``length_errors``.

    Members
    -------
    i_hdr : In(stream.Signature(MessageSender.descriptor_layout(width, meta_words)))
        One descriptor per message.
    i_data : In(payload_signature(width))
        Payload words of messages with ``payload_bytes > 0``, in order.
    o : Out(flit_signature(width))
        The messages.
    length_errors : Out(32)
        Messages whose payload stream length disagreed with ``payload_bytes``.

    Raises
    ------
    ValueError
        If the width is not supported or ``meta_words`` is out of range.
    """

    @staticmethod
    def descriptor_layout(width: int, meta_words: int = 0, meta_bits: int | None = None,
                          short_meta: bool = False, prefix_bytes: int = 0) -> data.StructLayout:
        """The descriptor's layout: :data:`DESCRIPTOR_FIELDS` at their header widths, then
        ``meta`` (``meta_words * width`` bits, or ``meta_bits``; see :func:`meta_plan`) if
        there is metadata, with ``short_meta`` ``meta_flits``, and with ``prefix_bytes``
        ``prefix``."""
        hdr = noc_header(width)
        fields = {name: unsigned(hdr.width(name)) for name in DESCRIPTOR_FIELDS}
        flits, _, bits = meta_plan(width, meta_words, meta_bits)
        if bits:
            fields["meta"] = unsigned(bits)
        if short_meta:
            fields["meta_flits"] = range(flits + 1)
        if prefix_bytes:
            fields["prefix"] = unsigned(8 * prefix_bytes)
        return data.StructLayout(fields)

    def __init__(self, width: int, meta_words: int = 0, *, meta_bits: int | None = None,
                 empty_packets: bool = False, short_meta: bool = False,
                 head: "int | Mapping[int, int]" = 0, head_types_only: bool = False,
                 prefix_bytes: int = 0, prefix_only: bool = False, clean_tail: bool = False,
                 length_bits: int | None = None, pre_split: bool = False) -> None:
        self._width = check_width(width)
        self._meta_words, self._inline, self._meta_bits = meta_plan(width, meta_words, meta_bits)
        self._empty_packets = bool(empty_packets)
        self._short_meta = bool(short_meta)
        self._heads = _check_head(width, head, self._meta_words, self._inline, head_types_only)
        self._length_bits = length_bits or noc_header(width).width("payload_bytes")
        self._meta_args = (meta_words, meta_bits)
        self._head = head
        self._head_types_only = bool(head_types_only)
        self._prefix = prefix_bytes
        self._prefix_only = bool(prefix_only)
        self._clean_tail = bool(clean_tail)
        if prefix_bytes and not (isinstance(prefix_bytes, int) and None in self._heads
                                 and 0 < prefix_bytes <= self._heads[None] - (not prefix_only)):
            raise ValueError(f"a prefix of {prefix_bytes!r} bytes needs one head count for "
                             f"every message, {'at least' if prefix_only else 'larger than'} "
                             f"it; head is {head!r}")
        if prefix_only and not prefix_bytes:
            raise ValueError("prefix_only needs prefix_bytes")
        self._pre_split = bool(pre_split)
        if pre_split and (prefix_bytes or None not in self._heads):
            raise ValueError(f"pre_split needs one head count for every message and no prefix; "
                             f"head is {head!r}, prefix_bytes {prefix_bytes!r}")
        super().__init__({
            "i_hdr": In(stream.Signature(self.descriptor_layout(width, meta_words, meta_bits,
                                                                short_meta, prefix_bytes))),
            "i_data": In(payload_signature(width)),
            "o": Out(flit_signature(width)),
            "length_errors": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width = self._width
        # The framer is made before the flits: Yosys maps the smaller netlist in this order.
        framer = None
        if not self._prefix_only:             # a prefix-only sender has no payload flits
            # With head bytes the sender zeroes the lanes past the payload in its own output,
            # after the realignment, not in the framer's words before it; with clean_tail
            # nowhere.
            # (A pre-split payload's words pass as they are: the framer zeroes their tails.)
            realigned = bool(self._heads) and not self._pre_split
            m.submodules.framer = framer = PayloadFramer(width, early=realigned,
                                                         zero_tail=not (realigned
                                                                        or self._clean_tail),
                                                         length_bits=self._length_bits)
        meta_words, meta_bits = self._meta_args
        m.submodules.flits = flits = MessageFlits(width, meta_words, meta_bits=meta_bits,
                                                  short_meta=self._short_meta, head=self._head,
                                                  head_types_only=self._head_types_only,
                                                  length_bits=self._length_bits)
        # Which header/metadata flit is on `o`.
        index = Signal(range(header_flits(width) + self._meta_words), name="index")
        desc = self.i_hdr.payload.as_value()
        if len(desc) != len(flits.desc.as_value()):     # the prefix rides past the header
            desc = desc[:len(flits.desc.as_value())]
        m.d.comb += [flits.desc.eq(desc), flits.index.eq(index)]
        if framer is None:
            self._send_prefix(m, flits, index)
            return m
        errors = framer.error
        if self._pre_split:
            errors = self._send_pre_split(m, framer, flits, index)
        elif self._heads:
            self._send_with_head(m, framer, flits, index)
        else:
            self._send(m, framer, flits, index)
        count(m, self.length_errors, by=errors)
        return m

    def _links(self, framer: PayloadFramer) -> tuple[list[Any], list[Any]]:
        """``(feed, passing)``: the statements that pass ``i_data`` to ``framer``, and those
        that also pass its words on to ``o``."""
        feed = [
            framer.i.valid.eq(self.i_data.valid),
            framer.i.payload.data.eq(self.i_data.payload.data),
            framer.i.payload.last.eq(self.i_data.payload.last),
            self.i_data.ready.eq(framer.i.ready),
        ]
        passing = [
            *feed,
            self.o.valid.eq(framer.o.valid),
            self.o.payload.data.eq(framer.o.payload.data),
            self.o.payload.last.eq(framer.o.payload.last),
            framer.o.ready.eq(self.o.ready),
        ]
        return feed, passing

    def _discard(self, m: Module, discard: Signal) -> None:
        """While ``discard``: take and drop ``i_data``'s words up to its ``last`` (the packet
        of a header-only message, with ``empty_packets``)."""
        m.d.comb += self.i_data.ready.eq(1)
        with m.If(self.i_data.valid & self.i_data.payload.last):
            m.d.sync += discard.eq(0)

    def _send(self, m: Module, framer: PayloadFramer, flits: "MessageFlits",
              index: Signal) -> None:
        """Without head payload bytes: the header and metadata flits (``index`` counting
        them), then the framer's payload words."""
        _, passing = self._links(framer)
        final, words = flits.final, flits.words
        sent_flit = self.o.valid & self.o.ready
        discard = Signal()          # taking the packet of a header-only message (empty_packets)
        with m.If(framer.busy):
            m.d.comb += passing
        with m.Elif(discard):
            self._discard(m, discard)
        with m.Else():
            m.d.comb += [
                self.o.valid.eq(self.i_hdr.valid),
                self.o.payload.data.eq(flits.flit),
                self.o.payload.last.eq(final & (words == 0)),
                self.i_hdr.ready.eq(self.o.ready & final),
                framer.load_bytes.eq(self.i_hdr.payload.payload_bytes),
            ]
            with m.If(sent_flit):
                m.d.sync += index.eq(Mux(final, 0, index + 1))
                m.d.comb += framer.load.eq(final & (words != 0))
                if self._empty_packets:
                    m.d.sync += discard.eq(final & (words == 0))

    def _send_prefix(self, m: Module, flits: "MessageFlits", index: Signal) -> None:
        """With ``prefix_only``: the header and metadata flits, the descriptor's prefix in the
        header flit's head lanes (zeroed past ``payload_bytes`` unless ``clean_tail``)."""
        desc = self.i_hdr.payload
        spare, nh = spare_bytes(self._width), header_flits(self._width)
        prefix = desc.prefix
        if not self._clean_tail:
            prefix = prefix & lane_mask(m, self._prefix, desc.payload_bytes)
        final = flits.final
        m.d.comb += [
            self.o.valid.eq(self.i_hdr.valid),
            self.o.payload.data.eq(flits.flit | Mux(
                index == nh - 1, Cat(Const(0, 8 * (spare - self._heads[None])), prefix), 0)),
            self.o.payload.last.eq(final),
            self.i_hdr.ready.eq(self.o.ready & final),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += index.eq(Mux(final, 0, index + 1))

    def _send_pre_split(self, m: Module, framer: PayloadFramer, flits: "MessageFlits",
                        index: Signal) -> Value:
        """With ``pre_split``: the header flit takes the head word's top `k` lanes into its
        head lanes (wiring: both are fixed), then the framer passes the words after it.
        Returns the length errors' pulse."""
        nb, k = self._width // 8, self._heads[None]
        spare = spare_bytes(self._width)
        desc, data_ = self.i_hdr.payload, self.i_data
        _, passing = self._links(framer)
        final, out_words = flits.final, flits.out_words
        sent_flit = self.o.valid & self.o.ready
        head = data_.payload.data[8 * (nb - k):]
        if not self._clean_tail:
            head = head & lane_mask(m, k, desc.payload_bytes)
        region = Cat(Const(0, 8 * (spare - k)), head)
        discard = Signal()          # the head word's packet runs on past a header-only message
        ended = Signal()            # the packet ended in its head word: the framer pads
        with m.If(framer.busy):
            m.d.comb += passing
            with m.If(ended):
                m.d.comb += [framer.i.valid.eq(1), framer.i.payload.last.eq(1),
                             framer.i.payload.data.eq(0), data_.ready.eq(0)]
        with m.Elif(discard):
            self._discard(m, discard)
        with m.Else():
            go = ~final | data_.valid
            m.d.comb += [
                self.o.valid.eq(self.i_hdr.valid & go),
                self.o.payload.data.eq(flits.flit | Mux(final, region, 0)),
                self.o.payload.last.eq(final & (out_words == 0)),
                self.i_hdr.ready.eq(self.o.ready & final & go),
                data_.ready.eq(self.i_hdr.valid & self.o.ready & final),
                framer.load_bytes.eq(Mux(desc.payload_bytes > k, desc.payload_bytes - k, 0)),
            ]
            with m.If(sent_flit):
                m.d.sync += index.eq(Mux(final, 0, index + 1))
                with m.If(final):
                    m.d.comb += framer.load.eq(out_words != 0)
                    m.d.sync += [discard.eq((out_words == 0) & ~data_.payload.last),
                                 ended.eq(data_.payload.last)]
        # An early end is counted once, when the head word is taken, not by the framer's pad.
        return (framer.error & ~ended) | (framer.load & data_.payload.last)

    def _send_with_head(self, m: Module, framer: PayloadFramer, flits: "MessageFlits",
                        index: Signal) -> None:
        """With head payload bytes: the header flit takes the payload's first word: its first
        `k` bytes ride there (head_lanes), the rest waits in `carry` to start the first payload
        flit, which each later word completes; the last payload flit may be `carry` alone."""
        width = self._width
        nb = width // 8
        desc = self.i_hdr.payload
        feed, passing = self._links(framer)
        final, out_words, k = flits.final, flits.out_words, flits.head
        ks = _head_counts(self._heads)
        sent_flit = self.o.valid & self.o.ready
        discard = Signal()          # taking the packet of a header-only message (empty_packets)
        spare = spare_bytes(width)
        word = framer.o.payload.data
        # With a prefix, `i_data` holds the payload after it: its words shift by the head
        # bytes it leaves them (`ks` less the prefix), and the header flit takes a word only
        # if there are any.
        h = self._prefix
        data_bytes: Any = desc.payload_bytes
        words = flits.words
        if h:
            data_bytes = Signal(self._length_bits, name="data_bytes")
            m.d.comb += data_bytes.eq(Mux(desc.payload_bytes > h, desc.payload_bytes - h, 0))
            words, _ = payload_words(data_bytes, width)
        head_now = Signal()
        m.d.comb += head_now.eq((k != 0) & (words != 0))

        def payload_lanes(value: Any, nbytes: Any) -> Any:
            # The framer passes its words whole: each output zeroes the lanes past the
            # payload, unless they come zero (clean_tail).
            return value if self._clean_tail else value & lane_mask(m, len(value) // 8, nbytes)

        region = _pick(m, k, ks, lambda a: Cat(
            Const(0, 8 * (spare - a + h)), payload_lanes(word[:8 * (a - h)], data_bytes)))
        prefix = Const(0, 0)
        if h:
            prefix = Cat(Const(0, 8 * (spare - ks[0])), desc.prefix)
        # Only a message with head bytes reaches the payload flits' realignment: it shifts by
        # one of the non-zero counts, and the carry holds what a word has past them.
        shifts = [a - h for a in ks if a]
        ks = [a - h for a in ks]
        k_held = Signal.like(k, name="k_held")
        carry = Signal(8 * (nb - shifts[0]))
        left = Signal(len(out_words), name="left")  # payload flits still to send
        done = Signal()                             # the payload's last word is taken
        heading = Signal()                          # sending the payload flits
        last_bytes = Signal(range(nb + 1))          # bytes of the last payload flit
        start = Signal()                            # a headless payload starts (k = 0)
        start_bytes = Signal(self._length_bits)
        # What a word leaves for the next payload flit: the first one's (by `k`), or a later
        # one's (by the count held).
        rest_of = _pick(m, Mux(heading, k_held, k), shifts, lambda a: word[8 * a:])

        with m.If(heading):
            # Once the last word is taken the framer shows zeros: the flit is the carry alone.
            joined = _pick(m, k_held, shifts, lambda a: Cat(Const(0, 8 * (nb - a)), word))
            m.d.comb += [
                *feed,
                self.o.valid.eq(done | framer.o.valid),
                self.o.payload.data.eq(payload_lanes(carry | joined[:width],
                                                     Mux(left == 1, last_bytes, nb))),
                self.o.payload.last.eq(left == 1),
                framer.o.ready.eq(self.o.ready & ~done),
            ]
            with m.If(sent_flit):
                m.d.sync += left.eq(left - 1)
                with m.If(left == 1):
                    m.d.sync += heading.eq(0)
                with m.If(~done):
                    m.d.sync += [carry.eq(rest_of), done.eq(framer.o.payload.last)]
        if 0 in ks:         # some types carry no head bytes: their payload passes as it is
            with m.Elif(framer.busy | start):
                m.d.comb += [*passing, framer.load.eq(start),
                             framer.load_bytes.eq(start_bytes),
                             self.o.payload.data.eq(
                                 payload_lanes(word, framer.o.payload.nbytes))]
                with m.If(sent_flit):
                    m.d.sync += start.eq(0)
        with m.Elif(discard):
            self._discard(m, discard)
        with m.Else():
            taking = final & head_now
            tail_out = (desc.payload_bytes - k)[:nb.bit_length() - 1]
            m.d.comb += [
                self.o.valid.eq(self.i_hdr.valid & (~taking | framer.o.valid)),
                self.o.payload.data.eq(flits.flit | Mux(taking, region, 0) | prefix),
                self.o.payload.last.eq(final & (out_words == 0)),
                self.i_hdr.ready.eq(self.o.ready & final & (~taking | framer.o.valid)),
                framer.load_bytes.eq(data_bytes),
            ]
            with m.If(taking):
                m.d.comb += [*feed, framer.load.eq(self.i_hdr.valid),
                             framer.o.ready.eq(self.o.ready)]
            with m.If(sent_flit):
                m.d.sync += index.eq(Mux(final, 0, index + 1))
                with m.If(taking):
                    m.d.sync += [
                        heading.eq(out_words != 0), left.eq(out_words), k_held.eq(k),
                        last_bytes.eq(Mux(tail_out == 0, nb, tail_out)),
                        carry.eq(rest_of),
                        done.eq(framer.o.payload.last),
                    ]
                with m.Else():
                    m.d.sync += [start.eq(final & (words != 0)),
                                 start_bytes.eq(desc.payload_bytes)]
                if self._empty_packets:
                    m.d.sync += discard.eq(final & (words == 0))


class MessageFlits(wiring.Component):
    """The header and metadata flits of a :class:`MessageSender`'s message, built from its
    descriptor; one of them at a time, by ``index``.

    Combinational: ``flit`` is flit ``index`` of the message's header and metadata flits:
    the NoC header (flit 0 holding its top bits) with the descriptor's
    :data:`DESCRIPTOR_FIELDS`, ``msg_len`` and ``metadata_flits`` computed and every other
    field zero, inline metadata (:func:`meta_plan`) in the header flit's low bits below the
    head payload bytes' lanes (which stay zero here), then the metadata flits (word 0 first).
    ``final`` is high on the last of them: flit ``header_flits(width) - 1 + meta_words``, or
    with ``short_meta`` the descriptor's ``meta_flits``. ``words`` is the number of words
    ``payload_bytes`` fills, ``out_words`` the payload flits the message carries (``words``
    less the head bytes', with ``head``), ``head`` the message's head payload bytes by its
    ``msg_type`` (only with ``head``).

    Parameters
    ----------
    width, meta_words, meta_bits, short_meta, head, head_types_only, length_bits
        As for :class:`MessageSender`.

    Members
    -------
    desc : In(MessageSender.descriptor_layout(width, meta_words, meta_bits, short_meta))
        The descriptor.
    index : In(range(header_flits(width) + meta_words))
        Which flit to show.
    flit : Out(width)
        That flit.
    final : Out(1)
        It is the message's last header or metadata flit.
    words, out_words : Out(unsigned)
        Payload words, payload flits.
    head : Out(range(max_head + 1))
        Head payload bytes (only with ``head``).
    """

    def __init__(self, width: int, meta_words: int = 0, *, meta_bits: int | None = None,
                 short_meta: bool = False, head: "int | Mapping[int, int]" = 0,
                 head_types_only: bool = False, length_bits: int | None = None) -> None:
        self._width = check_width(width)
        self._meta_words, self._inline, self._meta_bits = meta_plan(width, meta_words, meta_bits)
        self._short_meta = bool(short_meta)
        self._heads = _check_head(width, head, self._meta_words, self._inline, head_types_only)
        self._length_bits = length_bits or noc_header(width).width("payload_bytes")
        payload_bytes = Signal(self._length_bits)
        words_bits = len(Value.cast(payload_words(payload_bytes, width)[0]))
        members = {
            "desc": In(MessageSender.descriptor_layout(width, meta_words, meta_bits,
                                                       short_meta)),
            "index": In(range(header_flits(width) + self._meta_words)),
            "flit": Out(width),
            "final": Out(1),
            "words": Out(words_bits),
            "out_words": Out(words_bits),
        }
        if self._heads:
            members["head"] = Out(range(max(_head_counts(self._heads)) + 1))
        super().__init__(members)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width, meta_words = self._width, self._meta_words
        nh = header_flits(width)
        heads = self._heads
        desc = self.desc
        # Metadata flits of this message: all of them, or with short_meta the descriptor's.
        sent = desc.meta_flits if self._short_meta else meta_words
        count = Signal(range(nh + meta_words + 1))  # flits built from the descriptor
        m.d.comb += count.eq(nh + sent)
        payload_bytes = desc.payload_bytes[:self._length_bits]
        words, _ = payload_words(payload_bytes, width)
        m.d.comb += self.words.eq(words)
        if heads:
            k, ks, rest = _head_split(m, heads, desc.msg_type, payload_bytes)
            m.d.comb += [self.head.eq(k), self.out_words.eq(payload_words(rest, width)[0])]
        else:
            m.d.comb += self.out_words.eq(self.words)
        header = Signal(noc_header(width).layout())
        for name in DESCRIPTOR_FIELDS:
            m.d.comb += getattr(header, name).eq(getattr(desc, name))
        m.d.comb += [
            header.payload_bytes.eq(payload_bytes),
            header.msg_len.eq(nh - 1 + sent + self.out_words),
            header.metadata_flits.eq(sent),
        ]
        if self._inline:
            inline_meta = desc.meta
            if heads:       # the lanes a type's head bytes take carry none of its metadata
                inline_meta = desc.meta & _below_head(m, width, k, ks)
            m.d.comb += header.as_value()[:self._inline].eq(inline_meta)
        raw = header.as_value()
        flits = [raw[(nh - 1 - j) * width:(nh - j) * width] for j in range(nh)]
        if meta_words:
            meta = Cat(desc.meta, Const(0, meta_words * width - self._meta_bits))
            flits += [meta[j * width:(j + 1) * width] for j in range(meta_words)]

        with m.Switch(self.index):
            for j, value in enumerate(flits):
                with m.Case(j):
                    m.d.comb += self.flit.eq(value)
        m.d.comb += self.final.eq(self.index == count - 1)
        return m


def _restore_head(m: Module, width: int, ks: list[int], k: Any, head: Any, load: Any,
                  alone: Any, length: Any, src: Any, o: Any, at_once: bool = False) -> Any:
    """Put a message's head payload bytes back in front of its payload flits' words: ``src``
    (the framed flits) to ``o``. ``load`` takes ``head`` (the header flit's ``k`` head bytes,
    lanes past the payload zero) into the carry; each word then leaves as the carry and its
    first bytes (a fixed shift by each of ``ks``), its last ``k`` bytes the next carry, and a
    last word that overflows is followed by the carry alone (one more word). ``alone``: the
    packet is the head bytes only (``length`` of them), sent the cycle after ``load``, or with
    ``at_once`` in the cycle of ``load`` if ``o`` is ready then. Combinational from ``src`` to
    ``o``; returns the condition a next ``load`` waits on (a flush word not yet taken)."""
    nb = width // 8
    carry = Signal(8 * max(ks), name="carry")
    k_held = Signal.like(k, name="k_held")
    flushing = Signal()                     # `o` shows the carry alone
    flush_bytes = Signal(range(nb + 1))
    total = Signal(range(2 * nb + 1))
    word = src.payload.data
    m.d.comb += total.eq(k_held + src.payload.nbytes)
    ends = src.payload.last & (total <= nb)
    if at_once:
        now = Signal()                      # a packet of head bytes alone, offered with `load`
        m.d.comb += now.eq(load & alone & ~flushing)
    with m.If(flushing):
        m.d.comb += [o.valid.eq(1), o.payload.data.eq(carry), o.payload.last.eq(1),
                     o.payload.nbytes.eq(flush_bytes)]
        with m.If(o.ready):
            m.d.sync += flushing.eq(0)
    if at_once:
        with m.Elif(now):
            m.d.comb += [o.valid.eq(1), o.payload.data.eq(head), o.payload.last.eq(1),
                         o.payload.nbytes.eq(length)]
    with m.Else():
        joined = _pick(m, k_held, ks, lambda a: Cat(Const(0, 8 * a), word)[:width])
        m.d.comb += [
            o.valid.eq(src.valid), src.ready.eq(o.ready),
            o.payload.data.eq(carry | joined), o.payload.last.eq(ends),
            o.payload.nbytes.eq(Mux(ends, total, nb)),
        ]
        with m.If(src.valid & src.ready):
            m.d.sync += carry.eq(_pick(m, k_held, ks, lambda a: word[8 * (nb - a):]))
            with m.If(src.payload.last & ~ends):
                m.d.sync += [flushing.eq(1), flush_bytes.eq(total - nb)]
    with m.If(load):
        m.d.sync += [carry.eq(head), k_held.eq(k)]
        with m.If(alone & ~(now & o.ready) if at_once else alone):
            m.d.sync += [flushing.eq(1), flush_bytes.eq(length)]
    return flushing & ~o.ready                  # the carry is free once its flush word leaves


class MessageReceiver(wiring.Component):
    """Split NoC messages into a header transfer and a payload byte stream.

    For each message on ``i`` the receiver makes one transfer on ``o_hdr`` (every NoC header field
    plus ``meta``, the ``meta_words`` metadata flits with the first in the least significant
    bits), then, if ``payload_bytes > 0``, ``ceil(payload_bytes / (width // 8))`` words on
    ``o_data`` with ``nbytes`` restored from ``payload_bytes``, ``last`` on the final one, and
    byte lanes past ``nbytes`` zeroed. Header-only messages (``payload_bytes == 0``) give an
    ``o_hdr`` transfer only. ``o_hdr`` is taken before the message's first payload word appears.

    Latency: 0 cycles from the last header/metadata flit on ``i`` to ``o_hdr`` (earlier header
    flits are registered, the last one passes combinationally), and 0 cycles from a payload flit
    to ``o_data`` (combinational). Throughput: one flit per cycle; back-to-back messages without
    idle cycles.

    Errors, each counting once per message in ``errors``:

    * The message ends before its header and metadata are complete, its header's
      ``metadata_flits`` is not ``meta_words`` (with ``short_meta``: is more than
      ``meta_words``), or it ends on its last metadata flit while
      ``payload_bytes > 0``: the whole message is dropped (no ``o_hdr``, no ``o_data``).
    * It has fewer payload flits than ``payload_bytes`` calls for: ``o_data`` is completed with
      zero words, so it always carries exactly ``payload_bytes`` bytes.
    * It has more flits than ``payload_bytes`` calls for (including a header-only message with
      payload flits): ``o_data`` ends where ``payload_bytes`` says and the extra flits are
      discarded.

    ``msg_len`` is not checked: links and routers frame messages by ``last``.

    With ``length_bits`` (:func:`length_bits`) lengths are counted in that many bits: a
    message whose ``payload_bytes`` needs more is dropped whole (no ``o_hdr``) and counted in
    ``errors``, and ``o_hdr``'s ``payload_bytes`` bits above them are zero.

    With ``empty_packets=True`` a header-only message also gives a packet on ``o_data``: one word
    with ``nbytes == 0`` and ``last``, in the cycle after ``o_hdr`` (the next message waits for
    it), so that every message has exactly one packet on ``o_data``.

    Parameters
    ----------
    width : int
        Flit width in bits (64, 128, 256 or 512).
    meta_words : int
        Metadata flits every message must carry, 0 to 255.
    meta_bits : int or None
        Instead of ``meta_words``: the metadata's size in bits, inline in the header flit when
        it fits there (:func:`meta_plan`), as :class:`MessageSender` sends it.
    empty_packets : bool
        Header-only messages give an empty packet on ``o_data`` (see above).
    short_meta : bool
        Take messages with fewer metadata flits than ``meta_words`` too (not only exactly
        that many): ``meta``'s words past those the message carries read as zero. For a
        format whose messages carry only its first fields (a prefix, in the low bits). Costs
        one more stored flit and a multiplexer per header/metadata flit.
    head : int or mapping of int to int
        Head payload bytes, as :class:`MessageSender` sends them: the header flit's bytes come
        back in front of the payload flits' (a :class:`~apiary.stream.realign.StreamInsert`;
        a message whose payload fits in its header flit gives its packet the cycle after
        ``o_hdr``), and ``meta`` holds only the lanes below them. Throughput stays one flit
        per cycle; a payload then ends with a flush word when its last flit's bytes and the
        head bytes overflow a word.
    packet_with_header : bool
        With ``head``: a message whose payload fits in its header flit gives its packet on
        ``o_data`` in the cycle its ``o_hdr`` is taken, if ``o_data`` is ready then (otherwise
        the cycle after, as without), a cycle earlier: ``o_hdr`` is then taken *no later
        than* the first payload word, and ``o_data.valid`` depends on ``o_hdr.ready``, so
        ``o_hdr.ready`` must not depend on ``o_data.valid``.
    length_bits : int or None
        Bits the payload length is counted in (above); the header field's width by default.

    Members
    -------
    i : In(flit_signature(width))
        The messages.
    o_hdr : Out(stream.Signature(MessageReceiver.header_layout(width, meta_words)))
        One transfer per message delivered.
    o_data : Out(payload_signature(width))
        The payload bytes of messages with ``payload_bytes > 0``.
    errors : Out(32)
        Messages dropped or reframed, as listed above.

    Raises
    ------
    ValueError
        If the width is not supported or ``meta_words`` is out of range.
    """

    @staticmethod
    def header_layout(width: int, meta_words: int = 0,
                      meta_bits: int | None = None) -> data.StructLayout:
        """Every field of ``noc_header(width)`` at its place in the header, then ``meta``:
        ``meta_words * width`` bits (or ``meta_bits``) above the header, or with inline
        metadata (:func:`meta_plan`) the header's ``meta_bits`` low bits."""
        hdr = noc_header(width)
        fields = {n: data.Field(unsigned(hdr.width(n)), hdr.offset(n)) for n in hdr.names}
        flits, inline, bits = meta_plan(width, meta_words, meta_bits)
        if inline:
            fields["meta"] = data.Field(unsigned(inline), 0)
        elif bits:
            fields["meta"] = data.Field(unsigned(bits), hdr.size)
        return data.FlexibleLayout(hdr.size + flits * width, fields)

    def __init__(self, width: int, meta_words: int = 0, *, meta_bits: int | None = None,
                 empty_packets: bool = False, short_meta: bool = False,
                 head: "int | Mapping[int, int]" = 0, length_bits: int | None = None,
                 packet_with_header: bool = False) -> None:
        self._width = check_width(width)
        self._length_bits = length_bits or noc_header(width).width("payload_bytes")
        self._packet_with_header = bool(packet_with_header)
        self._meta_words, self._inline, _ = meta_plan(width, meta_words, meta_bits)
        self._empty_packets = bool(empty_packets)
        self._short_meta = bool(short_meta)
        self._heads = _check_head(width, head, self._meta_words, self._inline)
        super().__init__({
            "i": In(flit_signature(width)),
            "o_hdr": Out(stream.Signature(self.header_layout(width, meta_words, meta_bits))),
            "o_data": Out(payload_signature(width)),
            "errors": Out(32),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width, meta_words = self._width, self._meta_words
        nh = header_flits(width)
        most = nh + meta_words                      # header and metadata flits, at most
        m.submodules.framer = framer = PayloadFramer(width, length_bits=self._length_bits)
        index = Signal(range(most), name="index")   # which header/metadata flit is on `i`

        if self._short_meta:
            # The last header/metadata flit may be any of them: each position shows the input
            # while it is on `i`, and metadata flits the message does not carry read as zero.
            stored = [Signal(width, name=f"flit{j}") for j in range(most)]
            flits = [Mux(index == j, self.i.payload.data, reg) for j, reg in enumerate(stored)]
        else:
            stored = [Signal(width, name=f"flit{j}") for j in range(most - 1)]
            flits = [*stored, self.i.payload.data]  # the last one straight from the input
        hdr = self.o_hdr.payload
        raw_hdr = Cat(*reversed(flits[:nh]))
        m.d.comb += hdr.as_value()[:len(raw_hdr)].eq(raw_hdr)
        # A length beyond length_bits rejects the message; the bits above read as zero.
        too_long: Any = Const(0)
        if self._length_bits < len(hdr.payload_bytes):
            at = noc_header(width).offset("payload_bytes")
            too_long = raw_hdr[at + self._length_bits:at + len(hdr.payload_bytes)].any()
            m.d.comb += hdr.payload_bytes[self._length_bits:].eq(0)
        received = hdr.metadata_flits
        for j, word in enumerate(flits[nh:]):
            if self._short_meta:
                word = Mux(received > j, word, 0)
            m.d.comb += hdr.as_value()[len(raw_hdr) + j * width:
                                       len(raw_hdr) + (j + 1) * width].eq(word)
        if self._short_meta:
            # The count is read where it arrives (the last header flit, on the input or stored),
            # not through the multiplexers above, which would put them on the control path.
            at, bits = noc_header(width).offset("metadata_flits"), len(received)
            assert at + bits <= width, "metadata_flits is in the last header flit"
            count_now = self.i.payload.data[at:at + bits]
            count_stored = stored[nh - 1][at:at + bits]
            at_last = Mux(index == nh - 1, count_now == 0,
                          (index == nh - 1 + count_stored) & (count_stored <= meta_words))
        else:
            at_last = index == most - 1
        drop = Signal()                             # discarding the rest of a bad message
        empty = Signal()                            # an empty packet is on `o_data`
        error = Signal()
        i = self.i
        taken = i.valid & i.ready

        out = self.o_data                           # where payload words go
        rest: Any = hdr.payload_bytes               # bytes in payload flits
        inject = Const(0)                           # its packet is the head bytes alone
        hold = Const(0)                             # the next header waits
        if self._heads:
            spare = spare_bytes(width)
            k, ks, rest = _head_split(m, self._heads, hdr.msg_type, hdr.payload_bytes)
            last_flit = flits[nh - 1]
            m.d.comb += hdr.as_value()[:self._inline].eq(
                last_flit[:self._inline] & _below_head(m, width, k, ks))
            head = _pick(m, k, ks, lambda a: last_flit[8 * (spare - a):8 * spare])
            inject = (hdr.payload_bytes != 0) & (rest == 0)
            if self._empty_packets:
                inject = inject | (hdr.payload_bytes == 0)
            out = payload_signature(width).create()
            hold = _restore_head(m, width, ks, k,
                                 head & lane_mask(m, max(ks), hdr.payload_bytes),
                                 self.o_hdr.valid & self.o_hdr.ready, inject,
                                 hdr.payload_bytes, out, self.o_data,
                                 at_once=self._packet_with_header)
        words, _ = payload_words(rest, width)
        m.d.comb += framer.load_bytes.eq(rest)

        with m.If(empty):
            m.d.comb += [out.valid.eq(1), out.payload.last.eq(1)]
            with m.If(out.ready):
                m.d.sync += empty.eq(0)
        with m.Elif(framer.busy):
            m.d.comb += [
                framer.i.valid.eq(i.valid),
                framer.i.payload.eq(i.payload),
                i.ready.eq(framer.i.ready),
                out.valid.eq(framer.o.valid),
                out.payload.eq(framer.o.payload),
                framer.o.ready.eq(out.ready),
            ]
        with m.Elif(drop):
            m.d.comb += i.ready.eq(1)
            with m.If(taken & i.payload.last):
                m.d.sync += drop.eq(0)
        with m.Elif(~at_last & (index != most - 1)):
            m.d.comb += i.ready.eq(1)
            with m.If(taken):
                with m.Switch(index):
                    for j, reg in enumerate(stored):
                        with m.Case(j):
                            m.d.sync += reg.eq(i.payload.data)
                with m.If(i.payload.last):      # truncated header or metadata
                    m.d.comb += error.eq(1)
                    m.d.sync += index.eq(0)
                with m.Else():
                    m.d.sync += index.eq(index + 1)
        with m.Else():
            if self._short_meta:
                reject = (received > meta_words) | (i.payload.last & (words != 0)) | too_long
            else:
                reject = (received != meta_words) | (i.payload.last & (words != 0)) | too_long
            with m.If(reject):
                m.d.comb += i.ready.eq(1)
                with m.If(taken):
                    m.d.comb += error.eq(1)
                    m.d.sync += [index.eq(0), drop.eq(~i.payload.last)]
            with m.Else():
                m.d.comb += [
                    self.o_hdr.valid.eq(i.valid & ~hold),
                    i.ready.eq(self.o_hdr.ready & ~hold),
                ]
                with m.If(taken):
                    m.d.sync += index.eq(0)
                    m.d.comb += framer.load.eq(words != 0)
                    if self._empty_packets and not self._heads:
                        m.d.sync += empty.eq((words == 0) & (hdr.payload_bytes == 0))
                    with m.If((words == 0) & ~i.payload.last):  # header-only, but more flits
                        m.d.comb += error.eq(1)
                        m.d.sync += drop.eq(1)

        m.d.sync += self.errors.eq(self.errors + error + framer.error)
        return m
