"""A load-balancer tile: whole messages to one of several replicas of the next tile.

The tile's next hops are replicas: every route leaving it has the same key (usually ``None``), so
its next-hop table lists the replicas under one key (:meth:`apiary.design.Design.replicate` makes
such routes). Each message goes out unchanged but for its header's destination (the chosen
replica) and source (this tile), to the replica the policy picks:

=============  ==========================================================================
policy         replica
=============  ==========================================================================
round_robin    0, 1, ..., n-1, 0, ...: message by message, exactly
hash           ``(h * n) >> 16``, ``h`` the 16-bit Toeplitz hash of the flow's 4-tuple
               under the key register ``hash_key`` (:func:`flow_hash`): the same 4-tuple
               goes to the same replica while the key stays the same
port           the ``ports`` table's replica for the local (destination) port if an entry
               matches, else ``port % n``
=============  ==========================================================================

Where the flow comes from (``flow=``):

* ``"meta"`` (default): the :data:`~beehive.proto.messages.PACKET_META` of the message:
  ``peer_ip``, ``local_ip``, ``peer_port``, ``local_port`` (behind UDP RX, TCP RX);
* ``"ipv4"``: the payload is an IPv4 packet (behind Ethernet RX, so the metadata is
  :data:`~beehive.proto.messages.ETH_META`'s, and the frame's first bytes ride in the header
  flit from 256 bits up, :func:`~apiary.noc.spec.head_bytes`): bytes 12-15 (source, the
  peer), 16-19 (destination, local), 20-21 and 22-23 (the ports if the IPv4 header has no
  options; with options, 4 bytes of them, as constant per flow as the ports are).

Messages in and out (any type; the tile reads only the fields above):

=====================  ======================================================================
message                flits
=====================  ======================================================================
in (from anyone)       NoC header, metadata, payload, as framed by
                       :class:`~apiary.noc.framing.MessageSender`
out (to the replica)   the same flits; header ``dst_x``, ``dst_y``, ``dst_fbits`` set to the
                       replica's, ``src_x``, ``src_y``, ``src_fbits`` to this tile's
=====================  ======================================================================

Registers (control plane): ``hash_key`` (32 bits, policy ``hash``) and, with policy ``port``,
the table ``ports`` (``port_entries`` entries of 25 bits: ``port`` bits 0-15, ``replica`` bits
16-23, ``valid`` bit 24; :func:`port_entry`). The key and the table are read once per message,
on the flit that decides it (atomic per message).
"""

from amaranth import Module, Signal, Cat, Const, Mux
from amaranth.hdl import unsigned

from apiary.noc.flit import flit_layout
from apiary.noc.framing import meta_plan
from apiary.noc.header import Fbits, field_location, head_lanes, header_flits, noc_header
from apiary.noc.spec import head_bytes
from apiary.stream.queue import Queue
from apiary.stream.registers import Register, Table
from apiary.tile import Receive, Send, Tile, TileEnv

from ..proto.messages import ETH_META, PACKET_META, MsgType
from apiary.stream.counters import count


__all__ = ["LoadBalancerTile", "POLICIES", "FLOWS", "KEY_RESET", "HASH_BITS", "TUPLE_BITS",
           "flow_tuple", "flow_hash", "hash_replica", "port_entry", "port_replica",
           "decision_flit"]


POLICIES = ("round_robin", "hash", "port")
FLOWS = ("meta", "ipv4")

#: ``hash_key`` at reset.
KEY_RESET = 0x6D2B79F5
#: Bits of the hash; bits of the 4-tuple it is taken over.
HASH_BITS = 16
TUPLE_BITS = 96
_KEY_BITS = TUPLE_BITS + HASH_BITS - 1
# The 32-bit key is stretched to the Toeplitz key's 111 bits by rotations and constants.
_STRETCH = ((0, 0), (7, 0x9E3779B9), (13, 0x7F4A7C15), (19, 0x85EBCA6B))
_PORT_ENTRY_BITS = 25


def _rotl(value, n):
    return ((value << n) | (value >> (32 - n))) & 0xFFFFFFFF if n else value


def _stretched(key):
    words = [_rotl(key, r) ^ c for r, c in _STRETCH]
    return sum(w << (32 * i) for i, w in enumerate(words)) & ((1 << _KEY_BITS) - 1)


def flow_tuple(peer_ip, local_ip, peer_port, local_port):
    """The 96-bit flow value the hash is taken over."""
    return peer_ip | local_ip << 32 | peer_port << 64 | local_port << 80


