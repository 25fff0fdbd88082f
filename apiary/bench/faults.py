"""The fault matrix: what one tenant's fault costs another, ``apiary bench faults [--markdown]``.

Two untrusted tiles share a memory tile and a destination (64 bits, Verilator, every figure in
cycles, exact)::

    (0,0) offender*   (1,0) tenant*   (2,0) mm          * untrusted
    (0,1) sink        (1,1) mem0      (2,1) errors

The tenant offers a steady load: every :data:`PERIOD` cycles one request, alternately a 64-byte
load from its segment in ``mem0`` and a 32-byte message to the sink, :data:`REQUESTS` in all
(the *window*). At the tenant's first request the offender commits one fault; the same window
without it is the *solo* run. For each fault:

* **share**: the tenant's bytes delivered within the window (load answers at the tenant, messages
  at the sink), as a share of the solo run's;
* **worst wait**: the tenant's longest request, from the cycle it is offered at the tenant's
  port (which holds it while the tenant cannot send) to the answer leaving the tenant's (a
  load) or the sink's (a message) port; solo beside it;
* **lost**: the tenant's bytes never delivered, once the design is idle again;
* **to quarantine**: cycles from the fault (the offending frame's last word entering the
  offender's port; the first flit of the endless message) to the offender's monitor
  quarantining it;
* **to serve again**: cycles from the sink's RELEASE entering its port to the offender's monitor
  opening again, and to an allocation the offender then asks for being answered.

The monitors stop a tile that leaves a message untaken for ``stall_limit`` cycles
(:class:`~apiary.os.monitor.MonitorConfig`; the bench uses :data:`STALL_LIMIT`, the default is
65,536), and the offender's sends are rate-limited (:data:`FLOOD_RATE`, ``on_excess="fault"``).
``--rx-buffer-flits N`` gives every monitor a receive buffer (``MonitorConfig.rx_buffer_flits``),
so that a shared tile never waits on a tile that does not read.
"""

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from ..design import Design
from ..noc.header import Fbits, Message, NocHeader
from ..os.kernel import Kernel
from ..os.memory_tile import LOAD_MEM, LOAD_MEM_ACK, decode_mem_message, mem_message_flits
from ..os.monitor import MonitorConfig, RateLimit
from ..os.uapi import (FaultKind, KernelMeta, KernelMsgType as K, Perm, Status,
                       decode_kernel_message, kernel_message_flits, virtual_address)
from ..tiles import RawPortTile
from ..tiles.hostile import EndlessTile, HangingPortTile
from ..tiles.raw_port import frame_message, message_frame


__all__ = ["FAULTS", "fault_design", "FaultRun", "run_fault", "markdown", "main"]

WIDTH = 64
OFFENDER, TENANT, MANAGER, SINK, MEM, ERRORS = (0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)
#: The tenant's load: one request every PERIOD cycles, REQUESTS of them.
PERIOD, REQUESTS = 16, 256
LOAD_BYTES, MESSAGE_BYTES = 64, 32
STALL_LIMIT = 1024
#: Bytes each tile allocates: a distinct address for each of the tenant's loads.
SEGMENT = LOAD_BYTES * REQUESTS // 2
FLOOD_RATE = RateLimit(burst=32, refill=1, period=4, on_excess="fault")
#: The cycle the window opens (the allocations are done long before).
START = 2000
#: Messages of a flood, and the type every plain message carries.
FLOOD, PLAIN = 64, 12
SPOOFED = b"spoofed: the tenant's source"

#: The faults, by name: the offender tile that commits it.
FAULTS = {
    "hung tile (stops reading, its own load in flight)": "hanging",
    "endless message (3 flits of 8, never ended)": "endless",
    "flood (64 messages back to back)": "raw",
    "IPC violation (a message without a capability)": "raw",
    "memory violation (a load outside its segment)": "raw",
    "forged kernel message (CAP_INSTALL)": "raw",
    "spoofed source (the tenant's)": "raw",
}


