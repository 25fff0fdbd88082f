"""VXLAN (RFC 7348): encapsulation and decapsulation tiles, with a table of the virtual network's
peers (VNI, the peer's inner MAC, the remote VTEP's address and MAC). Beyond Beehive, whose
thesis only draws VXLAN in its target stack.

Where they sit
--------------
:class:`VxlanDecapTile` sits behind the outer UDP RX, which routes port 4789 to it: it checks
the VXLAN header, the VNI and the sending VTEP against the table, strips the VXLAN header *and*
the inner Ethernet header (it is the inner frame's Ethernet RX: one realignment instead of two),
and sends the inner payload by its EtherType to a **second IPv4 RX**, exactly as Ethernet RX
sends a frame's (a datagram crossing two IPv4 and UDP headers must not use the same tile
twice, reference §6.3). :class:`VxlanEncapTile` sits between IPv4 TX and Ethernet TX: a datagram
to a peer MAC in the table leaves with an inner Ethernet header, a VXLAN header, an outer UDP
header (port 4789, checksum 0 as RFC 7348 §5 recommends for IPv4) and an outer IPv4 header in
front of it, all built in one insert; Ethernet TX adds the outer Ethernet header, to the VTEP's
MAC. Datagrams to other MACs pass unchanged::

    eth_rx ─▶ ip_rx ─▶ udp_rx ─▶ vxlan_decap ─▶ ip_rx2 ─▶ udp_rx2 ─▶ app
    eth_tx ◀─ vxlan_encap ◀─ ip_tx ◀─ udp_tx ◀─ app

Messages
--------
==============  =============================================================================
tile            in → out
==============  =============================================================================
decap           ``UDP_RX_SEGMENT`` (VXLAN header + inner frame, ``peer_ip`` the VTEP) →
                ``ETH_RX_FRAME``, the inner frame's payload, metadata ``peer_mac``,
                ``ethertype``, ``vlan``, ``vlan_tci`` from the inner Ethernet header
encap           ``ETH_TX_FRAME`` (an IPv4 datagram, ``peer_mac`` the inner destination) →
                ``ETH_TX_FRAME``, the outer IPv4/UDP/VXLAN/inner Ethernet headers + the
                datagram, metadata ``peer_mac`` the VTEP's MAC, ``ethertype`` IPv4, no VLAN
==============  =============================================================================

Table ``peers`` (:data:`VXLAN_PEER`, 153 bits, MSB first; the first valid match wins)
-------------------------------------------------------------------------------------
==============  ====  =========================================================================
field           bits  meaning
==============  ====  =========================================================================
valid           1     the entry is in use
vni             24    the virtual network
peer_mac        48    a peer's inner MAC (encap: the inner destination looked up)
vtep_ip         32    the VTEP it sits behind (decap: the outer source must be it; 0 for any)
vtep_mac        48    the outer next hop's MAC (encap: the outer Ethernet destination)
==============  ====  =========================================================================

The outer UDP source port is :func:`vxlan_source_port` of the inner packet's destination and
ports, read from its headers (RFC 7348 §5: a hash of the inner headers, in 49152-65535). Inner
frames are sent untagged.
"""


from amaranth import Cat, Mux, Signal

from apiary.stream.checksum import word_sum
from apiary.stream.header import Header, header_view
from beehive.proto.addresses import local_addresses, mac_to_int
from beehive.proto.ethernet import BROADCAST, ETHERNET, VLAN, EtherType
from beehive.proto.ipv4 import IPV4, IPV4_FLAG_DF, IPV4_MIN_IHL, IPV4_VERSION, IpProtocol
from beehive.proto.messages import MsgType
from beehive.proto.udp import UDP

from .base import NfTile, check_ttl, ip_value


__all__ = ["VXLAN", "VXLAN_PORT", "VXLAN_FLAG_I", "VXLAN_PEER", "VXLAN_OVERHEAD",
           "VxlanEncapTile", "VxlanDecapTile", "vxlan_peer", "vxlan_source_port"]


#: The VXLAN header, 8 bytes.
VXLAN = Header("vxlan", [("flags", 8), ("_reserved0", 24), ("vni", 24), ("_reserved1", 8)])
VXLAN_PORT = 4789
VXLAN_FLAG_I = 0x08             # "a valid VNI": must be set
#: Bytes the encapsulation adds before Ethernet TX's outer header: IPv4, UDP, VXLAN, Ethernet.
VXLAN_OVERHEAD = 20 + 8 + 8 + 14

