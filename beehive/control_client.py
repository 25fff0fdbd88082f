"""Read and write a running design's counters, registers and tables by name, through its
controller tile (:mod:`beehive.apps.controller`), over UDP, over TCP or in a simulation.

::

    from apiary.top import control_map
    from beehive.control_client import ControlClient, udp_transport

    client = ControlClient(control_map(design), udp_transport("10.0.0.2"))
    client.read("udp_rx.bad_checksum")          # -> int
    client.write("lb.hash_key", 5)
    client.write_entry("nat.rules", 3, value)   # one burst: staging words, then COMMIT
    client.read_entry("nat.rules", 3)           # LOAD, then the staging words
    client.counters(moved_only=True)            # {"udp_rx.bad_checksum": 2, ...}

A *transport* is a callable that sends one request datagram's payload and returns the reply's
(or raises :class:`ControlError`): :func:`udp_transport` over a UDP socket,
:func:`tcp_transport` over one TCP connection (to a design whose controller has a
:class:`~beehive.apps.tcp_datagram.TcpDatagramTile` in front, as examples/tcp_ctl.py: each
request and reply is a record, a 2-byte length then its bytes), :class:`SimTransport` into an
:mod:`apiary.sim` simulation. Every request gets its own ``tag`` (byte 1), and a
transport takes only a reply whose first 7 bytes are the request's, so a late reply to an
earlier request is never taken for a later one. UDP may lose either datagram:
:func:`udp_transport` sends a request again when its reply does not come in time. Every
request is idempotent (a write writes the same words again; a table entry's burst writes the
same staging words and commits the same index), so a request served twice does no harm. TCP
loses nothing, so :func:`tcp_transport` sends each request once and waits for its reply.
"""

import itertools
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

from apiary.control.addrmap import DesignMap, MapEntry, TileMap, WORD_BITS
from beehive.apps.tcp_datagram import record, split_records
from beehive.apps.controller import (CONTROL_PORT, HEADER_BYTES, MAX_WORDS, STATUS_BAD_REQUEST,
                                     STATUS_BAD_ADDR, STATUS_NAMES, STATUS_OK,
                                     STATUS_READ_ONLY, STATUS_TIMEOUT, ControlReply,
                                     parse_reply, read_request, write_request)


__all__ = ["ControlClient", "ControlError", "Transport", "udp_transport", "tcp_transport",
           "SimTransport"]

#: Sends a request payload, returns the reply payload (raising :class:`ControlError`).
Transport = Callable[[bytes], bytes]
_WORD_MASK = (1 << WORD_BITS) - 1


class ControlError(Exception):
    """A request failed: an unknown name, a value that does not fit, no answer, or an agent's
    refusal (BAD_ADDR, READ_ONLY). The message is one readable sentence."""


def _status_text(status: int) -> str:
    return STATUS_NAMES.get(status, f"status {status:#04x}")


