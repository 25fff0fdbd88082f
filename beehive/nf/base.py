"""The framework every network-function tile is written in, and its rule table.

A network function (:mod:`.nat`, :mod:`.ipip`, :mod:`.vxlan`) takes a message (an IPv4 datagram,
a UDP payload...), looks its header up in a table the control plane may change while traffic
flows, and sends it on rewritten, with bytes stripped from its front (decapsulation) or put in
front of it (encapsulation), or drops it and counts why. :class:`NfTile` is that pipeline, once,
made of a receive layer's pieces (:mod:`beehive.proto.layer`: its parse object, verdict, patch
and framing) plus a rule table and an insert; a subclass writes :meth:`NfTile.parse` and names
its drop reasons and counters::

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

import ipaddress
from collections.abc import Iterable, Mapping
from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data
from amaranth.lib.wiring import connect

from apiary.stream.checksum import ones_sum
from apiary.stream.header import Header
from apiary.stream.peek import PayloadPeek
from apiary.stream.queue import Queue
from apiary.stream.realign import StreamInsert, StreamStrip
from apiary.stream.registers import Table
from apiary.tile import Tile
from beehive.proto.layer import (LENGTH_BITS, Parse, bytes_queue, decide, header_queue_depth,
                                 hold_packet, message_overhead, packet_input, packet_output,
                                 patch_stream, receive, received_packets, send)
from beehive.proto.messages import MsgType


__all__ = ["NfTile", "RuleTable", "UNMATCHED", "rule_values", "checksum_update",
           "py_checksum_update", "ip_value", "check_ttl"]

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


def ip_value(value) -> int:
    """An IPv4 address given as text (``"10.0.0.1"``) or an integer, as an integer."""
    return int(ipaddress.IPv4Address(value)) if isinstance(value, str) else int(value)


def check_ttl(ttl: int, what: str) -> int:
    """``ttl``, once checked to be an IPv4 TTL an encapsulating tile may send (1 to 255)."""
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= 255:
        raise ValueError(f"{what}: ttl must be an integer from 1 to 255, not {ttl!r}")
    return ttl


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


class _NfParse(Parse):
    """What :meth:`NfTile.parse` reads (``head``, ``head_len``, ``length``, ``msg_type``,
    ``meta``, ``rules``: the table's entries) and sets (``drop``, ``key``, ``strip``,
    ``patch``, ``insert``, ``out_length``, ``set_meta``, ``count``, ``match``): a receive
    layer's :class:`~beehive.proto.layer.Parse` with rules, inserts and counts."""

    def __init__(self, tile, m, head, head_len, cur, rules):
        super().__init__(tile, m, head, head_len, cur.length, cur.meta)
        self.msg_type = cur.msg_type
        self.rules = rules
        self.insert_value, self.insert_len = None, 0
        self.counts = []
        self._unmatched = tile.unmatched

    def count(self, name: str, condition) -> None:
        """Count a forwarded packet under ``name`` if ``condition`` holds."""
        self.counts.append((name, condition))

    def insert(self, value, nbytes) -> None:
        """Put the ``nbytes`` bytes of ``value`` (lane order) in front of the packet."""
        self.insert_value, self.insert_len = value, nbytes

    def match(self, name: str, condition, matched: str):
        """``(hit, rule)``: whether some rule satisfies ``condition(entry)``, and the first that
        does (:meth:`RuleTable.first_match`; each condition a signal ``<name>_hit<k>``). A packet
        no rule matches is dropped under ``no_rule`` with ``unmatched="drop"``; a forwarded one
        is counted under ``matched`` or ``passed``."""
        hits = []
        for k, e in enumerate(self.rules):
            hit = Signal(name=f"{name}_hit{k}")
            self.m.d.comb += hit.eq(condition(e))
            hits.append(hit)
        hit, rule = RuleTable.first_match(self.m, self.rules, hits, name)
        self.drop("no_rule", Const(self._unmatched == "drop") & ~hit)
        self.count(matched, hit)
        self.count("passed", ~hit)
        return hit, rule


