"""A monitor's capability tables (:mod:`apiary.os.monitor`): segments, IPC out, IPC in.

:class:`CapabilityTables` holds the three tables; the rest of the monitor reads them through
lookups (a key out, the answer back, combinationally) and changes them by commands (an ``en``
strobe and its fields, applied at the next clock edge). The signatures here are the asking
side's; the tables' members are their flipped forms.
"""

from collections.abc import Sequence
from typing import Any

from amaranth import Module, Signal, Cat, Const, Mux, Array
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, Component

from .uapi import HANDLE_BITS, IpcDir


__all__ = ["SEGMENT", "IPC_ENTRY", "Cap", "ipc_rows", "segment_lookup", "row_lookup",
           "walk_lookup", "ipc_lookup", "free_row", "command", "CapabilityTables"]


#: A segment capability, one row of the table.
SEGMENT = data.StructLayout({
    "valid": 1, "owner": 1, "gen": HANDLE_BITS, "base": 48, "size": 40, "perm": 2,
    "mem_x": 8, "mem_y": 8, "root": 16,
})

#: The fields of a segment row that only an install writes: kept in LUT RAM.
_STORED = ("base", "size", "perm", "mem_x", "mem_y")
_STORED_REST = data.StructLayout({k: SEGMENT.members[k] for k in _STORED if k != "base"})

#: The rest of a row but its generation (in LUT RAM too): in flip-flops.
_FLAGS = data.StructLayout({k: v for k, v in SEGMENT.members.items()
                            if k not in _STORED and k != "gen"})

#: An IPC capability (either direction): ``any`` ignores ``fbits``.
IPC_ENTRY = data.StructLayout({"valid": 1, "any": 1, "x": 8, "y": 8, "fbits": 4})

Cap = tuple[int, int, int | None]


def ipc_rows(caps: Sequence[Cap], size: int, what: str) -> list[dict]:
    """The ``size`` initial rows of an IPC table holding ``caps`` (``(x, y, fbits or None)``,
    duplicates once); a ``ValueError`` if they do not fit."""
    caps = list(dict.fromkeys(caps))
    if len(caps) > size:
        raise ValueError(f"the monitor has {size} {what} entries but the design grants "
                         f"{len(caps)}; raise MonitorConfig")
    rows = [{"valid": 1, "any": int(f is None), "x": x, "y": y, "fbits": f or 0}
            for x, y, f in caps]
    return rows + [{}] * (size - len(rows))


def segment_lookup() -> wiring.Signature:
    """The row a handle names (``handle`` out), and whether the handle is ``current`` (the row
    is valid and of the handle's generation)."""
    return wiring.Signature({"handle": Out(HANDLE_BITS), "entry": In(SEGMENT),
                             "current": In(1)})


def row_lookup(entries: int) -> wiring.Signature:
    """The segment row at ``slot``."""
    return wiring.Signature({"slot": Out(range(entries)), "entry": In(SEGMENT)})


def ipc_lookup() -> wiring.Signature:
    """Whether a table holds an IPC capability for ``(x, y, fbits)``; not while ``busy`` (the
    lookup answers for a grant to its table this cycle, not for the asker)."""
    return wiring.Signature({"x": Out(8), "y": Out(8), "fbits": Out(4), "allowed": In(1),
                             "busy": In(1)})


def walk_lookup(entries: int) -> wiring.Signature:
    """The segment row at ``slot``, while ``active``."""
    return wiring.Signature({"active": Out(1), "slot": Out(range(entries)),
                             "entry": In(SEGMENT)})


def free_row(entries: int) -> wiring.Signature:
    """The first free segment row (the tables' side): ``found``, its ``slot`` and the
    ``handle`` a capability installed there gets."""
    return wiring.Signature({"found": Out(1), "slot": Out(range(entries)),
                             "handle": Out(HANDLE_BITS)})


def command(**fields: Any) -> wiring.Signature:
    """A command to the tables: ``en`` and its ``fields`` (name: shape)."""
    return wiring.Signature({"en": Out(1), **{k: Out(v) for k, v in fields.items()}})


