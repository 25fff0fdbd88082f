"""``apiary faults``: read the fault log of a running design, and release a quarantined tile,
over UDP through the kernel's control service (:mod:`beehive.apps.kernel_ctl`).

Registered with the ``apiary`` command line through the entry point ``apiary.commands: faults``
(``pyproject.toml``). The log is read entry by entry (index 0, 1, ... until the service answers
NO_ENTRY); a request whose answer does not come within ``--timeout`` is sent again, up to
``--retries`` times, since UDP may drop either datagram.
"""

import argparse
import json
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from apiary.cli import Command, error


__all__ = ["COMMAND", "DEFAULT_PORT", "CtlError", "read_log", "release", "format_table"]

#: The control service's UDP port in ``examples/apiary_fault.py``.
DEFAULT_PORT = 7100
#: Entries a log holds at most (``FAULT_READ`` names one by an 8-bit index).
_MAX_ENTRIES = 256


class CtlError(Exception):
    """The control service did not answer, or answered something unexpected."""


def _ask(sock: socket.socket, request: bytes, accept: Callable[[dict[str, Any]], bool],
         timeout: float, retries: int) -> dict[str, Any]:
    """Send ``request`` and return the first parsed reply ``accept(reply)`` takes, sending again
    after each ``timeout`` seconds of silence, ``retries`` times at most. Replies that do not
    parse or that ``accept`` refuses (late answers to an earlier try) are skipped; a reply
    with status TIMEOUT (the error manager did not answer the service) counts as silence."""
    from beehive.apps.kernel_ctl import STATUS_TIMEOUT, parse_reply
    for _ in range(retries + 1):
        sock.send(request)
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                data = sock.recv(2048)
            except TimeoutError:
                break
            try:
                reply = parse_reply(data)
            except ValueError:
                continue
            if accept(reply):
                if reply["status"] == STATUS_TIMEOUT:
                    break
                return reply
    raise CtlError(f"no answer after {retries + 1} tr{'y' if retries == 0 else 'ies'} of "
                   f"{timeout:g} s")


