"""What the Verilator back end changes in the Verilog Yosys writes: an ``always @*`` block that
assigns a constant and reads nothing (Verilator never runs it) becomes an ``initial`` block;
every other block is left as it is. The end-to-end proof is tests/os/test_apiary_fault.py, whose
monitors set the source fields of passing messages to their tile's (constant) position."""

from apiary.sim.verilator import constant_processes


def test_constant_only_blocks_become_initial_blocks():
    verilog = (
        "  always @*\n"
        "    \\new [49:42] = 8'h03;\n"
        "  always @*\n"
        "    \\new [33:0] = head[97:64];\n"
        "  always @* begin\n"
        "    if (\\$auto$verilog_backend.cc:2355:dump_module$3 ) begin end\n"
        "    o__ready = 1'h0;\n"
        "  end\n"
        "  always @*\n"
        "    x[3:0] = 4'b1010;\n")
    assert constant_processes(verilog) == (
        "  initial \\new [49:42] = 8'h03;\n"
        "  always @*\n"
        "    \\new [33:0] = head[97:64];\n"
        "  always @* begin\n"
        "    if (\\$auto$verilog_backend.cc:2355:dump_module$3 ) begin end\n"
        "    o__ready = 1'h0;\n"
        "  end\n"
        "  initial x[3:0] = 4'b1010;\n")
