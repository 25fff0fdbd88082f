// DP16KD, the ECP5 sysMEM block RAM (18 Kib): a behavioural model for simulating the ECP5
// netlists of Yosys (apiary.sim.netlist), which ships only a blackbox of it (cells_sim_ecp5.v).
// Written from Lattice's description of the primitive (TN1264, the ECP5 Memory Usage Guide) for
// what Yosys's brams_map_16kd.v makes of it, and nothing else:
//
// * DATA_WIDTH_A and DATA_WIDTH_B each one of 1, 2, 4, 9 and 18 (true dual port: each port
//   reads and writes), or both 36 (pseudo dual port, Yosys's $__PDPW16KD_: A writes {DIB, DIA},
//   B reads {DOB, DOA}). A word of w bits is at AD[13:k], k = 0, 1, 2, 3, 4, 5 for w = 1, 2, 4,
//   9, 18, 36; at 18 bits AD[1:0], at 36 bits ADA[3:0], are the write enables of its 9-bit
//   bytes. Two widths that differ are simulated only where one port is unused (Yosys gives an
//   unused port the default 18; apiary.sim.netlist checks), as no test has compared the layout
//   below with a block RAM that two widths share.
//   The array is 1,024 words of 18 bits, laid out as Yosys's memory library assumes (and packs
//   INITVAL_00..3F, 16 words each, a word in 20 bits): a 36-bit word is two 18-bit words, low
//   first; an 18-bit word two 9-bit bytes; a 9-bit byte two 4-bit nibbles and a ninth bit; a
//   nibble two 2-bit words, each two bits.
// * REGMODE "NOREG": a port's output is the latch its read sets at its clock edge (OCE unused).
//   WRITEMODE "NORMAL" (a write leaves the port's output as it was), "WRITETHROUGH" (it shows the
//   word as written) or "READBEFOREWRITE" (the word as it was). A port reads and writes only on
//   an edge with CE high and {CS2, CS1, CS0} equal to its CSDECODE ("0bXYZ").
// * RESETMODE "SYNC" (RST clears the output at the clock edge, whatever CE says) or "ASYNC"
//   (RST clears it at once and holds it clear), ASYNC_RESET_RELEASE the same; RST never stops a
//   write. CLKxMUX straight or "INV"; GSR any (simulation has no GSR); INIT_DATA "STATIC".
//
// Anything else stops Verilator's elaboration ($fatal; apiary.sim.netlist builds with
// -Werror-USERFATAL). Both ports must share a clock (apiary.sim.netlist checks that the netlist
// wires CLKA and CLKB to one net, where both ports are used): a port that reads, on the edge
// the other port writes them, bits of the same word collides, of which Yosys's memory library
// for the DP16KD (brams_16kd.txt: no wrtrans) assumes nothing, adding logic of its own where the
// design needs a value. The model gives the reading port those bits inverted from the word as
// it was, so that a netlist that depends on a collision shows it. Two ports writing the same
// bits on one edge leave one of the two values.
`default_nettype none
module DP16KD (
    input  wire DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9,
                DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0,
    input  wire ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7,
                ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0,
    input  wire CEA, OCEA, CLKA, WEA, RSTA,
    input  wire CSA2, CSA1, CSA0,
    output wire DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9,
                DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0,
    input  wire DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9,
                DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0,
    input  wire ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7,
                ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0,
    input  wire CEB, OCEB, CLKB, WEB, RSTB,
    input  wire CSB2, CSB1, CSB0,
    output wire DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9,
                DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0
);
    parameter integer DATA_WIDTH_A = 18;
    parameter integer DATA_WIDTH_B = 18;
    parameter REGMODE_A = "NOREG";
    parameter REGMODE_B = "NOREG";
    parameter RESETMODE = "SYNC";
    parameter ASYNC_RESET_RELEASE = "SYNC";
    parameter CSDECODE_A = "0b000";
    parameter CSDECODE_B = "0b000";
    parameter WRITEMODE_A = "NORMAL";
    parameter WRITEMODE_B = "NORMAL";
    parameter CLKAMUX = "CLKA";
    parameter CLKBMUX = "CLKB";
    parameter GSR = "ENABLED";
    parameter INIT_DATA = "STATIC";
    parameter [319:0] INITVAL_00 = 320'h0;
    parameter [319:0] INITVAL_01 = 320'h0;
    parameter [319:0] INITVAL_02 = 320'h0;
    parameter [319:0] INITVAL_03 = 320'h0;
    parameter [319:0] INITVAL_04 = 320'h0;
    parameter [319:0] INITVAL_05 = 320'h0;
    parameter [319:0] INITVAL_06 = 320'h0;
    parameter [319:0] INITVAL_07 = 320'h0;
    parameter [319:0] INITVAL_08 = 320'h0;
    parameter [319:0] INITVAL_09 = 320'h0;
    parameter [319:0] INITVAL_0A = 320'h0;
    parameter [319:0] INITVAL_0B = 320'h0;
    parameter [319:0] INITVAL_0C = 320'h0;
    parameter [319:0] INITVAL_0D = 320'h0;
    parameter [319:0] INITVAL_0E = 320'h0;
    parameter [319:0] INITVAL_0F = 320'h0;
    parameter [319:0] INITVAL_10 = 320'h0;
    parameter [319:0] INITVAL_11 = 320'h0;
    parameter [319:0] INITVAL_12 = 320'h0;
    parameter [319:0] INITVAL_13 = 320'h0;
    parameter [319:0] INITVAL_14 = 320'h0;
    parameter [319:0] INITVAL_15 = 320'h0;
    parameter [319:0] INITVAL_16 = 320'h0;
    parameter [319:0] INITVAL_17 = 320'h0;
    parameter [319:0] INITVAL_18 = 320'h0;
    parameter [319:0] INITVAL_19 = 320'h0;
    parameter [319:0] INITVAL_1A = 320'h0;
    parameter [319:0] INITVAL_1B = 320'h0;
    parameter [319:0] INITVAL_1C = 320'h0;
    parameter [319:0] INITVAL_1D = 320'h0;
    parameter [319:0] INITVAL_1E = 320'h0;
    parameter [319:0] INITVAL_1F = 320'h0;
    parameter [319:0] INITVAL_20 = 320'h0;
    parameter [319:0] INITVAL_21 = 320'h0;
    parameter [319:0] INITVAL_22 = 320'h0;
    parameter [319:0] INITVAL_23 = 320'h0;
    parameter [319:0] INITVAL_24 = 320'h0;
    parameter [319:0] INITVAL_25 = 320'h0;
    parameter [319:0] INITVAL_26 = 320'h0;
    parameter [319:0] INITVAL_27 = 320'h0;
    parameter [319:0] INITVAL_28 = 320'h0;
    parameter [319:0] INITVAL_29 = 320'h0;
    parameter [319:0] INITVAL_2A = 320'h0;
    parameter [319:0] INITVAL_2B = 320'h0;
    parameter [319:0] INITVAL_2C = 320'h0;
    parameter [319:0] INITVAL_2D = 320'h0;
    parameter [319:0] INITVAL_2E = 320'h0;
    parameter [319:0] INITVAL_2F = 320'h0;
    parameter [319:0] INITVAL_30 = 320'h0;
    parameter [319:0] INITVAL_31 = 320'h0;
    parameter [319:0] INITVAL_32 = 320'h0;
    parameter [319:0] INITVAL_33 = 320'h0;
    parameter [319:0] INITVAL_34 = 320'h0;
    parameter [319:0] INITVAL_35 = 320'h0;
    parameter [319:0] INITVAL_36 = 320'h0;
    parameter [319:0] INITVAL_37 = 320'h0;
    parameter [319:0] INITVAL_38 = 320'h0;
    parameter [319:0] INITVAL_39 = 320'h0;
    parameter [319:0] INITVAL_3A = 320'h0;
    parameter [319:0] INITVAL_3B = 320'h0;
    parameter [319:0] INITVAL_3C = 320'h0;
    parameter [319:0] INITVAL_3D = 320'h0;
    parameter [319:0] INITVAL_3E = 320'h0;
    parameter [319:0] INITVAL_3F = 320'h0;

    function automatic is_width(input integer w);
        is_width = w == 1 || w == 2 || w == 4 || w == 9 || w == 18 || w == 36;
    endfunction

    function automatic is_writemode(input [15*8-1:0] mode);
        is_writemode = mode == "NORMAL" || mode == "WRITETHROUGH" || mode == "READBEFOREWRITE";
    endfunction

    function automatic is_bit(input [7:0] c);
        is_bit = c == "0" || c == "1";
    endfunction

    function automatic is_csdecode(input [5*8-1:0] s);
        is_csdecode = s[39:24] == "0b" && is_bit(s[23:16]) && is_bit(s[15:8]) && is_bit(s[7:0]);
    endfunction

    // "0bXYZ" as 3'bXYZ.
    function automatic [2:0] cs_bits(input [5*8-1:0] s);
        cs_bits = {s[23:16] == "1", s[15:8] == "1", s[7:0] == "1"};
    endfunction

    // -- what is modelled: anything else stops the build -------------------------------------
    generate
        if (!is_width(DATA_WIDTH_A) || !is_width(DATA_WIDTH_B)
            || (DATA_WIDTH_A == 36) != (DATA_WIDTH_B == 36)) begin : bad_width
            $fatal(1, "DP16KD model: DATA_WIDTH_A %0d with DATA_WIDTH_B %0d is not modelled",
                   DATA_WIDTH_A, DATA_WIDTH_B);
        end
        if (REGMODE_A != "NOREG" || REGMODE_B != "NOREG") begin : bad_regmode
            $fatal(1, "DP16KD model: REGMODE_A %0s, REGMODE_B %0s: only NOREG is modelled",
                   REGMODE_A, REGMODE_B);
        end
        if ((RESETMODE != "SYNC" && RESETMODE != "ASYNC") || ASYNC_RESET_RELEASE != RESETMODE)
            begin : bad_resetmode
            $fatal(1, "DP16KD model: RESETMODE %0s with ASYNC_RESET_RELEASE %0s is not modelled",
                   RESETMODE, ASYNC_RESET_RELEASE);
        end
        if (!is_writemode(WRITEMODE_A) || !is_writemode(WRITEMODE_B)) begin : bad_writemode
            $fatal(1, "DP16KD model: WRITEMODE_A %0s, WRITEMODE_B %0s is not modelled",
                   WRITEMODE_A, WRITEMODE_B);
        end
        if (!is_csdecode(CSDECODE_A) || !is_csdecode(CSDECODE_B)) begin : bad_csdecode
            $fatal(1, "DP16KD model: CSDECODE_A %0s, CSDECODE_B %0s is not of the form 0bXYZ",
                   CSDECODE_A, CSDECODE_B);
        end
        if ((CLKAMUX != "CLKA" && CLKAMUX != "INV") || (CLKBMUX != "CLKB" && CLKBMUX != "INV"))
            begin : bad_clkmux
            $fatal(1, "DP16KD model: CLKAMUX %0s, CLKBMUX %0s is not modelled",
                   CLKAMUX, CLKBMUX);
        end
        if (INIT_DATA != "STATIC") begin : bad_init_data
            $fatal(1, "DP16KD model: INIT_DATA %0s is not modelled", INIT_DATA);
        end
    endgenerate

    // -- the array ----------------------------------------------------------------------------
    localparam PDP = DATA_WIDTH_A == 36;
    localparam [20479:0] INIT_ALL = {
        INITVAL_3F, INITVAL_3E, INITVAL_3D, INITVAL_3C, INITVAL_3B, INITVAL_3A, INITVAL_39,
        INITVAL_38, INITVAL_37, INITVAL_36, INITVAL_35, INITVAL_34, INITVAL_33, INITVAL_32,
        INITVAL_31, INITVAL_30, INITVAL_2F, INITVAL_2E, INITVAL_2D, INITVAL_2C, INITVAL_2B,
        INITVAL_2A, INITVAL_29, INITVAL_28, INITVAL_27, INITVAL_26, INITVAL_25, INITVAL_24,
        INITVAL_23, INITVAL_22, INITVAL_21, INITVAL_20, INITVAL_1F, INITVAL_1E, INITVAL_1D,
        INITVAL_1C, INITVAL_1B, INITVAL_1A, INITVAL_19, INITVAL_18, INITVAL_17, INITVAL_16,
        INITVAL_15, INITVAL_14, INITVAL_13, INITVAL_12, INITVAL_11, INITVAL_10, INITVAL_0F,
        INITVAL_0E, INITVAL_0D, INITVAL_0C, INITVAL_0B, INITVAL_0A, INITVAL_09, INITVAL_08,
        INITVAL_07, INITVAL_06, INITVAL_05, INITVAL_04, INITVAL_03, INITVAL_02, INITVAL_01,
        INITVAL_00};
    reg [17:0] mem [0:1023];
    integer i;
    initial
        for (i = 0; i < 1024; i = i + 1)
            mem[i] = INIT_ALL[20 * i +: 18];

    // Where a w-bit word (w < 18) starts in its 18-bit word; 0 at 18 and 36 bits.
    function automatic [4:0] offset(input integer w, input [13:0] ad);
        case (w)
            1: offset = 9 * ad[3] + 4 * ad[2] + 2 * ad[1] + ad[0];
            2: offset = 9 * ad[3] + 4 * ad[2] + 2 * ad[1];
            4: offset = 9 * ad[3] + 4 * ad[2];
            9: offset = 9 * ad[3];
            default: offset = 0;
        endcase
    endfunction

    // The bits of a w-bit word, at the bottom of 18 (all 18 at 18 and 36 bits).
    function automatic [17:0] lanes(input integer w);
        lanes = w >= 18 ? 18'h3ffff : (18'h1 << w) - 18'h1;
    endfunction

    // The bits a write of a port reaches in its (first) 18-bit word: the word's bits, or at 18
    // and 36 bits the bytes AD[1:0] enable.
    function automatic [17:0] reach(input integer w, input [13:0] ad, input [17:0] ones);
        reach = w >= 18 ? {{9{ad[1]}}, {9{ad[0]}}} : ones;
    endfunction

    // -- port A --------------------------------------------------------------------------------
    wire [17:0] dia = {DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9,
                       DIA8, DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0};
    wire [13:0] ada = {ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7,
                       ADA6, ADA5, ADA4, ADA3, ADA2, ADA1, ADA0};
    wire        clka = CLKAMUX == "INV" ? ~CLKA : CLKA;
    wire        ona = CEA && {CSA2, CSA1, CSA0} == cs_bits(CSDECODE_A);
    wire [9:0]  worda = DATA_WIDTH_A == 36 ? {ada[13:5], 1'b0} : ada[13:4];
    wire [4:0]  offa = offset(DATA_WIDTH_A, ada);
    wire [17:0] onesa = lanes(DATA_WIDTH_A) << offa;
    reg  [17:0] doa;

    // -- port B --------------------------------------------------------------------------------
    wire [17:0] dib = {DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9,
                       DIB8, DIB7, DIB6, DIB5, DIB4, DIB3, DIB2, DIB1, DIB0};
    wire [13:0] adb = {ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7,
                       ADB6, ADB5, ADB4, ADB3, ADB2, ADB1, ADB0};
    wire        clkb = CLKBMUX == "INV" ? ~CLKB : CLKB;
    wire        onb = CEB && {CSB2, CSB1, CSB0} == cs_bits(CSDECODE_B);
    wire [9:0]  wordb = DATA_WIDTH_B == 36 ? {adb[13:5], 1'b0} : adb[13:4];
    wire [4:0]  offb = offset(DATA_WIDTH_B, adb);
    wire [17:0] onesb = lanes(DATA_WIDTH_B) << offb;
    reg  [17:0] dob;

    // The bits each port writes at this edge (A's second word: the high half at 36 bits).
    wire [17:0] wra = WEA && ona ? reach(DATA_WIDTH_A, ada, onesa) : 18'd0;
    wire [17:0] wra_hi = PDP && WEA && ona ? {{9{ada[3]}}, {9{ada[2]}}} : 18'd0;
    wire [17:0] wrb = WEB && onb && !PDP ? reach(DATA_WIDTH_B, adb, onesb) : 18'd0;
    wire [9:0]  worda_hi = worda | 10'd1;
    wire [9:0]  wordb_hi = wordb | 10'd1;
    wire [17:0] newa = (mem[worda] & ~wra) | ((dia << offa) & wra);
    wire [17:0] newb = (mem[wordb] & ~wrb) | ((dib << offb) & wrb);

    always @(posedge clka) begin
        if (wra != 18'd0)
            mem[worda] <= newa;
        if (wra_hi != 18'd0)
            mem[worda_hi] <= (mem[worda_hi] & ~wra_hi) | (dib & wra_hi);
    end
    always @(posedge clkb)
        if (wrb != 18'd0)
            mem[wordb] <= newb;

    // -- reads --------------------------------------------------------------------------------
    // The word a port reads at this edge, the bits the other port writes now inverted.
    wire [17:0] seena = mem[worda] ^ (wordb == worda ? wrb : 18'd0);
    wire [17:0] seenb = mem[wordb] ^ (worda == wordb ? wra : 18'd0)
                                   ^ (worda_hi == wordb ? wra_hi : 18'd0);
    wire [17:0] seenb_hi = mem[wordb_hi] ^ (worda == wordb_hi ? wra : 18'd0)
                                         ^ (worda_hi == wordb_hi ? wra_hi : 18'd0);

    // What a port's output takes at its edge (when it reads: on, and not a NORMAL write): the
    // word as written for a WRITETHROUGH write, else the word read; its w bits, at the bottom.
    wire loada = ona && !PDP && !(WEA && WRITEMODE_A == "NORMAL");
    wire loadb = onb && !(WEB && !PDP && WRITEMODE_B == "NORMAL");
    wire        thrua = WEA && WRITEMODE_A == "WRITETHROUGH";
    wire        thrub = WEB && !PDP && WRITEMODE_B == "WRITETHROUGH";
    wire [17:0] nexta = ((thrua ? newa : seena) >> offa) & lanes(DATA_WIDTH_A);
    wire [17:0] nextb = ((thrub ? newb : seenb) >> offb) & lanes(DATA_WIDTH_B);
    reg  [17:0] dob_hi;
    initial begin
        doa = 18'd0;
        dob = 18'd0;
        dob_hi = 18'd0;
    end

    // RST clears an output at once in ASYNC mode (an edge of arst), at the clock edge in SYNC.
    wire arsta = RESETMODE == "ASYNC" && RSTA;
    wire arstb = RESETMODE == "ASYNC" && RSTB;
    always @(posedge clka, posedge arsta)
        if (RSTA) doa <= 18'd0;
        else if (loada) doa <= nexta;
    always @(posedge clkb, posedge arstb)
        if (RSTB) {dob_hi, dob} <= 36'd0;
        else if (loadb) {dob_hi, dob} <= {seenb_hi, nextb};

    // At 36 bits B's read comes out on both ports' pins: DOA the low word, DOB the high one.
    assign {DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9,
            DOA8, DOA7, DOA6, DOA5, DOA4, DOA3, DOA2, DOA1, DOA0} = PDP ? dob : doa;
    assign {DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9,
            DOB8, DOB7, DOB6, DOB5, DOB4, DOB3, DOB2, DOB1, DOB0} = PDP ? dob_hi : dob;
endmodule
`default_nettype wire