def _connect(host: str, port: int) -> socket.socket:
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except socket.gaierror as e:
        raise CtlError(f"unknown host {host!r}: {e.strerror}") from None
    family, kind, proto, _, address = info[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.connect(address)       # only the service's replies come in, ICMP errors too
    except OSError:
        sock.close()
        raise
    return sock


def read_log(sock: socket.socket, timeout: float = 1.0,
             retries: int = 3) -> tuple[list[dict[str, Any]], int]:
    """Every entry of the fault log (as :func:`~beehive.apps.kernel_ctl.parse_fault_reply`
    reads them, oldest first) and the number of faults logged since reset."""
    from beehive.apps.kernel_ctl import (OP_FAULT_READ, STATUS_NO_ENTRY, STATUS_OK,
                                         fault_request)
    entries: list[dict[str, Any]] = []
    total = 0
    for index in range(_MAX_ENTRIES + 1):
        def answers(r: dict[str, Any], i: int = index) -> bool:
            return r["op"] == OP_FAULT_READ and r["index"] == i
        reply = _ask(sock, fault_request(index), answers, timeout, retries)
        total = reply["total"]
        if reply["status"] == STATUS_NO_ENTRY:
            break
        if reply["status"] != STATUS_OK:
            raise CtlError(f"reading entry {index}: status {reply['status']:#x}")
        entries.append(reply)
    return entries, total


def release(sock: socket.socket, x: int, y: int, timeout: float = 1.0,
            retries: int = 3) -> None:
    """Release tile (``x``, ``y``): its monitor resets it and lifts its quarantine."""
    from beehive.apps.kernel_ctl import STATUS_OK, release_request
    request = release_request(x, y)
    def answers(r: dict[str, Any]) -> bool:
        return "args" in r and r["op"] == request[0] and r["args"][:3] == request[1:]
    reply = _ask(sock, request, answers, timeout, retries)
    if reply["status"] != STATUS_OK:
        raise CtlError(f"releasing ({x},{y}): status {reply['status']:#x}")


def _row(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry's fields by name, as the table and ``--json`` show them."""
    from apiary.noc.msgtype import msg_type_name
    from apiary.os.uapi import FaultKind
    # Register the message types an entry may name: the memory's and the network stack's.
    import apiary.os.memory_tile  # noqa: F401
    import beehive.proto.messages  # noqa: F401
    try:
        kind = FaultKind(entry["kind"]).name
    except ValueError:
        kind = str(entry["kind"])
    return {"index": entry["index"], "tile": [entry["x"], entry["y"]], "kind": kind,
            "handle": entry["handle"], "addr": entry["addr"], "size": entry["size"],
            "perm": ("-", "R", "W", "RW")[entry["perm"] & 3],
            "peer": [entry["peer_x"], entry["peer_y"], entry["peer_fbits"]],
            "msg_type": msg_type_name(entry["msg_type"]), "inbound": bool(entry["inbound"])}


def format_table(entries: list[dict[str, Any]], total: int) -> str:
    """The log as a table, one line per fault, and a summary line."""
    head = ("index", "tile", "kind", "handle", "addr", "size", "perm", "peer", "msg_type",
            "inbound")
    lines = [head]
    for r in map(_row, entries):
        px, py, pf = r["peer"]
        lines.append((str(r["index"]), f"({r['tile'][0]},{r['tile'][1]})", r["kind"],
                      f"{r['handle']:#04x}", f"{r['addr']:#x}", str(r["size"]), r["perm"],
                      f"{'from' if r['inbound'] else 'to'} ({px},{py}):{pf}", r["msg_type"],
                      "yes" if r["inbound"] else "no"))
    widths = [max(len(line[k]) for line in lines) for k in range(len(head))]
    text = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    summary = f"{len(entries)} fault{'' if len(entries) == 1 else 's'} in the log"
    if total > len(entries):
        summary += f"; {total} since reset ({total - len(entries)} not stored: the log is full)"
    return "\n".join((text if entries else []) + [summary])


def _tile(text: str) -> tuple[int, int]:
    try:
        x, y = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--release takes a tile as X,Y (e.g. 3,0), not {text!r}") from None
    if not (0 <= x < 256 and 0 <= y < 256):
        raise ValueError(f"--release: tile coordinates are 0 to 255, not {text!r}")
    return x, y


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", metavar="HOST", help="the design's IP address (or host name)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"the control service's UDP port (default {DEFAULT_PORT})")
    parser.add_argument("--timeout", type=float, default=1.0, metavar="S",
                        help="seconds to wait for each answer before asking again (default 1.0)")
    parser.add_argument("--retries", type=int, default=3, metavar="N",
                        help="times a request is sent again when its answer does not come "
                             "(default 3)")
    parser.add_argument("--release", metavar="X,Y",
                        help="after printing the log, release tile (X,Y): its monitor resets "
                             "it, gives back its memory and lifts its quarantine")
    parser.add_argument("--json", action="store_true",
                        help="print the log (and the release) as one JSON object")


def _run(args: argparse.Namespace) -> int:
    try:
        tile = _tile(args.release) if args.release is not None else None
    except ValueError as e:
        print(f"apiary faults: {e}", file=sys.stderr)
        return 2
    if not 0 < args.port < 65536 or args.timeout <= 0 or args.retries < 0:
        print("apiary faults: --port is 1 to 65535, --timeout above 0, --retries 0 or more",
              file=sys.stderr)
        return 2
    where = f"{args.host}:{args.port}"
    out: dict[str, Any] = {"host": args.host, "port": args.port}
    try:
        with _connect(args.host, args.port) as sock:
            entries, total = read_log(sock, args.timeout, args.retries)
            if args.json:
                out.update(total=total, entries=[_row(e) for e in entries])
            else:
                print(format_table(entries, total), flush=True)
            if tile is not None:
                release(sock, *tile, timeout=args.timeout, retries=args.retries)
                if args.json:
                    out["released"] = list(tile)
                else:
                    print(f"released tile ({tile[0]},{tile[1]})")
            if args.json:
                print(json.dumps(out))
    except CtlError as e:
        return error(f"apiary faults: {where}: {e}")
    except OSError as e:
        return error(f"apiary faults: {where}: {e.strerror or e}")
    return 0


COMMAND = Command(
    "faults", "read a running design's fault log over UDP; release a quarantined tile", _run,
    description="Read the whole fault log of a running Apiary design through its kernel "
                "control service (beehive.apps.kernel_ctl, UDP port 7100 in "
                "examples/apiary_fault.py) and print one line per fault: the faulting tile, "
                "the kind (apiary.os.uapi.FaultKind), the handle, address, size and "
                "permission, the offending message's destination (or source, for an inbound "
                "fault) and type. With --release X,Y, release that tile after the log is "
                "printed (nothing is released if the log cannot be read). Exits 1 when the "
                "service does not answer.",
    arguments=_arguments, takes_design=False)
"""The ``faults`` command (entry point ``apiary.commands: faults``)."""