class CapabilityTables(Component):
    """The segment table (``entries`` rows of :data:`SEGMENT`) and the IPC-out and IPC-in
    tables (:data:`IPC_ENTRY`, initial rows from :func:`ipc_rows`).

    Lookups are combinational (0 cycles): ``seg`` (by handle: a load's, a store's or a
    capability operation's), ``ack`` and ``walk`` (by slot), ``dst`` (IPC out), ``src`` (IPC
    in); ``free`` shows the first free segment row and the handle an install there gets. A
    handle is ``slot | gen << log2(entries)``, cut to ``HANDLE_BITS``: a row's generation is
    that of its latest install, each install one more than the row's last (from 0), so a
    handle of an earlier install is stale. ``ack`` shows a row's ``base``; ``walk`` (while
    ``active``: no message is judged then, the release walks with the tile in reset) its
    ``valid``, ``owner`` and ``root``, through the row multiplexer of ``seg``, whose flags
    then show the walked row (the other fields read as zero there).

    What only an install writes (``base``, ``size``, ``perm``, ``mem_x``, ``mem_y``, ``gen``)
    is kept in LUT RAM, read asynchronously (``base`` and ``gen`` through two ports);
    ``valid``, ``owner`` and ``root``, which drops, revocations and the release walk read or
    change in parallel, in flip-flops. A dropped row keeps its fields until the next install.

    Commands take effect at the next clock edge, several in a cycle in this order (a later one
    wins on the same row):

    * ``drop``: row ``slot`` becomes invalid (its handle is stale).
    * ``install``: ``row`` (all but ``valid`` and ``gen``) into the first free row, made
      valid; only while ``free.found`` (the asker checks).
    * ``revoke``: every valid row not owned (``owner`` 0) derived from ``root`` is dropped.
    * ``grant``: with ``add``, an IPC capability for ``(x, y, fbits)`` into the first free row
      of the ``dir`` table (:class:`~apiary.os.uapi.IpcDir`), unless it is there already (a full
      table ignores it); without, every capability there matching ``(x, y)`` and ``fbits`` (or
      any port) is removed. The grant is compared by that table's lookup (``dst`` or
      ``src``), which in its cycle answers for the grant's key and shows ``busy``: the asker
      must not use it then.
    * ``clear``: row ``slot``, if valid, is dropped.

    Members
    -------
    seg : In(segment_lookup())
    ack : In(row_lookup(entries))
    walk : In(walk_lookup(entries))
    dst, src : In(ipc_lookup())
    free : Out(free_row(entries))
    install : In(command(row=SEGMENT))
    drop, clear : In(command(slot=range(entries)))
    revoke : In(command(root=16))
    grant : In(command(dir=2, add=1, x=8, y=8, fbits=4))
    """

    def __init__(self, entries: int, ipc_out: Sequence[dict], ipc_in: Sequence[dict]) -> None:
        if entries not in (2, 4, 8, 16, 32, 64):
            raise ValueError(f"the segment table needs a power of two from 2 to 64 rows, "
                             f"not {entries!r}")
        self._entries, self._ipc_out, self._ipc_in = entries, list(ipc_out), list(ipc_in)
        slot = range(entries)
        super().__init__({
            "seg": In(segment_lookup()),
            "ack": In(row_lookup(entries)), "walk": In(walk_lookup(entries)),
            "dst": In(ipc_lookup()), "src": In(ipc_lookup()),
            "free": Out(free_row(entries)),
            "install": In(command(row=SEGMENT)),
            "drop": In(command(slot=slot)), "clear": In(command(slot=slot)),
            "revoke": In(command(root=16)),
            "grant": In(command(dir=2, add=1, x=8, y=8, fbits=4)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        n = self._entries
        slot_bits = (n - 1).bit_length()
        seg = [Signal(_FLAGS, name=f"seg{i}") for i in range(n)]
        ipc_out = [Signal(IPC_ENTRY, name=f"ipc_out{i}", init=row)
                   for i, row in enumerate(self._ipc_out)]
        ipc_in = [Signal(IPC_ENTRY, name=f"ipc_in{i}", init=row)
                  for i, row in enumerate(self._ipc_in)]
        seg_raw = Array(s.as_value() for s in seg)

        def row(slot: Any) -> Any:
            return data.View(_FLAGS, seg_raw[slot])

        free = self.free
        for i in reversed(range(n)):
            with m.If(~seg[i].valid):
                m.d.comb += [free.slot.eq(i), free.found.eq(1)]
        # A row's generation: that of its latest install (all ones before the first), so the
        # next install's is one more. Only an install writes it: it is kept in LUT RAM.
        gen_bits = HANDLE_BITS - slot_bits
        m.submodules.gens = gens = Memory(shape=gen_bits, depth=n,
                                          init=[(1 << gen_bits) - 1] * n)
        gen_free, gen_seg = gens.read_port(domain="comb"), gens.read_port(domain="comb")
        gen_w = gens.write_port()
        next_gen = Signal(gen_bits)
        m.d.comb += [
            gen_free.addr.eq(free.slot), next_gen.eq(gen_free.data + 1),
            gen_w.addr.eq(free.slot), gen_w.en.eq(self.install.en), gen_w.data.eq(next_gen),
            free.handle.eq(free.slot | next_gen << slot_bits),
        ]

        m.submodules.bases = bases = Memory(shape=48, depth=n, init=[])
        m.submodules.rest = rest = Memory(shape=_STORED_REST, depth=n, init=[])
        new = self.install.row
        base_w, rest_w = bases.write_port(), rest.write_port()
        for write in (base_w, rest_w):
            m.d.comb += [write.addr.eq(free.slot), write.en.eq(self.install.en)]
        m.d.comb += [base_w.data.eq(new.base),
                     *(rest_w.data[k].eq(new[k]) for k in _STORED_REST.members)]
        base_seg, base_ack = bases.read_port(domain="comb"), bases.read_port(domain="comb")
        rest_seg = rest.read_port(domain="comb")

        look = self.seg
        slot = look.handle[:slot_bits]
        # One row mux for the flags serves both: no message is judged while the table is walked.
        entry = row(Mux(self.walk.active, self.walk.slot, slot))
        gen = look.handle[slot_bits:HANDLE_BITS]
        m.d.comb += [
            base_seg.addr.eq(slot), rest_seg.addr.eq(slot), base_ack.addr.eq(self.ack.slot),
            gen_seg.addr.eq(slot), look.entry.gen.eq(gen_seg.data),
            *(look.entry[k].eq(entry[k]) for k in _FLAGS.members),
            look.entry.base.eq(base_seg.data),
            *(look.entry[k].eq(rest_seg.data[k]) for k in _STORED[1:]),
            look.current.eq(entry.valid & (gen_seg.data == gen)),
            self.ack.entry.base.eq(base_ack.data),
        ]
        m.d.comb += [self.walk.entry[k].eq(entry[k]) for k in _FLAGS.members]
        for look, table, direction in ((self.dst, ipc_out, IpcDir.OUT),
                                       (self.src, ipc_in, IpcDir.IN)):
            self._ipc_table(m, look, table, direction)

        def retire(e: Any) -> list:
            return [e.valid.eq(0)]      # the handle is stale: valid again only with a new gen

        with m.If(self.drop.en):
            with m.Switch(self.drop.slot):
                for i, e in enumerate(seg):
                    with m.Case(i):
                        m.d.sync += retire(e)
        self._install(m, seg)
        with m.If(self.revoke.en):
            for e in seg:
                with m.If(e.valid & ~e.owner & (e.root == self.revoke.root)):
                    m.d.sync += retire(e)
        with m.If(self.clear.en):
            with m.Switch(self.clear.slot):
                for i, e in enumerate(seg):
                    with m.Case(i):
                        with m.If(e.valid):
                            m.d.sync += retire(e)
        return m

    def _install(self, m: Module, seg: list) -> None:
        new = self.install.row
        with m.If(self.install.en):
            with m.Switch(self.free.slot):
                for i, e in enumerate(seg):
                    with m.Case(i):
                        m.d.sync += [e.valid.eq(1), e.owner.eq(new.owner),
                                     e.root.eq(new.root)]

    def _ipc_table(self, m: Module, look: Any, table: list, direction: IpcDir) -> None:
        """One IPC table: its lookup and its grants. A grant is compared by the lookup's
        comparators (one per row, the table's largest part), so in a grant's cycle the lookup
        answers for the grant's key, not the asker's."""
        g = self.grant
        granting = g.en & (g.dir == direction)
        x, y, fbits = (Mux(granting, getattr(g, k), getattr(look, k)) for k in ("x", "y", "fbits"))
        xy = [e.valid & (e.x == x) & (e.y == y) for e in table]
        port = [e.fbits == fbits for e in table]
        matches = [k & (e.any | f) for e, k, f in zip(table, xy, port)]
        m.d.comb += [look.allowed.eq(Cat(*matches).any()), look.busy.eq(granting)]
        held = Cat(*(k & ~e.any & f for e, k, f in zip(table, xy, port))).any()
        put = granting & g.add & ~held
        earlier = Const(0)              # a free row before this one: the first free row wins
        for e, match in zip(table, matches):
            with m.If(put & ~e.valid & ~earlier):
                m.d.sync += [e.valid.eq(1), e.any.eq(0), e.x.eq(g.x), e.y.eq(g.y),
                             e.fbits.eq(g.fbits)]
            with m.If(granting & ~g.add & match):
                m.d.sync += e.valid.eq(0)
            earlier = earlier | ~e.valid
