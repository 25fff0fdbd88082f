"""Our models of the two ECP5 cells Yosys ships only as blackboxes (apiary/sim/harness/): the
block RAM (DP16KD) against Amaranth's Memory, the multiplier (MULT18X18D) against Amaranth's
``*``.

A bank of memories of every shape Yosys's mapper puts in a block RAM (1, 2, 4, 9, 18 and 36 bits
wide, byte enables at 16 and 32 bits, a single port reading the old word, the new word or
nothing while it writes) and of products (unsigned and signed 18 x 18,
wider ones that Yosys splits over several multipliers of mixed signedness, a constant times a
signal) is synthesised with the board builds' script (:func:`apiary.sim.netlist.synthesize`),
and its netlist, on the cell models, runs under Verilator beside the RTL: the same random inputs
into both, every read and product equal, for 20,000 cycles. The addresses are mostly a few words
apart, so reads meet writes of the same word on the same edge (where the DP16KD model gives the
other port's bits inverted: Yosys must not have relied on them). What this checks is that the
models do what Yosys's mappers assume of the primitives, mode by mode; that the primitives do it
too is Lattice's documentation's word.

The logic cells a netlist model writes out as plain Verilog (apiary/sim/ecp5_cells.py: LUT4,
CCU2C, TRELLIS_FF, TRELLIS_DPR16X4), every mode of each, run side by side with the same instances
on Yosys's models for 20,000 random cycles: every output equal.

The fast tests: a model refuses a mode it does not model at Verilator's elaboration, the
rewriting refuses a mode it does not write, the netlist checks refuse what the models cannot
simulate, and ``netlist_tiles`` leaves the right modules RTL.
"""

import itertools
import os
import random
import re
import subprocess
from types import SimpleNamespace

import pytest
from amaranth import Cat, Module, signed, unsigned
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from apiary.sim import BuildError
from apiary.sim import verilator as vl
from apiary.sim.ecp5_cells import inline_cells
from apiary.sim.netlist import (NETLIST_FLAGS, cell_models, check_netlist, kept_modules,
                                rtl_modules, submodule_names, synthesize)

#: (name, width, depth, write granularity, ports): "sdp" a write port and a read port of their
#: own addresses; "old", "new", "keep" one address for both (the read gives the word before a
#: write, the word written, or nothing while writing). Two write ports are not here: Amaranth
#: writes them as two processes, whose order on a shared word Verilog leaves open, and Yosys
#: builds such a memory of flip-flops.
SHAPES = [
    ("w1", 1, 16384, None, "sdp"), ("w2", 2, 8192, None, "sdp"), ("w4", 4, 4096, None, "sdp"),
    ("w9", 9, 2048, None, "sdp"), ("w18", 18, 1024, None, "sdp"), ("w36", 36, 512, None, "sdp"),
    ("b16", 16, 1024, 8, "sdp"), ("b32", 32, 512, 8, "sdp"),
    ("old18", 18, 1024, None, "old"), ("new18", 18, 1024, None, "new"),
    ("keep18", 18, 1024, None, "keep"), ("new4", 4, 4096, None, "new"),
    ("keep9", 9, 2048, None, "keep"), ("old2", 2, 8192, None, "old"),
]
#: (width of a, width of b, signed): products, each a's and b's bits from the stimulus.
PRODUCTS = [(18, 18, False), (18, 18, True), (24, 20, False), (30, 12, True), (16, 0, False)]
CYCLES = 20_000
#: Address bits the stimulus sets on most cycles: the rest are set one cycle in four.
NEAR = 3