class ControlClient:
    """Names to words: what a design's address map (``dmap``, from
    :func:`apiary.top.control_map`) says a name is, read or written through ``transport``.

    Values wider than 32 bits are split into words least significant first, as the agents
    keep them; a request reads or writes at most 64 words, so longer runs are split into
    several requests.
    """

    def __init__(self, dmap: DesignMap, transport: Transport) -> None:
        self.dmap = dmap
        self.transport = transport
        self._tags = itertools.cycle(range(256))

    # -- words ---------------------------------------------------------------------------------

    def _tile(self, tile: "str | TileMap | tuple[int, int]") -> tuple[str, int, int]:
        """``(label, x, y)`` of a tile; the label is its name and position (``udp_rx (2,0)``),
        or only the position when given as ``(x, y)``."""
        if isinstance(tile, tuple):
            x, y = tile
            return f"({x},{y})", x, y
        if not isinstance(tile, TileMap):
            try:
                tile = self.dmap.tile(tile)
            except KeyError as e:
                raise ControlError(e.args[0]) from None
        return f"{tile.name} ({tile.x},{tile.y})", tile.x, tile.y

    def _ask(self, request: bytes, where: str) -> ControlReply:
        reply = parse_reply(self.transport(request))
        if reply.status == STATUS_OK:
            return reply
        reason = {STATUS_TIMEOUT: "the tile's control agent did not answer",
                  STATUS_BAD_REQUEST: "the controller refused the request as malformed",
                  STATUS_BAD_ADDR: "no such word in the tile's address map",
                  STATUS_READ_ONLY: "a word there is read-only"}.get(reply.status, "refused")
        raise ControlError(f"{where}: {_status_text(reply.status)} ({reason})")

    def read_words(self, tile: "str | TileMap | tuple[int, int]", addr: int,
                   count: int) -> list[int]:
        """``count`` words at ``addr``, ``addr + 1``, ... of ``tile`` (a name, a
        :class:`~apiary.control.addrmap.TileMap` or ``(x, y)``)."""
        label, x, y = self._tile(tile)
        words: list[int] = []
        for start in range(addr, addr + count, MAX_WORDS):
            n = min(MAX_WORDS, addr + count - start)
            where = f"reading {label} words {start:#06x}..{start + n - 1:#06x}"
            try:
                request = read_request(x, y, start, n, tag=next(self._tags))
            except ValueError as e:
                raise ControlError(f"{where}: {e}") from None
            words += self._ask(request, where).words
        return words

    def write_words(self, tile: "str | TileMap | tuple[int, int]", addr: int,
                    words: Iterable[int]) -> None:
        """Write ``words`` to ``addr``, ``addr + 1``, ... of ``tile``, in order."""
        label, x, y = self._tile(tile)
        words = list(words)
        for k in range(0, len(words), MAX_WORDS):
            chunk = words[k:k + MAX_WORDS]
            start = addr + k
            where = f"writing {label} words {start:#06x}..{start + len(chunk) - 1:#06x}"
            try:
                request = write_request(x, y, start, chunk, tag=next(self._tags))
            except ValueError as e:
                raise ControlError(f"{where}: {e}") from None
            self._ask(request, where)

    # -- names ---------------------------------------------------------------------------------

    def lookup(self, name: str) -> tuple[TileMap, MapEntry]:
        """``(tile map, entry)`` of ``"<tile>.<name>"``; :class:`ControlError` (listing what
        there is) if the design has no such thing."""
        try:
            return self.dmap.lookup(name)
        except KeyError as e:
            raise ControlError(e.args[0]) from None

    @staticmethod
    def _join(words: list[int]) -> int:
        return sum((w & _WORD_MASK) << (WORD_BITS * k) for k, w in enumerate(words))

    @staticmethod
    def _split(value: int, count: int) -> list[int]:
        return [value >> (WORD_BITS * k) & _WORD_MASK for k in range(count)]

    @staticmethod
    def _fit(value: int, entry: MapEntry, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or \
                not 0 <= value < 1 << entry.width:
            raise ControlError(f"{what} is {entry.width} bits wide: {value!r} does not fit "
                               f"(0 to {(1 << entry.width) - 1:#x})")
        return value

    def read(self, name: str) -> int:
        """The value of counter or register ``name`` (``"<tile>.<name>"``)."""
        tmap, entry = self.lookup(name)
        if entry.kind == "table":
            raise ControlError(f"{name} is a table of {entry.entries} entries: read an entry "
                               f"(read_entry, or `apiary ctl ... table {name} INDEX`)")
        return self._join(self.read_words(tmap, entry.addr, entry.words))

    def write(self, name: str, value: int) -> None:
        """Set register ``name`` to ``value`` (its words in one request, least significant
        first, each taking effect as it is written)."""
        tmap, entry = self.lookup(name)
        if entry.kind == "counter":
            raise ControlError(f"{name} is a counter: counters are read-only")
        if entry.kind == "table":
            raise ControlError(f"{name} is a table: write an entry (write_entry, or "
                               f"`apiary ctl ... table {name} INDEX VALUE`)")
        self.write_words(tmap, entry.addr, self._split(self._fit(value, entry, name),
                                                       entry.words))

    def _table(self, name: str, index: int) -> tuple[TileMap, MapEntry]:
        tmap, entry = self.lookup(name)
        if entry.kind != "table":
            raise ControlError(f"{name} is a {entry.kind}, not a table")
        if isinstance(index, bool) or not isinstance(index, int) or \
                not 0 <= index < entry.entries:
            raise ControlError(f"{name} has entries 0 to {entry.entries - 1}, not {index!r}")
        return tmap, entry

    def read_entry(self, name: str, index: int) -> int:
        """Entry ``index`` of table ``name``: a write of ``index`` to its LOAD word, then a read
        of its staging words (two requests)."""
        tmap, entry = self._table(name, index)
        self.write_words(tmap, entry.load, [index])
        return self._join(self.read_words(tmap, entry.addr, entry.words))

    def write_entry(self, name: str, index: int, value: int) -> None:
        """Set entry ``index`` of table ``name`` to ``value``, whole: one request writing its
        staging words then ``index`` to COMMIT, which copies them into the entry in one
        cycle."""
        tmap, entry = self._table(name, index)
        if not entry.writable:
            raise ControlError(f"{name} is a read-only table")
        words = self._split(self._fit(value, entry, f"an entry of {name}"), entry.words)
        self.write_words(tmap, entry.addr, words + [index])

    def counters(self, moved_only: bool = False) -> dict[str, int]:
        """Every counter of every tile, ``{"<tile>.<counter>": value}`` in address-map order
        (with ``moved_only``, only those that are not zero). Each tile's counters are read in
        one request (or as few as 64-word requests allow)."""
        out: dict[str, int] = {}
        for tmap in self.dmap:
            counters = tmap.of_kind("counter")
            if not counters:
                continue
            start = min(e.addr for e in counters)
            end = max(e.addr + e.words for e in counters)
            words = self.read_words(tmap, start, end - start)
            for e in counters:
                value = self._join(words[e.addr - start:e.addr - start + e.words])
                if value or not moved_only:
                    out[f"{tmap.name}.{e.name}"] = value
        return out


# -- transports ------------------------------------------------------------------------------------

def _matches(request: bytes, reply: bytes) -> bool:
    return len(reply) >= HEADER_BYTES and reply[:HEADER_BYTES - 1] == request[:HEADER_BYTES - 1]


class _UdpTransport:
    """See :func:`udp_transport`."""

    def __init__(self, host: str, port: int, timeout: float, retries: int) -> None:
        if not 0 < port < 65536 or timeout <= 0 or retries < 0:
            raise ControlError("the port is 1 to 65535, the timeout above 0 and the retries 0 "
                               "or more")
        self.where = f"{host}:{port}"
        self.timeout, self.retries = timeout, retries
        try:
            info = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
        except socket.gaierror as e:
            raise ControlError(f"unknown host {host!r}: {e.strerror}") from None
        family, kind, proto, _, address = info[0]
        self.sock = socket.socket(family, kind, proto)
        try:
            self.sock.connect(address)      # only the controller's replies come in
        except OSError as e:
            self.sock.close()
            raise ControlError(f"{self.where}: {e.strerror or e}") from None

    def __call__(self, request: bytes) -> bytes:
        tries = self.retries + 1
        try:
            for _ in range(tries):
                self.sock.send(request)
                deadline = time.monotonic() + self.timeout
                while (left := deadline - time.monotonic()) > 0:
                    self.sock.settimeout(left)
                    try:
                        reply = self.sock.recv(2048)
                    except TimeoutError:
                        break
                    if _matches(request, reply):
                        return reply
        except OSError as e:
            raise ControlError(f"{self.where}: {e.strerror or e}") from None
        raise ControlError(f"{self.where}: no answer from the controller after {tries} "
                           f"tr{'y' if tries == 1 else 'ies'} of {self.timeout:g} s")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "_UdpTransport":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def udp_transport(host: str, port: int = CONTROL_PORT, timeout: float = 0.5,
                  retries: int = 3) -> _UdpTransport:
    """A transport over a UDP socket to the controller at ``host``:``port``: each request is
    sent again after ``timeout`` seconds without its reply, ``retries`` times at most, then
    :class:`ControlError`. Replies to other requests (late ones) are skipped. Close it with
    ``.close()`` (or use it in a ``with`` block)."""
    return _UdpTransport(host, port, timeout, retries)


class _TcpTransport:
    """See :func:`tcp_transport`."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        if not 0 < port < 65536 or timeout <= 0:
            raise ControlError("the port is 1 to 65535 and the timeout above 0")
        self.where = f"{host}:{port} (TCP)"
        self.timeout = timeout
        self.pending = b""                  # bytes of the stream not yet taken as replies
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except socket.gaierror as e:
            raise ControlError(f"unknown host {host!r}: {e.strerror}") from None
        except OSError as e:
            raise ControlError(f"{self.where}: {e.strerror or e}") from None

    def __call__(self, request: bytes) -> bytes:
        try:
            self.sock.sendall(record(request))
            deadline = time.monotonic() + self.timeout
            while True:
                replies, rest = split_records(self.pending)
                if replies:
                    self.pending = self.pending[len(record(replies[0])):]
                    if _matches(request, replies[0]):
                        return replies[0]
                    continue                # (a reply to an earlier request: not ours)
                if (left := deadline - time.monotonic()) <= 0:
                    break
                self.sock.settimeout(left)
                try:
                    data = self.sock.recv(4096)
                except TimeoutError:
                    break
                if not data:
                    raise ControlError(f"{self.where}: the design closed the connection (a "
                                       f"request it could not take, or no reply in time)")
                self.pending += data
        except OSError as e:
            raise ControlError(f"{self.where}: {e.strerror or e}") from None
        raise ControlError(f"{self.where}: no reply from the controller in "
                           f"{self.timeout:g} s")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "_TcpTransport":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def tcp_transport(host: str, port: int = CONTROL_PORT, timeout: float = 5.0) -> _TcpTransport:
    """A transport over one TCP connection to the controller at ``host``:``port`` (opened
    now): each request goes once, as a record, and its reply is awaited ``timeout`` seconds at
    most, then :class:`ControlError`. Close it with ``.close()`` (or use it in a ``with``
    block): the design then closes its side."""
    return _TcpTransport(host, port, timeout)


class SimTransport:
    """A transport into a simulation (:func:`apiary.sim.open_sim`): each request becomes an
    Ethernet/IPv4/UDP frame (scapy) from the client's addresses to the design's MAC and IPv4
    address (its ``settings``, :mod:`beehive.proto.addresses`) and ``port``; the simulation runs
    ``step`` cycles at a time until the reply frame comes out (at most ``max_cycles``, then
    :class:`ControlError`), and its UDP payload is returned. Frames that are not the reply stay
    in ``sim.received()`` for the test to see. No ARP: the frame goes straight to the design's
    MAC, and the design answers to the request's source MAC.
    """

    def __init__(self, sim: Any, *, client_mac: str = "02:00:00:00:00:01",
                 client_ip: str = "10.0.0.1", client_port: int = 40000,
                 port: int = CONTROL_PORT, frame_port: str | None = None, step: int = 100,
                 max_cycles: int = 200_000) -> None:
        from beehive.proto.addresses import design_addresses
        self.sim = sim
        self.mac, self.ip = design_addresses(sim.design)
        self.client_mac, self.client_ip, self.client_port = client_mac, client_ip, client_port
        self.port, self.frame_port = port, frame_port
        self.step, self.max_cycles = step, max_cycles
        self.requests = 0

    def frame(self, request: bytes) -> bytes:
        """The Ethernet frame that carries ``request``."""
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        return bytes(Ether(dst=self.mac, src=self.client_mac)
                     / IP(src=self.client_ip, dst=self.ip)
                     / UDP(sport=self.client_port, dport=self.port) / bytes(request))

    def reply_of(self, frame: bytes) -> bytes | None:
        """The UDP payload of ``frame`` if it is a datagram from the controller to the client."""
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        packet = Ether(frame)
        if UDP not in packet or IP not in packet:
            return None
        ip, udp = packet[IP], packet[UDP]
        if (ip.src, ip.dst, udp.sport, udp.dport) != (self.ip, self.client_ip, self.port,
                                                      self.client_port):
            return None
        return bytes(udp.payload)

    def __call__(self, request: bytes) -> bytes:
        sim, port = self.sim, self.frame_port
        seen = len(sim.received(port))
        sim.send(self.frame(request), port)
        self.requests += 1
        ran = 0
        while ran < self.max_cycles:
            ran += sim.run(self.step)
            frames = sim.received(port)
            for frame in frames[seen:]:
                reply = self.reply_of(frame.data)
                if reply is not None and _matches(request, reply):
                    return reply
        raise ControlError(f"no reply from the controller within {self.max_cycles} cycles")

