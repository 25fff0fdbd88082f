"""A tile's message ports, declared once and built by one piece of code.

A tile says at the top of its class which messages it takes and which it sends::

    class MemoryTile(Tile):
        inputs = (Receive("requests", LOAD_MEM, STORE_MEM, meta=MEM_FORMAT),)
        outputs = (Send("replies", LOAD_MEM_ACK, STORE_MEM_ACK, meta=MEM_FORMAT),)

and builds them in ``elaborate`` with ``ports = self.message_ports(m)``
(:meth:`apiary.tile.Tile.message_ports`, which calls :func:`build_ports`): ``ports.requests``
is a :class:`~apiary.noc.framing.MessageReceiver`, ``ports.replies`` a
:class:`~apiary.noc.framing.MessageSender`, each framed for its declared metadata
(``meta_bits`` of its :class:`~apiary.stream.format.Format`) and the head payload bytes its
types carry (:func:`~apiary.noc.spec.head_counts`).

What :func:`build_ports` builds, per plane:

* **in**: one input is joined to the tile's flit port directly; several are told apart first by
  the sub-port they arrive on (``fbits``: an :class:`~apiary.noc.splitter.FbitsSplitter`), then
  among those sharing a sub-port by message type (a :class:`~apiary.noc.splitter.TypeSplitter`;
  the last input of such a group takes every type the others do not);
* **out**: one output is joined directly; several are merged a whole message at a time
  (:class:`~apiary.noc.merger.MessageMerger`, round-robin or ``priority``), or, with
  ``merge="select"``, the tile's own logic says which sender owns the port (``ports.select``).

The same declarations tell the layout check (:func:`route_problem`) whether a route joins a
tile that sends some type to one that takes it, before anything is elaborated.
"""

from collections.abc import Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from amaranth import Const, Module, Signal
from amaranth.lib.wiring import connect, flipped

from ..stream.format import Format
from ..stream.queue import register_stream
from .framing import MessageReceiver, MessageSender
from .header import Fbits
from .merger import MessageMerger
from .msgtype import msg_type_name
from .spec import head_bytes, head_counts
from .splitter import FbitsSplitter, TypeSplitter


__all__ = ["MessagePort", "Receive", "Send", "build_ports", "route_types", "route_problem",
           "MERGES"]


#: How several outputs of one plane share the tile's flit port.
MERGES = ("round_robin", "priority", "select")


def _type_value(t: Any) -> int:
    value = getattr(t, "value", t)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 256:
        raise ValueError(f"a message type is an 8-bit value or a registered message type, "
                         f"not {t!r}")
    return value


class MessagePort:
    """One kind of message a tile takes (:class:`Receive`) or sends (:class:`Send`).

    Parameters
    ----------
    name : str
        The port's name: ``ports.<name>`` in the tile's logic, and its submodule's name.
    *types : message types
        The ``msg_type`` values it carries (registered enum members or ints); none: any type.
    meta : Format or None
        The format of the metadata its messages carry (``meta_bits`` of its size); ``None``:
        no metadata, or ``meta_words=`` among ``options``.
    plane : str
        ``"data"`` or ``"ctl"``.
    raw : bool
        The tile passes these messages on as flits (a forwarding or rewriting tile): no
        framing is built, and ``ports.<name>`` is the flit stream itself (in: the messages
        delivered to it; out: where the tile puts the messages it sends).
    options
        Further arguments of the :class:`~apiary.noc.framing.MessageReceiver` or
        :class:`~apiary.noc.framing.MessageSender` (``empty_packets``, ``short_meta``,
        ``head``: by default the head payload bytes its types carry); for an input also
        ``registered`` (behind a two-flit :class:`~apiary.stream.queue.Queue` in registers,
        submodule ``<name>_queue``: a cycle of latency, no combinational path from the router
        into the tile).
    """

    kind = "port"

    def __init__(self, name: str, *types: Any, meta: Format | None = None,
                 plane: str = "data", raw: bool = False, **options: Any) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"a message port's name must be a Python identifier, not {name!r}")
        if meta is not None and not isinstance(meta, Format):
            raise ValueError(f"{self.kind} {name!r}: meta must be a Format (or None), not "
                             f"{meta!r}")
        self.name = name
        self.types = tuple(_type_value(t) for t in types)
        self.meta = meta
        self.plane = plane
        self.raw = bool(raw)
        self.options = dict(options)

    @property
    def meta_bits(self) -> int | None:
        return None if self.meta is None else self.meta.size

    def type_names(self) -> str:
        return ", ".join(msg_type_name(t) for t in self.types) if self.types else "any type"

    def head(self, width: int) -> Any:
        """The ``head=`` of its framing at ``width`` bits: the declared one, else the counts by
        type of the types it carries (:func:`~apiary.noc.spec.head_counts`; nothing for types
        that carry none)."""
        if "head" in self.options:
            return self.options["head"]
        return head_counts(width, self.types or None)

    def framing_args(self, width: int, overrides: Mapping[str, Any]) -> dict[str, Any]:
        args = {k: v for k, v in {**self.options, **overrides}.items()
                if k not in ("head", "registered")}
        if self.meta is not None:
            args["meta_bits"] = self.meta.size
        head = overrides.get("head", self.head(width))
        if head:
            args["head"] = head
        return args

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.type_names()})"


