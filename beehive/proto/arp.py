"""ARP (RFC 826): the header table, and the tile that answers requests for the design's address
and resolves addresses for other tiles.

Messages (metadata :data:`~beehive.proto.messages.PACKET_META`; fields not named are 0)
-----------------------------------------------------------------------------------------

================  ====  ======================  ==============================  ===============
message           type  from → to               metadata                        payload
================  ====  ======================  ==============================  ===============
``ETH_RX_FRAME``  12    Ethernet RX → ARP       ``peer_mac``, ``ethertype``     the ARP packet
                                                0x0806, ``vlan``, ``vlan_tci``  (any padding)
``ETH_TX_FRAME``  1     ARP → Ethernet TX       ``peer_mac`` (the requester,    28 bytes: a
                        (route key ``None``)    or broadcast for a request),    reply, or a
                                                ``ethertype`` 0x0806, ``vlan``, request of the
                                                ``vlan_tci``                    resolver
``ARP_RESOLVE``   27    a tile → ARP            ``peer_ip``: the address to     none (any is
                                                resolve; ``vlan``,              ignored)
                                                ``vlan_tci``: where to ask
                                                (0: untagged)
``ARP_RESOLVED``  28    ARP → the request's     ``peer_ip`` (the request's),    none
                        ``src_x/src_y/          ``peer_mac`` (0: not resolved),
                        src_fbits`` (route key  ``vlan``, ``vlan_tci`` (where it
                        ``"resolved"``)         was learned; the request's if 0)
================  ====  ======================  ==============================  ===============

The ARP tile tells ``ARP_RESOLVE`` from frames by ``msg_type`` alone, on any ``dst_fbits``:
a requester routes to it as to any tile (``d.route("tcp", "arp", key=...)``, sub-port
``LOCAL0``). Every other message type is taken for a frame, as without the resolver.

Routes of the ARP tile: ``d.route("arp", "eth_tx")`` (key ``None``: the frames), and for each
tile that resolves, ``d.route("arp", requester, key="resolved")`` (:data:`RESOLVED_KEY`). The
answers go to each request's source whatever the routes say; the routes tell the deadlock check
the path. A tile with routes under ``"resolved"`` has the resolver (see :class:`ArpTile`).
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, enum
from amaranth.lib.wiring import In, Out, connect, flipped

from apiary.noc.header import Fbits
from apiary.noc.msgtype import register_msg_types
from apiary.noc.spec import register_formats
from apiary.stream.header import Header, header_signal, header_view
from apiary.stream.peek import PayloadPeek
from apiary.stream.queue import Queue
from apiary.stream.realign import StreamInsert
from apiary.tile import Receive, Send, Tile, TileEnv

from .addresses import (AddressesSignature, address_registers, address_source,
                        local_addresses, netmask_gateway)
from .ethernet import BROADCAST, EtherType
from .layer import RxLayerTile, level_meta
from .messages import META_BITS, PACKET_META, MsgType
from apiary.stream.counters import count


__all__ = ["ArpOperation", "ArpMsgType", "ARP", "ARP_BYTES", "ARP_HTYPE_ETHERNET", "RESOLVED_KEY",
           "ArpTile"]


class ArpOperation(enum.Enum, shape=16):
    REQUEST = 1
    REPLY   = 2


@register_msg_types
class ArpMsgType(enum.Enum, shape=8):
    """Address resolution for other tiles (see the module docstring)."""
    ARP_RESOLVE  = 27
    ARP_RESOLVED = 28


register_formats(ArpMsgType, PACKET_META)


#: ARP for IPv4 over Ethernet (RFC 826), 28 bytes.
ARP = Header("arp", [
    ("htype", 16), ("ptype", 16), ("hlen", 8), ("plen", 8), ("oper", 16),
    ("sha", 48), ("spa", 32), ("tha", 48), ("tpa", 32),
])
ARP_BYTES = ARP.size // 8
ARP_HTYPE_ETHERNET = 1

#: Route key of the ARP tile's answers to requesters: ``d.route("arp", tile, key=RESOLVED_KEY)``.
RESOLVED_KEY = "resolved"


def _ipv4_over_ethernet(pkt):
    return ((pkt.htype == ARP_HTYPE_ETHERNET) & (pkt.ptype == EtherType.IPV4.value)
            & (pkt.hlen == 6) & (pkt.plen == 4))


def _arp_packet(m, oper, sha, spa, tha, tpa):
    """The 28 bytes (lane order) of an ARP packet for IPv4 over Ethernet."""
    value = Signal(8 * ARP_BYTES, name="arp_packet")
    pkt = header_view(ARP, value)
    m.d.comb += [
        pkt.htype.eq(ARP_HTYPE_ETHERNET), pkt.ptype.eq(EtherType.IPV4.value),
        pkt.hlen.eq(6), pkt.plen.eq(4), pkt.oper.eq(oper),
        pkt.sha.eq(sha), pkt.spa.eq(spa), pkt.tha.eq(tha), pkt.tpa.eq(tpa),
    ]
    return value


class _ArpResponder(RxLayerTile):
    """:class:`ArpTile` without the resolver: a receive layer that patches each request for the
    design's address into its reply."""

    head_bytes = ARP_BYTES
    key_width = 1
    msg_type = MsgType.ETH_TX_FRAME
    receives = MsgType.ETH_RX_FRAME
    drop_reasons = {
        "truncated": "packets shorter than 28 bytes",
        "unsupported": "ARP for other than IPv4 over Ethernet",
        "not_request": "replies (gratuitous ARP included)",
        "not_for_us": "requests for another address",
    }
    patch_bytes = ARP_BYTES
    reply_is_patch = True

    def __init__(self, env):
        super().__init__(env)
        self.mac, self.ipv4 = local_addresses(self.env)

    def parse(self, m, p):
        req = p.field(ARP)
        p.drop("truncated", p.head_len < ARP_BYTES)
        p.drop("unsupported", ~_ipv4_over_ethernet(req))
        p.drop("not_request", req.oper != ArpOperation.REQUEST.value)
        p.drop("not_for_us", req.tpa != self.ipv4)
        p.patch(_arp_packet(m, ArpOperation.REPLY.value, self.mac, self.ipv4, req.sha, req.spa),
                ARP_BYTES)
        p.out_length = ARP_BYTES
        p.set_meta(peer_mac=req.sha, ethertype=EtherType.ARP.value)


