"""A DHCP client (RFC 2131): the design takes its IPv4 address, netmask and gateway from the
network's DHCP server, keeps the lease, and gives it back.

A design with ``settings["runtime_addresses"] = "dhcp"`` and a :class:`DhcpClientTile` has no
IPv4 address until the server grants one: the client drives the design's addresses
(:class:`~beehive.proto.addresses.AddressesSignature`, the broadcast wires every tile that
reads them takes), its IPv4 address 0 until a lease is bound. Until then the stack answers
nothing but DHCP: IPv4 RX takes no datagram but a broadcast to UDP port 68, and the ARP tile no
request (no request asks for 0.0.0.0). Once bound, the ARP tile announces the address
(gratuitous ARP, as for any change).

Messages (UDP, through the design's UDP RX and TX):

====================  ====  ====================  =======================================  =====
message               type  from → to             what                                     route
====================  ====  ====================  =======================================  =====
``UDP_RX_SEGMENT``    26    UDP RX → client       a DHCP reply (to port 68)                (in)
``UDP_TX_SEGMENT``    13    client → UDP TX       DISCOVER, REQUEST, RELEASE (300 bytes,   None
                                                  from port 68 to 67)
====================  ====  ====================  =======================================  =====

The client's states are RFC 2131's (Figure 5): ``INIT`` sends DISCOVER (broadcast, the
broadcast flag set so that the server's answers come to 255.255.255.255); ``SELECTING`` takes
the first OFFER and sends REQUEST for it (options 50 and 54); ``REQUESTING`` binds on ACK, goes
back to ``INIT`` on NAK; ``BOUND`` holds the address until T1 (option 58, else half the lease),
then ``RENEWING`` sends REQUEST to the server that granted it (unicast, ``ciaddr`` set) until an
ACK renews the lease, and from T2 (option 59, else 7/8 of it) ``REBINDING`` broadcasts it; a
NAK, or the lease's end, takes the address away and starts again at ``INIT``. A request not
answered is sent again every ``retry_seconds``; ``REQUESTING`` gives up after 4 and starts
again. Writing a new value to the register ``release`` sends RELEASE to the server and drops
the address (state ``RELEASED``); ``retry_seconds`` later the client starts again, for a new
lease (a design without an address cannot be reached to be told).

Timers count seconds of ``cycles_per_second`` cycles: give the design's clock, or a smaller
number to run a lease's timers faster in simulation.

Replies are checked before they are used: BOOTREPLY, the transaction ID of the client's last
request, its MAC, the magic cookie and a DHCP message type it expects; anything else is
dropped and counted (``ignored``). A reply is stored whole (at most ``max_bytes``) and then
read a byte a cycle; one that comes while the last is read is dropped (``busy``), and so is one
longer than ``max_bytes`` (``ignored``).
"""

from typing import Any

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect

from apiary.noc.framing import offer_message
from apiary.noc.header import Fbits
from apiary.noc.nexthop import address_of, first_hop
from apiary.stream.counters import count
from apiary.stream.emit import network_bytes, send_words
from apiary.stream.layout import payload_signature
from apiary.stream.registers import Register
from apiary.tile import Receive, Send, Tile, TileEnv

from ..proto.addresses import AddressesSignature, local_addresses
from ..proto.ethernet import BROADCAST
from ..proto.ipv4 import IpProtocol
from ..proto.messages import META_BITS, PACKET_META, MsgType


__all__ = ["DhcpClientTile", "DhcpMessage", "DhcpReplyParser", "DhcpType", "SERVER_PORT",
           "CLIENT_PORT", "MESSAGE_BYTES", "MAGIC_COOKIE"]

SERVER_PORT, CLIENT_PORT = 67, 68
#: What the client sends: the BOOTP header (236 bytes), the cookie, options, padded to BOOTP's
#: 300 bytes (RFC 1542).
MESSAGE_BYTES = 300
MAGIC_COOKIE = 0x63825363
LIMITED_BROADCAST = 0xFFFF_FFFF
#: Options the client asks for (option 55): subnet mask, router, lease time, T1, T2.
PARAMETERS = (1, 3, 51, 58, 59)


class DhcpType(enum.Enum, shape=8):
    """Option 53, the DHCP message type."""
    DISCOVER = 1
    OFFER = 2
    REQUEST = 3
    DECLINE = 4
    ACK = 5
    NAK = 6
    RELEASE = 7


