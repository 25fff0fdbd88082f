"""``apiary faults``: read the fault log of a running design, and release a quarantined tile,
over UDP through the kernel's control service (:mod:`beehive.apps.kernel_ctl`).
``apiary ctl``: read and write any tile's counters, registers and tables by name, over UDP
through the design's controller (:mod:`beehive.apps.controller`, :mod:`beehive.control_client`).

Registered with the ``apiary`` command line through the entry points ``apiary.commands:
faults`` and ``apiary.commands: ctl`` (``pyproject.toml``). The log is read entry by entry
(index 0, 1, ... until the service answers NO_ENTRY); a request whose answer does not come
within ``--timeout`` is sent again, up to ``--retries`` times, since UDP may drop either
datagram. ``apiary ctl`` takes the names from the design script (its address map,
:func:`apiary.top.control_map`), so it loads the design as the other design commands do.
"""

import argparse
import json
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from apiary.cli import Command, error


__all__ = ["COMMAND", "CTL_COMMAND", "DEFAULT_PORT", "CtlError", "read_log", "release",
           "format_table", "format_map", "transport_arguments", "transport_error"]

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


def transport_arguments(parser: argparse.ArgumentParser, *, port: int, service: str,
                        timeout: float, answer: str = "answer") -> None:
    """Add ``--port`` (``service``'s UDP port, default ``port``), ``--timeout`` (seconds to
    wait for each ``answer``, default ``timeout``) and ``--retries`` (default 3) to the
    ``parser`` of a command that asks a design over UDP; :func:`transport_error` checks them."""
    parser.add_argument("--port", type=int, default=port,
                        help=f"{service}'s UDP port (default {port})")
    parser.add_argument("--timeout", type=float, default=timeout, metavar="S",
                        help=f"seconds to wait for each {answer} before asking again "
                             f"(default {timeout})")
    parser.add_argument("--retries", type=int, default=3, metavar="N",
                        help=f"times a request is sent again when its {answer} does not come "
                             f"(default 3)")


