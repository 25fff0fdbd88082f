"""The framework every network-function tile is written in, and its rule table.

A network function (:mod:`.nat`, :mod:`.ipip`, :mod:`.vxlan`) takes a message (an IPv4 datagram,
a UDP payload...), looks its header up in a table the control plane may change while traffic
flows, and sends it on rewritten, with bytes stripped from its front (decapsulation) or put in
front of it (encapsulation), or drops it and counts why. :class:`NfTile` is that pipeline, once;
a subclass writes :meth:`NfTile.parse` and names its drop reasons and counters::

    noc_in ─▶ receiver ─▶ PayloadPeek ─▶ [StreamStrip] ─▶ [patch] ─▶ [StreamInsert] ─▶ sender
              (hdr) ─▶ parse(head, rules) ─▶ descriptor / strip / patch / insert queues ──┘

**Atomic per packet.** The tile keeps its rules in registers (:class:`RuleTable`): the control
plane writes an entry whole in one cycle. :meth:`NfTile.parse` reads the rules combinationally
in the one cycle the packet's verdict is taken, and everything the packet needs (its descriptor,
the bytes to strip, patch or insert) is queued in that cycle. A packet therefore sees one version
of the table from its first byte to its last, never half an old rule and half a new one.

**Cost.** Latency from the message's first flit in to its first flit out is that of a protocol
receive tile: the flits up to the last byte :attr:`NfTile.head_bytes` needs, plus the
framing's few cycles; throughput one flit per cycle (see :mod:`.cost` for measured numbers).

**Counters.** One per drop reason (``drop_reasons``, counted once per packet, under the first
reason that holds), ``no_route`` (no next hop), ``forwarded``, then the subclass's own
(``kept_counters``, counted among the packets forwarded: rewritten, encapsulated, passed...).
"""

from collections.abc import Iterable, Mapping
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.hdl import unsigned
from amaranth.lib import data, stream
from amaranth.lib.wiring import connect, flipped

from apiary.noc.framing import MessageReceiver, MessageSender
from apiary.noc.nexthop import NextHopTable
from apiary.stream.checksum import ones_sum
from apiary.stream.header import Header, header_signal
from apiary.stream.peek import PayloadPeek
from apiary.stream.queue import Queue
from apiary.stream.realign import StreamInsert, StreamStrip
from apiary.stream.registers import Table
from apiary.tile import Tile
from beehive.proto.layer import LENGTH_BITS, message_overhead
from beehive.proto.messages import META_BITS, PACKET_META


__all__ = ["NfTile", "RuleTable", "UNMATCHED", "rule_values", "checksum_update",
           "py_checksum_update"]

#: What a tile does with a packet that matches no rule: send it on unchanged (counted in
#: ``passed``), or drop it (counted in ``no_rule``).
UNMATCHED = ("pass", "drop")


def rule_values(entry: Header, rules: Iterable, entries: int, what: str) -> list[int]:
    """The integer values of ``rules`` (each an ``int`` or a ``{field: value}`` mapping of
    ``entry``'s fields; a mapping without ``valid`` is valid), checked against ``entry`` and
    the table's size, padded with invalid (zero) entries to ``entries``."""
    rules = list(rules or [])
    if len(rules) > entries:
        raise ValueError(f"{what}: {len(rules)} rules do not fit a table of {entries} entries")
    values = []
    for k, rule in enumerate(rules):
        if isinstance(rule, Mapping):
            fields = dict(rule)
            if "valid" in entry.names:
                fields.setdefault("valid", 1)
            try:
                values.append(entry.pack(fields))
            except ValueError as e:
                raise ValueError(f"{what}: rule {k}: {e}") from None
        elif isinstance(rule, int) and not isinstance(rule, bool) and 0 <= rule < 1 << entry.size:
            values.append(rule)
        else:
            raise ValueError(f"{what}: rule {k} must be a mapping of the fields {entry.names} or "
                             f"an integer of {entry.size} bits, not {rule!r}")
    return values + [0] * (entries - len(values))


def checksum_update(checksum, old: list, new: list):
    """An Internet checksum after 16-bit words ``old`` of what it covers became ``new``, without
    a pass over the rest (RFC 1624, eqn. 3: ``HC' = ~(~HC + ~m + m')``), as a 16-bit value.
    Exactly what a full recomputation gives (a sum of nonzero terms is never ``0x0000``)."""
    terms = [(~checksum)[:16]] + [(~w)[:16] for w in old] + list(new)
    return (~ones_sum(*terms))[:16]


