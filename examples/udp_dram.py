"""DRAM reachable from Linux over UDP: the UDP echo stack of ``examples/udp_echo.py`` plus a
memory tile (:class:`~apiary.os.memory_tile.MemoryTile`) and a UDP application that serves
reads and writes of it (:class:`~beehive.apps.mem_server.UdpMemoryTile`), on a 4 × 3 mesh::

    (0,0) eth_rx ─▶ (1,0) ip_rx ─▶ (2,0) udp_rx ──────────┐
      │               │               │                   ▼
    (0,1) eth_tx ◀─ (1,1) ip_tx ◀─ (2,1) udp_tx ◀── (3,1) mem_app
      ▲               ▲               ▲                 ▲ │
    (0,2) arp       (1,2) icmp      (2,2) echo      (3,2) memory

UDP port 7 is still the echo; datagrams to ``mem_port`` (7777) are memory requests, answered
to the port they came from. The request and reply formats are in
``beehive/apps/mem_server.py``: ``op`` (1 read, 2 write), a flags/status byte, ``length``
(u16) and ``addr`` (u32), big-endian, then the data of a write or of a read's reply; status 0
ok, 1 memory error (beyond ``mem_bytes``), 2 bad request. One request is served at a time.

From Linux (``apiary sim examples/udp_dram.py --tap tap0`` with tap0 at 10.0.0.1/24, or a
board on the network)::

    import socket
    from beehive.apps.mem_server import OP_READ, OP_WRITE, mem_request, parse_mem_reply

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    s.sendto(mem_request(OP_WRITE, 0x1000, b"hello, DRAM"), ("10.0.0.2", 7777))
    assert parse_mem_reply(s.recv(2048))["status"] == 0
    s.sendto(mem_request(OP_READ, 0x1000, 11), ("10.0.0.2", 7777))
    print(parse_mem_reply(s.recv(2048))["data"])     # b'hello, DRAM'

(without the package: ``struct.pack("!BBHI", op, 0, length, addr) + data``.) Reads are at
most 1024 bytes; a write is as long as one datagram allows (1464 data bytes at a 1500-byte
MTU). UDP may lose datagrams: a client retries after its timeout (a repeated write is
harmless).

In simulation the memory port gets a model (``apiary.sim`` attaches a ``MemoryModel``);
on a LiteX board (``apiary build examples/udp_dram.py --platform ecpix5``) the memory
tile's port ``memory_mem`` is LiteDRAM's native user port.

::

    apiary check examples/udp_dram.py
    apiary show  examples/udp_dram.py -o udp_dram.svg

``design(width=512, mac=..., ipv4=..., port=7, mem_port=7777, mem_bytes=1 << 20)``.
"""

from apiary.design import Design
from apiary.load import sibling
from apiary.os.memory_tile import MemoryTile
from beehive.apps.mem_server import MEMORY_KEY, REPLY_KEY, UdpMemoryTile
from beehive.proto.addresses import DEFAULT_IPV4, DEFAULT_MAC


udp_echo = sibling(__file__, "udp_echo.py")

MEM_PORT = 7777


def design(width=512, mac=DEFAULT_MAC, ipv4=DEFAULT_IPV4, port=udp_echo.ECHO_PORT,
           mem_port=MEM_PORT, mem_bytes=1 << 20):
    d = Design("udp_dram", cols=4, rows=3, width=width)
    d.settings.update(mac=mac, ipv4=ipv4)
    udp_echo.build_stack(d, port)
    d.add("mem_app", UdpMemoryTile, at=(3, 1))
    d.add("memory", MemoryTile, at=(3, 2), size_bytes=mem_bytes)
    d.route("udp_rx", "mem_app", key=mem_port)
    d.route("mem_app", "udp_tx", key=REPLY_KEY)
    d.route("mem_app", "memory", key=MEMORY_KEY)
    d.route("memory", "mem_app")
    return d