def flow_hash(flow, key=KEY_RESET):
    """The 16-bit Toeplitz hash of ``flow`` (:func:`flow_tuple`) under the 32-bit ``key``:
    the XOR, over the flow's set bits ``i``, of bits ``i .. i+15`` of the stretched key."""
    k = _stretched(key)
    h = 0
    for i in range(TUPLE_BITS):
        if flow >> i & 1:
            h ^= (k >> i) & ((1 << HASH_BITS) - 1)
    return h


def hash_replica(flow, n, key=KEY_RESET):
    """The replica (0 to ``n - 1``) the ``hash`` policy sends ``flow`` to."""
    return (flow_hash(flow, key) * n) >> HASH_BITS


def port_entry(port, replica, valid=True):
    """A ``ports`` table entry: ``port`` to ``replica``."""
    return port | replica << 16 | int(valid) << 24


def port_replica(port, n, table=()):
    """The replica the ``port`` policy picks for ``port`` given the table's entries (ints of
    :func:`port_entry`): the first valid match, else ``port % n``; a result ``>= n`` is
    dropped."""
    for entry in table:
        if entry >> 24 & 1 and entry & 0xFFFF == port:
            return entry >> 16 & 0xFF
    return port % n


def _probes(width, policy, flow):
    """``{name: [(flit, lsb, bits), ...]}``: where in a message the fields the policy reads are
    (pieces in LSB-first order; a field in network byte order is byte-swapped afterwards)."""
    if policy == "round_robin":
        return {}
    hf = header_flits(width)
    # Behind Ethernet RX the messages carry the Ethernet level of the metadata only.
    carried = PACKET_META if flow == "meta" else ETH_META
    mflits, inline, _ = meta_plan(width, meta_bits=carried.size)
    if flow == "meta":
        base = (hf - 1) * width if inline else hf * width
        fields: dict[str, tuple[int, int] | list[tuple[int, int]]]
        fields = {name: (base + PACKET_META.offset(name), PACKET_META.width(name))
                  for name in ("peer_ip", "local_ip", "peer_port", "local_port")}
    else:
        # Payload byte b: in the header flit's head lanes if the frame carries it there
        # (head_bytes), else in the payload flits after the header and metadata.
        head = head_bytes(width, MsgType.ETH_RX_FRAME)
        first = head_lanes(width, head)

        def at(b):
            return (hf - 1) * width + 8 * (first + b) if b < head else \
                (hf + mflits) * width + 8 * (b - head)
        fields = {name: [(at(b), 8) for b in range(byte, byte + size)] for name, byte, size in
                  (("peer_ip", 12, 4), ("local_ip", 16, 4), ("peer_port", 20, 2),
                   ("local_port", 22, 2))}
    if policy == "port":
        fields = {"local_port": fields["local_port"]}
    out = {}
    for name, spans in fields.items():
        pieces = []
        for pos, left in ([spans] if isinstance(spans, tuple) else spans):
            while left:
                f, lo = divmod(pos, width)
                take = min(width - lo, left)
                pieces.append((f, lo, take))
                pos, left = pos + take, left - take
        out[name] = pieces
    return out


def decision_flit(width, policy="round_robin", flow="meta"):
    """The flit of a message (0 = the first) on which the tile decides where it goes: its
    latency in cycles is one more than this (1 when the policy reads nothing, or reads the
    metadata at 512 bits, where it rides in the header flit)."""
    probes = _probes(width, policy, flow)
    return max((f for pieces in probes.values() for f, _, _ in pieces), default=0)


def _byteswap(value, nbytes):
    return Cat(*(value[8 * (nbytes - 1 - i):8 * (nbytes - i)] for i in range(nbytes)))