def py_checksum_update(checksum: int, old: list[int], new: list[int]) -> int:
    """:func:`checksum_update` in Python."""
    total = (~checksum & 0xFFFF) + sum(~w & 0xFFFF for w in old) + sum(new)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


class RuleTable:
    """A table of ``entries`` rules of the MSB-first :class:`~apiary.stream.header.Header`
    ``entry``, in registers, built into a module by :meth:`build`.

    The control plane's port (the tile's ``regs.<name>``, a
    :class:`~apiary.stream.registers.TableSignature`) writes an entry whole in the cycle
    ``w_valid`` is high; ``r_data`` is entry ``r_index``, combinationally (0 past the last
    entry). Each entry starts as ``rules[k]`` (see :func:`rule_values`), invalid past them.
    """

    def __init__(self, entry: Header, entries: int, rules: Iterable, description: str,
                 what: str) -> None:
        if isinstance(entries, bool) or not isinstance(entries, int) or not 1 <= entries <= 256:
            raise ValueError(f"{what}: entries must be an integer from 1 to 256, not "
                             f"{entries!r}")
        self.entry, self.entries = entry, entries
        self.initial = rule_values(entry, rules, entries, what)
        self.spec = Table(entries=entries, width=entry.size, description=description,
                          layout=entry)

    def build(self, m: Module, port) -> list[data.View]:
        """The entries' registers, written and read through ``port``, as views of ``entry``."""
        regs = [Signal(self.entry.size, init=v, name=f"rule{k}")
                for k, v in enumerate(self.initial)]
        for k, reg in enumerate(regs):
            with m.If(port.w_valid & (port.w_index == k)):
                m.d.sync += reg.eq(port.w_data)
        with m.Switch(port.r_index):
            for k, reg in enumerate(regs):
                with m.Case(k):
                    m.d.comb += port.r_data.eq(reg)
        return [data.View(self.entry.layout(), reg) for reg in regs]

    @staticmethod
    def first_match(m: Module, entries: list[data.View], hits: list, name: str = "rule"):
        """``(hit, entry)``: whether any of ``hits`` (one condition per entry) holds, and the
        first entry (lowest index) whose condition holds."""
        layout = entries[0].shape()
        chosen = Signal(layout, name=f"{name}_chosen")
        hit = Signal(name=f"{name}_hit")
        value = Const(0, layout.size)
        for e, h in reversed(list(zip(entries, hits))):
            value = Mux(h, e.as_value(), value)
        m.d.comb += [chosen.as_value().eq(value), hit.eq(Cat(*hits).any())]
        return hit, chosen


def nf_packet_layout() -> data.StructLayout:
    """What travels with each packet between the stages: length, type and metadata."""
    return data.StructLayout({"length": unsigned(LENGTH_BITS), "msg_type": unsigned(8),
                              "meta": PACKET_META.layout()})


class _NfParse:
    """What :meth:`NfTile.parse` reads (``head``, ``head_len``, ``length``, ``msg_type``,
    ``meta``, ``rules``: the table's entries) and sets (``drop``, ``key``, ``strip``,
    ``patch``, ``insert``, ``out_length``, ``set_meta``, ``count``)."""

    def __init__(self, tile, m, head, head_len, cur, rules):
        self.m, self.head, self.head_len = m, head, head_len
        self.length, self.msg_type, self.meta = cur.length, cur.msg_type, cur.meta
        self.rules = rules
        self.key = Const(0, tile.key_width)
        self.strip = 0
        self.out_length = None
        self.meta_out = {}
        self.patch_value, self.patch_len = None, 0
        self.insert_value, self.insert_len = None, 0
        self.drops, self.counts = [], []
        self._tile = tile

    def field(self, header: Header, offset: int = 0) -> data.View:
        """The head's bytes from ``offset`` on, viewed as the MSB-first ``header``."""
        return header_signal(self.m, header, self.head, offset)

    def drop(self, reason: str, condition) -> None:
        """Drop the packet under ``reason`` if ``condition`` (and no earlier reason) holds."""
        if reason not in self._tile.counter_names:
            raise ValueError(f"{type(self._tile).__name__}: drop reason {reason!r} is not one "
                             f"of its counters")
        self.drops.append((reason, condition))

    def count(self, name: str, condition) -> None:
        """Count a forwarded packet under ``name`` if ``condition`` holds."""
        self.counts.append((name, condition))

    def set_meta(self, **fields) -> None:
        self.meta_out.update(fields)

    def patch(self, value, nbytes) -> None:
        """Overwrite the first ``nbytes`` bytes (after any strip) with ``value`` (lane order)."""
        self.patch_value, self.patch_len = value, nbytes

    def insert(self, value, nbytes) -> None:
        """Put the ``nbytes`` bytes of ``value`` (lane order) in front of the packet."""
        self.insert_value, self.insert_len = value, nbytes


