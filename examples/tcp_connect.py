"""A tile opens a TCP connection to a server and sends it a known byte stream: the active
open that Beehive's engine lacks. The stack of ``examples/tcp_echo.py`` (ARP, ping, UDP echo,
TCP echo on port 7), plus a sender application, :class:`~beehive.apps.TcpSenderTile`, that
resolves the server's address through the ARP tile, opens a connection to
``peer_ip:peer_port`` and writes ``length`` bytes (byte ``k`` is ``k % 251``), then closes::

    (0,3) sender ─▶ tcp_rx ─▶ ARP (who has 10.0.0.1?) ─▶ SYN ─▶ ... ─▶ FIN

From Linux, inside a network namespace (see README)::

    ip netns exec demo python3 -c "import socket; s = socket.create_server(('10.0.0.1', 5001));
        c, _ = s.accept(); n = 0
        while (b := c.recv(65536)): n += len(b)
        print(n)" &
    ip netns exec demo apiary sim examples/tcp_connect.py --tap tap0 --width 64

The sender opens a million cycles after reset and, if the server is not there yet, again every
million cycles (20 times at most), so the namespace's address can be set up after the bridge
starts. ``design(width=512, peer_ip="10.0.0.1", peer_port=5001, length=256 * 1024, ...)``.
"""

from apiary.design import Design
from apiary.load import sibling
from beehive.apps import TcpEchoTile, TcpSenderTile
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC


tcp_echo = sibling(__file__, "tcp_echo.py")

SERVER_IP, SERVER_PORT = "10.0.0.1", 5001
LOCAL_PORT = 40000


def design(width=512, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, peer_ip=SERVER_IP,
           peer_port=SERVER_PORT, length=256 * 1024, start=1_000_000, retry=1_000_000,
           attempts=20, flows=None, ring=16384, rto=None, **tcp):
    d = Design("tcp_connect", cols=4, rows=4, width=width)
    d.settings.update(mac=mac, ipv4=ipv4, idle_hz=tcp_echo.IDLE_HZ,
                      memory_latency=tcp_echo.BRAM_LATENCY)
    tcp_echo.udp_echo.build_stack(d)
    config = tcp_echo.tcp_config(width, flows, ring, rto, **tcp)
    tcp_echo.add_tcp(d, config)
    d.add("tcp_echo", TcpEchoTile, at=(3, 2), config=config)
    tcp_echo.connect_app(d, "tcp_echo", tcp_echo.ECHO_PORT)
    d.add("sender", TcpSenderTile, at=(0, 3), config=config, peer_ip=peer_ip,
          peer_port=peer_port, local_port=LOCAL_PORT, length=length, start=start,
          retry=retry, attempts=attempts)
    tcp_echo.connect_app(d, "sender", opens=True)
    return d