class Receive(MessagePort):
    """A kind of message a tile takes (see :class:`MessagePort`); ``fbits``: the sub-port
    (``dst_fbits``) they arrive on, ``None`` for any."""

    kind = "input"

    def __init__(self, name: str, *types: Any, meta: Format | None = None,
                 fbits: int | None = None, plane: str = "data", raw: bool = False,
                 **options: Any) -> None:
        super().__init__(name, *types, meta=meta, plane=plane, raw=raw, **options)
        if fbits is not None and (not isinstance(fbits, int) or not 0 <= fbits < 16):
            raise ValueError(f"input {name!r}: fbits must be a 4-bit value such as "
                             f"Fbits.LOCAL0, not {fbits!r}")
        self.fbits = fbits

    def head(self, width: int) -> Any:
        """As :meth:`MessagePort.head`, but a receiver of one type takes its count for every
        message (what that type carries; it takes no other)."""
        if "head" not in self.options and len(self.types) == 1:
            return head_bytes(width, self.types[0])
        return super().head(width)


class Send(MessagePort):
    """A kind of message a tile sends (see :class:`MessagePort`); ``keys``: the route keys
    (next-hop table keys) its messages leave on, if only some (for the layout check)."""

    kind = "output"

    def __init__(self, name: str, *types: Any, meta: Format | None = None,
                 keys: Iterable[Any] | None = None, plane: str = "data", raw: bool = False,
                 **options: Any) -> None:
        super().__init__(name, *types, meta=meta, plane=plane, raw=raw, **options)
        self.keys = None if keys is None else tuple(keys)

    def framing_args(self, width: int, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """As :meth:`MessagePort.framing_args`; a sender of one type that carries head bytes
        frames every message with its count (``head_types_only``), not by ``msg_type``."""
        args = super().framing_args(width, overrides)
        if len(self.types) == 1 and isinstance(args.get("head"), Mapping):
            args["head_types_only"] = True
        return args


def _check(owner: str, inputs: Sequence[Receive], outputs: Sequence[Send]) -> None:
    names = [p.name for p in (*inputs, *outputs)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{owner} declares message port(s) {', '.join(twice)} twice")
    for group, cls in ((inputs, Receive), (outputs, Send)):
        for port in group:
            if not isinstance(port, cls):
                raise ValueError(f"{owner}: {cls.kind}s hold {port!r}, which is not a "
                                 f"{cls.__name__}")


def _fbits_name(fbits: int) -> str:
    try:
        return Fbits(fbits).name
    except ValueError:
        return f"fbits{fbits}"


def _split(m: Module, owner: str, width: int, source: Any, group: list[Receive],
           prefix: str) -> list[Any]:
    """Flit streams for the inputs of ``group`` (one sub-port), split by type if several."""
    if len(group) == 1:
        return [source]
    typed = group[:-1]
    for p in typed:
        if not p.types:
            raise ValueError(f"{owner}: input {p.name!r} takes any type, so it must be the last "
                             f"of the inputs that share its sub-port")
    split = TypeSplitter(width, [p.types for p in typed])
    m.submodules[f"{prefix}by_type"] = split
    connect(m, tile=source, split=split.i)
    return list(split.o)


def _inputs(m: Module, owner: str, width: int, noc_in: Any, inputs: list[Receive],
            prefix: str, ns: SimpleNamespace) -> list[Any]:
    """The flit stream feeding each input, in declaration order (``ns.dropped``: the count of
    the sub-port split, if any)."""
    source = flipped(noc_in)
    if not inputs:
        m.d.comb += noc_in.ready.eq(1)      # nothing taken here: sink whatever arrives
        return []
    by_fbits: dict[int | None, list[Receive]] = {}
    for p in inputs:
        by_fbits.setdefault(p.fbits, []).append(p)
    if len(by_fbits) == 1:
        streams = _split(m, owner, width, source, inputs, prefix)
        return streams
    if None in by_fbits:
        raise ValueError(f"{owner}: inputs on several sub-ports must each name their fbits "
                         f"({', '.join(p.name for p in by_fbits[None])} do not)")
    keys = [k for k in by_fbits if k is not None]
    split = FbitsSplitter(width, keys)
    m.submodules[f"{prefix}split"] = split
    ns.dropped = split.dropped
    connect(m, tile=source, split=split.i)
    out: dict[str, Any] = {}
    for k, key in enumerate(keys):
        group = by_fbits[key]
        for p, s in zip(group, _split(m, owner, width, split.o[k], group,
                                      f"{prefix}{_fbits_name(key).lower()}_")):
            out[p.name] = s
    return [out[p.name] for p in inputs]


def build_ports(m: Module, width: int, inputs: Sequence[Receive], outputs: Sequence[Send], *,
                noc_in: Any = None, noc_out: Any = None, merge: str = "round_robin",
                owner: str = "tile",
                overrides: Mapping[str, Mapping[str, Any]] | None = None,
                prefix: str = "", length_bits: int | None = None) -> SimpleNamespace:
    """Build the framing of ``inputs`` and ``outputs`` (one plane's) into ``m`` and join it to
    the tile's flit ports ``noc_in`` (into the tile) and ``noc_out``; return a namespace with a
    :class:`MessageReceiver` or :class:`MessageSender` per port name (submodules of the same
    names) and, with ``merge="select"``, ``select``: the index of the output that owns
    ``noc_out``, which the tile drives; ``dropped`` counts the messages the split by sub-port
    discarded (a ``dst_fbits`` no input names; 0 without that split). ``overrides`` gives
    per-port framing arguments for this instance (``head``, ``empty_packets``, ``registered``,
    ...). ``noc_in=None`` builds the outputs alone and ``noc_out=None`` the inputs alone (a tile
    whose two directions are built in different places), leaving the other port to a second
    call. ``length_bits``: every receiver's and sender's payload length width
    (:func:`~apiary.noc.framing.length_bits`)."""
    inputs, outputs = list(inputs), list(outputs)
    _check(owner, inputs, outputs)
    if merge not in MERGES:
        raise ValueError(f"{owner}: merge must be one of {', '.join(MERGES)}, not {merge!r}")
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - {p.name for p in (*inputs, *outputs)})
    if unknown:
        raise ValueError(f"{owner}: no message port named {', '.join(unknown)}")
    ns = SimpleNamespace(select=None, dropped=Const(0, 32))
    if noc_in is None:
        inputs = []
    if noc_out is None:
        outputs = []
    for p, flits in zip(inputs, _inputs(m, owner, width, noc_in, inputs, prefix, ns) if noc_in
                        is not None else []):
        if p.raw:
            setattr(ns, p.name, flits)
            continue
        extra = overrides.get(p.name, {})
        if extra.get("registered", p.options.get("registered", False)):
            flits = register_stream(m, f"{prefix}{p.name}_queue", flits)
        rx = MessageReceiver(width, length_bits=length_bits, **p.framing_args(width, extra))
        m.submodules[prefix + p.name] = rx
        connect(m, flits=flits, receiver=rx.i)
        setattr(ns, p.name, rx)
    senders: list[MessageSender | None] = []
    for q in outputs:
        if q.raw:
            senders.append(None)
            continue
        tx = MessageSender(width, length_bits=length_bits,
                           **q.framing_args(width, overrides.get(q.name, {})))
        m.submodules[prefix + q.name] = tx
        senders.append(tx)
        setattr(ns, q.name, tx)
    if noc_out is None:
        pass
    elif not outputs:
        m.d.comb += noc_out.valid.eq(0)
    elif len(outputs) == 1:
        _join(m, ns, outputs[0], senders[0], flipped(noc_out))
    elif merge == "select":
        if any(q.raw for q in outputs):
            raise ValueError(f"{owner}: merge='select' takes no raw outputs")
        ns.select = Signal(range(len(senders)), name=f"{prefix}select")
        with m.Switch(ns.select):
            for k, sender in enumerate(senders):
                with m.Case(k):
                    connect(m, sender=sender.o, tile=flipped(noc_out))   # type: ignore[union-attr]
    else:
        merger = MessageMerger(width, len(senders), priority=merge == "priority")
        m.submodules[f"{prefix}merge"] = merger
        for q, sender, port in zip(outputs, senders, merger.i):
            _join(m, ns, q, sender, port)
        connect(m, merge=merger.o, tile=flipped(noc_out))
    return ns


def _join(m: Module, ns: SimpleNamespace, port: "Send", sender: Any, sink: Any) -> None:
    """Join an output to ``sink`` (the tile's flit port or a merger input): its sender, or for
    a raw output hand ``sink`` itself to the tile."""
    if sender is None:
        setattr(ns, port.name, sink)
    else:
        connect(m, sender=sender.o, sink=sink)


# -- the layout check's view -------------------------------------------------------------------

def route_types(outputs: Sequence[Send], inputs: Sequence[Receive], *, key: Any = None,
                fbits: int = Fbits.LOCAL0, plane: str = "data") -> tuple[set | None, set | None]:
    """``(sent, taken)``: the message types ``outputs`` may send on a route with ``key`` (an
    output naming ``keys`` sends only on those) and the types ``inputs`` take on sub-port
    ``fbits``, each ``None`` for "any type" (an undeclared side, or a port of any type)."""
    outs = [p for p in outputs if p.plane == plane and (p.keys is None or key in p.keys)]
    ins = [p for p in inputs if p.plane == plane and p.fbits in (None, fbits)]
    sent: set | None = None if not outputs or any(not p.types for p in outs) else \
        {t for p in outs for t in p.types}
    taken: set | None = None if not inputs or any(not p.types for p in ins) else \
        {t for p in ins for t in p.types}
    return sent, taken


def route_problem(src: str, src_cls: type, dst: str, dst_cls: type, *, key: Any = None,
                  fbits: int = Fbits.LOCAL0, plane: str = "data") -> str | None:
    """What is wrong with a route from tile ``src`` to tile ``dst`` by their classes'
    declarations (``inputs``, ``outputs``), or ``None``: the route must carry some type that
    ``src`` sends and ``dst`` takes on that sub-port."""
    outputs = getattr(src_cls, "outputs", ())
    inputs = getattr(dst_cls, "inputs", ())
    if not outputs or not inputs:
        return None                  # a side that declares nothing is not checked
    sent, taken = route_types(outputs, inputs, key=key, fbits=fbits, plane=plane)
    if sent is None or taken is None or sent & taken:
        return None
    names = lambda ts: ", ".join(sorted(msg_type_name(t) for t in ts)) or "nothing"
    port = _fbits_name(fbits)
    return (f"{src} ({src_cls.__name__}) sends {names(sent)} on it, but {dst} "
            f"({dst_cls.__name__}) takes {names(taken)} on sub-port {port}: no message type "
            f"of the one is taken by the other")