def transport_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the :func:`transport_arguments` in ``args``, if anything."""
    if not 0 < args.port < 65536 or args.timeout <= 0 or args.retries < 0:
        return "--port is 1 to 65535, --timeout above 0, --retries 0 or more"
    return None


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", metavar="HOST", help="the design's IP address (or host name)")
    transport_arguments(parser, port=DEFAULT_PORT, service="the control service", timeout=1.0)
    parser.add_argument("--release", metavar="X,Y",
                        help="after printing the log, release tile (X,Y): its monitor resets "
                             "it, gives back its memory and lifts its quarantine (a tile that "
                             "has not faulted, a hung one say, is killed and restarted so)")
    parser.add_argument("--json", action="store_true",
                        help="print the log (and the release) as one JSON object")


def _run(args: argparse.Namespace) -> int:
    try:
        tile = _tile(args.release) if args.release is not None else None
    except ValueError as e:
        print(f"apiary faults: {e}", file=sys.stderr)
        return 2
    problem = transport_error(args)
    if problem:
        print(f"apiary faults: {problem}", file=sys.stderr)
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
    "faults", "read a running design's fault log over UDP; release (restart) a tile", _run,
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


# -- apiary ctl ------------------------------------------------------------------------------------

#: ``apiary ctl`` actions and the operands each takes (usage text).
_ACTIONS = {
    "list": "",
    "csr": "",
    "read": "NAME...",
    "write": "NAME VALUE",
    "counters": "[--all]",
    "table": "NAME INDEX [VALUE | FIELD=VALUE...]",
}


class _Usage(Exception):
    """A usage error of ``apiary ctl`` (exit status 2)."""

#: Actions that need no HOST: they read the design only.
_OFFLINE = ("list", "csr")


def _number(text: str, what: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise _Usage(f"{what} must be a number (decimal, 0x hex or 0b binary), not "
                     f"{text!r}") from None
    if value < 0:
        raise _Usage(f"{what} must not be negative, not {text!r}")
    return value


def _parse_action(args: argparse.Namespace) -> tuple[str, list[str]]:
    """``(action, operands)`` from ``HOST ACTION ARGS...`` (or ``list`` alone, in HOST's
    place)."""
    if args.action is None:
        if args.host in _OFFLINE:
            return args.host, []
        raise _Usage(f"give an action after HOST: {' | '.join(_ACTIONS)}" if args.host not in
                     _ACTIONS else f"{args.host!r} needs the design's HOST before it: "
                     f"apiary ctl DESIGN HOST {args.host} {_ACTIONS[args.host]}".rstrip())
    action, operands = args.action, list(args.operands)
    if action not in _ACTIONS and args.host in _ACTIONS and args.host not in _OFFLINE:
        raise _Usage(f"{args.host!r} needs the design's HOST before it: apiary ctl DESIGN "
                     f"HOST {args.host} {_ACTIONS[args.host]}".rstrip())
    if action not in _ACTIONS:
        raise _Usage(f"unknown action {action!r}: one of {', '.join(_ACTIONS)}")
    counts = {"list": (0, 0), "csr": (0, 0), "read": (1, None), "write": (2, 2),
              "counters": (0, 0),
              "table": (2, None)}
    low, high = counts[action]
    if len(operands) < low or (high is not None and len(operands) > high):
        raise _Usage(f"usage: apiary ctl DESIGN HOST {action} {_ACTIONS[action]}".rstrip())
    if args.all and action != "counters":
        raise _Usage("--all goes with counters")
    return action, operands


def _map_rows(dmap: Any) -> list[dict[str, Any]]:
    rows = []
    for tmap in dmap:
        for e in tmap:
            rows.append({"tile": tmap.name, "x": tmap.x, "y": tmap.y, "name": e.name,
                         "kind": e.kind, "addr": e.addr, "width": e.width,
                         "entries": e.entries, "writable": e.writable,
                         "description": e.description})
    return rows


def format_map(dmap: Any) -> str:
    """A design's address map as a table: one line per counter, register and table (a table's
    width is ``<entries>x<bits>``, its kind ``table-ro`` if the control plane cannot write
    it)."""
    head = ("tile", "at", "name", "kind", "address", "width", "description")
    lines = [head]
    for r in _map_rows(dmap):
        table = r["kind"] == "table"
        kind = r["kind"] + ("" if r["writable"] or not table else "-ro")
        width = f"{r['entries']}x{r['width']}" if table else str(r["width"])
        lines.append((r["tile"], f"({r['x']},{r['y']})", r["name"], kind, f"{r['addr']:#06x}",
                      width, r["description"]))
    widths = [max(len(line[k]) for line in lines) for k in range(len(head) - 1)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(line, widths)), line[-1]]).rstrip()
                     for line in lines)


def _address_form(text: str, width: int) -> bool:
    """Whether ``text`` is written as an address that a value of ``width`` bits holds: an IPv4
    address (a.b.c.d) in 32 bits, a MAC address (aa:bb:cc:dd:ee:ff) in 48."""
    return (width == 32 and text.count(".") == 3) or (width == 48 and text.count(":") == 5)


def _field_value(text: str, field: str, width: int) -> int:
    """A table field's value from the command line: a number, an IPv4 address (a.b.c.d) or a
    MAC address (aa:bb:cc:dd:ee:ff)."""
    import ipaddress
    try:
        if not _address_form(text, width):
            value = _number(text, field)
        elif width == 32:
            value = int(ipaddress.IPv4Address(text))
        else:
            value = int(text.replace(":", ""), 16)
    except ValueError as e:
        raise _Usage(f"{field}: {e}") from None
    if value >> width:
        raise _Usage(f"{field} is {width} bits wide: {text} does not fit")
    return value


#: Registers shown as addresses (beehive.proto.addresses): IPv4 dotted, the MAC with colons.
_ADDRESS_REGISTERS = {"ipv4": "ip", "netmask": "ip", "gateway": "ip", "mac": "mac"}


def _show(kind: str, value: int, name: str = "") -> str:
    if kind == "counter":
        return str(value)
    if kind == "register":
        field = _ADDRESS_REGISTERS.get(name.rpartition(".")[2], "")
    else:
        field = name.rpartition(".")[2] if "]." in name else ""
    if field and "ip" in field and value < 1 << 32:
        return ".".join(str(value >> s & 0xFF) for s in (24, 16, 8, 0))
    if field and "mac" in field and value < 1 << 48:
        return ":".join(f"{value >> s & 0xFF:02x}" for s in range(40, -8, -8))
    return str(value) if field else f"{value:#x}"


def _intermixed(parser: argparse.ArgumentParser) -> None:
    """Let options come anywhere among ``parser``'s positionals (``HOST --json counters``):
    the ``apiary`` parser hands a subcommand's arguments to its ``parse_known_args``, and
    optional positionals (``ACTION``, ``ARG...``) would otherwise be taken, empty, before the
    first option."""
    plain = parser.parse_known_args

    def parse_known_args(args: Any = None, namespace: Any = None) -> Any:
        parser.parse_known_args = plain             # type: ignore[method-assign]
        try:
            return parser.parse_known_intermixed_args(args, namespace)
        finally:
            parser.parse_known_args = parse_known_args  # type: ignore[method-assign]

    parser.parse_known_args = parse_known_args      # type: ignore[method-assign]


def _ctl_arguments(parser: argparse.ArgumentParser) -> None:
    from beehive.apps.controller import CONTROL_PORT
    _intermixed(parser)
    parser.add_argument("host", metavar="HOST",
                        help="the design's IP address (or host name); `list` and `csr` need "
                             "none")
    parser.add_argument("action", metavar="ACTION", nargs="?",
                        help="list | csr | read NAME... | write NAME VALUE | counters [--all] | "
                             "table NAME INDEX [VALUE | FIELD=VALUE...]")
    parser.add_argument("operands", metavar="ARG", nargs="*",
                        help="names are <tile>.<name> as `list` shows them; values are numbers "
                             "(decimal, 0x hex), or addresses (a.b.c.d in 32 bits, "
                             "aa:bb:cc:dd:ee:ff in 48)")
    transport_arguments(parser, port=CONTROL_PORT, service="the controller", timeout=0.5,
                        answer="reply")
    parser.add_argument("--tcp", action="store_true",
                        help="ask over one TCP connection to --port (the design needs a "
                             "TcpDatagramTile in front of its controller, as "
                             "examples/tcp_ctl.py) instead of UDP datagrams; --retries does "
                             "not apply")
    parser.add_argument("--all", action="store_true",
                        help="counters: every counter, not only those that moved")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _is_design_ipv4(dmap: Any, name: str) -> bool:
    """Whether ``name`` is the design's own IPv4 address (``ipv4`` of the tile that holds the
    run-time addresses, :mod:`beehive.proto.addresses`)."""
    tile, _, register = name.partition(".")
    held = {e.name for tmap in dmap for e in tmap if tmap.name == tile and e.kind == "register"}
    return register == "ipv4" and set(_ADDRESS_REGISTERS) <= held


def _ctl(args: argparse.Namespace, dmap: Any) -> dict[str, Any]:
    """Do ``args``' action through the controller; return what to print, as JSON would."""
    from beehive.control_client import ControlClient, tcp_transport, udp_transport
    from beehive.proto.addresses import int_to_ipv4
    action, operands = _parse_action(args)

    def connect(host: str) -> Any:
        return (tcp_transport(host, args.port, args.timeout * (args.retries + 1)) if args.tcp
                else udp_transport(host, args.port, args.timeout, args.retries))

    with connect(args.host) as transport:
        client = ControlClient(dmap, transport)
        if action == "read":
            return {name: client.read(name) for name in operands}
        if action == "write":
            name, text = operands
            width = client.lookup(name)[1].width
            value = (_field_value(text, "VALUE", width) if _address_form(text, width)
                     else _number(text, "VALUE"))
            client.write(name, value)
            if _is_design_ipv4(dmap, name):             # it answers at the new address now
                with connect(int_to_ipv4(value)) as moved:
                    return {name: ControlClient(dmap, moved).read(name)}
            return {name: client.read(name)}
        if action == "counters":
            return client.counters(moved_only=not args.all)
        name, index_text, *values = operands
        index = _number(index_text, "INDEX")
        layout = client.lookup(name)[1].layout
        if any("=" in v for v in values):
            if layout is None:
                raise _Usage(f"table {name} does not name its fields; give its entry as one "
                             f"number")
            fields = layout.unpack(client.read_entry(name, index))
            for item in values:
                field, _, text = item.partition("=")
                if field not in layout.names:
                    raise _Usage(f"table {name} has no field {field!r}; its fields are "
                                 f"{', '.join(layout.names)}")
                fields[field] = _field_value(text, field, layout.width(field))
            client.write_entry(name, index, layout.pack(fields))
        elif len(values) == 1:
            client.write_entry(name, index, _number(values[0], "VALUE"))
        elif values:
            raise _Usage("table NAME INDEX takes one VALUE, or FIELD=VALUE pairs")
        value = client.read_entry(name, index)
        out: dict[str, Any] = {f"{name}[{index}]": value}
        if layout is not None:
            out.update({f"{name}[{index}].{f}": v for f, v in layout.unpack(value).items()})
        return out


