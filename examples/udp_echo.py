"""UDP echo on port 7 through the Beehive stack, as in the paper's Fig. 8a: Ethernet, IPv4 and
UDP each in separate receive and transmit tiles, plus ARP, ICMP echo (ping) and the echo
application, on a 3 × 3 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx
      │               │               │
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx
      ▲               ▲               ▲
    (0,2) arp       (1,2) icmp      (2,2) echo

Every packet moves through the stack in protocol order, so the layout is deadlock-free
(``apiary check``). The design answers ARP for its address, pings, and UDP on port 7::

    apiary check examples/udp_echo.py
    apiary show  examples/udp_echo.py -o udp_echo.svg
    apiary sim   examples/udp_echo.py --tap tap0

``design(mac=..., ipv4=..., width=...)`` overrides the defaults (MAC 02:00:00:00:00:02, IPv4
10.0.0.2, 512-bit data plane). ``ip_options=False`` (``--set ip_options=False``) puts
:class:`~beehive.proto.ipv4.Ipv4RxNoOptionsTile` in IPv4 RX's place: half its area, and a
datagram with IP options is dropped and counted instead of answered. ``verify_checksums=False``
leaves the UDP and ICMP checksums unchecked (:func:`beehive.proto.layer.verify_checksums`): UDP RX
and ICMP become cut-through, without their packet buffers, and UDP replies carry checksum 0. The
25F board (``colorlight_5a_75b``) builds with both off, as LiteEth's own stack would be.
``low_latency=True`` (:func:`beehive.proto.layer.low_latency`) passes every queue straight through
when it is empty: at 512 bits the 1-byte echo takes 24 cycles instead of 33, for about 2,700
LUTs more (docs/performance.md).
"""

from apiary.design import Design
from beehive.apps.stack import ECHO_PORT, add_udp_stack
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC


#: The stack's tiles and routes (beehive/apps/stack.py), as the examples that build on this one
#: call it (``examples/udp_dram.py``, ...).
build_stack = add_udp_stack


def design(width=512, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, port=ECHO_PORT, ip_options=True,
           verify_checksums=True, low_latency=False):
    d = Design("udp_echo", cols=3, rows=3, width=width)
    d.settings.update(mac=mac, ipv4=ipv4, verify_checksums=verify_checksums,
                      low_latency=low_latency)
    return build_stack(d, port, ip_options=ip_options)
