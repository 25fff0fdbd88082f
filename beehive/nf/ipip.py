"""IP-in-IP (RFC 2003): encapsulation and decapsulation tiles, with a virtual → physical address
table the control plane changes when a client migrates (Beehive's IPinIP tile).

Where they sit
--------------
:class:`IpipEncapTile` sits between IPv4 TX and Ethernet TX (``ETH_TX_FRAME`` in and out): a
datagram whose destination is a *virtual* address in the table leaves inside an outer IPv4
header to the *physical* address; others pass unchanged. :class:`IpipDecapTile` sits behind the
outer IPv4 RX, which checks the outer header (checksum, destination ours), strips it and routes
protocol 4 here; it checks that the tunnel is known (the inner source is a virtual address whose
physical address is the outer source) and hands the inner datagram to a **second IPv4 RX**.
A datagram crossing two IPv4 headers must not use the same IPv4 RX twice: that would make a
cycle in the layout's resource-dependency graph (Beehive's deadlock rule for repeated headers,
reference §6.3). Placing the second IPv4 RX further along the receive path, past the decap
tile, keeps every packet moving one way::

    eth_rx ─▶ ip_rx ─▶ ipip_decap ─▶ ip_rx2 ─▶ udp_rx ─▶ app
      (outer)  └── protocol 17 (not tunnelled) ──────▶ ┘
    eth_tx ◀─ ipip_encap ◀─ ip_tx ◀─ udp_tx ◀─ app

Messages
--------
==============  =============================================================================
tile            in → out
==============  =============================================================================
encap           ``ETH_TX_FRAME``, an IPv4 datagram → ``ETH_TX_FRAME``, the datagram behind an
                outer IPv4 header (or unchanged); metadata unchanged
decap           ``IP_RX_DATAGRAM`` (protocol 4: the inner datagram, ``peer_ip`` the outer
                source) → ``ETH_RX_FRAME``, the inner datagram, what IPv4 RX takes
==============  =============================================================================

Table ``routes`` (:data:`IPIP_ROUTE`, 65 bits, MSB first; the first valid match wins)
-------------------------------------------------------------------------------------
==============  ====  =========================================================================
field           bits  meaning
==============  ====  =========================================================================
valid           1     the entry is in use
virtual_ip      32    a client's virtual address (the inner datagram's peer)
physical_ip     32    the host it is on now (the outer header's peer)
==============  ====  =========================================================================

The outer header (RFC 2003 §3.1): version 4, IHL 5, DSCP/ECN copied from the inner header, total
length inner + 20, identification 0, DF copied from the inner header, TTL ``ttl``, protocol 4,
source the design's address (``local_ip``), destination ``physical_ip``, checksum computed.
"""


from amaranth import Mux, Signal

from apiary.stream.checksum import word_sum
from apiary.stream.header import Header, header_view
from beehive.proto.addresses import local_addresses
from beehive.proto.ipv4 import IPV4, IPV4_FLAG_DF, IPV4_MIN_IHL, IPV4_VERSION
from beehive.proto.messages import MsgType

from .base import NfTile, check_ttl, ip_value


__all__ = ["IPIP_ROUTE", "IPPROTO_IPIP", "IpipEncapTile", "IpipDecapTile", "ipip_route"]


IPPROTO_IPIP = 4

IPIP_ROUTE = Header("ipip_route", [("valid", 1), ("virtual_ip", 32), ("physical_ip", 32)])

_DESCRIPTION = "virtual -> physical: valid 1 | virtual_ip 32 | physical_ip 32"


def ipip_route(virtual_ip, physical_ip) -> dict[str, int]:
    """A valid :data:`IPIP_ROUTE` as a dict (addresses as text or integers)."""
    return {"valid": 1, "virtual_ip": ip_value(virtual_ip), "physical_ip": ip_value(physical_ip)}


