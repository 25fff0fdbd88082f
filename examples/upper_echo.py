"""A tile of your own: UDP echo in capitals. The UDP echo stack of ``examples/udp_echo.py`` plus
:class:`UpperEchoTile`, which sends every datagram to UDP port 7007 back with its ASCII letters
upper-cased, on a 4 × 3 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx ──────────┐
      │               │               │                   ▼
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx ◀──── (3,1) upper
      ▲               ▲               ▲
    (0,2) arp       (1,2) icmp      (2,2) echo

``docs/writing-a-tile.md`` walks through it and prints it whole; it needs nothing but the
installed packages, so a copy runs from any folder. ``tests/test_upper_echo.py`` runs it::

    apiary check examples/upper_echo.py
    apiary sim   examples/upper_echo.py --tap tap0 --width 64

``design(width=512, mac=..., ipv4=..., port=7007)``.
"""

from amaranth import Cat, Module, Mux, Signal

from apiary.design import Design
from apiary.noc.framing import offer_message
from apiary.noc.header import Fbits
from apiary.tile import Receive, Send, Tile
from beehive.apps.stack import add_udp_stack
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC
from beehive.proto.messages import PACKET_META, MsgType


UPPER_PORT = 7007


def upper_case(byte):
    """``byte`` (an 8-bit Amaranth value) with a to z made A to Z (bit 5 cleared); still 8
    bits wide, as ``Cat`` needs."""
    return Mux((byte >= ord("a")) & (byte <= ord("z")), byte & 0xDF, byte)


class UpperEchoTile(Tile):
    """Send every UDP datagram back to where it came from with its letters upper-cased.

    In: ``UDP_RX_SEGMENT`` messages from UDP RX (metadata :data:`PACKET_META`, the datagram's
    payload). Out: ``UDP_TX_SEGMENT`` messages to the tile's one next hop (UDP TX) with the same
    metadata, which names the client as the peer and so addresses the reply, but for
    ``l4_sum_valid``, cleared: the payload changed, so the sum UDP RX left in ``l4_sum`` is
    wrong, and UDP TX sends the reply with checksum 0 ("none", which IPv4 allows).

    Cut-through (``streaming``): a message's first flits leave before its last have arrived.
    Latency: 0 cycles from the last header flit in to the first flit out; one flit per cycle.

    Counters: ``datagrams`` (answered), ``bytes`` (their payload bytes), ``letters`` (bytes
    changed).

    Raises
    ------
    ValueError
        Unless the design gives the tile exactly one next hop on the data plane.
    """

    inputs = (Receive("requests", MsgType.UDP_RX_SEGMENT, meta=PACKET_META),)
    outputs = (Send("replies", MsgType.UDP_TX_SEGMENT, meta=PACKET_META),)

    def __init__(self, env=None):
        super().__init__(env, counters={
            "datagrams": "datagrams answered",
            "bytes": (32, "payload bytes answered"),
            "letters": (32, "lower-case letters made upper-case"),
        })
        hops = {hop for hops in self.env.next_hops("data").values() for hop in hops}
        if len(hops) != 1:
            raise ValueError(f"UpperEchoTile {self.name!r}: needs one next hop on the data "
                             f"plane (UDP TX), has {len(hops)}")
        (self.reply_to,) = hops

    def elaborate(self, platform):
        m = Module()
        width = self.env.width

        # Flits in → (header and metadata, payload words) → the same out, as a new message:
        # the receiver and sender of the ports the class declares.
        ports = self.message_ports(m)
        rx, tx = ports.requests, ports.replies

        # The reply's descriptor: the request's metadata, its sum marked stale.
        meta = Signal(PACKET_META.layout())
        m.d.comb += [meta.eq(rx.o_hdr.payload.meta), meta.l4_sum_valid.eq(0)]
        to = self.reply_to
        ready = offer_message(m, tx, rx.o_hdr.valid, dst=(to.x, to.y, to.fbits),
                              src=(self.env.x, self.env.y, Fbits.LOCAL0),
                              msg_type=MsgType.UDP_TX_SEGMENT,
                              payload_bytes=rx.o_hdr.payload.payload_bytes, meta=meta)
        m.d.comb += rx.o_hdr.ready.eq(ready)
        with m.If(rx.o_hdr.valid & ready):
            m.d.sync += [
                self.counters.datagrams.eq(self.counters.datagrams + 1),
                self.counters.bytes.eq(self.counters.bytes + rx.o_hdr.payload.payload_bytes),
            ]

        # The payload, word by word: byte i is in lane i (bits 8i to 8i + 7); the receiver
        # zeroes the lanes past the datagram's end, so they never count as letters.
        word = rx.o_data.payload
        lanes = [word.data[8 * i:8 * i + 8] for i in range(width // 8)]
        changed = [upper_case(b) != b for b in lanes]
        m.d.comb += [
            tx.i_data.valid.eq(rx.o_data.valid),
            tx.i_data.payload.data.eq(Cat(upper_case(b) for b in lanes)),
            tx.i_data.payload.nbytes.eq(word.nbytes),
            tx.i_data.payload.last.eq(word.last),
            rx.o_data.ready.eq(tx.i_data.ready),
        ]
        with m.If(rx.o_data.valid & tx.i_data.ready):
            m.d.sync += self.counters.letters.eq(self.counters.letters + sum(changed))
        return m


def design(width=512, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, port=UPPER_PORT):
    d = Design("upper_echo", cols=4, rows=3, width=width)
    d.settings.update(mac=mac, ipv4=ipv4)
    add_udp_stack(d)                             # the nine tiles of examples/udp_echo.py
    d.add("upper", UpperEchoTile, at=(3, 1))
    d.route("udp_rx", "upper", key=port)         # UDP RX sends datagrams to `port` here
    d.route("upper", "udp_tx")                   # the one next hop: replies go to UDP TX
    return d
