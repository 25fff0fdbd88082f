// The storage of a memory model under Verilator (apiary.sim.verilator.RamMemoryModel): the
// words of an Amaranth Memory without its initial contents, which Amaranth writes out word by
// word (a 4 MiB model is 65,536 lines that Yosys and the C++ compiler take minutes over).
// All words start at zero (the model is built with --x-initial 0), as in the Memory it replaces.
module apiary_sim_ram #(parameter WIDTH = 64, parameter DEPTH = 2, parameter ABITS = 1) (
    input                    clk,
    input      [ABITS-1:0]   waddr,
    input      [WIDTH-1:0]   wdata,
    input      [WIDTH/8-1:0] wen,
    input      [ABITS-1:0]   raddr,
    input                    ren,
    output reg [WIDTH-1:0]   rdata
);
    reg [WIDTH-1:0] words [0:DEPTH-1];
    integer lane;
    always @(posedge clk) begin
        if (ren)
            rdata <= words[raddr];
        for (lane = 0; lane < WIDTH / 8; lane = lane + 1)
            if (wen[lane])
                words[waddr][8 * lane +: 8] <= wdata[8 * lane +: 8];
    end
endmodule