class CellBank(wiring.Component):
    """The memories of :data:`SHAPES` and the products of :data:`PRODUCTS` (a width of 0: 3
    times a), every input a field of ``stim``, every read and product in ``q``."""

    def __init__(self):
        self.fields = {}            # (memory, field) -> (offset, width, is an address)
        offset = 0
        for name, width, depth, granularity, ports in SHAPES:
            abits = (depth - 1).bit_length()
            enables = 1 if granularity is None else width // granularity
            fields = [("waddr", abits), ("wdata", width), ("wen", enables), ("ren", 1)]
            if ports == "sdp":
                fields.append(("raddr", abits))
            for field, bits in fields:
                self.fields[name, field] = (offset, bits, "addr" in field)
                offset += bits
        for i, (a, b, _) in enumerate(PRODUCTS):
            for field, bits in (("a", a), ("b", b)):
                self.fields[f"mul{i}", field] = (offset, bits, False)
                offset += bits
        reads = sum(w for _, w, _, _, _ in SHAPES)
        reads += sum(a + max(b, 2) for a, b, _ in PRODUCTS)
        super().__init__({"stim": In(offset), "q": Out(reads)})

    def elaborate(self, platform):
        m = Module()

        def field(name, f):
            offset, bits, _ = self.fields[name, f]
            return self.stim[offset:offset + bits]

        reads = []
        for name, width, depth, granularity, ports in SHAPES:
            mem = m.submodules[name] = Memory(shape=width, depth=depth, init=[])
            wp = mem.write_port(granularity=granularity)
            rp = mem.read_port(transparent_for=(wp,) if ports == "new" else ())
            addr, en = field(name, "waddr"), field(name, "wen")
            m.d.comb += [wp.addr.eq(addr), wp.data.eq(field(name, "wdata")), wp.en.eq(en),
                         rp.addr.eq(field(name, "raddr") if ports == "sdp" else addr),
                         rp.en.eq(field(name, "ren") & ~(en.any() if ports == "keep" else 0))]
            reads.append(rp.data)
        for i, (a, b, sign) in enumerate(PRODUCTS):
            shape = signed if sign else unsigned
            x = field(f"mul{i}", "a").as_signed() if sign else field(f"mul{i}", "a")
            y = (field(f"mul{i}", "b").as_signed() if sign else field(f"mul{i}", "b")) if b else 3
            product = m.submodules[f"mul{i}"] = Product(a, max(b, 2), shape)
            m.d.comb += [product.x.eq(x), product.y.eq(y)]
            reads.append(product.p)
        m.d.comb += self.q.eq(Cat(*reads))
        return m


