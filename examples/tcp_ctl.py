"""The internal controller over UDP and over TCP, beside the TCP echo (examples/tcp_echo.py):
every counter of every tile readable, and every register writable, by name from the network
(``apiary ctl``, port 7200), with UDP datagrams or over a TCP connection. On a 4 × 4 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx     (3,0) tcp_rx ◀─┐
      │               │     └────────────────────────▶ │   ▲ wires  │
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx     (3,1) tcp_tx   │
      ▲               ▲               ▲                │           │
    (0,2) arp       (1,2) icmp      (2,2) echo      (3,2) tcp_echo │
    (0,3) ctl ◀──▶  (1,3) ctl_tcp   (2,3) tx_mem    (3,3) rx_mem ──┘

UDP requests go from ``udp_rx`` to the controller ``ctl`` and its replies to ``udp_tx``, as in
examples/udp_echo_ctl.py. TCP connections to port 7200 go to ``ctl_tcp``
(:class:`~beehive.apps.tcp_datagram.TcpDatagramTile`), which hands each length-prefixed record
to ``ctl`` as a datagram and writes its reply back on the connection: the controller answers
requests that came over TCP (``protocol`` 6) through ``ctl_tcp``. ::

    apiary check examples/tcp_ctl.py
    apiary sim   examples/tcp_ctl.py --tap tap0 --width 64          # then, from Linux:
    apiary ctl   examples/tcp_ctl.py 10.0.0.2 --tcp counters        # over one TCP connection
    apiary ctl   examples/tcp_ctl.py 10.0.0.2 read tcp_rx.bad_checksum    # over UDP

``design(width=512, ctl_width=64, **tcp_echo_options)``: the options of
``examples/tcp_echo.py``'s ``design``.
"""

from apiary.load import sibling
from beehive.apps.controller import CONTROL_PORT, REPLY_KEY, TCP_REPLY_KEY, ControllerTile
from beehive.apps.tcp_datagram import DATAGRAM_FBITS, KEY_APP, TcpDatagramTile


tcp_echo = sibling(__file__, "tcp_echo.py")


def design(width=512, ctl_width=64, **options):
    d = tcp_echo.design(width=width, name="tcp_ctl", ctl_width=ctl_width, **options)
    config = d.tiles["tcp_rx"].params["config"]        # the engine's, as the example set it
    d.add("ctl", ControllerTile, at=(0, 3))
    d.route("udp_rx", "ctl", key=CONTROL_PORT)
    d.route("ctl", "udp_tx", key=REPLY_KEY)
    d.add("ctl_tcp", TcpDatagramTile, at=(1, 3), config=config)
    tcp_echo.connect_app(d, "ctl_tcp", CONTROL_PORT)
    d.route("ctl_tcp", "ctl", key=KEY_APP)
    d.route("ctl", "ctl_tcp", key=TCP_REPLY_KEY, fbits=DATAGRAM_FBITS)
    return d
