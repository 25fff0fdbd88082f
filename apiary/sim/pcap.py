"""pcap in, pcap out: feed a capture's frames into a design and capture what comes out.

Output timestamps are simulated time: a frame's timestamp is the cycle its last word left the
design divided by the clock (default 250 MHz, the Beehive paper's reference clock), written with
nanosecond resolution (pcap magic ``0xa1b23c4d``) so that single cycles stay distinct. Wireshark
and scapy's ``rdpcap`` read it.
"""

import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

from .base import DEFAULT_CLOCK_HZ, DEFAULT_MAX_CYCLES
from .core import SimError


__all__ = ["read_pcap", "write_pcap", "run_pcap", "PcapRecord", "write_pcap_records",
           "read_pcap_records", "cycle_ns"]

LINKTYPE_ETHERNET = 1
_NS_MAGIC = 0xA1B23C4D
_US_MAGIC = 0xA1B2C3D4


def read_pcap(path):
    """The frames of a pcap or pcapng file, as a list of ``bytes`` (Ethernet captures only)."""
    from scapy.utils import rdpcap
    import scapy.layers.l2  # noqa: F401 -- registers Ethernet with rdpcap (else: a warning)
    try:
        packets = rdpcap(os.fspath(path))
    except FileNotFoundError:
        raise SimError(f"no such pcap file: {path}") from None
    except Exception as e:  # noqa: BLE001 -- scapy raises several kinds for a bad file
        raise SimError(f"cannot read {path} as a pcap file: {e}") from None
    return [bytes(p) for p in packets]


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
        The file is missing, not a classic pcap (pcapng is not read here), or truncated.
    """
    try:
        with open(os.fspath(path), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise SimError(f"no such pcap file: {path}") from None
    if len(raw) < 24:
        raise SimError(f"{path} is not a pcap file: too short for its header")
    for order in "<>":
        magic, = struct.unpack(order + "I", raw[:4])
        if magic in (_NS_MAGIC, _US_MAGIC):
            break
    else:
        raise SimError(f"{path} is not a classic pcap file (magic {raw[:4].hex()})")
    scale = 1 if magic == _NS_MAGIC else 1000
    linktype = struct.unpack(order + "I", raw[20:24])[0] & 0xFFFF
    records, at = [], 24
    while at < len(raw):
        if at + 16 > len(raw):
            raise SimError(f"{path}: truncated record header at byte {at}")
        sec, frac, incl, orig = struct.unpack(order + "IIII", raw[at:at + 16])
        at += 16
        if at + incl > len(raw):
            raise SimError(f"{path}: truncated record at byte {at}")
        records.append(PcapRecord(sec * 1_000_000_000 + frac * scale, raw[at:at + incl], orig))
        at += incl
    return linktype, records


def run_pcap(design, pcap_in, pcap_out, *, backend="verilator", clock_hz=DEFAULT_CLOCK_HZ,
             max_cycles=DEFAULT_MAX_CYCLES, vcd=None, vcd_window=None, seed=None, stall=0.0,
             port=None, quiet=True, impair=None):
    """Feed every frame of ``pcap_in`` into ``design``'s Ethernet port (back to back, in file
    order), simulate until idle or ``max_cycles``, and write what comes out to ``pcap_out``;
    with ``impair`` (an :class:`~apiary.sim.impair.Impairment`) both through the impaired link.

    Returns a summary dict: ``backend``, ``clock_hz``, ``cycles``, ``seconds`` (simulated),
    ``frames_in``, ``frames_entered``, ``frames_out``, ``idle`` (False if ``max_cycles`` cut
    the run short), ``counters``, ``port``, ``impaired`` (the link's counts as one line, or
    ``None``).
    """
    from . import open_sim
    frames = read_pcap(pcap_in)
    with open_sim(design, backend, seed=seed, stall=stall, clock_hz=clock_hz, vcd=vcd,
                  vcd_window=vcd_window, quiet=quiet, impair=impair) as sim:
        name = sim.port(port).name
        sim.send_many(frames, port=name)
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
        }
