"""pcap in, pcap out: feed a capture's frames into a design and capture what comes out.

Output timestamps are simulated time: a frame's timestamp is the cycle its last word left the
design divided by the clock (default 250 MHz, the Beehive paper's reference clock), written with
nanosecond resolution (pcap magic ``0xa1b23c4d``) so that single cycles stay distinct. Wireshark
and scapy's ``rdpcap`` read it.
"""

import os
import struct

from .base import DEFAULT_CLOCK_HZ, DEFAULT_MAX_CYCLES
from .core import SimError


__all__ = ["read_pcap", "write_pcap", "run_pcap"]

LINKTYPE_ETHERNET = 1
_NS_MAGIC = 0xA1B23C4D


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
