"""Cut a window of time out of a VCD file (Amaranth's simulator can only dump from time 0)."""

import re


__all__ = ["crop_vcd"]

_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "ps": 1e-12, "fs": 1e-15}


def _timescale(header):
    m = re.search(r"\$timescale\s+(\d+)\s*([munpf]?s)\s+\$end", header)
    if not m:
        return 1e-12
    return int(m[1]) * _UNITS[m[2]]


def _ident(line):
    """The identifier a value-change line sets."""
    if line[0] in "bBrR":
        return line.split()[1]
    return line[1:]


def crop_vcd(src, dst, start, end):
    """Copy the VCD ``src`` to ``dst`` keeping only times ``start`` to ``end`` (seconds).

    The output starts with a ``$dumpvars`` block holding every signal's value at ``start``, so a
    viewer shows the window as if the dump had begun there.
    """
    with open(src) as f:
        text = f.read()
    cut = text.find("$enddefinitions")
    cut = text.index("$end", cut + len("$enddefinitions")) + len("$end")
    header, body = text[:cut], text[cut:]
    unit = _timescale(header)
    t0, t1 = round(start / unit), round(end / unit)
    values: dict[str, str] = {}
    out = [header, "\n"]
    now = 0
    started = False
    for line in body.splitlines():
        line = line.strip()
        if not line or line.startswith("$") and line != "$end" and not line.startswith("$dumpvars"):
            if line.startswith("$comment"):
                continue
            if not line:
                continue
        if line.startswith("#"):
            now = int(line[1:])
            if now > t1:
                break
            if now >= t0:
                if not started:
                    out.append(f"#{t0}\n$dumpvars\n")
                    out.extend(v + "\n" for v in values.values())
                    out.append("$end\n")
                    started = True
                if now > t0:
                    out.append(line + "\n")
            continue
        if line.startswith("$") or line == "$end":
            continue
        if now < t0:
            values[_ident(line)] = line
        else:
            if not started:
                out.append(f"#{t0}\n$dumpvars\n")
                out.extend(v + "\n" for v in values.values())
                out.append("$end\n")
                started = True
            out.append(line + "\n")
    if not started:
        out.append(f"#{t0}\n$dumpvars\n")
        out.extend(v + "\n" for v in values.values())
        out.append("$end\n")
    with open(dst, "w") as f:
        f.write("".join(out))
