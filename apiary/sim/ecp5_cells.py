"""The ECP5 logic cells of a netlist written as the plain Verilog they simulate as.

``write_verilog`` leaves a netlist of tens of thousands of LUT4, CCU2C, TRELLIS_FF and
TRELLIS_DPR16X4 instances. Verilated as instances of Yosys's models (``cells_sim_ecp5.v``), each
instance is a copy of its module's code for Verilator to elaborate and inline; :func:`inline_cells`
writes each instead as what Yosys's model of it computes in its mode: a LUT4 an assignment of
its truth table indexed by its inputs, a CCU2C the two LUTs and the carry of Yosys's model, the
flip-flops one ``always`` block per clock edge, a TRELLIS_DPR16X4 a 16 x 4 memory. On the 64-bit
UDP echo's netlist (10,733 LUT4s, 9,983 flip-flops) Verilator's run takes 37 s instead of 70, on
the TCP engine's (23,756 LUT4s) 79 s instead of 151 and 0.9 GB instead of 2.7 (2026-11-30).

Only the modes Yosys's models define are written (every parameter value below); any other value
is a :class:`~apiary.sim.core.BuildError` naming the cell. ``tests/sim/test_ecp5_cells.py`` runs
every mode, written both ways, side by side on random inputs. Like the models under Verilator,
the result has two states: an ``x`` in a truth table or an initial value is 0, and so is an
unconnected input.
"""

import re

from .core import BuildError

__all__ = ["CELL", "PIN", "INLINED", "cell_pins", "inline_cells"]

#: One instance of cell ``{}`` as ``write_verilog`` writes it: (parameters, name, pins).
CELL = r"^  {}\s+(?:#\((.*?)\)\s*)?(\\\S+|\w+)\s*\((.*?)\);\n?"
#: One ``.NAME(value)`` of a parameter or pin list.
PIN = re.compile(r"\.(\w+)\(([^()]*)\)")
_PINS = re.compile(r"\s*(?:\.\w+\([^()]*\)\s*,?\s*)*")

#: The cells :func:`inline_cells` writes out, and the values each parameter may take (``None``:
#: any; the truth tables and initial values).
INLINED: dict[str, dict[str, tuple[str, ...] | None]] = {
    "LUT4": {"INIT": None},
    "CCU2C": {"INIT0": None, "INIT1": None, "INJECT1_0": ("YES", "NO"),
              "INJECT1_1": ("YES", "NO")},
    "TRELLIS_FF": {"GSR": ("ENABLED", "DISABLED"), "CEMUX": ("1", "0", "CE", "INV"),
                   "CLKMUX": ("CLK", "INV"), "LSRMUX": ("LSR", "INV"),
                   "SRMODE": ("LSR_OVER_CE", "ASYNC"), "REGSET": ("RESET", "SET"),
                   "LSRMODE": ("LSR",)},
    "TRELLIS_DPR16X4": {"INITVAL": None, "WCKMUX": ("WCK", "INV"),
                        "WREMUX": ("WRE", "INV", "1", "0")},
}
#: Yosys's defaults of the parameters a netlist may leave out.
_DEFAULTS = {"INIT": "16'h0000", "INIT0": "16'h0000", "INIT1": "16'h0000", "INJECT1_0": "YES",
             "INJECT1_1": "YES", "GSR": "ENABLED", "CEMUX": "1", "CLKMUX": "CLK",
             "LSRMUX": "LSR", "SRMODE": "LSR_OVER_CE", "REGSET": "RESET", "LSRMODE": "LSR",
             "INITVAL": "64'h0", "WCKMUX": "WCK", "WREMUX": "WRE"}
_INSTANCE = re.compile(CELL.format(f"({'|'.join(INLINED)})"), re.S | re.M)
_LITERAL = re.compile(r"(\d+)'([bhd])([0-9a-fA-FxXzZ_]+)")
_CONSTANT = re.compile(r"1'[bh]([01xXzZ])")
#: The prefix of the names :func:`inline_cells` adds.
_PREFIX = "apiary_cell_"