def _run_ctl(args: argparse.Namespace) -> int:
    from apiary.cli import load
    from beehive.control_client import ControlError
    try:
        action, _ = _parse_action(args)
    except _Usage as e:
        print(f"apiary ctl: {e}", file=sys.stderr)
        return 2
    problem = transport_error(args)
    if problem:
        print(f"apiary ctl: {problem}", file=sys.stderr)
        return 2
    design = load(args)
    from apiary.top import control_map
    dmap = control_map(design)
    if action == "csr":
        from beehive.apps.etherbone import csr_csv
        if not dmap.tiles:
            return error(f"apiary ctl: design {design.name!r} has no control plane (no "
                         f"controller tile): no csr.csv to write")
        print(csr_csv(dmap, design.name), end="")
        return 0
    if action == "list":
        if args.json:
            print(json.dumps({"design": design.name, "controller": dmap.controller,
                              "map": _map_rows(dmap)}))
        else:
            print(format_map(dmap) if dmap.tiles else
                  f"design {design.name!r} has no control plane (no controller tile)")
        return 0
    if not dmap.tiles:
        return error(f"apiary ctl: design {design.name!r} has no controller (a tile such as "
                     f"beehive.apps.controller.ControllerTile): nothing to read or write")
    where = f"{args.host}:{args.port}"
    try:
        out = _ctl(args, dmap)
    except _Usage as e:
        print(f"apiary ctl: {e}", file=sys.stderr)
        return 2
    except ControlError as e:
        text = str(e)
        return error(f"apiary ctl: {text if text.startswith(where) else f'{where}: {text}'}")
    if args.json:
        print(json.dumps(out))
    elif action == "counters" and not out:
        print("no counter moved (--all shows them all)")
    else:
        kinds = {}
        for name in out:
            base = name.split("[")[0]
            kinds[name] = dmap.lookup(base)[1].kind
        wide = max(len(name) for name in out)
        for name, value in out.items():
            print(f"{name.ljust(wide)}  {_show(kinds[name], value, name)}")
    return 0