class LoadBalancerTile(Tile):
    """Send each message whole to one replica of the next tile, chosen by ``policy``.

    Latency: ``decision_flit + 1`` cycles from a message's first flit in to its first flit out
    (:func:`decision_flit`: 1 cycle for round robin at any width and for every policy at 512 bits,
    where the metadata and, with ``flow="ipv4"``, the frame's first 37 bytes ride in the
    header flit; at 64 bits, where the metadata follows a
    2-flit header, both decide on flit 4 with ``flow="meta"``, where the ports are, and on flit
    6 with ``flow="ipv4"``, behind the Ethernet level's 2 metadata flits). Throughput: one flit
    per cycle, so a message every as many cycles as it has flits, back to back, with no cycle
    between messages; back-pressure
    on the output stalls the input only once ``decision_flit + 4`` flits are queued.

    A message shorter than the decision flit is decided on its last flit (fields it does not
    carry read as zero). Drops, each counted and the next message forwarded: every message when
    the tile has no next hop (``no_route``), a message the ``ports`` table sends to a replica
    that does not exist (``dropped``).

    Counters: ``<replica>_forwarded`` per replica (the replica's tile name, or ``replica<k>``
    when names repeat), ``no_route``, ``dropped``.

    Parameters
    ----------
    env : TileEnv
        Its next hops on the data plane, all under one key: the replicas, in order.
    policy : str
        ``"round_robin"``, ``"hash"`` or ``"port"``.
    flow : str
        ``"meta"`` or ``"ipv4"``: where the 4-tuple (or the port) is read (module docstring).
    hash_key : int
        ``hash_key`` at reset.
    port_entries : int
        Entries of the ``ports`` table (policy ``port``).

    Raises
    ------
    ValueError
        For an unknown policy or flow, or next hops under more than one key.
    """

    # Messages of any type pass as flits (no framing): in, and out to the chosen replica.
    inputs = (Receive("messages", raw=True),)
    outputs = (Send("to_replica", raw=True),)

    def __init__(self, env=None, *, policy: str = "round_robin", flow: str = "meta",
                 hash_key: int = KEY_RESET, port_entries: int = 8) -> None:
        if policy not in POLICIES:
            raise ValueError(f"LoadBalancerTile: policy must be one of {', '.join(POLICIES)}, "
                             f"not {policy!r}")
        if flow not in FLOWS:
            raise ValueError(f"LoadBalancerTile: flow must be one of {', '.join(FLOWS)}, not "
                             f"{flow!r}")
        if not isinstance(port_entries, int) or not 1 <= port_entries <= 256:
            raise ValueError(f"LoadBalancerTile: port_entries must be 1 to 256, not "
                             f"{port_entries!r}")
        env = env if env is not None else TileEnv()
        routes = env.next_hops("data")
        if len(routes) > 1:
            keys = ", ".join(repr(k) for k in routes)
            raise ValueError(f"LoadBalancerTile: its routes must all have one key (the "
                             f"replicas), not several ({keys})")
        self.replicas = list(next(iter(routes.values()), []))
        self.policy, self.flow = policy, flow
        names = [ep.name for ep in self.replicas]
        if len(set(names)) != len(names):
            names = [f"replica{k}" for k in range(len(names))]
        self.counter_names = [f"{name}_forwarded" for name in names]
        counters = {c: f"messages sent to {ep.name} ({ep.x},{ep.y})"
                    for c, ep in zip(self.counter_names, self.replicas)}
        counters.update(no_route="messages dropped: the tile has no next hop",
                        dropped="messages dropped: the ports table names a replica that does "
                                "not exist")
        registers: dict[str, Register | Table] = {}
        if policy == "hash":
            registers["hash_key"] = Register(32, "key of the 4-tuple Toeplitz hash",
                                             reset=hash_key)
        if policy == "port":
            registers["ports"] = Table(port_entries, _PORT_ENTRY_BITS,
                                       "port steering: port (bits 0-15) to replica (16-23), "
                                       "valid (24)")
        self.port_entries = port_entries
        super().__init__(env, counters=counters, registers=registers or None)

    def elaborate(self, platform):
        m = Module()
        width = self.env.width
        n = len(self.replicas)
        ports = self.message_ports(m)
        i, o = ports.messages, ports.to_replica
        probes = _probes(width, self.policy, self.flow)
        decide_at = decision_flit(width, self.policy, self.flow)
        accept = i.valid & i.ready

        if n == 0:
            # No next hop: every message is dropped and counted.
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid & i.payload.last):
                count(m, self.counters.no_route)
            return m

        # Position of the incoming flit in its message, saturating past the decision flit.
        index = Signal(range(decide_at + 2))
        with m.If(accept):
            with m.If(i.payload.last):
                m.d.sync += index.eq(0)
            with m.Elif(index <= decide_at):
                m.d.sync += index.eq(index + 1)
        decide = Signal()
        m.d.comb += decide.eq(accept & ((index == decide_at)
                                        | (i.payload.last & (index < decide_at))))

        # The fields the policy reads, captured as their flits go by; live on the deciding flit.
        values = {}
        for name, pieces in probes.items():
            parts = []
            for k, (f, lo, bits) in enumerate(pieces):
                held = Signal(bits, name=f"{name}_{k}")
                live = i.payload.data[lo:lo + bits]
                with m.If(accept & (index == f)):
                    m.d.sync += held.eq(live)
                with m.If(accept & i.payload.last):
                    m.d.sync += held.eq(0)
                parts.append(Mux(index == f, live, held))
            value = Signal(sum(b for _, _, b in pieces), name=name)
            m.d.comb += value.eq(Cat(*parts))
            if self.flow == "ipv4":
                swapped = Signal(len(value), name=f"{name}_be")
                m.d.comb += swapped.eq(_byteswap(value, len(value) // 8))
                value = swapped
            values[name] = value

        choice = Signal(range(max(n, 2)))
        drop = Signal()
        if self.policy == "round_robin":
            pointer = Signal(range(max(n, 2)))
            m.d.comb += choice.eq(pointer)
            with m.If(decide):
                m.d.sync += pointer.eq(Mux(pointer == n - 1, 0, pointer + 1))
        elif self.policy == "hash":
            self._hash(m, values, n, choice)
        else:
            self._port(m, values["local_port"], n, choice, drop)

        # Flits wait here until their message's choice is known.
        depth = decide_at + 4
        m.submodules.flits = flits = Queue(flit_layout(width), depth)
        m.submodules.choices = choices = Queue({"replica": unsigned(len(choice)),
                                                "drop": unsigned(1)}, depth)
        m.d.comb += [
            flits.i.valid.eq(i.valid & choices.i.ready),
            flits.i.payload.eq(i.payload),
            choices.i.valid.eq(decide),
            choices.i.payload.replica.eq(choice),
            choices.i.payload.drop.eq(drop),
            i.ready.eq(flits.i.ready & choices.i.ready),
        ]
        with m.If(decide & drop):
            count(m, self.counters.dropped)
        for k, name in enumerate(self.counter_names):
            counter = getattr(self.counters, name)
            with m.If(decide & ~drop & (choice == k)):
                count(m, counter)

        # Out: the head message's flits with the header's destination and source rewritten.
        hdr = noc_header(width)
        nh = header_flits(width)
        out_index = Signal(range(nh + 1))
        go = flits.o.valid & choices.o.valid
        head = choices.o.payload
        take = go & (head.drop | o.ready)
        m.d.comb += [
            flits.o.ready.eq(take),
            choices.o.ready.eq(take & flits.o.payload.last),
            o.valid.eq(go & ~head.drop),
            o.payload.last.eq(flits.o.payload.last),
        ]
        with m.If(take):
            with m.If(flits.o.payload.last):
                m.d.sync += out_index.eq(0)
            with m.Elif(out_index < nh):
                m.d.sync += out_index.eq(out_index + 1)
        dst = {name: Signal(hdr.width(name), name=f"replica_{name}")
               for name in ("dst_x", "dst_y", "dst_fbits")}
        with m.Switch(head.replica):
            for k, ep in enumerate(self.replicas):
                with m.Case(k):
                    m.d.comb += [dst["dst_x"].eq(ep.x), dst["dst_y"].eq(ep.y),
                                 dst["dst_fbits"].eq(ep.fbits)]
        fields = dict(dst, src_x=Const(self.env.x, 8), src_y=Const(self.env.y, 8),
                      src_fbits=Const(Fbits.LOCAL0, 4))
        data = Signal(width)
        m.d.comb += data.eq(flits.o.payload.data)
        for name, value in fields.items():
            flit, lsb = field_location(width, name)
            with m.If(out_index == flit):
                m.d.comb += data[lsb:lsb + hdr.width(name)].eq(value)
        m.d.comb += o.payload.data.eq(data)
        return m

    def _hash(self, m, values, n, choice):
        key = self.regs.hash_key
        stretched = Signal(_KEY_BITS)
        words = [key.rotate_left(r) ^ Const(c, 32) for r, c in _STRETCH]
        m.d.comb += stretched.eq(Cat(*words)[:_KEY_BITS])
        flow = Signal(TUPLE_BITS)
        m.d.comb += flow.eq(Cat(values["peer_ip"], values["local_ip"], values["peer_port"],
                                values["local_port"]))
        h = Signal(HASH_BITS)
        terms = [Mux(flow[b], stretched[b:b + HASH_BITS], 0) for b in range(TUPLE_BITS)]
        acc = terms[0]
        for t in terms[1:]:
            acc = acc ^ t
        m.d.comb += h.eq(acc)
        m.d.comb += choice.eq((h * n) >> HASH_BITS)

    def _port(self, m, port, n, choice, drop):
        tbl = self.regs.ports
        entries = [Signal(_PORT_ENTRY_BITS, name=f"port_entry{k}")
                   for k in range(self.port_entries)]
        with m.If(tbl.w_valid):
            with m.Switch(tbl.w_index):
                for k, e in enumerate(entries):
                    with m.Case(k):
                        m.d.sync += e.eq(tbl.w_data)
        with m.Switch(tbl.r_index):
            for k, e in enumerate(entries):
                with m.Case(k):
                    m.d.comb += tbl.r_data.eq(e)
        picked = Signal(8)
        m.d.comb += picked.eq(port % n)
        # The first valid entry that matches wins: scan from the last so the first is applied
        # last.
        for e in reversed(entries):
            with m.If(e[24] & (e[:16] == port)):
                m.d.comb += picked.eq(e[16:24])
        m.d.comb += [choice.eq(picked[:len(choice)]), drop.eq(picked >= n)]
