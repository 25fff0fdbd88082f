"""pcap in, pcap out: feed a capture's frames into a design and capture what comes out.

Input is a classic pcap file (micro- or nanosecond, either byte order) of Ethernet frames, read
here rather than by scapy so that a bad capture is one clear error instead of odd frames: a
pcapng file, another link type (raw IP, Linux cooked, ...), a file cut short inside a record's
header or data, and a packet captured only in part (a snap length) are each refused with a
message naming the file, the record (numbered from 1, as Wireshark numbers them) and the fix.

Output timestamps are simulated time: a frame's timestamp is the cycle its last word left the
design divided by the clock (default 250 MHz, the Beehive paper's reference clock), written with
nanosecond resolution (pcap magic ``0xa1b23c4d``) so that single cycles stay distinct. Wireshark
and scapy's ``rdpcap`` read it.
"""

import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

from ..top import no_progress
from .base import DEFAULT_CLOCK_HZ, DEFAULT_MAX_CYCLES
from .core import SimError


__all__ = ["read_pcap", "write_pcap", "run_pcap", "PcapRecord", "write_pcap_records",
           "read_pcap_records", "cycle_ns"]

LINKTYPE_ETHERNET = 1
#: Link types of captures that hold no Ethernet header, by the name a user knows them by.
LINKTYPE_NAMES = {0: "BSD loopback", 12: "raw IP", 101: "raw IP", 113: "Linux cooked capture",
                  228: "raw IPv4", 229: "raw IPv6", 276: "Linux cooked capture v2"}
_NS_MAGIC = 0xA1B23C4D
_US_MAGIC = 0xA1B2C3D4
_PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"       # a pcapng section header block
_HEADER = 24                            # bytes of the file header
_RECORD_HEADER = 16                     # bytes of a record's header


def read_pcap(path) -> list[bytes]:
    """The frames of a classic pcap file of Ethernet frames (link type 1), as ``bytes``.

    Raises
    ------
    SimError
        One message naming the file and the problem: what :func:`read_pcap_records` refuses,
        another link type (raw IP, Linux cooked, ...: the frames need an Ethernet header
        first; the message says how), or a packet captured only in part (a snap length).
    """
    linktype, records = read_pcap_records(path)
    if linktype != LINKTYPE_ETHERNET:
        name = LINKTYPE_NAMES.get(linktype, "not Ethernet")
        raise SimError(f"{path}: link type {linktype} ({name}); the design takes Ethernet frames "
                       f"(link type {LINKTYPE_ETHERNET}). Give the packets an Ethernet header "
                       f"addressed to the design first, e.g. `tcprewrite --dlt=enet "
                       f"--enet-dmac=DESIGN_MAC --enet-smac=02:00:00:00:00:01 "
                       f"--infile={path} --outfile=eth.pcap`")
    for number, (_, data, orig_len) in enumerate(records, 1):
        if len(data) < orig_len:
            raise SimError(f"{path}: record {number} holds {len(data)} of the packet's "
                           f"{orig_len} bytes (captured with a snap length); capture whole "
                           f"frames (tcpdump -s 0)")
    return [r.data for r in records]


def write_pcap(path, frames, clock_hz=DEFAULT_CLOCK_HZ):
    """Write ``frames`` (:class:`~apiary.sim.Frame`\\ s) to a nanosecond pcap, each stamped at
    ``cycle_last / clock_hz`` seconds."""
    with open(os.fspath(path), "wb") as f:
        f.write(struct.pack("<IHHiIII", _NS_MAGIC, 2, 4, 0, 0, 65535, LINKTYPE_ETHERNET))
        for frame in frames:
            ns = frame.cycle_last * 1_000_000_000 // int(clock_hz) if float(clock_hz).is_integer() \
                else round(frame.cycle_last * 1e9 / clock_hz)
            sec, nsec = divmod(ns, 1_000_000_000)
            data = bytes(frame.data)
            f.write(struct.pack("<IIII", sec, nsec, len(data), len(data)))
            f.write(data)


class PcapRecord(NamedTuple):
    """One packet of a pcap: when (nanoseconds), what was captured, and how long the packet
    was (``orig_len``, at least ``len(data)``: a capture may keep only its first bytes)."""
    ns: int
    data: bytes
    orig_len: int