CTL_COMMAND = Command(
    "ctl", "read and write a running design's counters, registers and tables by name", _run_ctl,
    description="Talk to a running design's controller (beehive.apps.controller, UDP port 7200) "
                "and, through the control plane, to the control agent of any tile: `read NAME...`"
                " prints counters and registers (NAME is <tile>.<name>), `write NAME VALUE` sets "
                "a register and prints it read back (an address register such as arp.ipv4 or "
                "arp.mac takes a.b.c.d or aa:bb:cc:dd:ee:ff), `counters` prints every counter "
                "that is not zero (--all: every one), `table NAME INDEX [VALUE | FIELD=VALUE...]`"
                " prints a table's entry, field by field where the table names its fields (after "
                "writing it: whole with VALUE, or the fields given, addresses as a.b.c.d or "
                "aa:bb:cc:dd:ee:ff, the rest kept). `list` prints the design's address map (tile,"
                " position, name, kind, address, width, description) without talking to the "
                "design, and needs no HOST; `csr` prints it as LiteX's csr.csv, for litex_cli and"
                " RemoteClient over the controller's Etherbone (beehive.apps.etherbone; no HOST "
                "either). Names come from DESIGN. Exits 1 when a request fails (no answer, an "
                "unknown name, a refused word), 2 on usage errors.",
    arguments=_ctl_arguments)
"""The ``ctl`` command (entry point ``apiary.commands: ctl``)."""
