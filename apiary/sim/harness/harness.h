// The interface between the fixed harness (harness.cpp) and the per-design glue that
// apiary/sim/verilator.py generates (glue.cpp). The glue knows the Verilated model's port names
// and types; the harness knows the cycle rules of apiary/sim/core.py. Payload words are passed
// as arrays of 32-bit words, bit 0 of the payload in bit 0 of word 0: the frame bytes (byte i in
// lane i), then keep (a bit per valid byte), then last, then error, as
// amaranth.lib.data.StructLayout lays out apiary.stream.mac.mac_word_layout().
#pragma once
#include <cstdint>

class VerilatedContext;
class VerilatedVcdC;

namespace apiary_glue {

extern const int kPorts;          // Ethernet ports (the design's MacPort members, <name>_mac)
extern const int kBytes;          // bytes per word (data width / 8)
extern const int kPayloadWords;   // 32-bit words holding one payload
extern const int kCounters;       // counter outputs

void* create(VerilatedContext* ctx);
void destroy(void* model);
void eval(void* model);
void set_clk(void* model, int value);
void set_rx(void* model, int port, int valid, const uint32_t* payload);
int rx_ready(void* model, int port);
void set_tx_ready(void* model, int port, int ready);
int tx_valid(void* model, int port);
void tx_payload(void* model, int port, uint32_t* payload);
uint64_t counter(void* model, int index);
void trace(void* model, VerilatedVcdC* vcd);  // no-op unless built with APIARY_TRACE
void final(void* model);

}  // namespace apiary_glue