def fault_design(offender: str = "raw", stall_limit: int = STALL_LIMIT,
                 rx_buffer_flits: int | None = None) -> Design:
    """The bench's design, with an offender of kind ``offender``: ``raw`` (a
    :class:`~apiary.tiles.RawPortTile`), ``hanging`` (:class:`~apiary.tiles.hostile.
    HangingPortTile`, one read) or ``endless`` (:class:`~apiary.tiles.hostile.EndlessTile`,
    to the sink, at :data:`START`); the monitors' ``stall_limit`` and ``rx_buffer_flits``."""
    d = Design(f"faults_{offender}", cols=3, rows=2, width=WIDTH)
    kernel = Kernel(d, manager=MANAGER, errors=ERRORS, memories={"mem0": (MEM, 1 << 14)},
                    monitor=MonitorConfig(stall_limit=stall_limit,
                                          rx_buffer_flits=rx_buffer_flits))
    if offender == "raw":
        d.add("offender", RawPortTile, at=OFFENDER, trusted=False)
    elif offender == "hanging":
        d.add("offender", HangingPortTile, at=OFFENDER, trusted=False, reads=1)
    elif offender == "endless":
        d.add("offender", EndlessTile, at=OFFENDER, trusted=False, dst=SINK, start=START)
    else:
        raise ValueError(f"no offender {offender!r}; one of raw, hanging, endless")
    d.add("tenant", RawPortTile, at=TENANT, trusted=False, backpressure=True)
    d.add("sink", RawPortTile, at=SINK)
    kernel.trust("sink")                        # its RELEASE, to the error manager
    kernel.limit("offender", FLOOD_RATE)
    d.route("offender", "sink", allow=True)
    d.route("tenant", "sink", allow=True)
    return d


def _plain(src: tuple[int, int], dst: tuple[int, int], payload: bytes) -> bytes:
    hdr = NocHeader(dst_x=dst[0], dst_y=dst[1], src_x=src[0], src_y=src[1], msg_type=PLAIN)
    return message_frame(Message(hdr, [], payload).flits(WIDTH), WIDTH)


def _load(place: tuple[int, int], handle: int, offset: int, size: int, tag: int) -> bytes:
    return message_frame(mem_message_flits(WIDTH, LOAD_MEM, virtual_address(handle, offset), size,
                                           b"", src=place, dst=(7, 7), tag=tag), WIDTH)


def _alloc(place: tuple[int, int], user: int = 0) -> bytes:
    return message_frame(kernel_message_flits(WIDTH, K.CAP_ALLOC, KernelMeta(
        size=SEGMENT, perm=Perm.RW, user=user), src=place, dst=place), WIDTH)


@dataclass
class FaultRun:
    """What one run measured (see the module docstring); ``None`` where it does not apply."""
    delivered: int                              # tenant bytes within the window
    worst_wait: int
    lost: int
    fault_kind: int | None = None               # the error manager's FaultKind, if any
    to_quarantine: int | None = None
    to_open: int | None = None
    to_serve: int | None = None
    notes: list[str] = field(default_factory=list)


class _Driver:
    def __init__(self, sim: Any) -> None:
        self.sim = sim

    def quarantined(self) -> bool:
        return bool(self.sim.counters().get("offender_monitor_quarantined", 0))

    def alloc(self, port: str, place: tuple[int, int]) -> int:
        self.sim.send(_alloc(place), port=port)
        self.sim.run(until_idle=True)
        (frame,) = self.sim.received(port, clear=True)
        meta = decode_kernel_message(frame_message(frame.data, WIDTH), WIDTH)[1]
        if (meta.op, meta.status) != (K.CAP_ALLOC.value, Status.OK):
            raise RuntimeError(f"{port}'s allocation failed: {meta}")
        return meta.handle

    def until(self, done: Any, limit: int) -> int | None:
        """Run cycle by cycle until ``done()``; the cycle it held, or None after ``limit``."""
        for _ in range(limit):
            if done():
                return self.sim.cycle
            self.sim.run(1)
        return self.sim.cycle if done() else None


def _commit(kind: str, sim: Any, offender_handle: int | None) -> None:
    """Queue the offending frames of ``kind`` at the offender's port."""
    name = kind.split(" (")[0]
    if name == "hung tile":
        assert offender_handle is not None
        sim.send(_load(OFFENDER, offender_handle, 0, 512, tag=1), port="offender")
    elif name == "flood":
        sim.send_many([_plain(OFFENDER, SINK, bytes([0xF0]) * MESSAGE_BYTES)
                       for _ in range(FLOOD)], port="offender")
    elif name == "IPC violation":
        sim.send(_plain(OFFENDER, TENANT, b"no capability"), port="offender")
    elif name == "memory violation":
        assert offender_handle is not None
        sim.send(_load(OFFENDER, offender_handle, SEGMENT, 64, tag=2), port="offender")
    elif name == "forged kernel message":
        sim.send(message_frame(kernel_message_flits(
            WIDTH, K.CAP_INSTALL, KernelMeta(size=1 << 20, perm=Perm.RW), src=OFFENDER,
            dst=TENANT), WIDTH), port="offender")
    elif name == "spoofed source":
        sim.send(_plain(TENANT, SINK, SPOOFED), port="offender")
    elif name != "endless message":
        raise ValueError(f"no fault {kind!r}")