def cell_pins(text: str, what: str) -> dict[str, str]:
    """``{name: value}`` of a parameter or pin list; a list that is not all ``.NAME(value)``
    (a value with parentheses) is a :class:`BuildError` naming ``what``."""
    if not _PINS.fullmatch(text):
        raise BuildError("yosys", f"{what}: cannot read its list {text.strip()[:80]!r}")
    return {k: v.strip() for k, v in PIN.findall(text)}


def _value(literal: str, bits: int, what: str) -> int:
    """The value of a Verilog literal (``16'hc0ff``, ``64'bxx01``, ``32'd5``), ``x`` bits 0."""
    m = _LITERAL.fullmatch(literal.replace(" ", ""))
    if m is None or int(m.group(1)) > bits:
        raise BuildError("yosys", f"{what}: {literal!r} is not a constant of {bits} bits")
    digits = re.sub("[xXzZ]", "0", m.group(3).replace("_", ""))
    value = int(digits, {"b": 2, "d": 10, "h": 16}[m.group(2)])
    if value >> bits:
        raise BuildError("yosys", f"{what}: {literal!r} is not a constant of {bits} bits")
    return value


def _lut(table: int, bits: int, inputs: list[str]) -> str:
    """A ``bits``-input LUT of truth table ``table`` on ``inputs`` (A first), as an
    expression."""
    return f"{1 << bits}'h{table:0{(1 << bits) // 4}x} >> {{{', '.join(reversed(inputs))}}}"