_RESOLVER_COUNTERS = {
    "truncated": "packets shorter than 28 bytes",
    "unsupported": "ARP for other than IPv4 over Ethernet, or neither request nor reply",
    "not_for_us": "requests and replies for another address",
    "unmatched_reply": "replies to the design's address that answer no pending resolution "
                       "(unsolicited, late or duplicate), dropped without touching the cache",
    "no_room": "requests for the design's address dropped, 2 replies already waiting to leave",
    "forwarded": "replies sent for requests for the design's address",
    "matched_reply": "replies that answered pending resolutions",
    "requests_sent": "ARP requests sent for resolutions, retransmissions included",
    "resolve_cached": "ARP_RESOLVE answered from the cache",
    "resolve_replied": "ARP_RESOLVE answered with the MAC of a reply",
    "resolve_timeout": "ARP_RESOLVE answered with peer_mac 0 after the last retry",
    "resolve_busy": "ARP_RESOLVE answered with peer_mac 0 at once: every pending entry in use",
    "resolve_dropped": "ARP_RESOLVE dropped unanswered: every pending entry and the answer "
                       "slot in use",
}


class _State(enum.Enum, shape=2):
    FREE = 0
    WAIT = 1        # an ARP request is out (or due); waiting for the reply
    DONE = 2        # the answer waits to leave


#: One resolution: what the answer needs, and where the request came from.
_ENTRY = data.StructLayout({
    "state": _State, "ip": 32, "mac": 48, "vlan": 1, "vlan_tci": 16,
    "dst_x": 8, "dst_y": 8, "dst_fbits": 4, "send": 1,
})
#: The same, for a tile that may resolve through a gateway: ``target`` is the address asked for
#: (the gateway's, or ``ip`` itself on the link).
_ROUTED_ENTRY = data.StructLayout({**_ENTRY.members, "target": 32})
_CACHED = data.StructLayout({"valid": 1, "ip": 32, "mac": 48, "vlan": 1, "vlan_tci": 16})


