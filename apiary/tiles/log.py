"""A logging tile: pass every message through unchanged and record each one, with the cycle it
passed, in a log the control plane reads (Beehive's logging tiles, thesis §4.3.6).

A :class:`LogTile` sits on a path between two tiles (``eth_rx → log → ip_rx``, ``ip_tx → log →
eth_tx``, ``udp_rx → log → app``): the upstream tile routes to it, it routes to its one next
hop. It forwards each message as :class:`~apiary.tiles.forward.ForwardTile` does (only the
header's destination and source change) and writes one entry per message into a table of
``entries`` entries, ``log``, that the control plane reads (:mod:`apiary.control.addrmap`: the
table's ``LOAD`` word, then its staging words; ``beehive.control_client`` and ``apiary log``
do this over UDP).

The entry (``entry_width(snap) = 128 + 8 * snap`` bits, least significant field first; the
control plane's staging word 0 holds bits 0-31):

=============  ======  ==========================================================================
field          bits    what
=============  ======  ==========================================================================
cycle          0-63    the tile's cycle counter when the message's first flit left the tile: a
                       free-running count of cycles since reset, so every log tile of a design
                       counts the same cycles
payload_bytes  64-79   the header's ``payload_bytes`` (saturated at 65535)
flits          80-95   the message's flits (saturated at 65535)
span           96-111  cycles from the first flit leaving to the last (saturated at 65535):
                       ``flits - 1`` when the message went through without a gap
msg_type       112-119 the header's ``msg_type``
(zero)         120-127
snap           128-    the first ``snap`` bytes of the message as it left the tile (header,
                       metadata and payload flits in order, each flit least significant byte
                       first, as :func:`~apiary.tiles.raw_port.message_frame` lays them out);
                       zeros past the message's end
=============  ======  ==========================================================================

**The log keeps the first entries** (as Beehive's logs do, and the kernel's fault log): entry
*i* is the *i*-th message since the log was last emptied; once ``entries`` are written, later
messages pass but are not logged (counted in ``lost``). Entries below ``written`` never change,
so the log can be read while the design runs. Writing a new value to the register ``rearm``
empties the log (``written`` and ``lost`` back to 0) and starts logging again.

Latency: 0 cycles (combinational, cut-through). Throughput: one flit per cycle. Logging never
stalls the path: an entry is written the cycle after the message's last flit, one write per
message. Without a single next hop every message is logged, then taken and dropped (counted in
``dropped``).

Counters: ``written``, entries in the log; ``lost``, messages not logged because the log was
full; ``dropped``, messages dropped for want of a single next hop.

For a pcap of a log (``apiary log``), the tile's ``linktype`` says what its messages' payloads
are: :data:`LINKTYPE_NOC` (147, user-defined: whole NoC messages, header first) by default,
101 (raw IPv4) or 1 (Ethernet) on paths whose payloads are IPv4 datagrams or Ethernet frames.
"""

from dataclasses import dataclass
from typing import Any

from amaranth import Module, Mux, Signal
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import connect

from ..noc.header import field_location, header_flits, noc_header
from ..noc.rewrite import HeaderRewriter
from ..noc.spec import decode_message
from ..stream.registers import Register, Table
from ..stream.registers import TABLE_MAX_WIDTH
from ..tile import Receive, Send, Tile, TileEnv
from .forward import next_hop_fields
from ..stream.counters import count
from ..stream.integers import power_of_two


__all__ = ["LogTile", "LogEntry", "entry_width", "ENTRY_FIELDS_BITS", "LINKTYPE_NOC",
           "LINKTYPE_ETHERNET", "LINKTYPE_RAW_IPV4", "LINKTYPES"]

#: Bits of an entry before its snapshot.
ENTRY_FIELDS_BITS = 128
#: pcap link types a log's messages may be written as.
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW_IPV4 = 101
LINKTYPE_NOC = 147
LINKTYPES = (LINKTYPE_ETHERNET, LINKTYPE_RAW_IPV4, LINKTYPE_NOC)

_SAT16 = 0xFFFF


def entry_width(snap: int) -> int:
    """Bits of one log entry with a ``snap``-byte snapshot."""
    return ENTRY_FIELDS_BITS + 8 * snap