class _Writer:
    """Rewrites one netlist: :meth:`cell` for each instance, then :meth:`tail` for what goes
    before ``endmodule`` (the flip-flops' and memories' declarations and always blocks)."""

    def __init__(self) -> None:
        self.n = 0
        self.declarations: list[str] = []
        self.assigns: list[str] = []
        self.processes: dict[str, list[str]] = {}       # event control -> statements
        self.counts: dict[str, int] = dict.fromkeys(INLINED, 0)

    def name(self, what: str) -> str:
        self.n += 1
        return f"{_PREFIX}{self.n}_{what}"

    def cell(self, m: re.Match[str]) -> str:
        kind, name = m.group(1), m.group(3)
        what = f"{kind} {name}"
        params = {**{k: v for k, v in _DEFAULTS.items() if k in INLINED[kind]},
                  **{k: v.strip('"') for k, v in cell_pins(m.group(2) or "", what).items()}}
        for param, value in params.items():
            allowed = INLINED[kind].get(param, ())
            if param not in INLINED[kind] or (allowed is not None and value not in allowed):
                raise BuildError("yosys", f"{what}: {param} {value!r} is not a mode the "
                                          f"inlined cells model (apiary/sim/ecp5_cells.py)")
        # An escaped name ends at a space: every value is followed by one.
        pins = {k: v + " " for k, v in cell_pins(m.group(4), what).items()}
        self.counts[kind] += 1
        return getattr(self, kind.lower())(params, pins, what)

    @staticmethod
    def pin(pins: dict[str, str], name: str) -> str:
        return pins.get(name, "1'h0 ")

    def lut4(self, params: dict[str, str], pins: dict[str, str], what: str) -> str:
        if "Z" not in pins:
            return ""
        inputs = [self.pin(pins, p) for p in "ABCD"]
        return f"  assign {pins['Z']}= {_lut(_value(params['INIT'], 16, what), 4, inputs)};\n"

    def ccu2c(self, params: dict[str, str], pins: dict[str, str], what: str) -> str:
        # Yosys's model: each half a LUT4 (the sum, with the carry in unless INJECT1) and a
        # LUT2 of its INIT's low bits on A, B (the generate, unless INJECT1).
        out, carry = [], self.pin(pins, "CIN")
        for half in "01":
            table = _value(params[f"INIT{half}"], 16, what)
            inject = params[f"INJECT1_{half}"] == "YES"
            lut4 = self.name(f"lut{half}")
            a, b = self.pin(pins, f"A{half}"), self.pin(pins, f"B{half}")
            inputs = [a, b, self.pin(pins, f"C{half}"), self.pin(pins, f"D{half}")]
            out.append(f"  wire {lut4} = {_lut(table, 4, inputs)};\n")
            sum_pin, carry_pin = f"S{half}", "COUT" if half == "1" else None
            if sum_pin in pins:
                out.append(f"  assign {pins[sum_pin]}= {lut4}" + ("" if inject else
                                                                    f" ^ {carry}") + ";\n")
            generate = "1'b0" if inject else f"({_lut(table & 0xF, 2, [a, b])})"
            cout = self.name(f"cout{half}")
            out.append(f"  wire {cout} = ~{lut4} & {generate} | {lut4} & {carry};\n")
            carry = cout + " "
            if carry_pin and carry_pin in pins:
                out.append(f"  assign {pins[carry_pin]}= {cout};\n")
        return "".join(out)

    def trellis_ff(self, params: dict[str, str], pins: dict[str, str], what: str) -> str:
        if "CLK" not in pins:
            raise BuildError("yosys", f"{what}: no clock")
        q = self.name("q")
        value = "1'b1" if params["REGSET"] == "SET" else "1'b0"
        self.declarations.append(f"  reg {q} = {value};\n")
        if "Q" in pins:
            self.assigns.append(f"  assign {pins['Q']}= {q};\n")
        edge = "negedge" if params["CLKMUX"] == "INV" else "posedge"
        events = [f"{edge} {pins['CLK']}"]
        lsr = self.pin(pins, "LSR")
        inverted = params["LSRMUX"] == "INV"
        constant = _CONSTANT.fullmatch(lsr.strip())
        if params["SRMODE"] == "ASYNC" and constant is None:
            events.append(f"{'negedge' if inverted else 'posedge'} {lsr}")
        reset = f"~{lsr}" if inverted else lsr
        enable = {"1": None, "0": "1'b0", "CE": self.pin(pins, "CE"),
                  "INV": f"~{self.pin(pins, 'CE')}"}[params["CEMUX"]]
        load = f"{q} <= {self.pin(pins, 'DI')};"
        load = load if enable is None else f"if ({enable}) {load}"
        self.processes.setdefault(" or ".join(events), []).append(
            f"      if ({reset}) {q} <= {value}; else {load}\n")
        return ""

    def trellis_dpr16x4(self, params: dict[str, str], pins: dict[str, str], what: str) -> str:
        mem = self.name("mem")
        init = _value(params["INITVAL"], 64, what)
        self.declarations.append(f"  reg [3:0] {mem} [0:15];\n")
        if init:
            self.declarations.append("  initial begin\n" + "".join(
                f"    {mem}[{i}] = 4'h{init >> 4 * i & 0xF:x};\n" for i in range(16))
                + "  end\n")
        edge = "negedge" if params["WCKMUX"] == "INV" else "posedge"
        enable = {"WRE": self.pin(pins, "WRE"), "INV": f"~{self.pin(pins, 'WRE')}",
                  "1": "1'b1", "0": "1'b0"}[params["WREMUX"]]
        self.processes.setdefault(f"{edge} {self.pin(pins, 'WCK')}", []).append(
            f"      if ({enable}) {mem}[{self.pin(pins, 'WAD')}] <= "
            f"{self.pin(pins, 'DI')};\n")
        if "DO" in pins:
            self.assigns.append(f"  assign {pins['DO']}= {mem}[{self.pin(pins, 'RAD')}];\n")
        return ""

    def tail(self) -> str:
        return "".join(self.declarations) + "".join(self.assigns) + "".join(
            f"  always @({events}) begin\n{''.join(body)}  end\n"
            for events, body in self.processes.items())


def inline_cells(netlist: str) -> tuple[str, dict[str, int]]:
    """``netlist`` (one module, as ``write_verilog`` writes it) with every instance of the
    cells of :data:`INLINED` written as the Verilog Yosys's model of it computes; and how many
    of each it wrote.

    Raises
    ------
    BuildError
        A parameter value the rewriting does not model, or a list it cannot read."""
    if _PREFIX in netlist:
        raise BuildError("yosys", f"the netlist already has names starting {_PREFIX!r}")
    writer = _Writer()
    body = _INSTANCE.sub(writer.cell, netlist)
    end = body.rfind("endmodule")
    if end < 0:
        raise BuildError("yosys", "the netlist has no endmodule")
    return body[:end] + writer.tail() + body[end:], writer.counts