VXLAN_PEER = Header("vxlan_peer", [("valid", 1), ("vni", 24), ("peer_mac", 48),
                                   ("vtep_ip", 32), ("vtep_mac", 48)])

_DESCRIPTION = "VXLAN peers: valid 1 | vni 24 | peer_mac 48 | vtep_ip 32 | vtep_mac 48"


def _mac(value) -> int:
    return mac_to_int(value) if isinstance(value, str) else int(value)


def vxlan_peer(vni: int, peer_mac, vtep_ip, vtep_mac) -> dict[str, int]:
    """A valid :data:`VXLAN_PEER` as a dict (addresses as text or integers)."""
    return {"valid": 1, "vni": int(vni), "peer_mac": _mac(peer_mac), "vtep_ip": ip_value(vtep_ip),
            "vtep_mac": _mac(vtep_mac)}


#: Bytes 16-23 of an IPv4 packet without options: its destination and, for UDP and TCP, its
#: ports (for other protocols the same bytes of theirs, as constant per flow).
_INNER_FLOW = Header("inner_flow", [("dst", 32), ("src_port", 16), ("dst_port", 16)])


def vxlan_source_port(peer_ip: int, peer_port: int, local_port: int) -> int:
    """The outer UDP source port the encap tile uses for an inner flow (the inner packet's
    destination address ``peer_ip``, destination port ``peer_port`` and source port
    ``local_port``): ``0xC000`` plus 14 bits of their XOR."""
    return 0xC000 | ((peer_ip >> 16) ^ peer_ip ^ peer_port ^ local_port) & 0x3FFF


class VxlanDecapTile(NfTile):
    """Unwrap VXLAN packets of known VNIs and VTEPs (see the module docstring) and send the inner
    frame's payload to the next hop for its EtherType.

    Cut-through: the entry is looked up once per packet, from its first 26 bytes (VXLAN header
    and an inner Ethernet header with an 802.1Q tag); 22 or 26 bytes are stripped. Throughput
    one flit per cycle.

    Drops, each counted once: ``truncated`` (shorter than the VXLAN and inner Ethernet
    headers), ``bad_flags`` (the I flag is clear), ``no_rule`` (VNI and VTEP not in the table,
    with ``unmatched="drop"``, the default), ``not_for_us`` (inner destination neither
    ``mac``, by default the design's, nor broadcast), ``no_route`` (an inner EtherType with no
    next hop). Counted among the forwarded: ``decapsulated``, ``passed`` (no entry, with
    ``unmatched="pass"``).
    """

    head_bytes = 26
    key_width = 16
    strip_counts = (22, 26)
    msg_type = MsgType.ETH_RX_FRAME
    rule_entry = VXLAN_PEER
    table_name = "peers"
    table_description = _DESCRIPTION
    drop_reasons = {
        "truncated": "packets shorter than the VXLAN and inner Ethernet headers",
        "bad_flags": "VXLAN headers without the I flag",
        "no_rule": "VNI and VTEP not in the table (unmatched='drop')",
        "not_for_us": "inner frames to another MAC than ours or broadcast",
    }
    kept_counters = {
        "decapsulated": "inner frames of known VNIs, sent on",
        "passed": "inner frames of unknown VNIs, sent on (unmatched='pass')",
    }

    def __init__(self, env=None, *, mac: str | None = None, entries: int = 16, rules=(),
                 unmatched: str = "drop") -> None:
        super().__init__(env, entries=entries, rules=rules, unmatched=unmatched)
        self.mac = _mac(mac) if mac is not None else local_addresses(self.env)[0]

    def parse(self, m, p):
        vx = p.field(VXLAN)
        eth = p.field(ETHERNET, 8)
        tag = p.field(VLAN, 8 + 12)
        tagged = Signal()
        m.d.comb += tagged.eq(eth.ethertype == EtherType.VLAN.value)
        p.drop("truncated", p.head_len < Mux(tagged, 26, 22))
        p.drop("bad_flags", ~(vx.flags & VXLAN_FLAG_I).any())
        p.match("vxlan", lambda e: e.valid & (e.vni == vx.vni)
                & ((e.vtep_ip == 0) | (e.vtep_ip == p.meta.peer_ip)), "decapsulated")
        p.drop("not_for_us", (eth.dst != self.mac) & (eth.dst != BROADCAST))
        p.key = Mux(tagged, tag.ethertype, eth.ethertype)
        p.strip = Mux(tagged, 26, 22)
        p.set_meta(peer_mac=eth.src, ethertype=p.key, vlan=tagged,
                   vlan_tci=Cat(tag.vid, tag.dei, tag.pcp))


