"""Static NAT (address and port rewriting) on IPv4 datagrams, with incremental checksums.

Where it sits
-------------
A NAT works on whole IPv4 datagrams, so it sits where the stack carries them: one
:class:`NatTile` with ``direction="in"`` between Ethernet RX and IPv4 RX (``ETH_RX_FRAME``
messages, the datagram after the Ethernet header), one with ``direction="out"`` between IPv4 TX
and Ethernet TX (``ETH_TX_FRAME``). Give both the same rules: the inbound tile rewrites a
datagram to a rule's *public* address and port into its *private* ones, the outbound tile
rewrites a datagram from the private address and port back to the public ones, so the stack
behind them serves on the public address (``examples/nat_echo.py``)::

    eth_rx ─▶ nat_in ─▶ ip_rx ─▶ ...        ... ─▶ ip_tx ─▶ nat_out ─▶ eth_tx

Messages
--------
=============================  ===================================================================
in (``noc_in``)                an IPv4 datagram (any message type; Ethernet padding after it is
                               kept), metadata :data:`~beehive.proto.messages.PACKET_META`
out (``noc_out``, the tile's   the same message (type, metadata, length) with the addresses,
single next hop)               ports and checksums rewritten if a rule matched
=============================  ===================================================================

Rule table ``rules`` (:data:`NAT_RULE`, 153 bits, MSB first; the first valid entry that
matches wins)
----------------------------------------------------------------------------------------------
==============  ====  =========================================================================
field           bits  meaning
==============  ====  =========================================================================
valid           1     the rule is in use
protocol        8     IP protocol the rule applies to (6 TCP, 17 UDP...), 0 for any
peer_ip         32    the remote end's address (the inbound source, the outbound destination),
                      0 for any
peer_port       16    the remote end's port, 0 for any (a nonzero one needs UDP or TCP)
public_ip       32    the address the outside sees
public_port     16    the port the outside sees; 0: the rule rewrites addresses only and
                      matches any port (and any protocol, ICMP included)
private_ip      32    the address of the stack behind the NAT
private_port    16    its port (used when ``public_port`` is nonzero)
==============  ====  =========================================================================

Inbound, a datagram matches if its destination is ``public_ip`` (and port ``public_port``),
its source ``peer_ip``/``peer_port``; it leaves with destination ``private_ip``/``private_port``.
Outbound, a datagram matches if its source is ``private_ip`` (and port ``private_port``), its
destination ``peer_ip``/``peer_port``; it leaves with source ``public_ip``/``public_port``.

Checksums are updated incrementally (RFC 1624, eqn. 3) from the words that changed: the IPv4
header checksum, and the UDP or TCP checksum (whose pseudo-header holds the addresses); the
result equals a full recomputation. A UDP checksum of 0 ("none") stays 0, and a computed 0
is sent as ``0xFFFF``. Metadata passes unchanged.
"""


from amaranth import Mux, Signal

from apiary.stream.checksum import word_sum
from apiary.stream.header import Header, header_view
from beehive.proto.ipv4 import IPV4, IPV4_FLAG_MF, IPV4_MIN_IHL, IPV4_VERSION, IpProtocol
from beehive.proto.tcp.header import TCP
from beehive.proto.udp import UDP

from .base import NfTile, checksum_update, ip_value


__all__ = ["NAT_RULE", "NatTile", "nat_rule", "DIRECTIONS"]


NAT_RULE = Header("nat_rule", [
    ("valid", 1), ("protocol", 8), ("peer_ip", 32), ("peer_port", 16),
    ("public_ip", 32), ("public_port", 16), ("private_ip", 32), ("private_port", 16),
])

DIRECTIONS = ("in", "out")


def nat_rule(public_ip, private_ip, *, public_port: int = 0, private_port: int = 0,
             peer_ip=0, peer_port: int = 0, protocol: int = 0) -> dict[str, int]:
    """A valid :data:`NAT_RULE` as a dict (addresses as text or integers), for ``rules=``,
    :meth:`~apiary.stream.header.Header.pack`, or a table write through the control plane."""
    return {"valid": 1, "protocol": int(protocol), "peer_ip": ip_value(peer_ip),
            "peer_port": int(peer_port), "public_ip": ip_value(public_ip),
            "public_port": int(public_port), "private_ip": ip_value(private_ip),
            "private_port": int(private_port)}


