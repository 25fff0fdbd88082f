"""Etherbone over UDP: LiteX's host tools on the control plane.

The controller (:class:`~beehive.apps.controller.ControllerTile`) also answers Etherbone, the
protocol of LiteX's ``litex_server --udp`` (and so of ``litex_cli`` and ``RemoteClient``), on
UDP port :data:`ETHERBONE_PORT` when the design routes that port to it
(``d.route("udp_rx", "ctl", key=ETHERBONE_PORT)``). Each 32-bit Etherbone address names one
word of one control agent's address map (:mod:`apiary.control.addrmap`):

==========  ======  ==========================================================
bits        width   what
==========  ======  ==========================================================
31-24       8       ``x`` of the tile position
23-18       6       ``y``
17-2        16      the word in the agent's map (counters ``0x0000``, registers
                    ``0x1000``, tables ``0x2000``)
1-0         2       ignored (addresses are of 32-bit words)
==========  ======  ==========================================================

:func:`csr_csv` writes a design's map as LiteX's ``csr.csv`` (``apiary ctl DESIGN csr``), so
``litex_cli --csr-csv csr.csv --regs`` lists every counter and register by name. LiteX reads a
register of several words most significant first, our maps keep them least significant first:
a value wider than 32 bits is listed as one register per word, ``<name>_w0`` (least
significant), ``<name>_w1``, ...

Packets (network byte order; LiteX's ``litex.tools.remote.etherbone``):

=======  ====  =================================================================================
bytes    size  field
=======  ====  =================================================================================
0-1      2     magic ``0x4E6F``
2        1     version (1) in the high nibble; ``nr`` bit 2, ``pr`` (probe reply) bit 1, ``pf``
               (probe) bit 0
3        1     address and port sizes: ``0x44`` (32-bit addresses and data)
4-7      4     padding
8        1     record flags (ignored)
9        1     byte enables: ``0x0F``
10       1     ``wcount``: words written
11       1     ``rcount``: words read
12-15    4     writes: the base address; reads: the base return address
16-      4 n   writes: the ``wcount`` words, to the base address and the next ones;
               reads: the ``rcount`` addresses to read
=======  ====  =================================================================================

What the controller does with them:

* A probe (``pf``) is answered with the 8-byte header, ``pr`` set.
* A read record (``rcount`` 1 to :data:`MAX_RECORD_WORDS`) is answered with one write record of
  as many words to the base return address, as LiteX expects: each word read from the agent its
  address names. A word whose agent refuses it or does not answer reads 0, and so do the words
  after it (the reply is sent all the same; the controller's own counters say why).
* A write record (``wcount`` 1 to :data:`MAX_RECORD_WORDS`) writes its words, in order, and is not
  answered (Etherbone's writes are posted); a refused word ends it.
* Anything else (another magic, version or size, byte enables other than ``0x0F``, a record that
  both writes and reads or does neither, more words than :data:`MAX_RECORD_WORDS`, a packet
  shorter than its words) is dropped unanswered and counted in ``bad_request``; bytes after the
  first record are ignored (LiteX sends one record a packet).
"""

import struct
from collections.abc import Callable, Iterable

from apiary.control.addrmap import DesignMap, words_of


__all__ = ["ETHERBONE_PORT", "MAGIC", "MAX_RECORD_WORDS", "HEAD_BYTES", "X_SHIFT", "Y_SHIFT",
           "Y_LIMIT", "address", "target", "probe", "read_packet", "write_packet",
           "reply_words", "csr_csv", "csr_entries"]


#: The UDP port LiteX's ``litex_server --udp`` talks to.
ETHERBONE_PORT = 1234
MAGIC = 0x4E6F
#: The packet header and the record's header and base address.
HEAD_BYTES = 16
#: Words a record reads or writes at most (the controller keeps 264 bytes of a request).
MAX_RECORD_WORDS = 62
X_SHIFT, Y_SHIFT = 24, 18
#: Rows a design may have for its positions to be addressed.
Y_LIMIT = 1 << (X_SHIFT - Y_SHIFT)
#: Byte 2: version 1, and the probe flags.
VERSION, PROBE, PROBE_REPLY = 0x10, 0x01, 0x02
SIZES = 0x44
BYTE_ENABLES = 0x0F

_HEADER = struct.Struct("!HBB4x")
_RECORD = struct.Struct("!BBBBI")