class VxlanEncapTile(NfTile):
    """Put outer IPv4, UDP, VXLAN and inner Ethernet headers (50 bytes) in front of each
    datagram whose ``peer_mac`` is a peer in the table (see the module docstring); send the
    others on unchanged.

    Cut-through: the entry is looked up once per datagram, from its metadata, and the headers
    are inserted as it streams by. Throughput one flit per cycle but for the header flits.

    Drops, each counted once: ``no_rule`` (no entry, with ``unmatched="drop"``), ``no_route``.
    Counted among the forwarded: ``encapsulated``, ``passed`` (no entry, ``unmatched="pass"``,
    the default).

    Parameters
    ----------
    ttl : int
        The outer IPv4 TTL (default 64).
    local_ip, mac : str or None
        The outer source address and the inner source MAC (default: the design's).
    entries, rules, unmatched
        See :class:`~beehive.nf.base.NfTile`; ``rules`` are :data:`VXLAN_PEER` dicts
        (:func:`vxlan_peer`).
    """

    head_bytes = 24
    insert_counts = (VXLAN_OVERHEAD,)
    rule_entry = VXLAN_PEER
    table_name = "peers"
    table_description = _DESCRIPTION
    drop_reasons = {
        "no_rule": "datagrams to a MAC not in the table (unmatched='drop')",
    }
    kept_counters = {
        "encapsulated": "datagrams sent in VXLAN",
        "passed": "datagrams to a MAC not in the table, sent on unchanged",
    }

    def __init__(self, env=None, *, ttl: int = 64, local_ip: str | None = None,
                 mac: str | None = None, entries: int = 16, rules=(),
                 unmatched: str = "pass") -> None:
        self.ttl = check_ttl(ttl, "VxlanEncapTile")
        super().__init__(env, entries=entries, rules=rules, unmatched=unmatched)
        mac_, ip_ = local_addresses(self.env)
        self.local_ip = ip_value(local_ip) if local_ip is not None else ip_
        self.mac = _mac(mac) if mac is not None else mac_

    def parse(self, m, p):
        meta = p.meta
        hit, rule = p.match("vxlan", lambda e: e.valid & (e.peer_mac == meta.peer_mac),
                            "encapsulated")

        plain = Signal(8 * VXLAN_OVERHEAD)     # the headers with a zero IPv4 checksum
        ip = header_view(IPV4, plain)
        udp = header_view(UDP, plain, 20)
        vx = header_view(VXLAN, plain, 28)
        eth = header_view(ETHERNET, plain, 36)
        # The inner flow from the inner packet's headers: the Ethernet-level messages this tile
        # takes carry no addresses or ports in their metadata.
        inner = header_view(_INNER_FLOW, p.head, 16)
        sport = ((inner.dst[16:] ^ inner.dst[:16] ^ inner.dst_port ^ inner.src_port)[:14]
                 | 0xC000)
        m.d.comb += [
            ip.version.eq(IPV4_VERSION), ip.ihl.eq(IPV4_MIN_IHL),
            ip.total_length.eq(p.length + VXLAN_OVERHEAD), ip.flags.eq(IPV4_FLAG_DF),
            ip.ttl.eq(self.ttl), ip.protocol.eq(IpProtocol.UDP.value),
            ip.src.eq(self.local_ip), ip.dst.eq(rule.vtep_ip),
            udp.src_port.eq(sport), udp.dst_port.eq(VXLAN_PORT),
            udp.length.eq(p.length + VXLAN_OVERHEAD - 20),
            vx.flags.eq(VXLAN_FLAG_I), vx.vni.eq(rule.vni),
            eth.dst.eq(meta.peer_mac), eth.src.eq(self.mac), eth.ethertype.eq(meta.ethertype),
        ]
        header = Signal(8 * VXLAN_OVERHEAD)
        m.d.comb += [header.eq(plain),
                     header_view(IPV4, header).checksum.eq(~word_sum(plain[:8 * 20], 10))]
        p.insert(header, Mux(hit, VXLAN_OVERHEAD, 0))
        p.set_meta(peer_mac=Mux(hit, rule.vtep_mac, meta.peer_mac),
                   ethertype=Mux(hit, EtherType.IPV4.value, meta.ethertype),
                   vlan=Mux(hit, 0, meta.vlan))