def cycle_ns(cycle: int, clock_hz: float = DEFAULT_CLOCK_HZ) -> int:
    """Cycle ``cycle`` of a ``clock_hz`` clock in whole nanoseconds (rounded). Below 1 GHz
    distinct cycles stay distinct, and ``round(ns * clock_hz / 1e9)`` gives the cycle back."""
    if float(clock_hz).is_integer() and 1_000_000_000 % int(clock_hz) == 0:
        return cycle * (1_000_000_000 // int(clock_hz))
    return round(cycle * 1e9 / clock_hz)


def write_pcap_records(path, records: Iterable[PcapRecord], linktype: int = LINKTYPE_ETHERNET,
                       snaplen: int = 65535) -> int:
    """Write ``records`` to a nanosecond pcap (magic ``0xa1b23c4d``) of link type ``linktype``
    (1 Ethernet, 101 raw IP, 147 to 162 user-defined); returns how many were written.

    Raises
    ------
    SimError
        A record's time is negative or does not fit the format (year 2106), or its
        ``orig_len`` is below its captured length.
    """
    count = 0
    with open(os.fspath(path), "wb") as f:
        f.write(struct.pack("<IHHiIII", _NS_MAGIC, 2, 4, 0, 0, snaplen, linktype))
        for ns, data, orig_len in records:
            data = bytes(data)
            sec, nsec = divmod(int(ns), 1_000_000_000)
            if not 0 <= sec < 1 << 32:
                raise SimError(f"pcap record {count}: time {ns} ns is out of range")
            if orig_len < len(data):
                raise SimError(f"pcap record {count}: orig_len {orig_len} is below its "
                               f"{len(data)} captured bytes")
            f.write(struct.pack("<IIII", sec, nsec, len(data), orig_len))
            f.write(data)
            count += 1
    return count


def read_pcap_records(path) -> tuple[int, list[PcapRecord]]:
    """``(linktype, records)`` of a classic pcap file (micro- or nanosecond, either byte
    order), times in nanoseconds.

    Raises
    ------
    SimError
        One message naming the file and the problem: it is missing, not a pcap file, a pcapng
        file (not read here: the message says how to convert it), or cut short inside a
        record's header or data (records are numbered from 1, as Wireshark numbers them).
    """
    try:
        with open(os.fspath(path), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise SimError(f"no such pcap file: {path}") from None
    except OSError as e:
        raise SimError(f"cannot read {path}: {e.strerror or e}") from None
    if not raw:
        raise SimError(f"{path} is empty, not a pcap file")
    if raw[:4] == _PCAPNG_MAGIC:
        raise SimError(f"{path} is a pcapng file; apiary reads classic pcap files. Convert it "
                       f"with `editcap -F pcap {path} out.pcap` (or in Wireshark: Save As, "
                       f"pcap)")
    order = next((o for o in "<>" if len(raw) >= 4
                  and struct.unpack(o + "I", raw[:4])[0] in (_NS_MAGIC, _US_MAGIC)), None)
    if order is None:
        raise SimError(f"{path} is not a pcap file: it starts with {raw[:4].hex()}, not a pcap "
                       f"magic number (a1b2c3d4 or a1b23c4d, either byte order)")
    if len(raw) < _HEADER:
        raise SimError(f"{path}: the pcap file header is cut short: {len(raw)} of {_HEADER} "
                       f"bytes")
    magic, = struct.unpack(order + "I", raw[:4])
    scale = 1 if magic == _NS_MAGIC else 1000
    linktype = struct.unpack(order + "I", raw[20:24])[0] & 0xFFFF
    records: list[PcapRecord] = []
    at = _HEADER
    while at < len(raw):
        number = len(records) + 1
        if at + _RECORD_HEADER > len(raw):
            raise SimError(f"{path}: record {number}'s header is cut short: {len(raw) - at} of "
                           f"{_RECORD_HEADER} bytes")
        sec, frac, incl, orig = struct.unpack(order + "IIII", raw[at:at + _RECORD_HEADER])
        at += _RECORD_HEADER
        if at + incl > len(raw):
            raise SimError(f"{path}: record {number} is cut short: {len(raw) - at} of {incl} "
                           f"bytes")
        records.append(PcapRecord(sec * 1_000_000_000 + frac * scale, raw[at:at + incl], orig))
        at += incl
    return linktype, records


def run_pcap(design, pcap_in, pcap_out, *, backend="verilator", clock_hz=DEFAULT_CLOCK_HZ,
             max_cycles=DEFAULT_MAX_CYCLES, vcd=None, vcd_window=None, seed=None, stall=0.0,
             port=None, progress=None, impair=None, taps=None):
    """Feed every frame of ``pcap_in`` into ``design``'s Ethernet port (back to back, in file
    order), simulate until idle or ``max_cycles``, and write what comes out to ``pcap_out``;
    with ``impair`` (an :class:`~apiary.sim.impair.Impairment`) both through the impaired link;
    ``taps(sim)``, if given, is called on the open simulation before it runs (e.g.
    :class:`~apiary.sim.trace.NocTrace`) and what it returns is the summary's ``taps``.

    Returns a summary dict: ``backend``, ``clock_hz``, ``cycles``, ``seconds`` (simulated),
    ``frames_in``, ``frames_entered``, ``frames_out``, ``idle`` (False if ``max_cycles`` cut
    the run short), ``counters``, ``port``, ``impaired`` (the link's counts as one line, or
    ``None``).
    """
    from . import open_sim
    frames = read_pcap(pcap_in)
    with open_sim(design, backend, seed=seed, stall=stall, clock_hz=clock_hz, vcd=vcd,
                  vcd_window=vcd_window, progress=progress, impair=impair) as sim:
        tapped = None if taps is None else taps(sim)
        name = sim.port(port).name
        sim.send_many(frames, port=name)
        with (progress or no_progress)(
                f"simulating {len(frames)} frames ({backend})",
                lambda s: f"simulated {sim.cycle} cycles in {s:.1f} s ({backend})"):
            sim.run(max_cycles=max_cycles)
        out = sim.received(name)
        entered = len(sim.sent(name))
        idle = sim.idle
        link = sim.link(name)
        write_pcap(pcap_out, out, clock_hz)
        return {
            "backend": backend,
            "port": name,
            "clock_hz": clock_hz,
            "cycles": sim.cycle,
            "seconds": sim.cycle / clock_hz,
            "frames_in": len(frames),
            "frames_entered": entered,
            "frames_out": len(out),
            "idle": idle,
            "counters": sim.counters(),
            "impaired": None if link is None else link.summary(),
            "taps": tapped,
        }