class DhcpMessage(wiring.Component):
    """The 300 bytes of a DISCOVER, REQUEST or RELEASE, a word a cycle on ``o`` from the cycle
    after ``start``.

    Options: 53 (``kind``), 50 (``requested``, when ``with_requested``), 54 (``server``, when
    ``with_server``), 55 (:data:`PARAMETERS`), end; an option left out is replaced by pad bytes,
    so every message is the same length.
    """

    def __init__(self, width: int) -> None:
        self._width = width
        super().__init__({
            "kind": In(DhcpType, init=DhcpType.DISCOVER), "xid": In(32), "mac": In(48),
            "ciaddr": In(32),
            "broadcast": In(1), "requested": In(32), "with_requested": In(1),
            "server": In(32), "with_server": In(1), "start": In(1),
            "o": Out(payload_signature(width)),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        nb = self._width // 8

        def option(code: int, value: Any, nbytes: int, present: Any) -> Any:
            return Mux(present,
                       Cat(Const(code, 8), Const(nbytes, 8), *network_bytes(value, nbytes)),
                       Const(0, 8 * (nbytes + 2)))

        be = network_bytes
        header = Cat(Const(1, 8), Const(1, 8), Const(6, 8), Const(0, 8), *be(self.xid, 4),
                     Const(0, 16), *be(Mux(self.broadcast, 0x8000, 0), 2),
                     *be(self.ciaddr, 4), Const(0, 3 * 32), *be(self.mac, 6),
                     Const(0, 8 * (10 + 64 + 128)), *be(Const(MAGIC_COOKIE, 32), 4))
        assert len(header) == 8 * 240
        options = Cat(Const(53, 8), Const(1, 8), self.kind.as_value(),
                      option(50, self.requested, 4, self.with_requested),
                      option(54, self.server, 4, self.with_server),
                      Const(55, 8), Const(len(PARAMETERS), 8), *(Const(p, 8) for p in PARAMETERS),
                      Const(255, 8))
        words = -(-MESSAGE_BYTES // nb)
        message = Cat(header, options, Const(0, 8 * MESSAGE_BYTES - len(header) - len(options)))
        send_words(m, self.o, self.start, message, final=words - 1,
                   final_nbytes=MESSAGE_BYTES - (words - 1) * nb)
        return m


#: What the parser reads from a reply.
REPLY = data.StructLayout({
    "op": 8, "xid": 32, "yiaddr": 32, "chaddr": 48, "cookie": 32, "kind": 8,
    "server": 32, "lease": 32, "t1": 32, "t2": 32, "subnet": 32, "router": 32,
    "has_server": 1, "has_lease": 1, "has_t1": 1, "has_t2": 1, "has_subnet": 1, "has_router": 1,
})


class _Option(enum.Enum, shape=2):
    CODE = 0
    LENGTH = 1
    DATA = 2
    END = 3


class DhcpReplyParser(wiring.Component):
    """Keep a reply's UDP payload (up to ``max_bytes``, a word a cycle on ``i``, never waiting)
    and read it a byte a cycle: its fixed fields and the options the client uses. ``done``
    pulses when a reply is read, with ``reply`` valid until the next; ``dropped_busy`` pulses for
    a reply that came while the last was read, ``dropped_long`` for one over ``max_bytes``
    (each taken whole and dropped)."""

    def __init__(self, width: int, max_bytes: int) -> None:
        self._width, self._max_bytes = width, max_bytes
        super().__init__({
            "i": In(payload_signature(width)),
            "reply": Out(REPLY), "done": Out(1),
            "dropped_busy": Out(1), "dropped_long": Out(1),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width, nb = self._width, self._width // 8
        depth = -(-self._max_bytes // nb)
        m.submodules.buffer = buffer = Memory(shape=width, depth=depth, init=[])
        wr, rd = buffer.write_port(), buffer.read_port(domain="comb")

        # Taking a reply in: words into the buffer, unless the parser is still reading.
        parsing, discarding, too_long = Signal(), Signal(), Signal()
        word = Signal(range(depth + 1))
        length = Signal(range(depth * nb + 1))
        first = Signal(init=1)
        m.d.comb += self.i.ready.eq(1)
        with m.If(self.i.valid):
            m.d.sync += first.eq(self.i.payload.last)
            refuse = Mux(first, parsing, discarding)
            with m.If(first):
                m.d.sync += [discarding.eq(parsing), too_long.eq(0), word.eq(0)]
            keep = ~refuse & (Mux(first, 0, word) < depth)
            m.d.comb += [wr.addr.eq(Mux(first, 0, word)), wr.data.eq(self.i.payload.data),
                         wr.en.eq(keep)]
            with m.If(~refuse):
                m.d.sync += word.eq(Mux(first, 1, word + 1))
                with m.If(~keep):
                    m.d.sync += too_long.eq(1)
            with m.If(self.i.payload.last):
                end = Mux(first, 0, word) * nb + self.i.payload.nbytes
                with m.If(refuse):
                    m.d.comb += self.dropped_busy.eq(1)
                with m.Elif(too_long | ~keep):
                    m.d.comb += self.dropped_long.eq(1)
                with m.Else():
                    m.d.sync += [parsing.eq(1), length.eq(end)]

        # Reading it a byte a cycle.
        index = Signal(range(depth * nb + 1))
        byte = Signal(8)
        shift = nb.bit_length() - 1
        m.d.comb += [rd.addr.eq(index >> shift),
                     byte.eq(rd.data.word_select(index[:shift] if shift else 0, 8))]
        r = Signal(REPLY)
        done = Signal()
        m.d.sync += done.eq(0)
        m.d.comb += self.done.eq(done)
        state = Signal(_Option)
        code, left, value = Signal(8), Signal(8), Signal(32)
        got = Signal(3)                 # the option's bytes shifted into value, up to 4
        # An option's value: its first 4 bytes (a router list keeps its first address).
        value_next = Mux(got < 4, Cat(byte, value[:24]), value)
        with m.If(parsing):
            m.d.sync += index.eq(index + 1)
            for field, lo in (("op", 0), ("xid", 4), ("yiaddr", 16), ("chaddr", 28),
                              ("cookie", 236)):
                target = getattr(r, field)
                nbytes = len(target) // 8
                with m.If((index >= lo) & (index < lo + nbytes)):
                    m.d.sync += target.eq(Cat(byte, target[:-8]))
            with m.If(index >= 240):
                with m.Switch(state):
                    with m.Case(_Option.CODE):
                        m.d.sync += [code.eq(byte), value.eq(0)]
                        with m.If(byte == 255):
                            m.d.sync += state.eq(_Option.END)
                        with m.Elif(byte != 0):
                            m.d.sync += state.eq(_Option.LENGTH)
                    with m.Case(_Option.LENGTH):
                        m.d.sync += [left.eq(byte), got.eq(0),
                                     state.eq(Mux(byte == 0, _Option.CODE, _Option.DATA))]
                    with m.Case(_Option.DATA):
                        m.d.sync += [left.eq(left - 1), value.eq(value_next),
                                     got.eq(Mux(got < 4, got + 1, got))]
                        with m.If(left == 1):
                            m.d.sync += state.eq(_Option.CODE)
                            self._keep(m, r, code, value_next)
            # Done once the last byte's effects are in (a cycle later).
            with m.If((index + 1 >= length) | (state == _Option.END)):
                m.d.sync += [parsing.eq(0), index.eq(0), state.eq(_Option.CODE), done.eq(1)]
        with m.If(self.i.valid & self.i.payload.last & ~Mux(first, parsing, discarding)
                  & ~too_long):
            m.d.sync += r.eq(0)
        m.d.comb += self.reply.eq(r)
        return m

    @staticmethod
    def _keep(m: Module, r: Any, code: Any, value: Any) -> None:
        """The option ``code`` ends with its value ``value`` (its last 4 bytes, or fewer)."""
        with m.Switch(code):
            with m.Case(53):
                m.d.sync += r.kind.eq(value[:8])
            for number, field in ((54, "server"), (51, "lease"), (58, "t1"), (59, "t2"),
                                  (1, "subnet")):
                with m.Case(number):
                    m.d.sync += [getattr(r, field).eq(value), getattr(r, f"has_{field}").eq(1)]
            with m.Case(3):
                with m.If(~r.has_router):
                    m.d.sync += [r.router.eq(value), r.has_router.eq(1)]


class _State(enum.Enum, shape=3):
    INIT = 0
    SELECTING = 1
    REQUESTING = 2
    BOUND = 3
    RENEWING = 4
    REBINDING = 5
    RELEASED = 6


class DhcpClientTile(Tile):
    """The design's DHCP client (see the module docstring).

    Parameters
    ----------
    env : TileEnv
        ``settings["runtime_addresses"] == "dhcp"``; ``settings["mac"]``, the MAC at reset.
        Routes: UDP TX (key ``None``).
    cycles_per_second : int
        Cycles in one of the lease's seconds (default 125,000,000).
    retry_seconds : int
        Seconds before an unanswered request is sent again (default 4).
    max_bytes : int
        The longest reply kept (default 576, the size every DHCP client must take).

    Members
    -------
    addresses : Out(AddressesSignature)
        The design's MAC (register ``mac``) and the lease: IPv4 address (0 without one),
        netmask and gateway (0 unless the server gave them).

    Registers: ``mac``; ``release``: write a new value to release the lease (and ask for a new
    one ``retry_seconds`` later). Counters: ``discovers``, ``requests``, ``releases``
    (messages sent); ``offers``, ``acks``, ``naks`` (replies used); ``expired`` (leases that ran
    out); ``ignored``, ``busy`` (replies dropped, see the module docstring); ``dropped``
    (messages of another type, or malformed).
    """

    streaming = False

    inputs = (Receive("replies", MsgType.UDP_RX_SEGMENT, meta=PACKET_META),)
    outputs = (Send("requests", MsgType.UDP_TX_SEGMENT, meta=PACKET_META),)

    def __init__(self, env: TileEnv | None = None, *, cycles_per_second: int = 125_000_000,
                 retry_seconds: int = 4, max_bytes: int = 576) -> None:
        env = env if env is not None else TileEnv()
        for name, value, low in (("cycles_per_second", cycles_per_second, 1),
                                 ("retry_seconds", retry_seconds, 1),
                                 ("max_bytes", max_bytes, 300)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"DhcpClientTile's {name} must be an integer of at least "
                                 f"{low}, not {value!r}")
        if env.settings.get("runtime_addresses") != "dhcp":
            raise ValueError(f"DhcpClientTile {env.name!r} needs the design setting "
                             f"runtime_addresses='dhcp' (the tile drives the addresses)")
        self.cycles_per_second, self.retry_seconds = cycles_per_second, retry_seconds
        self.max_bytes = max_bytes
        self.udp_tx = first_hop(env.next_hops("data"), None)
        mac, _ = local_addresses(env)
        super().__init__(env, {"addresses": Out(AddressesSignature())}, counters={
            "discovers": "DISCOVER messages sent",
            "requests": "REQUEST messages sent (selecting, renewing and rebinding)",
            "releases": "RELEASE messages sent",
            "offers": "OFFERs taken",
            "acks": "ACKs that bound or renewed a lease",
            "naks": "NAKs (the address dropped, if there was one)",
            "expired": "leases that ran out",
            "ignored": "replies not for this client's transaction, or malformed or too long",
            "busy": "replies dropped: they came while the last one was read",
            "dropped": "messages of another type, or malformed",
        }, registers={
            "mac": Register(48, "the design's MAC address", mac),
            "release": Register(8, "write a new value to release the lease (a new one is "
                                   "asked for retry_seconds later)"),
        })

    def elaborate(self, platform: Any) -> Module:
        m = Module()
        width, c = self.env.width, self.counters
        ports = self.message_ports(m)
        rx, tx = ports.replies, ports.requests
        m.submodules.parser = parser = DhcpReplyParser(width, self.max_bytes)
        m.submodules.message = message = DhcpMessage(width)
        connect(m, receiver=rx.o_data, parser=parser.i)
        connect(m, message=message.o, sender=tx.i_data)
        m.d.comb += rx.o_hdr.ready.eq(1)
        with m.If(rx.o_hdr.valid & (rx.o_hdr.payload.msg_type != MsgType.UDP_RX_SEGMENT.value)):
            count(m, c.dropped)
        meta_in = data.View(PACKET_META.layout(), rx.o_hdr.payload.meta[:META_BITS])
        peer_mac = Signal(48)                               # the last reply's sender
        with m.If(rx.o_hdr.valid):
            m.d.sync += peer_mac.eq(meta_in.peer_mac)
        count(m, c.busy, parser.dropped_busy)
        count(m, c.ignored, parser.dropped_long)

        mac = self.regs.mac
        state = Signal(_State)
        lease_ip, netmask, gateway = Signal(32), Signal(32), Signal(32)
        server_ip, server_mac, offered = Signal(32), Signal(48), Signal(32)
        m.d.comb += [
            self.addresses.mac.eq(mac),
            self.addresses.ipv4.eq(lease_ip), self.addresses.netmask.eq(netmask),
            self.addresses.gateway.eq(gateway),
        ]

        elapsed, retry = self._seconds(m)
        t1, t2, lease = Signal(32), Signal(32), Signal(32)
        tries = Signal(range(5))

        # Transaction IDs: a 32-bit LFSR stepped every cycle, sampled at each new transaction.
        lfsr = Signal(32, init=0x1D872B41 ^ self.env.x << 8 ^ self.env.y)
        m.d.sync += lfsr.eq(Cat(lfsr[31] ^ lfsr[21] ^ lfsr[1] ^ lfsr[0], lfsr[:31]))
        xid = Signal(32)

        send, sending, unicast, source = self._send_path(m, tx, message, server_ip, server_mac)
        m.d.comb += [message.mac.eq(mac), message.xid.eq(xid)]
        with m.If(send):
            m.d.sync += retry.eq(self.retry_seconds)

        def request(kind: DhcpType, *, ciaddr: Any = 0, broadcast: Any = 1, requested: bool = False,
                    server: bool = False, to_server: bool = False) -> None:
            m.d.comb += send.eq(1)
            m.d.sync += [message.kind.eq(kind), message.ciaddr.eq(ciaddr),
                         message.broadcast.eq(broadcast), message.requested.eq(offered),
                         message.with_requested.eq(requested), message.server.eq(server_ip),
                         message.with_server.eq(server), unicast.eq(to_server),
                         source.eq(lease_ip)]
            counter = {DhcpType.DISCOVER: c.discovers, DhcpType.REQUEST: c.requests,
                       DhcpType.RELEASE: c.releases}[kind]
            count(m, counter)

        def lose_address() -> None:
            m.d.sync += [lease_ip.eq(0), netmask.eq(0), gateway.eq(0), state.eq(_State.INIT)]

        # Replies.
        r = parser.reply
        ours = parser.done & (r.op == 2) & (r.xid == xid) & (r.chaddr == mac) \
            & (r.cookie == MAGIC_COOKIE)
        offer = ours & (r.kind == DhcpType.OFFER.value) & r.has_server \
            & (state == _State.SELECTING)
        waiting = (state == _State.REQUESTING) | (state == _State.RENEWING) \
            | (state == _State.REBINDING)
        ack = ours & (r.kind == DhcpType.ACK.value) & waiting & r.has_lease
        nak = ours & (r.kind == DhcpType.NAK.value) & waiting
        with m.If(parser.done & ~offer & ~ack & ~nak):
            count(m, c.ignored)

        released = Signal(8)
        release_asked = self.regs.release != released
        can_send = ~sending

        with m.If(offer):
            count(m, c.offers)
            m.d.sync += [offered.eq(r.yiaddr), server_ip.eq(r.server), server_mac.eq(peer_mac),
                         state.eq(_State.REQUESTING), tries.eq(0), retry.eq(0)]
        with m.Elif(ack):
            count(m, c.acks)
            m.d.sync += [
                lease_ip.eq(r.yiaddr), netmask.eq(Mux(r.has_subnet, r.subnet, 0)),
                gateway.eq(Mux(r.has_router, r.router, 0)), lease.eq(r.lease),
                t1.eq(Mux(r.has_t1, r.t1, r.lease >> 1)),
                t2.eq(Mux(r.has_t2, r.t2, r.lease - (r.lease >> 3))),
                elapsed.eq(0), state.eq(_State.BOUND), server_mac.eq(peer_mac),
            ]
            with m.If(state == _State.REQUESTING):
                m.d.sync += server_ip.eq(Mux(r.has_server, r.server, server_ip))
        with m.Elif(nak):
            count(m, c.naks)
            lose_address()

        with m.If(~offer & ~ack & ~nak & can_send):
            with m.If(release_asked):
                m.d.sync += released.eq(self.regs.release)
                with m.If((state == _State.BOUND) | (state == _State.RENEWING)
                          | (state == _State.REBINDING)):
                    m.d.sync += xid.eq(lfsr)
                    request(DhcpType.RELEASE, ciaddr=lease_ip, broadcast=0, server=True,
                            to_server=True)
                    lose_address()
                    m.d.sync += state.eq(_State.RELEASED)
            with m.Else():
                with m.Switch(state):
                    with m.Case(_State.INIT):
                        m.d.sync += [xid.eq(lfsr), state.eq(_State.SELECTING)]
                        request(DhcpType.DISCOVER)
                    with m.Case(_State.SELECTING):
                        with m.If(retry == 0):
                            request(DhcpType.DISCOVER)
                    with m.Case(_State.REQUESTING):
                        with m.If((retry == 0) & (tries == 4)):
                            m.d.sync += state.eq(_State.INIT)
                        with m.Elif(retry == 0):
                            m.d.sync += tries.eq(tries + 1)
                            request(DhcpType.REQUEST, requested=True, server=True)
                    with m.Case(_State.BOUND):
                        with m.If(elapsed >= t1):
                            m.d.sync += [xid.eq(lfsr), state.eq(_State.RENEWING)]
                            request(DhcpType.REQUEST, ciaddr=lease_ip, broadcast=0,
                                    to_server=True)
                    with m.Case(_State.RENEWING):
                        with m.If(elapsed >= t2):
                            m.d.sync += state.eq(_State.REBINDING)
                            request(DhcpType.REQUEST, ciaddr=lease_ip, broadcast=0)
                        with m.Elif(retry == 0):
                            request(DhcpType.REQUEST, ciaddr=lease_ip, broadcast=0,
                                    to_server=True)
                    with m.Case(_State.RELEASED):
                        with m.If(retry == 0):
                            m.d.sync += state.eq(_State.INIT)
                    with m.Case(_State.REBINDING):
                        with m.If(elapsed >= lease):
                            count(m, c.expired)
                            lose_address()
                        with m.Elif(retry == 0):
                            request(DhcpType.REQUEST, ciaddr=lease_ip, broadcast=0)
        return m

    def _seconds(self, m: Module) -> tuple[Signal, Signal]:
        """Seconds of ``cycles_per_second`` cycles: ``elapsed`` counts them up, ``retry``
        (loaded by the caller) down to 0."""
        prescale = Signal(range(self.cycles_per_second))
        tick = prescale == self.cycles_per_second - 1
        m.d.sync += prescale.eq(Mux(tick, 0, prescale + 1))
        elapsed, retry = Signal(32), Signal(range(self.retry_seconds + 1))
        with m.If(tick):
            m.d.sync += elapsed.eq(elapsed + 1)
            with m.If(retry != 0):
                m.d.sync += retry.eq(retry - 1)
        return elapsed, retry

    def _send_path(self, m: Module, tx: Any, message: DhcpMessage, server_ip: Signal,
                   server_mac: Signal) -> tuple[Signal, Signal, Signal, Signal]:
        """The message's descriptor once, then its words. Returns ``send`` (asserted for a cycle
        to start a message), ``sending`` (a message is under way), and ``unicast`` and
        ``source``: the destination (the server, else broadcast) and the source address, kept
        from the request (RELEASE drops the address in the cycle it is asked for)."""
        send, sending, desc_done = Signal(), Signal(), Signal()
        unicast, source = Signal(), Signal(32)
        meta = Signal(PACKET_META.layout())
        m.d.comb += [
            meta.peer_mac.eq(Mux(unicast, server_mac, BROADCAST)),
            meta.peer_ip.eq(Mux(unicast, server_ip, LIMITED_BROADCAST)),
            meta.local_ip.eq(source), meta.protocol.eq(IpProtocol.UDP.value),
            meta.peer_port.eq(SERVER_PORT), meta.local_port.eq(CLIENT_PORT),
        ]
        offered_desc = sending & ~desc_done
        ready = offer_message(m, tx, offered_desc,
                              dst=address_of(self.udp_tx, Fbits.LOCAL0),
                              src=(self.env.x, self.env.y, Fbits.LOCAL0),
                              msg_type=MsgType.UDP_TX_SEGMENT.value,
                              payload_bytes=MESSAGE_BYTES, meta=meta)
        with m.If(offered_desc & ready):
            m.d.sync += desc_done.eq(1)
        with m.If(message.o.valid & message.o.ready & message.o.payload.last):
            m.d.sync += [sending.eq(0), desc_done.eq(0)]
        m.d.comb += message.start.eq(send)
        with m.If(send):
            m.d.sync += sending.eq(1)
        return send, sending, unicast, source