@dataclass(frozen=True)
class LogEntry:
    """One entry of a :class:`LogTile`'s log, in Python (see the module docstring)."""
    cycle: int
    payload_bytes: int
    flits: int
    span: int
    msg_type: int
    snap: bytes

    @classmethod
    def decode(cls, value: int, snap: int) -> "LogEntry":
        """The entry whose table value (an int, bit 0 first) is ``value``."""
        return cls(cycle=value & (1 << 64) - 1, payload_bytes=value >> 64 & _SAT16,
                   flits=value >> 80 & _SAT16, span=value >> 96 & _SAT16,
                   msg_type=value >> 112 & 0xFF,
                   snap=(value >> ENTRY_FIELDS_BITS).to_bytes(snap, "little"))

    def encode(self) -> int:
        """The entry as a table value (the inverse of :meth:`decode`)."""
        return (self.cycle | self.payload_bytes << 64 | self.flits << 80 | self.span << 96
                | self.msg_type << 112
                | int.from_bytes(self.snap, "little") << ENTRY_FIELDS_BITS)

    def decoded(self, width: int) -> Any:
        """The message as far as the snapshot holds it, at flit width ``width``
        (:func:`~apiary.noc.spec.decode_message` of its flits, the last padded with zeros), or
        ``None`` if it does not hold the header flits."""
        nb = width // 8
        if len(self.snap) < header_flits(width) * nb:
            return None
        snap = self.snap + bytes(-len(self.snap) % nb)
        return decode_message([int.from_bytes(snap[k:k + nb], "little")
                               for k in range(0, len(snap), nb)], width)

    def whole(self, width: int) -> bool:
        """Whether the snapshot holds the whole message (at flit width ``width``)."""
        return self.flits < _SAT16 and self.flits * (width // 8) <= len(self.snap)

    def message_bytes(self, width: int) -> bytes:
        """The message's bytes the snapshot holds: all of its flits if :meth:`whole`, else the
        first ``len(snap)``."""
        return self.snap[:self.flits * (width // 8)] if self.whole(width) else self.snap


class LogTile(Tile):
    """Forward every message to the tile's next hop and log it (see the module docstring).

    Parameters
    ----------
    env : TileEnv
    entries : int
        Entries in the log, a power of two (Beehive's TCP log: 2048).
    snap : int
        Bytes of each message kept in its entry (0: cycle, lengths and type only). The entry is
        ``128 + 8 * snap`` bits, at most 1984: ``snap`` at most 232.
    linktype : int
        What the logged messages are, for a pcap: 147 (whole NoC messages), 101 (payloads are
        raw IPv4 datagrams) or 1 (Ethernet frames).

    Raises
    ------
    ValueError
        A bad ``entries``, ``snap`` or ``linktype``.

    Message ports: ``messages`` in and ``forwarded`` out, any type, as flits (``raw``).
    """

    inputs = (Receive("messages", raw=True),)
    outputs = (Send("forwarded", raw=True),)

    def __init__(self, env: TileEnv | None = None, *, entries: int = 2048, snap: int = 64,
                 linktype: int = LINKTYPE_NOC) -> None:
        if not (power_of_two(entries) and 2 <= entries <= 1 << 16):
            raise ValueError(f"a log's entries must be a power of two from 2 to 65536, not "
                             f"{entries!r}")
        most = (TABLE_MAX_WIDTH - ENTRY_FIELDS_BITS) // 8
        if isinstance(snap, bool) or not isinstance(snap, int) or not 0 <= snap <= most:
            raise ValueError(f"a log's snap must be 0 to {most} bytes (an entry is at most "
                             f"{TABLE_MAX_WIDTH} bits), not {snap!r}")
        if linktype not in LINKTYPES:
            raise ValueError(f"linktype must be one of {', '.join(map(str, LINKTYPES))} "
                             f"(Ethernet, raw IPv4, NoC messages), not {linktype!r}")
        self.entries = entries
        self.snap = snap
        self.linktype = linktype
        super().__init__(env, counters={
            "written": "entries in the log",
            "lost": "messages not logged: the log was full",
            "dropped": "messages dropped for want of a single next hop",
        }, registers={
            "log": Table(entries=entries, width=entry_width(snap), writable=False,
                         description=f"one entry per message: cycle 64 | payload_bytes 16 | "
                                     f"flits 16 | span 16 | msg_type 8 | 0 8 | first {snap} "
                                     f"bytes of the message (LSB first)"),
            "rearm": Register(8, "write a new value to empty the log and log again"),
        })
        self._fields = next_hop_fields(self.env)

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width, nb = self.env.width, self.env.width // 8
        counters = self.counters
        ports = self.message_ports(m)
        messages = ports.messages

        # -- the path: out = in, but for the header's destination and source ---------------------
        out_valid, out_ready, out_data, out_last = Signal(), Signal(), Signal(width), Signal()
        if self._fields is None:
            m.d.comb += [
                messages.ready.eq(1),
                out_valid.eq(messages.valid), out_ready.eq(1),
                out_data.eq(messages.payload.data), out_last.eq(messages.payload.last),
            ]
            with m.If(messages.valid & messages.payload.last):
                count(m, counters.dropped)
        else:
            m.submodules.rewrite = rewrite = HeaderRewriter(width, self._fields)
            connect(m, tile=messages, rewrite=rewrite.i)
            connect(m, rewrite=rewrite.o, tile=ports.forwarded)
            m.d.comb += [
                out_valid.eq(rewrite.o.valid), out_ready.eq(ports.forwarded.ready),
                out_data.eq(rewrite.o.payload.data), out_last.eq(rewrite.o.payload.last),
            ]
        moved = Signal()
        m.d.comb += moved.eq(out_valid & out_ready)

        # -- the message being recorded ------------------------------------------------------------
        cycle = Signal(64)
        m.d.sync += cycle.eq(cycle + 1)
        snap_flits = -(-self.snap // nb)
        nh = header_flits(width)
        top = max(snap_flits, nh, 2)
        index = Signal(range(top + 1))         # the flit of the message, saturating at top
        first = Signal(init=1)
        started = Signal(64)
        flits = Signal(16)
        span = Signal(16)
        msg_type = Signal(8)
        payload_bytes = Signal(16)
        snapshot = Signal(max(snap_flits * width, 1))
        pending = Signal()                     # a whole message recorded, entry not yet written

        hdr = noc_header(width)
        type_flit, type_lsb = field_location(width, "msg_type")
        pb_flit, pb_lsb = field_location(width, "payload_bytes")
        pb = out_data[pb_lsb:pb_lsb + hdr.width("payload_bytes")]
        elapsed = Signal(64)
        m.d.comb += elapsed.eq(Mux(first, 0, cycle - started))

        m.d.sync += pending.eq(0)
        with m.If(moved):
            m.d.sync += [
                first.eq(out_last),
                flits.eq(Mux(first, 1, flits + (flits != _SAT16))),
                index.eq(Mux(first, 1, index + (index != top))),
                pending.eq(out_last),
            ]
            with m.If(out_last):
                m.d.sync += span.eq(Mux(elapsed > _SAT16, _SAT16, elapsed))
            with m.If(first):
                m.d.sync += started.eq(cycle)
            pos = Mux(first, 0, index)
            with m.If(pos == type_flit):
                m.d.sync += msg_type.eq(out_data[type_lsb:type_lsb + 8])
            with m.If(pos == pb_flit):
                m.d.sync += payload_bytes.eq(Mux(pb > _SAT16, _SAT16, pb))
            if self.snap:
                with m.If(first):
                    m.d.sync += snapshot.eq(out_data)       # and zeros past the first flit
                for k in range(1, snap_flits):
                    with m.If(~first & (index == k)):
                        m.d.sync += snapshot[k * width:(k + 1) * width].eq(out_data)

        # -- the log ------------------------------------------------------------------------------
        m.submodules.log = log = Memory(shape=entry_width(self.snap), depth=self.entries, init=[])
        wr = log.write_port()
        rd = log.read_port(transparent_for=())
        table = self.regs.log
        m.d.comb += [
            rd.addr.eq(table.r_index),
            table.r_data.eq(rd.data),
            wr.addr.eq(counters.written),
            wr.data.eq(started | payload_bytes << 64 | flits << 80 | span << 96
                       | msg_type << 112
                       | (snapshot[:8 * self.snap] << ENTRY_FIELDS_BITS if self.snap else 0)),
        ]
        full = Signal()
        m.d.comb += full.eq(counters.written == self.entries)
        armed = Signal(8)
        with m.If(self.regs.rearm != armed):
            m.d.sync += [armed.eq(self.regs.rearm), counters.written.eq(0), counters.lost.eq(0)]
        with m.Elif(pending):
            with m.If(full):
                count(m, counters.lost)
            with m.Else():
                m.d.comb += wr.en.eq(1)
                count(m, counters.written)
        return m