class ArpTile(Tile):
    """Answer ARP requests for the design's address and, with the resolver, resolve IPv4
    addresses for other tiles (message formats in the module docstring).

    **Responder** (always). Each request for the design's IPv4 address gets a 28-byte reply to
    the requester's MAC, its VLAN tag kept. Without the resolver this is a receive layer
    (:class:`~beehive.proto.layer.RxLayerTile`), cut-through: the reply's first word leaves as
    soon as the request's first 28 bytes are in. Drops, each counted: ``truncated`` (under 28
    bytes), ``unsupported`` (not IPv4 over Ethernet), ``not_request`` (replies, gratuitous ARP
    included), ``not_for_us`` (another target address), ``no_route``.

    **Resolver** (``resolver=True``, or by default when the tile has routes under
    ``"resolved"``). An ``ARP_RESOLVE`` takes a free pending entry: an address in the cache is
    answered from it at once, otherwise the entry sends an ARP request (to ff:ff:ff:ff:ff:ff,
    from the design's MAC and IPv4 address, on the request's VLAN) at once and again every
    ``retry_cycles`` up to ``retries`` times, and is answered by the first reply (oper 2, to
    the design's address) from that address, or with ``peer_mac`` 0 ``retry_cycles`` after the
    last retransmission. One entry serves one requester and sends its own requests; all the
    entries waiting on an address are answered by one reply. With every pending entry in use a
    request takes the *answer slot* and is answered at once: from the cache, else with
    ``peer_mac`` 0 (``resolve_busy``); with that slot taken too (its answer not yet on its way
    out), it is dropped unanswered (``resolve_dropped``). An entry is held from the request's
    arrival until its answer starts to leave, so requesters that keep at most
    ``pending_entries`` requests outstanding between them are never refused, and at most
    ``pending_entries + 1`` never dropped.

    The cache (``cache_entries``, replaced round robin, never expiring) learns the sender
    (``sha``, ``spa``, VLAN) of every request for the design's address (a host ARPs the design
    before it talks to it) and of every reply that answers a pending entry, updating the entry
    of an address it already holds. Replies that answer nothing (``unmatched_reply``) do not
    touch it.

    With the resolver the tile never holds its input while it waits for its output: it takes
    its input at one flit per cycle, with at most 2 idle cycles between messages, whatever
    ``noc_out`` does. What it cannot keep is dropped and counted instead: a request for the
    design's address whose reply finds 2 replies waiting to leave (``no_room``; the host asks
    again), an ``ARP_RESOLVE`` as above. Outputs leave one message at a time (queued replies
    first, then answers, then due requests), with an idle cycle between messages. Latency, with
    ``noc_out`` free: a reply's first flit leaves 3 cycles after the flit with the request's
    28th byte came in (2 without the resolver), an answer from the cache or a first ARP
    request 4 cycles after the ``ARP_RESOLVE``'s last flit. Frames are counted once each, as
    without the resolver, except that ``unsupported`` includes operations other than request
    and reply, ``not_for_us`` includes replies to other addresses, and replies to the design's
    address count as ``matched_reply`` or ``unmatched_reply``; there is no ``no_route``.
    Every ``ARP_RESOLVE`` is counted once, under how it is answered (``resolve_*``).

    **Gateway.** With ``settings["netmask"]`` and ``settings["gateway"]`` (or their registers),
    an address outside the design's subnet is resolved by asking for the gateway's MAC (the
    answer still names the address asked about); with no gateway (0), every address is asked
    for itself, as on one link.

    **Run-time addresses** (``settings["runtime_addresses"]``, :mod:`beehive.proto.addresses`).
    The tile holds the design's addresses in its registers ``mac``, ``ipv4``, ``netmask`` and
    ``gateway`` and drives them on ``addresses`` (:class:`AddressesSignature`) to the tiles
    that read them; it needs the resolver. When the MAC or IPv4 address changes, and then
    stays unchanged for ``announce_delay`` cycles (a 48-bit MAC is written a word at a time),
    the tile announces it: ``announcements`` gratuitous ARP requests (RFC 5227's announcement:
    sender and target the new address, to broadcast), ``retry_cycles`` apart, counted in
    ``announced``. Requests for the old address are not answered from the cycle of the change.

    ``streaming`` is False. With the resolver that is what the tile does (above), and it is
    what lets a requester that holds its input while it sends (a streaming tile) both send to
    the ARP tile and hear from it without a cycle in ``apiary check``. Without the resolver the
    tile holds its input while Ethernet TX takes a reply, but Ethernet TX sends nothing on the
    NoC, so no cycle can pass through that wait.

    Parameters
    ----------
    env : TileEnv
        ``settings["mac"]``, ``settings["ipv4"]``: the design's addresses. Routes: Ethernet TX
        under ``None``; with the resolver exactly one, and requesters under ``"resolved"``.
    resolver : bool or None
        Build the resolver; by default, if the routes have the key ``"resolved"``.
    cache_entries : int
        Addresses the cache holds (default 4).
    pending_entries : int
        Resolutions under way at once (default 2), besides the answer slot.
    retry_cycles : int
        Cycles between an entry's ARP requests, and from the last one to its answer with
        ``peer_mac`` 0 (default 250_000: 1 ms at 250 MHz).
    retries : int
        Retransmissions after the first request (default 3).
    announce_delay : int
        Run-time addresses: cycles an address must stay unchanged before it is announced
        (default 1,000).
    announcements : int
        Run-time addresses: gratuitous ARP requests per change (default 2).

    Raises
    ------
    ValueError
        If a parameter is out of range, a ``"resolved"`` route is declared with
        ``resolver=False`` (or run-time addresses), with the resolver the routes are not one
        Ethernet TX under ``None`` plus any under ``"resolved"``, or the netmask or gateway
        setting is malformed.
    """

    #: Neither mode can close a cycle through the ARP tile (see above).
    streaming = False

    #: With the resolver; without it, frames alone, passed to and from the responder.
    inputs = (Receive("requests", MsgType.ETH_RX_FRAME, ArpMsgType.ARP_RESOLVE, meta=PACKET_META,
                      short_meta=True, empty_packets=True),)
    outputs = (Send("answers", MsgType.ETH_TX_FRAME, ArpMsgType.ARP_RESOLVED, meta=PACKET_META,
                    short_meta=True),)

    def __init__(self, env=None, *, resolver=None, cache_entries=4, pending_entries=2,
                 retry_cycles=250_000, retries=3, announce_delay=1000, announcements=2):
        env = env if env is not None else TileEnv()
        for name, value, low in (("cache_entries", cache_entries, 1),
                                 ("pending_entries", pending_entries, 1),
                                 ("retry_cycles", retry_cycles, 1), ("retries", retries, 0),
                                 ("announce_delay", announce_delay, 1),
                                 ("announcements", announcements, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"ArpTile's {name} must be an integer of at least {low}, "
                                 f"not {value!r}")
        self.cache_entries, self.pending_entries = cache_entries, pending_entries
        self.retry_cycles, self.retries = retry_cycles, retries
        self.announce_delay, self.announcements = announce_delay, announcements
        routes = env.next_hops("data")
        self.source = address_source(env)
        self.runtime = self.source is not None
        if self.runtime and resolver is False:
            raise ValueError(f"ArpTile {env.name!r}: run-time addresses (settings"
                             f"['runtime_addresses']) need the resolver, not resolver=False")
        self.resolver = (RESOLVED_KEY in routes or self.runtime if resolver is None
                         else bool(resolver))
        self.mac, self.ipv4 = local_addresses(env)
        self.netmask, self.gateway = netmask_gateway(env)
        self.routed = self.runtime or self.gateway != 0
        if self.resolver:
            hops = routes.get(None, [])
            if len(hops) != 1 or set(routes) - {None, RESOLVED_KEY}:
                raise ValueError(f"ArpTile {env.name!r} with the resolver needs one route to "
                                 f"Ethernet TX (key None) and routes to requesters under key "
                                 f"{RESOLVED_KEY!r}; it has {routes}")
            self.tx_hop, = hops
            counters = dict(_RESOLVER_COUNTERS)
            if self.runtime:
                counters["announced"] = "gratuitous ARP requests sent for a changed address"
        else:
            if RESOLVED_KEY in routes:
                raise ValueError(f"ArpTile {env.name!r} has routes under {RESOLVED_KEY!r} but "
                                 f"resolver=False")
            self._responder = _ArpResponder(env)
            counters = _ArpResponder.layer_counters()
            self.inputs = (Receive("requests", MsgType.ETH_RX_FRAME, raw=True),)
            self.outputs = (Send("answers", MsgType.ETH_TX_FRAME, raw=True),)
        if self.source == "registers":
            super().__init__(env, {"addresses": Out(AddressesSignature())}, counters=counters,
                             registers=address_registers(env))
            regs = self.regs
            self.mac, self.ipv4, self.netmask, self.gateway = (
                regs.mac, regs.ipv4, regs.netmask, regs.gateway)
        elif self.source == "dhcp":        # the DHCP client drives them
            super().__init__(env, {"addresses": In(AddressesSignature())}, counters=counters)
            wires = self.addresses
            self.mac, self.ipv4, self.netmask, self.gateway = (
                wires.mac, wires.ipv4, wires.netmask, wires.gateway)
        else:
            super().__init__(env, counters=counters)

    def elaborate(self, platform):
        m = Module()
        if not self.resolver:
            m.submodules.responder = r = self._responder
            ports = self.message_ports(m)
            connect(m, tile=ports.requests, responder=r.noc_in)
            connect(m, responder=r.noc_out, tile=ports.answers)
            connect(m, responder=r.counters, tile=flipped(self.counters))
            return m
        # Pending entries, then the answer slot; `picked`: the entry whose answer or request
        # the output takes in this cycle (one-hot).
        layout = _ROUTED_ENTRY if self.routed else _ENTRY
        entries = [Signal(layout, name=f"entry{k}") for k in range(self.pending_entries + 1)]
        picked = Signal(len(entries))
        if self.source == "registers":
            m.d.comb += [self.addresses.mac.eq(self.mac), self.addresses.ipv4.eq(self.ipv4),
                         self.addresses.netmask.eq(self.netmask),
                         self.addresses.gateway.eq(self.gateway)]
        cur, pkt, decide, head_len = self._input(m)
        replies = self._decide(m, entries, picked, cur, pkt, decide, head_len)
        self._output(m, entries, picked, replies)
        return m

    # -- the resolver ----------------------------------------------------------------------------

    def _target(self, e):
        """The address an entry asks for: its ``target`` if the tile may route, else its own."""
        return e.target if self.routed else e.ip

    def _input(self, m):
        """Every message: its header fields and first 28 bytes; ``decide`` in the cycle both are
        in (the packet is then dropped from the peek: nothing is forwarded)."""
        width = self.env.width
        rx = self.message_ports(m, direction="in").requests
        m.submodules.peek = peek = PayloadPeek(width, ARP_BYTES)
        connect(m, receiver=rx.o_data, peek=peek.i)

        hdr = rx.o_hdr.payload
        meta = data.View(PACKET_META.layout(), hdr.meta[:META_BITS])
        cur = Signal(data.StructLayout({"resolve": 1, "ip": 32, "vlan": 1, "vlan_tci": 16,
                                        "src_x": 8, "src_y": 8, "src_fbits": 4}))
        cur_valid = Signal()
        m.d.comb += rx.o_hdr.ready.eq(~cur_valid)
        with m.If(rx.o_hdr.valid & rx.o_hdr.ready):
            m.d.sync += [
                cur.resolve.eq(hdr.msg_type == ArpMsgType.ARP_RESOLVE.value),
                cur.ip.eq(meta.peer_ip), cur.vlan.eq(meta.vlan), cur.vlan_tci.eq(meta.vlan_tci),
                cur.src_x.eq(hdr.src_x), cur.src_y.eq(hdr.src_y), cur.src_fbits.eq(hdr.src_fbits),
                cur_valid.eq(1),
            ]
        decide = Signal()
        m.d.comb += [
            decide.eq(cur_valid & peek.head_valid),
            peek.verdict.valid.eq(decide),
            peek.verdict.payload.keep.eq(0),
        ]
        with m.If(decide):
            m.d.sync += cur_valid.eq(0)
        return cur, header_signal(m, ARP, peek.head), decide, peek.head_len

    def _decide(self, m, entries, picked, cur, pkt, decide, head_len):
        """Act on the message decided (frames: count, queue a reply, learn, match pending
        entries; resolves: take an entry), and run the entries' retry timers. Returns the
        queue of replies."""
        c = self.counters
        pending, slot = entries[:-1], entries[-1]

        truncated, unsupported, not_for_us = Signal(), Signal(), Signal()
        m.d.comb += [
            truncated.eq(head_len < ARP_BYTES),
            unsupported.eq(~_ipv4_over_ethernet(pkt)
                           | ((pkt.oper != ArpOperation.REQUEST.value)
                              & (pkt.oper != ArpOperation.REPLY.value))),
            not_for_us.eq(pkt.tpa != self.ipv4),
        ]
        frame, resolve, request, reply = Signal(), Signal(), Signal(), Signal()
        good = ~truncated & ~unsupported & ~not_for_us
        m.d.comb += [
            frame.eq(decide & ~cur.resolve),
            resolve.eq(decide & cur.resolve),
            request.eq(good & (pkt.oper == ArpOperation.REQUEST.value)),
            reply.eq(good & (pkt.oper == ArpOperation.REPLY.value)),
        ]

        # Replies to requests for the design's address, waiting for the output.
        m.submodules.replies = replies = Queue({"sha": 48, "spa": 32, "vlan": 1,
                                                "vlan_tci": 16}, 2)
        m.d.comb += [
            replies.i.valid.eq(frame & request),
            replies.i.payload.sha.eq(pkt.sha), replies.i.payload.spa.eq(pkt.spa),
            replies.i.payload.vlan.eq(cur.vlan), replies.i.payload.vlan_tci.eq(cur.vlan_tci),
        ]

        # The pending entries a reply answers: those waiting on its sender.
        matches = Signal(len(pending))
        m.d.comb += matches.eq(Cat(frame & reply & (e.state == _State.WAIT)
                                   & (self._target(e) == pkt.spa)
                                   for e in pending))
        with m.If(frame):
            with m.If(truncated):
                count(m, c.truncated)
            with m.Elif(unsupported):
                count(m, c.unsupported)
            with m.Elif(not_for_us):
                count(m, c.not_for_us)
            with m.Elif(request & replies.i.ready):
                count(m, c.forwarded)
            with m.Elif(request):
                count(m, c.no_room)
            with m.Elif(matches.any()):
                count(m, c.matched_reply)
            with m.Else():
                count(m, c.unmatched_reply)

        # The address to ask for: the gateway's for one outside the subnet, if there is one.
        target = Signal(32)
        off_link = ((cur.ip ^ self.ipv4) & self.netmask) != 0
        m.d.comb += target.eq(Mux(off_link & (self.gateway != 0), self.gateway, cur.ip))
        hit, cached = self._cache(m, target, learn=(frame & request) | matches.any(),
                                  ip=pkt.spa, mac=pkt.sha, vlan=cur.vlan, vlan_tci=cur.vlan_tci)

        # The output takes an answer (the entry is free again) or a request (no longer due).
        for k, e in enumerate(entries):
            with m.If(picked[k]):
                with m.If(e.state == _State.DONE):
                    m.d.sync += e.state.eq(_State.FREE)
                with m.Else():
                    m.d.sync += e.send.eq(0)

        # A resolve takes the first free pending entry, else the answer slot.
        free = Signal(len(pending))
        m.d.comb += free.eq(Cat(e.state == _State.FREE for e in pending))
        take = Signal(len(entries))
        for k in reversed(range(len(pending))):
            with m.If(free[k]):
                m.d.comb += take.eq(1 << k)
        with m.If(~free.any() & (slot.state == _State.FREE)):
            m.d.comb += take.eq(1 << len(pending))
        with m.If(resolve):
            with m.If(take == 0):
                count(m, c.resolve_dropped)
            with m.Elif(hit):
                count(m, c.resolve_cached)
            with m.Elif(~free.any()):
                count(m, c.resolve_busy)
        for k, e in enumerate(entries):
            waits = ~hit if e is not slot else 0
            with m.If(resolve & take[k]):
                m.d.sync += [
                    e.state.eq(Mux(waits, _State.WAIT, _State.DONE)),
                    e.ip.eq(cur.ip),
                    *([e.target.eq(target)] if self.routed else []),
                    e.mac.eq(Mux(hit, cached.mac, 0)),
                    e.vlan.eq(Mux(hit, cached.vlan, cur.vlan)),
                    e.vlan_tci.eq(Mux(hit, cached.vlan_tci, cur.vlan_tci)),
                    e.dst_x.eq(cur.src_x), e.dst_y.eq(cur.src_y), e.dst_fbits.eq(cur.src_fbits),
                    e.send.eq(waits),
                ]

        # Retries: a waiting entry's timer runs from when it was taken; each expiry makes
        # another request due, the one after the last makes the answer peer_mac 0. A reply in
        # the cycle of that expiry wins.
        timeouts = []
        for k, e in enumerate(pending):
            timer = Signal(range(self.retry_cycles), name=f"timer{k}")
            tries = Signal(range(self.retries + 1), name=f"tries{k}")
            expires = Signal(name=f"expires{k}")
            m.d.comb += expires.eq((e.state == _State.WAIT) & (timer == 0))
            with m.If(resolve & take[k]):
                m.d.sync += [timer.eq(self.retry_cycles - 1), tries.eq(self.retries)]
            with m.If(e.state == _State.WAIT):
                m.d.sync += timer.eq(Mux(timer == 0, self.retry_cycles - 1, timer - 1))
            with m.If(expires & (tries == 0)):
                m.d.sync += [e.state.eq(_State.DONE), e.mac.eq(0), e.send.eq(0)]
            with m.Elif(expires):
                m.d.sync += [e.send.eq(1), tries.eq(tries - 1)]
            with m.If(matches[k]):
                m.d.sync += [e.state.eq(_State.DONE), e.mac.eq(pkt.sha), e.vlan.eq(cur.vlan),
                             e.vlan_tci.eq(cur.vlan_tci), e.send.eq(0)]
            timeouts.append(expires & (tries == 0) & ~matches[k])
        count(m, c.resolve_timeout, sum(timeouts))
        count(m, c.resolve_replied, sum(matches))
        return replies.o

    def _cache(self, m, lookup, *, learn, **fields):
        """``(hit, entry)``: whether the address ``lookup`` is cached, and its entry. With
        ``learn``, ``fields`` (``ip``, ``mac``, ``vlan``, ``vlan_tci``) are written over the
        entry of their ``ip``, or else the oldest."""
        cache = [Signal(_CACHED, name=f"cache{k}") for k in range(self.cache_entries)]
        oldest = Signal(range(self.cache_entries))
        hits, same = Signal(len(cache)), Signal(len(cache))
        m.d.comb += [
            hits.eq(Cat(e.valid & (e.ip == lookup) for e in cache)),
            same.eq(Cat(e.valid & (e.ip == fields["ip"]) for e in cache)),
        ]
        entry = Signal(_CACHED)
        for k, e in enumerate(cache):
            with m.If(hits[k]):
                m.d.comb += entry.eq(e)
        with m.If(learn):
            with m.If(~same.any()):
                m.d.sync += oldest.eq(Mux(oldest == len(cache) - 1, 0, oldest + 1))
            for k, e in enumerate(cache):
                with m.If(Mux(same.any(), same[k], oldest == k)):
                    m.d.sync += e.valid.eq(1)
                    m.d.sync += [getattr(e, name).eq(value) for name, value in fields.items()]
        return hits.any(), entry

    def _output(self, m, entries, picked, replies):
        """One message at a time to the sender: a queued reply, else an answer, else a due
        request. Frames take their 28 bytes from a :class:`StreamInsert` of an empty packet."""
        width, c, hop = self.env.width, self.counters, self.tx_hop
        sender = self.message_ports(m, direction="out").answers
        m.submodules.insert = insert = StreamInsert(width, ARP_BYTES, fixed=True)
        m.d.comb += [insert.i.valid.eq(1), insert.i.payload.last.eq(1)]
        connect(m, insert=insert.o, sender=sender.i_data)

        job = Signal(data.StructLayout({"frame": 1, "request": 1, "ip": 32, "mac": 48,
                                        "vlan": 1, "vlan_tci": 16,
                                        "dst_x": 8, "dst_y": 8, "dst_fbits": 4}))
        busy, desc_done = Signal(), Signal()
        desc = sender.i_hdr.payload
        meta = Signal(PACKET_META.layout())
        carried_meta, meta_flits = level_meta(width, desc.msg_type, meta.as_value())
        m.d.comb += [
            desc.meta.eq(carried_meta), desc.meta_flits.eq(meta_flits),
            desc.dst_x.eq(Mux(job.frame, hop.x, job.dst_x)),
            desc.dst_y.eq(Mux(job.frame, hop.y, job.dst_y)),
            desc.dst_fbits.eq(Mux(job.frame, hop.fbits, job.dst_fbits)),
            desc.src_x.eq(self.env.x), desc.src_y.eq(self.env.y), desc.src_fbits.eq(Fbits.LOCAL0),
            desc.msg_type.eq(Mux(job.frame, MsgType.ETH_TX_FRAME.value,
                                 ArpMsgType.ARP_RESOLVED.value)),
            desc.payload_bytes.eq(Mux(job.frame, ARP_BYTES, 0)),
            meta.peer_mac.eq(Mux(job.request, BROADCAST, job.mac)),
            meta.ethertype.eq(Mux(job.frame, EtherType.ARP.value, 0)),
            meta.vlan.eq(job.vlan), meta.vlan_tci.eq(job.vlan_tci),
            meta.peer_ip.eq(Mux(job.frame, 0, job.ip)),
            sender.i_hdr.valid.eq(busy & ~desc_done),
            insert.hdr.valid.eq(busy & job.frame),
            insert.hdr.payload.data.eq(_arp_packet(
                m, Mux(job.request, ArpOperation.REQUEST.value, ArpOperation.REPLY.value),
                self.mac, self.ipv4, Mux(job.request, 0, job.mac), job.ip)),
        ]
        # A frame's descriptor is taken before its payload, whose end ends the frame.
        desc_taken = sender.i_hdr.valid & sender.i_hdr.ready
        with m.If(desc_taken):
            m.d.sync += desc_done.eq(1)
        with m.If(Mux(job.frame, insert.hdr.valid & insert.hdr.ready, desc_taken)):
            m.d.sync += [busy.eq(0), desc_done.eq(0)]

        announce, announced = self._announcer(m) if self.runtime else (0, None)

        # Answers before requests; the first entry of either kind.
        answers, due, first = Signal(len(entries)), Signal(len(entries)), Signal(len(entries))
        m.d.comb += [
            answers.eq(Cat(e.state == _State.DONE for e in entries)),
            due.eq(Cat((e.state == _State.WAIT) & e.send for e in entries)),
        ]
        choice = Mux(answers.any(), answers, due)
        for k in reversed(range(len(entries))):
            with m.If(choice[k]):
                m.d.comb += first.eq(1 << k)
        with m.If(~busy):
            with m.If(replies.valid):
                m.d.comb += replies.ready.eq(1)
                m.d.sync += [
                    busy.eq(1), job.frame.eq(1), job.request.eq(0),
                    job.ip.eq(replies.payload.spa), job.mac.eq(replies.payload.sha),
                    job.vlan.eq(replies.payload.vlan), job.vlan_tci.eq(replies.payload.vlan_tci),
                ]
            if announced is not None:
                with m.Elif(announce):
                    m.d.comb += announced.eq(1)
                    m.d.sync += [busy.eq(1), job.frame.eq(1), job.request.eq(1),
                                 job.ip.eq(self.ipv4), job.vlan.eq(0), job.vlan_tci.eq(0)]
                    count(m, c.announced)
            with m.Elif(choice.any()):
                m.d.comb += picked.eq(first)
                request = ~answers.any()
                m.d.sync += [busy.eq(1), job.frame.eq(request), job.request.eq(request)]
                with m.If(request):
                    count(m, c.requests_sent)
        for k, e in enumerate(entries):
            with m.If(picked[k]):
                m.d.sync += [
                    job.ip.eq(Mux(e.state == _State.DONE, e.ip, self._target(e))),
                    job.mac.eq(e.mac), job.vlan.eq(e.vlan),
                    job.vlan_tci.eq(e.vlan_tci),
                    job.dst_x.eq(e.dst_x), job.dst_y.eq(e.dst_y), job.dst_fbits.eq(e.dst_fbits),
                ]

    def _announcer(self, m):
        """Run-time addresses: ``(due, taken)``. A gratuitous ARP request is ``due`` once the MAC
        or IPv4 address has changed and then held for ``announce_delay`` cycles, and again
        ``retry_cycles`` after each one sent, ``announcements`` in all; the output drives
        ``taken`` as it takes one. A change meanwhile starts the count again. An IPv4 address
        of 0 (a DHCP client's without a lease) is not announced."""
        mac, ipv4 = local_addresses(self.env)
        if self.source == "dhcp":
            ipv4 = 0                        # no address until a lease: its first is announced
        last_mac, last_ip = Signal(48, init=mac), Signal(32, init=ipv4)
        wait = Signal(range(max(self.announce_delay, self.retry_cycles)))
        left = Signal(range(self.announcements + 1))
        due, taken, changed = Signal(), Signal(), Signal()
        m.d.comb += [changed.eq((self.mac != last_mac) | (self.ipv4 != last_ip)),
                     due.eq((left != 0) & (wait == 0) & (self.ipv4 != 0) & ~changed)]
        with m.If((left != 0) & (wait != 0)):
            m.d.sync += wait.eq(wait - 1)
        with m.If(taken):
            m.d.sync += [left.eq(left - 1), wait.eq(self.retry_cycles - 1)]
        with m.If(changed):
            m.d.sync += [last_mac.eq(self.mac), last_ip.eq(self.ipv4),
                         left.eq(self.announcements), wait.eq(self.announce_delay - 1)]
        return due, taken