class Product(wiring.Component):
    """``p = x * y``, in a module of its own (so that the product is one multiplication)."""

    def __init__(self, a, b, shape):
        super().__init__({"x": In(shape(a)), "y": In(shape(b)), "p": Out(shape(a + b))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.p.eq(self.x * self.y)
        return m


def bench_verilog(mems):
    """A top ``tb`` driving ``mems_rtl`` and ``mems`` (its netlist) with the same xorshift
    stimulus, counting the cycles their outputs differ (``$display`` of the first)."""
    n, q = len(mems.stim), len(mems.q)
    words = -(-n // 64) + 1
    near = 0
    for offset, bits, is_addr in mems.fields.values():
        keep = (1 << NEAR) - 1 if is_addr else (1 << bits) - 1
        near |= keep << offset
    return side_by_side(words, q, ("rtl", "net"), f"""
    wire far = rnd[{words * 64 - 1}] & rnd[{words * 64 - 2}];
    wire [{n - 1}:0] stim = rnd[{n - 1}:0] & (far ? {{{n}{{1'b1}}}} : {n}'h{near:x});
    mems_rtl rtl(.clk(clk), .rst(1'b0), .stim(stim), .q(q_rtl));
    mems net(.clk(clk), .rst(1'b0), .stim(stim), .q(q_net));""")


def side_by_side(words, q, names, body):
    """A top ``tb`` of ``words`` 64-bit xorshift generators (``rnd``, a step a cycle) and
    ``body``, which drives ``q``-bit outputs ``q_<name>`` of the two ``names`` from them;
    counts the cycles the two differ (``$display`` of the first) and those the first is not
    zero (``busy``)."""
    a, b = names
    regs = "\n".join(f"    reg [63:0] s{i} = 64'd{0x9E3779B97F4A7C15 * (i + 1) % 2**64};"
                     for i in range(words))
    steps = "\n".join(f"        s{i} <= step(s{i});" for i in range(words))
    return f"""
module tb(input wire clk, output reg [31:0] errors = 0, output reg [31:0] first = 0,
          output reg [31:0] cycle = 0, output reg [31:0] busy = 0);
{regs}
    function automatic [63:0] step(input [63:0] s);
        reg [63:0] x;
        begin
            x = s ^ (s << 13);
            x = x ^ (x >> 7);
            step = x ^ (x << 17);
        end
    endfunction
    wire [{words * 64 - 1}:0] rnd = {{{", ".join(f"s{i}" for i in reversed(range(words)))}}};
    wire [{q - 1}:0] q_{a}, q_{b};
{body}
    always @(posedge clk) begin
{steps}
        cycle <= cycle + 1;
        if (q_{a} != 0)
            busy <= busy + 1;
        if (q_{a} != q_{b}) begin
            if (errors == 0) begin
                first <= cycle;
                $display("first difference, cycle %0d: {a} %h, {b} %h", cycle, q_{a}, q_{b});
            end
            errors <= errors + 1;
        end
    end
endmodule
"""


MAIN = r"""
#include "Vtb.h"
#include "verilated.h"
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
    VerilatedContext ctx;
    Vtb tb(&ctx, "tb");
    long cycles = std::atol(argv[1]);
    for (long i = 0; i < cycles; i++) {
        tb.clk = 0; tb.eval();
        tb.clk = 1; tb.eval();
    }
    std::printf("errors=%u first=%u cycles=%u busy=%u\n", tb.errors, tb.first, tb.cycle, tb.busy);
    tb.final();
    return 0;
}
"""


def verilate(work, sources, *, lint=False):
    """Build ``sources`` ({file: text}, top ``tb``) into ``work/tb`` with the flags of a netlist
    model, through the back end's own steps (or only Verilator's elaboration, with ``lint``)."""
    vroot, perl, cxx = vl._toolchain()
    env = dict(os.environ, VERILATOR_ROOT=vroot)
    for name, text in sources.items():
        with open(os.path.join(work, name), "w") as f:
            f.write(text)
    log: list[str] = []
    mode = ["--lint-only"] if lint else ["--cc", "--prefix", "Vtb", "--Mdir", "obj"]
    vl.run_tool("verilator", [perl, os.path.join(vroot, "bin", "verilator"), *mode, *sources,
                               "--top-module", "tb", *vl.VERILATOR_FLAGS, *NETLIST_FLAGS],
                 work, env, log)
    if lint:
        return None
    runtime, _ = vl._runtime(vroot, cxx, False, vl.cache_root(None))
    runtime = [o for o in runtime if not o.endswith("harness.o")]
    with open(os.path.join(work, "main.cpp"), "w") as f:
        f.write(MAIN)
    files = sorted(n for n in os.listdir(os.path.join(work, "obj")) if n.endswith(".cpp"))
    with open(os.path.join(work, "model.cpp"), "w") as f:
        f.write("".join(f'#include "obj/{n}"\n' for n in files))
    jobs = [(cxx, vl._cxx_cmd(cxx, vroot, "-O1", src, src.replace(".cpp", ".o"), trace=False,
                              include=["obj"])) for src in ("model.cpp", "main.cpp")]
    vl._compile_all(jobs, work, env, log)
    vl.run_tool(cxx, [cxx, "-pthread", "-o", "tb", "model.o", "main.o", *runtime], work, env,
                 log)
    return os.path.join(work, "tb")


def dp16kd_modes(netlist):
    """``{(DATA_WIDTH_A, WRITEMODE_A, WRITEMODE_B)}`` of the netlist's DP16KDs."""
    modes = set()
    for params in re.findall(r"DP16KD #\((.*?)\)\s*\S+\s*\(", netlist, re.S):
        p = dict(re.findall(r"\.(\w+)\(([^)]*)\)", params))
        modes.add((int(p["DATA_WIDTH_A"].split("'d")[-1]), p.get("WRITEMODE_A", '"NORMAL"')
                   .strip('"'), p.get("WRITEMODE_B", '"NORMAL"').strip('"')))
    return modes


@pytest.mark.slow
def test_the_models_compute_what_amaranth_does(tmp_path):
    mems = CellBank()
    netlist = synthesize(verilog.convert(CellBank(), name="mems"), "mems",
                         cache_dir=vl.cache_root(None))
    check_netlist(netlist, "mems")
    assert len(re.findall(r"^  MULT18X18D ", netlist, re.M)) >= len(PRODUCTS)
    modes = dp16kd_modes(netlist)
    # Every width, each single-port behaviour, byte enables: what the mapper made.
    assert {w for w, _, _ in modes} == {1, 2, 4, 9, 18, 36}
    assert {m for _, a, b in modes for m in (a, b)} >= {"NORMAL", "WRITETHROUGH",
                                                          "READBEFOREWRITE"}, modes
    assert "LUT4" in netlist and "TRELLIS_FF" in netlist
    tb = verilate(str(tmp_path), {"tb.v": bench_verilog(mems),
                                  "rtl.v": verilog.convert(mems, name="mems_rtl"),
                                  "netlist.v": netlist, "cells.v": cell_models()})
    out = subprocess.run([tb, str(CYCLES)], capture_output=True, text=True, check=True).stdout
    counts = dict(re.findall(r"(\w+)=(\d+)", out))
    assert counts["cycles"] == str(CYCLES)
    assert int(counts["busy"]) > CYCLES // 2          # the reads return data written
    assert counts["errors"] == "0", out


def test_a_mode_it_does_not_model_stops_the_build(tmp_path):
    """REGMODE "OUTREG", 36 bits on one port only, a width of 3, an unknown WRITEMODE, a
    malformed CSDECODE, resets that disagree; a multiplier's register or bypass: each stops
    Verilator's elaboration with the model's message. The modes modelled pass."""
    cases = {"DP16KD model: REGMODE": '.REGMODE_A("OUTREG")',
             "DP16KD model: DATA_WIDTH_A 36 with": ".DATA_WIDTH_A(36), .DATA_WIDTH_B(18)",
             "DP16KD model: DATA_WIDTH_A 3 with": ".DATA_WIDTH_A(3), .DATA_WIDTH_B(3)",
             "DP16KD model: WRITEMODE": '.WRITEMODE_B("BYPASS")',
             "DP16KD model: CSDECODE": '.CSDECODE_A("0b1x0")',
             "DP16KD model: RESETMODE": '.RESETMODE("ASYNC"), .ASYNC_RESET_RELEASE("SYNC")',
             "MULT18X18D model: a register": '.REG_OUTPUT_CLK("CLK0")',
             "MULT18X18D model: MULT_BYPASS": '.MULT_BYPASS("ENABLED")'}
    for message, params in cases.items():
        cell = message.split()[0]
        top = f"module tb(input wire clk); {cell} #({params}) inst(); endmodule"
        with pytest.raises(BuildError, match=message):
            verilate(str(tmp_path), {"tb.v": top, "cells.v": cell_models()}, lint=True)
    ok = ('module tb(input wire clk); DP16KD #(.DATA_WIDTH_A(36), .DATA_WIDTH_B(36), '
          '.WRITEMODE_A("WRITETHROUGH"), .CSDECODE_B("0b101"), .CLKAMUX("INV")) '
          'ram(.CLKA(clk), .CLKB(clk)); MULT18X18D mult(); endmodule')
    verilate(str(tmp_path), {"tb.v": ok, "cells.v": cell_models()}, lint=True)


def test_cell_models_are_yosys_and_ours_each_once():
    text = cell_models()
    assert "(* blackbox *)" not in text
    for cell in ("DP16KD", "MULT18X18D", "LUT4", "CCU2C", "TRELLIS_FF", "TRELLIS_DPR16X4",
                 "PFUMX", "L6MUX21"):
        assert len(re.findall(rf"^module {cell}\b", text, re.M)) == 1, cell


def test_the_netlist_checks_refuse_what_the_models_cannot_simulate():
    ram = ("  DP16KD #(\n    .DATA_WIDTH_A(32'd18),\n    .DATA_WIDTH_B(32'd18)\n  ) \\r.mem  (\n"
           "    .CEA(1'h1),\n    .CEB(en),\n    .CLKA(clk),\n    .CLKB(clk)\n  );\n")
    mult = "  MULT18X18D \\m.mul  (\n    .A0(clk),\n    .SOURCEA(1'h0),\n    .P0(p)\n  );\n"
    good = f"module t(clk, other);\n  input clk;\n{ram}{mult}endmodule\n"
    check_netlist(good, "t")
    # A port unused (its clock a constant, or its CE zero) may have another width and clock.
    for unused in (".CLKB(1'h0)", ".CEB(1'h0),\n    .CLKA(clk),\n    .CLKB(other)"):
        check_netlist(good.replace("32'd18)\n", "32'd4)\n").replace(".CLKB(clk)", unused)
                      .replace(".CEB(en),\n    .CLKA(clk),\n", ""), "t")
    with pytest.raises(BuildError, match=r"DP16KD \\r\.mem: its ports' clocks are clk and other"):
        check_netlist(good.replace(".CLKB(clk)", ".CLKB(other)"), "t")
    with pytest.raises(BuildError, match=r"DP16KD \\r\.mem: its ports are 18 and 4 bits wide"):
        check_netlist(good.replace("32'd18)\n", "32'd4)\n"), "t")
    with pytest.raises(BuildError, match="one flat module 't', not t, u"):
        check_netlist(good + "module u();\nendmodule\n", "t")
    with pytest.raises(BuildError, match=r"MULT18X18D \\m\.mul uses SOURCEB, ROA3"):
        check_netlist(good.replace("    .P0(p)", "    .SOURCEB(clk),\n    .ROA3(other),\n"
                                                 "    .P0(p)"), "t")


def logic_cells():
    """A module ``cells`` as ``write_verilog`` writes a netlist: every mode of the flip-flop
    (CE, clock and reset inverted or not, sync and async reset, set or reset), of the carry
    cell (INJECT1 on either half, chained three deep) and of the distributed RAM (write clock
    and enable), and LUT4s of random tables, some inputs constant or unconnected; each input a
    bit of ``stim``, each output a bit of ``q``. Returns (text, stim bits, q bits, cells)."""
    rng = random.Random(7)
    stim, q, cells = 0, 0, []

    def bits(n):
        nonlocal stim
        stim += n
        return [f"stim[{stim - n + i}]" for i in range(n)]

    def out(n):
        nonlocal q
        q += n
        return [f"q[{q - n + i}]" for i in range(n)]

    def cell(kind, params, pins):
        plist = ",\n".join(f"    .{k}({v})" for k, v in params.items())
        head = f"  {kind} #(\n{plist}\n  )" if params else f"  {kind}"
        cells.append(f"{head} \\c{len(cells)}.{kind}  (\n"
                     + ",\n".join(f"    .{k}({v})" for k, v in sorted(pins.items())) + "\n  );\n")

    for i in range(12):
        pins = dict(zip("ABCD", bits(4)))
        if i == 10:
            pins["A"] = "1'h0"
        if i == 11:
            del pins["B"]
        cell("LUT4", {"INIT": f"16'h{rng.getrandbits(16):04x}"}, {**pins, "Z": out(1)[0]})
    for inject in itertools.product(("YES", "NO"), repeat=2):
        carry = bits(1)[0]
        for _ in range(3):
            pins = {f"{p}{h}": s for h in "01" for p, s in zip("ABCD", bits(4))}
            s0, s1, cout = out(3)
            cell("CCU2C", {"INIT0": f"16'h{rng.getrandbits(16):04x}",
                           "INIT1": f"16'h{rng.getrandbits(16):04x}",
                           "INJECT1_0": f'"{inject[0]}"', "INJECT1_1": f'"{inject[1]}"'},
                 {**pins, "CIN": carry, "S0": s0, "S1": s1, "COUT": cout})
            carry = cout
    for ce, clk, lsr, mode, regset, gsr in itertools.product(
            ("1", "0", "CE", "INV"), ("CLK", "INV"), ("LSR", "INV"), ("LSR_OVER_CE", "ASYNC"),
            ("RESET", "SET"), ("ENABLED", "DISABLED")):
        d, e, r1, r2 = bits(4)
        # The reset a wire high one cycle in four (two stimulus bits), as a netlist's is.
        cells.append(f"  wire \\r{len(cells)} = {r1} & {r2};\n")
        cell("TRELLIS_FF", {"CEMUX": f'"{ce}"', "CLKMUX": f'"{clk}"', "LSRMUX": f'"{lsr}"',
                            "SRMODE": f'"{mode}"', "REGSET": f'"{regset}"', "GSR": f'"{gsr}"'},
             {"CLK": "clk", "CE": e, "DI": d, "LSR": f"\\r{len(cells) - 1} ", "Q": out(1)[0]})
    for wck, wre in itertools.product(("WCK", "INV"), ("WRE", "INV", "1", "0")):
        init = "".join(rng.choice("01x") for _ in range(64))
        di, wad, rad = (f"{{ {', '.join(reversed(bits(4)))} }}" for _ in range(3))
        do = f"{{ {', '.join(reversed(out(4)))} }}"
        cell("TRELLIS_DPR16X4", {"INITVAL": f"64'b{init}", "WCKMUX": f'"{wck}"',
                                 "WREMUX": f'"{wre}"'},
             {"DI": di, "WAD": wad, "RAD": rad, "WCK": "clk", "WRE": bits(1)[0], "DO": do})
    text = (f"module cells(clk, stim, q);\n  input clk;\n  wire clk;\n  input [{stim - 1}:0] stim;"
            f"\n  wire [{stim - 1}:0] stim;\n  output [{q - 1}:0] q;\n  wire [{q - 1}:0] q;\n"
            + "".join(cells) + "endmodule\n")
    return text, stim, q, cells


def logic_bench(stim, q):
    """A top ``tb`` driving ``cells`` and ``cells_inline`` with the same xorshift stimulus,
    counting the cycles their outputs differ."""
    return side_by_side(-(-stim // 64), q, ("yosys", "inline"), f"""
    cells yosys(.clk(clk), .stim(rnd[{stim - 1}:0]), .q(q_yosys));
    cells_inline inline(.clk(clk), .stim(rnd[{stim - 1}:0]), .q(q_inline));""")


def test_the_inlined_logic_cells_compute_what_yosys_models_do(tmp_path):
    """Every mode of LUT4, CCU2C, TRELLIS_FF and TRELLIS_DPR16X4 that the netlist models write
    inline (apiary/sim/ecp5_cells.py), beside the same instances on Yosys's models: the same
    random inputs into both, every output equal, for 20,000 cycles."""
    text, stim, q, cells = logic_cells()
    inlined, counts = inline_cells(text)
    assert counts == {"LUT4": 12, "CCU2C": 12, "TRELLIS_FF": 128, "TRELLIS_DPR16X4": 8}
    assert not re.search(r"^  (LUT4|CCU2C|TRELLIS_FF|TRELLIS_DPR16X4) ", inlined, re.M)
    tb = verilate(str(tmp_path), {"tb.v": logic_bench(stim, q), "cells.v": text,
                                  "inline.v": inlined.replace("module cells(",
                                                              "module cells_inline("),
                                  "models.v": cell_models()})
    out = subprocess.run([tb, str(CYCLES)], capture_output=True, text=True, check=True).stdout
    counts = dict(re.findall(r"(\w+)=(\d+)", out))
    assert counts["cycles"] == str(CYCLES)
    assert int(counts["busy"]) > CYCLES // 2
    assert counts["errors"] == "0", out


def test_a_mode_the_inlined_cells_do_not_model_is_refused():
    """A parameter value Yosys's models do not define (or a parameter they have not), a
    truth table too wide, a pin list with parentheses: each a BuildError naming the cell."""
    text, _, _, _ = logic_cells()
    for old, new, message in [
            ('.SRMODE("ASYNC")', '.SRMODE("SYNC")',
             r"TRELLIS_FF \\c\d+\.TRELLIS_FF: SRMODE 'SYNC'"),
            ('.REGSET("SET")', '.REGSET("SET"),\n    .LSRMODE("PRLD")', "LSRMODE 'PRLD'"),
            ('.WREMUX("1")', '.WREMUX("2")', "TRELLIS_DPR16X4 .*WREMUX '2'"),
            ('.INJECT1_0("NO")', '.INJECT1_0("MAYBE")', "CCU2C .*INJECT1_0 'MAYBE'"),
            (".INIT(16'h", ".INIT(16'h1", "LUT4 .*not a constant of 16 bits"),
            ('.WCKMUX("INV")', '.WCKMUX("INV"),\n    .WEIRD(1)', "WEIRD"),
            (".A(stim[0])", ".A(f(stim[0]))", r"cannot read its list")]:
        assert old in text, old
        with pytest.raises(BuildError, match=message):
            inline_cells(text.replace(old, new, 1))


def test_the_tiles_not_synthesised_stay_rtl():
    """``netlist_tiles``: the tiles named, their monitors and agents go to Yosys; every other
    submodule of the top (tiles, meshes, the MAC edge) and the memory models stay RTL."""
    rtl = "".join(f"module \\t.{m} (clk);\nendmodule\n" for m in (
        "eth_rx", "eth_rx.fifo", "tcp_rx", "tcp_rx.state", "tcp_rx_monitor", "tcp_rx_agent",
        "data_mesh", "data_mesh.router_0_0", "eth_mac", "tcp_rx_mem_mem_model"))
    rtl = "module t (clk);\nendmodule\n" + rtl
    assert submodule_names(rtl, "t") == ["data_mesh", "eth_mac", "eth_rx", "tcp_rx",
                                         "tcp_rx_agent", "tcp_rx_mem_mem_model",
                                         "tcp_rx_monitor"]
    model = SimpleNamespace(name="mem_model")
    top = SimpleNamespace(design=SimpleNamespace(name="t"), attached=[("tcp_rx", "mem", model)])
    assert rtl_modules(top, rtl, None) == ["t.tcp_rx_mem_mem_model"]
    assert sorted(rtl_modules(top, rtl, ["tcp_rx"])) == [
        "t.data_mesh", "t.eth_mac", "t.eth_rx", "t.tcp_rx_mem_mem_model"]
    assert "module \\t.eth_rx.fifo" in kept_modules(rtl, rtl_modules(top, rtl, ["tcp_rx"]))