class NatTile(NfTile):
    """Rewrite IPv4 datagrams by the first matching rule of ``rules`` (see the module docstring),
    updating the IPv4 and UDP/TCP checksums incrementally.

    Cut-through: the rule is looked up once per datagram, from its first 40 bytes (IPv4 and a
    TCP header), and the rewritten bytes are patched into the datagram as it streams by.
    Latency: 3 cycles at 512 bits, 12 at 64 bits (first flit in to first flit out, measured by
    :func:`beehive.nf.cost.nf_costs`); throughput one flit per cycle.

    Drops, each counted once, in this order: ``truncated`` (shorter than 20 bytes),
    ``bad_version``, ``bad_header_length`` (IHL below 5), ``ip_options`` (IHL above 5: not
    rewritten), ``bad_checksum`` (IPv4 header), ``bad_length`` (total length below the IPv4 and
    UDP/TCP headers' or above the bytes received), ``fragment`` (MF or an offset: no ports to
    match), ``no_rule`` (no rule matched, with ``unmatched="drop"``), ``no_route``. Counted
    among the forwarded: ``rewritten`` (a rule matched), ``passed`` (none did: sent on as it
    came, with ``unmatched="pass"``, the default).

    Parameters
    ----------
    direction : str
        ``"in"`` (public → private, before IPv4 RX) or ``"out"`` (private → public, after IPv4
        TX).
    entries, rules, unmatched
        See :class:`~beehive.nf.base.NfTile`; ``rules`` are :data:`NAT_RULE` dicts
        (:func:`nat_rule`).
    """

    head_bytes = 40
    patch_bytes = 40
    rule_entry = NAT_RULE
    table_description = ("NAT rules: valid 1 | protocol 8 | peer_ip 32 | peer_port 16 | "
                         "public_ip 32 | public_port 16 | private_ip 32 | private_port 16")
    drop_reasons = {
        "truncated": "datagrams shorter than an IPv4 header",
        "bad_version": "a version other than 4",
        "bad_header_length": "an IHL below 5",
        "ip_options": "datagrams with IP options (not rewritten)",
        "bad_checksum": "a wrong IPv4 header checksum",
        "bad_length": "a total length below the headers' or above the bytes received",
        "fragment": "fragments (no ports to match)",
        "no_rule": "datagrams no rule matches (unmatched='drop')",
    }
    kept_counters = {
        "rewritten": "datagrams a rule matched, rewritten",
        "passed": "datagrams no rule matches, sent on unchanged (unmatched='pass')",
    }

    def __init__(self, env=None, *, direction: str = "in", entries: int = 16, rules=(),
                 unmatched: str = "pass") -> None:
        if direction not in DIRECTIONS:
            raise ValueError(f"NatTile: direction must be one of {DIRECTIONS}, not "
                             f"{direction!r}")
        self.direction = direction
        super().__init__(env, entries=entries, rules=rules, unmatched=unmatched)

    def parse(self, m, p):
        ip = p.field(IPV4)
        udp = p.field(UDP, 20)
        tcp = p.field(TCP, 20)
        is_udp = ip.protocol == IpProtocol.UDP.value
        is_tcp = ip.protocol == IpProtocol.TCP.value
        l4 = Signal()
        m.d.comb += l4.eq(is_udp | is_tcp)
        l4_min = Mux(is_tcp, 20, Mux(is_udp, 8, 0))
        p.drop("truncated", p.head_len < 20)
        p.drop("bad_version", ip.version != IPV4_VERSION)
        p.drop("bad_header_length", ip.ihl < IPV4_MIN_IHL)
        p.drop("ip_options", ip.ihl > IPV4_MIN_IHL)
        p.drop("bad_checksum", word_sum(p.head, 10, stage=p.stage) != 0xFFFF)
        p.drop("bad_length", (ip.total_length < 20 + l4_min) | (ip.total_length > p.length))
        p.drop("fragment", (ip.flags & IPV4_FLAG_MF).any() | (ip.fragment_offset != 0))

        sport, dport = udp.src_port, udp.dst_port
        inbound = self.direction == "in"

        def matches(e):
            port_rule = e.public_port != 0
            uses_ports = port_rule | (e.peer_port != 0)
            if inbound:
                ours, peer = ip.dst == e.public_ip, ip.src
                our_port, peer_port, want = dport, sport, e.public_port
            else:
                ours, peer = ip.src == e.private_ip, ip.dst
                our_port, peer_port, want = sport, dport, e.private_port
            ports_ok = ~uses_ports | (l4 & (~port_rule | (our_port == want))
                                      & ((e.peer_port == 0) | (peer_port == e.peer_port)))
            return (e.valid & ((e.protocol == 0) | (e.protocol == ip.protocol))
                    & ours & ((e.peer_ip == 0) | (peer == e.peer_ip)) & ports_ok)
        hit, rule = p.match("nat", matches, "rewritten")

        # The words that change: the address (two words) and, for a port rule, the port.
        old_addr = Signal(32)
        new_addr = Signal(32)
        old_port = Signal(16)
        new_port = Signal(16)
        if inbound:
            m.d.comb += [old_addr.eq(ip.dst), new_addr.eq(rule.private_ip), old_port.eq(dport),
                         new_port.eq(Mux(rule.public_port != 0, rule.private_port, dport))]
        else:
            m.d.comb += [old_addr.eq(ip.src), new_addr.eq(rule.public_ip), old_port.eq(sport),
                         new_port.eq(Mux(rule.public_port != 0, rule.public_port, sport))]
        old = [old_addr[16:], old_addr[:16]]
        new = [new_addr[16:], new_addr[:16]]
        ip_sum = checksum_update(ip.checksum, old, new)
        tcp_sum = checksum_update(tcp.checksum, old + [old_port], new + [new_port])
        udp_sum = checksum_update(udp.checksum, old + [old_port], new + [new_port])

        head = Signal(8 * self.head_bytes)
        out_ip = header_view(IPV4, head)
        out_udp = header_view(UDP, head, 20)
        out_tcp = header_view(TCP, head, 20)
        m.d.comb += [head.eq(p.head), out_ip.checksum.eq(ip_sum)]
        if inbound:
            m.d.comb += [out_ip.dst.eq(new_addr), out_udp.dst_port.eq(new_port)]
        else:
            m.d.comb += [out_ip.src.eq(new_addr), out_udp.src_port.eq(new_port)]
        with m.If(is_tcp):
            m.d.comb += out_tcp.checksum.eq(tcp_sum)
        with m.Elif(is_udp & (udp.checksum != 0)):
            m.d.comb += out_udp.checksum.eq(Mux(udp_sum == 0, 0xFFFF, udp_sum))
        # Only the IPv4 header for other protocols (an address rule): their ports are not ports.
        nbytes = Mux(l4, p.head_len, Mux(p.head_len < 20, p.head_len, 20))
        p.patch(head, Mux(hit, nbytes, 0))