def address(x: int, y: int, word: int) -> int:
    """The Etherbone (byte) address of ``word`` of the agent at (``x``, ``y``)."""
    if not (0 <= x < 256 and 0 <= y < Y_LIMIT and 0 <= word < 1 << 16):
        raise ValueError(f"no Etherbone address for word {word:#x} at ({x}, {y}): x is 0 to "
                         f"255, y 0 to {Y_LIMIT - 1}, the word 0 to 0xffff")
    return x << X_SHIFT | y << Y_SHIFT | word << 2


def target(addr: int) -> tuple[int, int, int]:
    """``(x, y, word)`` that the Etherbone address ``addr`` names."""
    return addr >> X_SHIFT & 0xFF, addr >> Y_SHIFT & (Y_LIMIT - 1), addr >> 2 & 0xFFFF


def _packet(flags: int, record: bytes = b"") -> bytes:
    return _HEADER.pack(MAGIC, VERSION | flags, SIZES) + record


def probe() -> bytes:
    """A probe, as LiteX's ``CommUDP.probe`` sends it (with its 4 bytes of padding)."""
    return _packet(PROBE) + bytes(4)


def read_packet(addrs: Iterable[int], base_ret: int = 0) -> bytes:
    """A read of the words at ``addrs`` (Etherbone addresses), answered to ``base_ret``."""
    addrs = list(addrs)
    return _packet(0, _RECORD.pack(0, BYTE_ENABLES, 0, len(addrs), base_ret)
                   + b"".join(struct.pack("!I", a) for a in addrs))


def write_packet(base: int, words: Iterable[int]) -> bytes:
    """A write of ``words`` to the Etherbone address ``base`` and the next ones."""
    words = list(words)
    return _packet(0, _RECORD.pack(0, BYTE_ENABLES, len(words), 0, base)
                   + b"".join(struct.pack("!I", w) for w in words))


def reply_words(payload: bytes) -> tuple[int, list[int]]:
    """``(base address, words)`` of a read's reply; ``ValueError`` if it is not one."""
    payload = bytes(payload)
    if len(payload) < HEAD_BYTES or _HEADER.unpack_from(payload) != (MAGIC, VERSION, SIZES):
        raise ValueError(f"not an Etherbone reply: {payload[:HEAD_BYTES].hex()}")
    _, enables, wcount, rcount, base = _RECORD.unpack_from(payload, 8)
    if rcount or len(payload) < HEAD_BYTES + 4 * wcount:
        raise ValueError(f"not a read's reply: {wcount} words, {rcount} reads, "
                         f"{len(payload)} bytes")
    return base, list(struct.unpack_from(f"!{wcount}I", payload, HEAD_BYTES))


def csr_csv(dmap: DesignMap, name: str = "apiary") -> str:
    """The design's control map in LiteX's ``csr.csv`` format: its data and address widths,
    one ``csr_base`` per tile and one ``csr_register`` per counter and register word group
    (``<tile>_<name>``; ``ro`` or ``rw``). Tables are left out (LiteX has no equivalent; read
    them with ``apiary ctl``)."""
    lines = ["#" + "-" * 79, f"# Auto-generated by apiary ctl ({name}): the control plane over "
             f"Etherbone, UDP port {ETHERBONE_PORT}", "#" + "-" * 79,
             "constant,config_csr_data_width,32,,", "constant,config_bus_address_width,32,,",
             f"constant,config_etherbone_port,{ETHERBONE_PORT},,"]
    return "\n".join(lines + csr_entries(dmap, address)) + "\n"


def csr_entries(dmap: DesignMap, address_of: Callable[[int, int, int], int]) -> list[str]:
    """The ``csr_base`` and ``csr_register`` lines of :func:`csr_csv`, each word at
    ``address_of(x, y, word)``."""
    lines = [f"csr_base,{tmap.name},{address_of(tmap.x, tmap.y, 0):#010x},," for tmap in dmap]
    for tmap in dmap:
        for e in tmap:
            if e.kind == "table":
                continue
            mode = "rw" if e.writable else "ro"
            words = words_of(e.width)
            for k in range(words):
                suffix = f"_w{k}" if words > 1 else ""
                reg = f"{tmap.name}_{e.name}{suffix}"
                lines.append(f"csr_register,{reg},"
                             f"{address_of(tmap.x, tmap.y, e.addr + k):#010x},1,{mode}")
    return lines