class IpipEncapTile(NfTile):
    """Put an outer IPv4 header in front of each datagram whose destination is a virtual address
    in ``routes`` (see the module docstring); send the others on unchanged.

    Cut-through: the entry is looked up once per datagram, from its first 20 bytes, and the
    outer header is inserted as the datagram streams by. Throughput one flit per cycle but for
    the flush flit a 20-byte header may add at the end of a datagram.

    Drops, each counted once: ``truncated`` (shorter than 20 bytes), ``bad_version``,
    ``no_rule`` (no entry, with ``unmatched="drop"``), ``no_route``. Counted among the
    forwarded: ``encapsulated``, ``passed`` (no entry; ``unmatched="pass"``, the default).

    Parameters
    ----------
    ttl : int
        The outer header's TTL (default 64).
    local_ip : str or None
        The outer source address (default: the design's, ``settings["ipv4"]``).
    entries, rules, unmatched
        See :class:`~beehive.nf.base.NfTile`; ``rules`` are :data:`IPIP_ROUTE` dicts
        (:func:`ipip_route`).
    """

    head_bytes = 20
    insert_counts = (20,)
    rule_entry = IPIP_ROUTE
    table_name = "routes"
    table_description = _DESCRIPTION
    drop_reasons = {
        "truncated": "datagrams shorter than an IPv4 header",
        "bad_version": "a version other than 4",
        "no_rule": "datagrams to an address not in the table (unmatched='drop')",
    }
    kept_counters = {
        "encapsulated": "datagrams sent in an outer IPv4 header",
        "passed": "datagrams to an address not in the table, sent on unchanged",
    }

    def __init__(self, env=None, *, ttl: int = 64, local_ip: str | None = None,
                 entries: int = 16, rules=(), unmatched: str = "pass") -> None:
        self.ttl = check_ttl(ttl, "IpipEncapTile")
        super().__init__(env, entries=entries, rules=rules, unmatched=unmatched)
        self.local_ip = ip_value(local_ip) if local_ip is not None else local_addresses(self.env)[1]

    def parse(self, m, p):
        inner = p.field(IPV4)
        p.drop("truncated", p.head_len < 20)
        p.drop("bad_version", inner.version != IPV4_VERSION)
        hit, rule = p.match("ipip", lambda e: e.valid & (e.virtual_ip == inner.dst),
                            "encapsulated")

        plain = Signal(8 * 20)
        ip = header_view(IPV4, plain)
        m.d.comb += [
            ip.version.eq(IPV4_VERSION), ip.ihl.eq(IPV4_MIN_IHL),
            ip.dscp.eq(inner.dscp), ip.ecn.eq(inner.ecn),
            ip.total_length.eq(p.length + 20), ip.flags.eq(inner.flags & IPV4_FLAG_DF),
            ip.ttl.eq(self.ttl), ip.protocol.eq(IPPROTO_IPIP),
            ip.src.eq(self.local_ip), ip.dst.eq(rule.physical_ip),
        ]
        header = Signal(8 * 20)
        m.d.comb += [header.eq(plain), header_view(IPV4, header).checksum.eq(~word_sum(plain, 10))]
        p.insert(header, Mux(hit, 20, 0))


class IpipDecapTile(NfTile):
    """Hand the inner datagram of an IP-in-IP packet (after the outer IPv4 RX) to the next hop,
    a second IPv4 RX, if its tunnel is in ``routes``: an entry whose virtual address is the inner
    source and whose physical address is the outer source (``peer_ip``).

    Cut-through: the entry is looked up once per datagram, from its first 20 bytes; nothing is
    rewritten. Throughput one flit per cycle.

    Drops, each counted once: ``truncated`` (shorter than 20 bytes), ``bad_version``,
    ``no_rule`` (an unknown tunnel, with ``unmatched="drop"``, the default), ``no_route``.
    Counted among the forwarded: ``decapsulated`` (a known tunnel), ``passed`` (an unknown one,
    with ``unmatched="pass"``).
    """

    head_bytes = 20
    msg_type = MsgType.ETH_RX_FRAME
    rule_entry = IPIP_ROUTE
    table_name = "routes"
    table_description = _DESCRIPTION
    drop_reasons = {
        "truncated": "inner datagrams shorter than an IPv4 header",
        "bad_version": "an inner version other than 4",
        "no_rule": "tunnels not in the table (unmatched='drop')",
    }
    kept_counters = {
        "decapsulated": "inner datagrams of known tunnels, sent on",
        "passed": "inner datagrams of unknown tunnels, sent on (unmatched='pass')",
    }

    def __init__(self, env=None, *, entries: int = 16, rules=(), unmatched: str = "drop") -> None:
        super().__init__(env, entries=entries, rules=rules, unmatched=unmatched)

    def parse(self, m, p):
        inner = p.field(IPV4)
        p.drop("truncated", p.head_len < 20)
        p.drop("bad_version", inner.version != IPV4_VERSION)
        p.match("ipip", lambda e: e.valid & (e.virtual_ip == inner.src)
                & (e.physical_ip == p.meta.peer_ip), "decapsulated")