class NfTile(Tile):
    """Base class of the network-function tiles (see the module docstring).

    Class attributes a subclass sets: ``head_bytes`` (bytes :meth:`parse` sees), ``key_width``
    (bits of the routing key, 1 for a single next hop), ``msg_type`` (of the messages sent,
    ``None`` to keep each input message's; the tile's declared ``outputs`` follow it),
    ``drop_reasons`` and ``kept_counters`` (``{name: description}``), ``strip_counts`` (the
    byte counts it may strip: a tuple, or ``None`` for no strip stage), ``patch_bytes`` (most
    bytes it overwrites, 0 for none), ``insert_counts`` (the header lengths it may insert, or
    ``None``), ``rule_entry`` (the :class:`~apiary.stream.header.Header` of a table entry) and
    ``table_name``.

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
    msg_type: MsgType | None = None
    drop_reasons: dict[str, str] = {}
    kept_counters: dict[str, str] = {}
    strip_counts: tuple[int, ...] | None = None
    patch_bytes = 0
    insert_counts: tuple[int, ...] | None = None
    rule_entry: Header | None = None
    table_name = "rules"
    table_description = "rules"

    #: Packet messages of any type in (a receive layer's framing: :func:`packet_input`), of
    #: ``msg_type`` out (:func:`packet_output`).
    inputs = (packet_input(),)
    outputs = (packet_output(),)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "outputs" not in vars(cls):
            cls.outputs = (packet_output(cls.msg_type),)

    def __init__(self, env=None, *, entries: int = 16, rules: Iterable = (),
                 unmatched: str = "pass") -> None:
        what = type(self).__name__
        if unmatched not in UNMATCHED:
            raise ValueError(f"{what}: unmatched must be one of {UNMATCHED}, not {unmatched!r}")
        self.unmatched = unmatched
        assert self.rule_entry is not None, f"{what} sets no rule_entry"
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
        hdr, data_ = received_packets(m, receive(m, self), msg_type=True)
        cur, cur_valid = hold_packet(m, hdr)
        m.submodules.peek = peek = PayloadPeek(width, self.head_bytes,
                                               slack=message_overhead(width))
        connect(m, receiver=data_, peek=peek.i)

        # -- the decision -------------------------------------------------------------------
        rules = self.table.build(m, getattr(self.regs, self.table_name))
        p = _NfParse(self, m, peek.head, peek.head_len, cur, rules)
        self.parse(m, p)

        # Per packet kept, one entry in each queue, all in the cycle of its verdict.
        max_strip = max(self.strip_counts or (0,))
        max_insert = max(self.insert_counts or (0,))
        strip_n = Signal(range(max_strip + 1))
        insert_n = Signal(range(max_insert + 1))
        m.d.comb += [strip_n.eq(p.strip), insert_n.eq(p.insert_len)]
        out_length = Signal(LENGTH_BITS)
        m.d.comb += out_length.eq(p.out_length if p.out_length is not None
                                  else cur.length - strip_n + insert_n)
        queues, byte_queues = [], {}
        if max_strip:
            m.submodules.cuts = cuts = Queue(range(max_strip + 1), header_queue_depth(self.env))
            queues.append((cuts.i, strip_n))
        for name, max_bytes, value, nbytes in (
                ("patches", self.patch_bytes, p.patch_value, p.patch_len),
                ("inserts", max_insert, p.insert_value, insert_n)):
            if max_bytes:
                byte_queues[name] = queue = bytes_queue(m, name, max_bytes,
                                                        header_queue_depth(self.env))
                queues.append((queue.i, {"data": 0 if value is None else value,
                                         "nbytes": nbytes}))
        descs = decide(m, self, p, peek=peek, cur_valid=cur_valid, out_length=out_length,
                       msg_type=cur.msg_type if self.msg_type is None else self.msg_type.value,
                       queues=queues, counts=p.counts)

        # -- the packets out: strip, patch, insert, frame ------------------------------------
        words = peek.o
        if max_strip:
            counts = tuple(sorted(set(self.strip_counts or ()) | {0}))
            m.submodules.strip = strip = StreamStrip(width, max_strip, counts=counts)
            connect(m, peek=words, strip=strip.i)
            connect(m, cuts=cuts.o, strip=strip.n)
            words = strip.o
        if self.patch_bytes:
            words = patch_stream(m, width, self.patch_bytes, words, byte_queues["patches"].o)
        if max_insert:
            counts = tuple(sorted(set(self.insert_counts or ()) | {0}))
            m.submodules.insert = insert = StreamInsert(width, max_insert, counts=counts)
            connect(m, words=words, insert=insert.i)
            connect(m, inserts=byte_queues["inserts"].o, insert=insert.hdr)
            words = insert.o
        send(m, self, descs, words)
        return m
