"""The tile base class and what a tile learns from the design it is placed in."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .noc.flit import flit_signature
from .noc.framing import length_bits
from .noc.nexthop import Endpoint
from .noc.ports import Receive, Send, build_ports
from .stream.counters import CounterSignature
from .stream.layout import check_width
from .stream.registers import RegisterSignature


__all__ = ["Endpoint", "TileEnv", "Tile", "WiresSignature", "NOC_PORTS", "Receive", "Send",
           "message_length_bits"]


@dataclass
class TileEnv:
    """Everything a tile is told by the design: its name and place, the flit widths of the planes,
    and its next-hop table per plane, ``{key: [Endpoint, ...]}``. A key is whatever the tile
    routes on (an EtherType, an IP protocol, a UDP port, or ``None`` for "any"); several
    endpoints under one key are replicas to balance across. ``trusted`` is false for a tile
    behind an Apiary monitor (it addresses memory through segment capabilities)."""
    name: str = "tile"
    x: int = 0
    y: int = 0
    width: int = 512
    ctl_width: int = 64
    routes: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    trusted: bool = True

    def next_hops(self, plane: str = "data") -> dict:
        return self.routes.get(plane, {})


def message_length_bits(env: TileEnv) -> int:
    """The bits a tile's data-plane senders and receivers count payload lengths in: all of the
    header field's, or with the design setting ``max_message_bytes`` (the most payload bytes
    any data-plane message of the design carries, e.g. 2047 for a stack of 1,518-byte frames)
    just what that needs. Narrower lengths are narrower counters and adders in every framer;
    a receiver drops (and counts in its ``errors``) a message announcing more."""
    return length_bits(env.width, env.settings.get("max_message_bytes"))


class WiresSignature(wiring.Signature):
    """Dedicated wires between two tiles, outside the NoC (Beehive's TCP RX and TX engines share
    flow state this way). A tile declares a member of a subclass of this signature (``Out`` on
    one tile, ``In`` on its partner); the design joins the pair with
    :meth:`~apiary.design.Design.wire`. Such a member never becomes a top-level port, and a tile
    whose wires are not joined is an error at elaboration.

    Two such signatures are equal when they are of the same class and have the same members.

    A subclass that sets ``broadcast = True`` is joined without ``Design.wire``: the one tile of
    the design that drives such a member (``Out``) drives every member of that name and
    signature taken (``In``) by the other tiles (a design-wide value, such as Beehive's
    run-time addresses)."""

    #: Joined by the design from its one driver to every taker, without ``Design.wire``.
    broadcast = False

    def __eq__(self, other: object) -> bool:
        if isinstance(other, wiring.FlippedSignature):
            other = other.flip()
        return type(self) is type(other) and self.members == other.members


#: Port names of each plane on a tile: (into the tile, out of the tile).
NOC_PORTS = {"data": ("noc_in", "noc_out"), "ctl": ("ctl_in", "ctl_out")}


class Tile(wiring.Component):
    """Base class for a tile: its logic, not its router.

    A subclass lists the planes it attaches to in ``planes``, passes its external ports as
    ``members`` and declares what it counts as ``counters``, ``{name: description}`` (or
    ``{name: (width, description)}``). For each plane it gets a flit port into the tile
    (``noc_in`` / ``ctl_in``, messages the router delivers) and one out of it (``noc_out`` /
    ``ctl_out``, messages to inject); its counters are the member ``counters``, a
    :class:`~apiary.stream.counters.CounterSignature` (``self.counters.<name>`` in its logic),
    which the design collects into its counter bank (:mod:`apiary.counters`) under
    ``<tile>_<name>``. Other members become ports of the design's top level, named
    ``<tile>_<member>``, but for its control registers and tables, ``registers=``
    (``{name: Register | Table}``, :mod:`apiary.stream.registers`: the member ``regs``, which
    the control plane drives, or their reset values without one), MAC-facing streams
    (:class:`~apiary.stream.mac.FrameStream`), which get a MAC edge, and dedicated wires to
    another tile (:class:`WiresSignature`), which the design joins
    (:meth:`~apiary.design.Design.wire`).

    ``controls`` marks a controller: a tile on the ``ctl`` plane that sends register requests
    there. A design with one gets a control agent (:mod:`apiary.control.agent`) at every tile
    with counters or registers.

    ``streaming`` says whether the tile may hold its input while it waits for its output (true
    for cut-through tiles); the deadlock check adds an in→out dependency for such tiles.

    ``inputs`` and ``outputs`` are the tile's message contract
    (:class:`~apiary.noc.ports.Receive`, :class:`~apiary.noc.ports.Send`: the types it takes
    and sends, with their metadata formats), read at the top of its class; its ``elaborate``
    builds their framing with :meth:`message_ports`, and the layout check refuses a route
    that joins a tile sending some types to one that takes none of them. ``merge`` says how
    several outputs of a plane share its flit port (:data:`~apiary.noc.ports.MERGES`). A tile
    whose ports depend on its parameters declares the widest set on the class and narrows it
    per instance (the instance attributes of the same names).
    """

    planes: tuple[str, ...] = ("data",)
    streaming = True
    controls = False
    inputs: tuple[Receive, ...] = ()
    outputs: tuple[Send, ...] = ()
    merge = "round_robin"

    def __init__(self, env: TileEnv | None = None, members: Mapping[str, Any] | None = None,
                 counters: Mapping[str, Any] | None = None,
                 registers: Mapping[str, Any] | None = None) -> None:
        self.env = env if env is not None else TileEnv()
        check_width(self.env.width, "data plane width")
        check_width(self.env.ctl_width, "control plane width")
        sig = {}
        for plane in self.planes:
            if plane not in NOC_PORTS:
                raise ValueError(f"{type(self).__name__} names plane {plane!r}; "
                                 f"planes are {', '.join(NOC_PORTS)}")
            width = self.env.width if plane == "data" else self.env.ctl_width
            i, o = NOC_PORTS[plane]
            sig[i] = In(flit_signature(width))
            sig[o] = Out(flit_signature(width))
        for name in members or {}:
            if name in sig:
                raise ValueError(f"{type(self).__name__}: member {name!r} clashes with a NoC port")
        sig.update(members or {})
        if counters:
            if "counters" in sig:
                raise ValueError(f"{type(self).__name__}: a member named 'counters' clashes with "
                                 f"the tile's counters")
            sig["counters"] = Out(CounterSignature(counters))
        if registers:
            if "regs" in sig:
                raise ValueError(f"{type(self).__name__}: a member named 'regs' clashes with "
                                 f"the tile's registers")
            sig["regs"] = In(RegisterSignature(registers))
        super().__init__(sig)

    @property
    def name(self) -> str:
        return self.env.name

    def message_ports(self, m: Any, plane: str = "data", *, direction: str = "both",
                      overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
        """Build the framing of the tile's declared ``inputs`` and ``outputs`` on ``plane``
        into ``m``, joined to the plane's flit ports (:func:`~apiary.noc.ports.build_ports`):
        a namespace with a receiver or sender per port name. ``direction``: ``"in"`` or
        ``"out"`` builds one side only (the other in a second call). ``overrides``: per-port
        framing arguments of this instance. On the data plane, lengths are counted in the
        bits the design setting ``max_message_bytes`` needs (:func:`message_length_bits`)."""
        if direction not in ("both", "in", "out"):
            raise ValueError(f"direction is 'both', 'in' or 'out', not {direction!r}")
        i, o = NOC_PORTS[plane]
        width = self.env.width if plane == "data" else self.env.ctl_width
        prefix = "" if plane == "data" else f"{plane}_"
        return build_ports(
            m, width, [p for p in self.inputs if p.plane == plane],
            [p for p in self.outputs if p.plane == plane],
            noc_in=getattr(self, i) if direction != "out" else None,
            noc_out=getattr(self, o) if direction != "in" else None, merge=self.merge,
            owner=f"{type(self).__name__} {self.name!r}", overrides=overrides, prefix=prefix,
            length_bits=message_length_bits(self.env) if plane == "data" else None)

    @classmethod
    def external_members(cls, signature: wiring.Signature) -> list[str]:
        """Names of the members of ``signature`` that are neither NoC ports, counters,
        registers nor wires to another tile."""
        noc = {p for pair in NOC_PORTS.values() for p in pair}
        return [name for name, member in signature.members.items()
                if name not in noc and not cls.is_counters(member) and not cls.is_wires(member)
                and not cls.is_registers(member)]

    @staticmethod
    def is_wires(member: Any) -> bool:
        """Whether a signature member is dedicated wires to another tile."""
        return member.is_signature and isinstance(member.signature, WiresSignature)

    @staticmethod
    def is_registers(member: Any) -> bool:
        """Whether a signature member is a tile's control registers."""
        return member.is_signature and isinstance(member.signature, RegisterSignature)

    @staticmethod
    def is_counters(member: Any) -> bool:
        """Whether a signature member is a tile's counters."""
        return member.is_signature and isinstance(member.signature, CounterSignature)