class NfTile(Tile):
    """Base class of the network-function tiles (see the module docstring).

    Class attributes a subclass sets: ``head_bytes`` (bytes :meth:`parse` sees), ``key_width``
    (bits of the routing key, 1 for a single next hop), ``msg_type`` (of the messages sent,
    ``None`` to keep each input message's), ``drop_reasons`` and ``kept_counters``
    (``{name: description}``), ``strip_counts`` (the byte counts it may strip: a tuple, or
    ``None`` for no strip stage), ``patch_bytes`` (most bytes it overwrites, 0 for none),
    ``insert_counts`` (the header lengths it may insert, or ``None``), ``rule_entry`` (the
    :class:`~apiary.stream.header.Header` of a table entry) and ``table_name``.

    Parameters
    ----------
    env : TileEnv
    entries : int
        Entries of the rule table (default 16).
    rules : iterable
        The entries at reset (``{field: value}`` mappings or integers; see
        :func:`rule_values`), so that a design without a control plane has its rules.
    unmatched : str
        ``"pass"`` (send a packet that matches no rule on unchanged, counting it in ``passed``)
        or ``"drop"`` (drop it, counting it in ``no_rule``).
    """

    head_bytes = 20
    key_width = 1
    msg_type = None
    drop_reasons: dict[str, str] = {}
    kept_counters: dict[str, str] = {}
    strip_counts: tuple[int, ...] | None = None
    patch_bytes = 0
    insert_counts: tuple[int, ...] | None = None
    rule_entry: Header | None = None
    table_name = "rules"
    table_description = "rules"

    def __init__(self, env=None, *, entries: int = 16, rules: Iterable = (),
                 unmatched: str = "pass") -> None:
        what = type(self).__name__
        if unmatched not in UNMATCHED:
            raise ValueError(f"{what}: unmatched must be one of {UNMATCHED}, not {unmatched!r}")
        self.unmatched = unmatched
        self.table = RuleTable(self.rule_entry, entries, rules, self.table_description, what)
        counters = dict(self.drop_reasons)
        counters.update(no_route="packets with no next hop, dropped", forwarded="packets sent on")
        counters.update(self.kept_counters)
        self.counter_names = set(counters)
        super().__init__(env, counters=counters, registers={self.table_name: self.table.spec})
        self.routes = self.env.next_hops("data")

    def parse(self, m: Module, p: _NfParse) -> None:
        """Decide from ``p.head`` and ``p.rules`` what happens to a packet (see
        :class:`_NfParse`)."""
        raise NotImplementedError

    def elaborate(self, platform):
        m = Module()
        width = self.env.width

        # -- the packets in: header (length, type, metadata) and payload -------------------
        m.submodules.receiver = rx = MessageReceiver(width, meta_bits=META_BITS,
                                                     empty_packets=True)
        connect(m, tile=flipped(self.noc_in), receiver=rx.i)
        cur = Signal(nf_packet_layout())
        cur_valid = Signal()
        m.d.comb += rx.o_hdr.ready.eq(~cur_valid)
        with m.If(rx.o_hdr.valid & ~cur_valid):
            m.d.sync += [
                cur.length.eq(rx.o_hdr.payload.payload_bytes),
                cur.msg_type.eq(rx.o_hdr.payload.msg_type),
                cur.meta.eq(rx.o_hdr.payload.meta[:PACKET_META.size]),
                cur_valid.eq(1),
            ]
        m.submodules.peek = peek = PayloadPeek(width, self.head_bytes,
                                               slack=message_overhead(width))
        connect(m, receiver=rx.o_data, peek=peek.i)

        # -- the decision -------------------------------------------------------------------
        rules = self.table.build(m, getattr(self.regs, self.table_name))
        p = _NfParse(self, m, peek.head, peek.head_len, cur, rules)
        self.parse(m, p)

        m.submodules.table = table = NextHopTable(self.routes, self.key_width)
        m.d.comb += table.key.eq(p.key)
        meta = Signal(PACKET_META.layout())
        m.d.comb += meta.eq(cur.meta)
        for name, value in p.meta_out.items():
            m.d.comb += getattr(meta, name).eq(value)

        # Per packet kept, one entry in each queue, all in the cycle of its verdict.
        max_strip = max(self.strip_counts or (0,))
        max_insert = max(self.insert_counts or (0,))
        strip_n = Signal(range(max_strip + 1))
        insert_n = Signal(range(max_insert + 1))
        m.d.comb += [strip_n.eq(p.strip), insert_n.eq(p.insert_len)]
        out_length = Signal(LENGTH_BITS)
        m.d.comb += out_length.eq(p.out_length if p.out_length is not None
                                  else cur.length - strip_n + insert_n)
        m.submodules.descriptors = descs = Queue(
            MessageSender.descriptor_layout(width, meta_bits=META_BITS))
        entries = [(descs.i, {
            "dst_x": table.dst_x, "dst_y": table.dst_y, "dst_fbits": table.dst_fbits,
            "src_x": self.env.x, "src_y": self.env.y,
            "msg_type": cur.msg_type if self.msg_type is None else self.msg_type.value,
            "payload_bytes": out_length, "meta": meta.as_value(),
        })]
        if max_strip:
            m.submodules.cuts = cuts = Queue(range(max_strip + 1))
            entries.append((cuts.i, strip_n))
        if self.patch_bytes:
            m.submodules.patches = patches = Queue({"data": unsigned(8 * self.patch_bytes),
                                                    "nbytes": range(self.patch_bytes + 1)})
            entries.append((patches.i, {"data": p.patch_value if p.patch_value is not None
                                        else 0, "nbytes": p.patch_len}))
        if max_insert:
            m.submodules.inserts = inserts = Queue({"data": unsigned(8 * max_insert),
                                                    "nbytes": range(max_insert + 1)})
            entries.append((inserts.i, {"data": p.insert_value if p.insert_value is not None
                                        else 0, "nbytes": insert_n}))

        decide = Signal()
        room = Cat(*(w.ready for w, _ in entries)).all()
        m.d.comb += [
            decide.eq(peek.head_valid & cur_valid & room),
            peek.verdict.valid.eq(decide),
        ]
        dropped = Const(0)
        for reason, condition in p.drops:
            counter = getattr(self.counters, reason)
            this = Signal(name=f"drop_{reason}")
            m.d.comb += this.eq(condition)
            with m.If(decide & ~dropped & this):
                m.d.sync += counter.eq(counter + 1)
            so_far = Signal(name=f"dropped_{reason}")
            m.d.comb += so_far.eq(dropped | this)
            dropped = so_far
        keep = Signal()
        m.d.comb += keep.eq(~dropped & table.hit)
        with m.If(decide & ~dropped & ~table.hit):
            m.d.sync += self.counters.no_route.eq(self.counters.no_route + 1)
        with m.If(decide & keep):
            m.d.sync += self.counters.forwarded.eq(self.counters.forwarded + 1)
            for name, condition in p.counts:
                counter = getattr(self.counters, name)
                with m.If(condition):
                    m.d.sync += counter.eq(counter + 1)
        with m.If(decide):
            m.d.sync += cur_valid.eq(0)
        m.d.comb += [
            peek.verdict.payload.keep.eq(keep),
            table.lookup.eq(decide & keep),
        ]
        for w, fields in entries:
            m.d.comb += w.valid.eq(decide & keep)
            if isinstance(fields, dict):
                for name, value in fields.items():
                    m.d.comb += getattr(w.payload, name).eq(value)
            else:
                m.d.comb += w.payload.eq(fields)

        # -- the packets out: strip, patch, insert, frame ------------------------------------
        words = peek.o
        if max_strip:
            counts = tuple(sorted(set(self.strip_counts) | {0}))
            m.submodules.strip = strip = StreamStrip(width, max_strip, counts=counts)
            connect(m, peek=words, strip=strip.i)
            connect(m, cuts=cuts.o, strip=strip.n)
            words = strip.o
        if self.patch_bytes:
            words = self._patch(m, words, patches.o)
        if max_insert:
            counts = tuple(sorted(set(self.insert_counts) | {0}))
            m.submodules.insert = insert = StreamInsert(width, max_insert, counts=counts)
            connect(m, words=words, insert=insert.i)
            connect(m, inserts=inserts.o, insert=insert.hdr)
            words = insert.o
        m.submodules.sender = sender = MessageSender(width, meta_bits=META_BITS,
                                                    empty_packets=True)
        connect(m, sender=sender.o, tile=flipped(self.noc_out))
        connect(m, descriptors=descs.o, sender=sender.i_hdr)
        connect(m, words=words, sender=sender.i_data)
        return m

    def _patch(self, m, source, patch_r):
        """The packets of ``source`` with their first ``nbytes`` bytes overwritten by the patch
        at the head of ``patch_r`` (one per packet, taken with the packet's last word)."""
        nb = self.env.width // 8
        words = -(-self.patch_bytes // nb)
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
                if pos < self.patch_bytes:
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