def run_fault(kind: str | None, backend: str = "verilator", stall_limit: int = STALL_LIMIT,
              rx_buffer_flits: int | None = None) -> FaultRun:
    """One run: the tenant's window with the fault ``kind`` (a key of :data:`FAULTS`), or
    alone with ``None``."""
    from ..sim import open_sim
    offender = FAULTS[kind] if kind else "raw"
    design = fault_design(offender, stall_limit, rx_buffer_flits)
    with open_sim(design, backend, idle_cycles=200) as sim:
        drive = _Driver(sim)
        tenant = drive.alloc("tenant", TENANT)
        handle = drive.alloc("offender", OFFENDER) if offender != "endless" else None
        sim.run(START - sim.cycle)
        sim.sent("tenant", clear=True)
        if offender != "endless":
            sim.sent("offender", clear=True)
        # The window: the tenant's requests, paced; the fault committed with the first.
        fault_at = START if offender == "endless" else None
        quarantined_at = None
        offered = []
        for k in range(REQUESTS):
            offered.append(sim.cycle)
            if k % 2 == 0:
                sim.send(_load(TENANT, tenant, k // 2 * LOAD_BYTES, LOAD_BYTES, tag=k),
                         port="tenant")
            else:
                sim.send(_plain(TENANT, SINK, bytes([k % 256]) * MESSAGE_BYTES), port="tenant")
            if k == 0 and kind:
                _commit(kind, sim, handle)
            for _ in range(PERIOD):
                sim.run(1)
                if kind and quarantined_at is None and drive.quarantined():
                    quarantined_at = sim.cycle
        window_end = sim.cycle
        sim.run(until_idle=True, max_cycles=16 * stall_limit + 100_000)
        if kind and quarantined_at is None:
            quarantined_at = drive.until(drive.quarantined, 4 * stall_limit)
        if fault_at is None and kind and sim.sent("offender"):
            fault_at = sim.sent("offender")[0].cycle_last
        run = _tenant_figures(sim, offered, window_end, virtual_address(tenant, 0))
        if kind and quarantined_at is not None:
            run.to_quarantine = quarantined_at - fault_at if fault_at is not None else None
            _release(sim, drive, run, offender)
        elif kind and not run.notes:
            run.notes.append("not quarantined")
        return run


def _tenant_figures(sim: Any, asked: list[int], window_end: int, base: int) -> FaultRun:
    """Bytes delivered in the window, the worst wait (from the cycle each request was offered,
    ``asked``), and bytes lost, from the frames seen."""
    done: dict[int, int] = {}
    for f in sim.received("tenant", clear=True):
        header, meta, payload = decode_mem_message(frame_message(f.data, WIDTH), WIDTH)
        if header.msg_type == LOAD_MEM_ACK and len(payload) == LOAD_BYTES:
            done[2 * ((meta["addr"] - base) // LOAD_BYTES)] = f.cycle_last
    notes = []
    for f in sim.received("sink", clear=True):
        flits = frame_message(f.data, WIDTH)
        header = NocHeader.unpack([d for d, _ in flits], WIDTH)
        if header.msg_len != len(flits) - 1:
            continue                            # the endless message, ended by its monitor
        msg = Message.from_flits(flits, WIDTH)
        src = (header.src_x, header.src_y)
        if src == TENANT and len(msg.payload) == MESSAGE_BYTES:
            done[msg.payload[0]] = f.cycle_last
        elif src == OFFENDER and msg.payload == SPOOFED:
            notes.append("its message arrived with the offender's own source: no fault")
    size = {k: LOAD_BYTES if k % 2 == 0 else MESSAGE_BYTES for k in range(REQUESTS)}
    delivered = sum(size[k] for k, c in done.items() if c < window_end)
    lost = sum(size[k] for k in range(REQUESTS) if k not in done)
    worst = max((c - asked[k] for k, c in done.items() if k < len(asked)), default=0)
    return FaultRun(delivered=delivered, worst_wait=worst, lost=lost, notes=notes)


def _release(sim: Any, drive: _Driver, run: FaultRun, offender: str) -> None:
    """The fault's log entry, then a RELEASE from the sink, timed to the slot serving again."""
    sim.send(message_frame(kernel_message_flits(WIDTH, K.FAULT_READ, KernelMeta(handle=0),
                                                src=SINK, dst=ERRORS), WIDTH), port="sink")
    sim.run(until_idle=True)
    (entry,) = sim.received("sink", clear=True)
    run.fault_kind = decode_kernel_message(frame_message(entry.data, WIDTH), WIDTH)[1].op
    sim.sent("sink", clear=True)
    sim.send(message_frame(kernel_message_flits(WIDTH, K.RELEASE, KernelMeta(
        peer_x=OFFENDER[0], peer_y=OFFENDER[1], peer_fbits=Fbits.LOCAL0), src=SINK,
        dst=ERRORS), WIDTH), port="sink")
    drive.until(lambda: bool(sim.sent("sink")), 1000)
    released = sim.sent("sink")[0].cycle_last
    opened = drive.until(lambda: not drive.quarantined(), 10_000)
    if opened is None:
        run.notes.append("not released")
        return
    run.to_open = opened - released
    if offender == "endless":
        run.notes.append("restarts and sends its endless message again: no allocation asked")
        return
    sim.received("offender", clear=True)
    sim.send(_alloc(OFFENDER, user=7), port="offender")
    answered = drive.until(lambda: bool(sim.received("offender")), 10_000)
    if answered is not None:
        (frame,) = sim.received("offender")
        run.to_serve = frame.cycle_last - released


def matrix(backend: str = "verilator", stall_limit: int = STALL_LIMIT,
           faults: list[str] | None = None,
           rx_buffer_flits: int | None = None) -> tuple[FaultRun, dict[str, FaultRun]]:
    """The solo run and one run per fault (every one of :data:`FAULTS` by default)."""
    solo = run_fault(None, backend, stall_limit, rx_buffer_flits)
    return solo, {k: run_fault(k, backend, stall_limit, rx_buffer_flits)
                  for k in (faults or list(FAULTS))}


def _share(run: FaultRun, solo: FaultRun) -> str:
    # Floored to a tenth of a per cent: never rounded in the kernel's favour.
    tenths = run.delivered * 1000 // solo.delivered
    return f"{tenths // 10}.{tenths % 10} %"


def markdown(solo: FaultRun, runs: dict[str, FaultRun], stall_limit: int = STALL_LIMIT,
             rx_buffer_flits: int | None = None) -> str:
    buffers = (f" and a {rx_buffer_flits}-flit receive buffer each (`rx_buffer_flits`)"
               if rx_buffer_flits else "")
    lines = [
        f"The tenant offers one request every {PERIOD} cycles ({REQUESTS} in all, a window of "
        f"{REQUESTS * PERIOD:,} cycles: {LOAD_BYTES}-byte loads from the shared memory tile and "
        f"{MESSAGE_BYTES}-byte messages to the shared sink, alternately); alone, "
        f"{solo.delivered:,} of its bytes are delivered within the window, none lost, its worst "
        f"wait {solo.worst_wait} cycles. Monitors' `stall_limit` {stall_limit:,} cycles"
        f"{buffers}; the "
        f"offender's sends limited to {FLOOD_RATE.burst} flits of burst, {FLOOD_RATE.refill} "
        f"every {FLOOD_RATE.period} cycles, `on_excess=\"fault\"`.",
        "",
        "| fault | logged as | tenant's throughput (share of solo) | tenant's worst wait "
        "(cycles) | tenant's bytes lost | fault → quarantine (cycles) | RELEASE → open / → "
        "serving (cycles) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for kind, run in runs.items():
        logged = FaultKind(run.fault_kind).name if run.fault_kind else "—"
        quarantine = f"{run.to_quarantine:,}" if run.to_quarantine is not None else "—"
        back = ("—" if run.to_open is None else
                f"{run.to_open} / {run.to_serve if run.to_serve is not None else '—'}")
        note = f" ({'; '.join(run.notes)})" if run.notes else ""
        lines.append(f"| {kind}{note} | {logged} | {_share(run, solo)} | {run.worst_wait:,} | "
                     f"{run.lost:,} | {quarantine} | {back} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apiary bench faults",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--stall-limit", type=int, default=STALL_LIMIT, metavar="CYCLES",
                        help=f"the monitors' stall limit (default {STALL_LIMIT})")
    parser.add_argument("--rx-buffer-flits", type=int, metavar="N",
                        help="give every monitor a receive buffer of N flits (a power of two, "
                             "4 to 4096; default none)")
    parser.add_argument("--backend", choices=("verilator", "pysim"), default="verilator",
                        help="simulator (default verilator)")
    parser.add_argument("--markdown", action="store_true", help="Markdown (the default)")
    args = parser.parse_args(argv)
    if args.stall_limit < 1:
        parser.error(f"--stall-limit must be a positive number of cycles, not {args.stall_limit}")
    try:
        MonitorConfig(rx_buffer_flits=args.rx_buffer_flits)
    except ValueError as e:
        parser.error(f"--rx-buffer-flits: {e}")
    solo, runs = matrix(args.backend, args.stall_limit, rx_buffer_flits=args.rx_buffer_flits)
    command = "apiary bench faults" + (f" --stall-limit {args.stall_limit}"
                                       if args.stall_limit != STALL_LIMIT else "") + (
        f" --rx-buffer-flits {args.rx_buffer_flits}" if args.rx_buffer_flits else "")
    print(f"Produced by `{command}` ({args.backend}, {WIDTH} bits; cycles exact).\n")
    print(markdown(solo, runs, args.stall_limit, args.rx_buffer_flits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
