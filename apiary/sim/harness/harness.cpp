// The Verilator back end's test bench: frame queues and the cycle rules of apiary/sim/core.py,
// on the C++ side, so that Python hands over and collects whole frames in batches.
//
// Every function is extern "C" for ctypes. One ApiarySim owns one Verilated model.
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "verilated.h"
#ifdef APIARY_TRACE
#include "verilated_vcd_c.h"
#endif
#include "harness.h"

namespace g = apiary_glue;

namespace {

uint32_t seed_state(uint32_t seed, uint32_t k) {
    uint32_t x = seed ^ ((k + 1) * 0x9E3779B9u);
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x ? x : 0x6A09E667u;
}

struct Xorshift32 {
    uint32_t state;
    uint32_t next() {
        uint32_t x = state;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        state = x;
        return x;
    }
};

struct Stamped {
    std::vector<uint8_t> data;      // empty for frames sent (their bytes are known to Python)
    uint64_t first, last;
    uint32_t len;
};

struct Port {
    Xorshift32 rx_rng, tx_rng;
    std::deque<std::vector<uint8_t>> queue;
    std::vector<uint8_t> frame;     // the frame being offered on mac_rx
    bool busy = false;              // `frame` is being sent
    size_t word = 0, words = 0;
    bool offering = false;
    uint64_t first = 0;
    std::vector<uint8_t> out;       // the frame being received on mac_tx
    uint64_t out_first = 0;
    std::deque<Stamped> received;
    std::deque<Stamped> sent;       // stamps only (data left empty)
    std::vector<uint32_t> payload;  // scratch
    bool ready = false;
};

void set_bits(std::vector<uint32_t>& w, int lsb, uint32_t value, int bits) {
    for (int i = 0; i < bits; i++) {
        int b = lsb + i;
        uint32_t mask = 1u << (b % 32);
        if ((value >> i) & 1) w[b / 32] |= mask; else w[b / 32] &= ~mask;
    }
}

uint32_t get_bits(const std::vector<uint32_t>& w, int lsb, int bits) {
    uint32_t v = 0;
    for (int i = 0; i < bits; i++) {
        int b = lsb + i;
        v |= ((w[b / 32] >> (b % 32)) & 1u) << i;
    }
    return v;
}

}  // namespace

struct ApiarySim {
    std::unique_ptr<VerilatedContext> ctx;
    void* model = nullptr;
    std::vector<Port> ports;
    uint64_t cycle = 0, quiet = 0;
    uint64_t gap_threshold = 0, stall_threshold = 0, idle_cycles = 100;
    uint64_t period_ps = 4000;
#ifdef APIARY_TRACE
    std::unique_ptr<VerilatedVcdC> vcd;
#endif
    uint64_t trace_start = 0, trace_end = 0;
    bool tracing = false;
    std::vector<int> took;
    std::vector<uint32_t> scratch;

    void dump(uint64_t time_ps) {
#ifdef APIARY_TRACE
        if (tracing && cycle >= trace_start && cycle <= trace_end) vcd->dump(time_ps);
#endif
    }

    bool idle() const {
        if (quiet < idle_cycles) return false;
        for (const Port& p : ports)
            if (!p.queue.empty() || p.busy) return false;
        return true;
    }

    void step() {
        const int nb = g::kBytes;
        // Drive this cycle (clock low).
        for (int i = 0; i < (int)ports.size(); i++) {
            Port& p = ports[i];
            uint32_t r = p.rx_rng.next();
            uint32_t q = p.tx_rng.next();
            if (!p.offering) {
                if (!p.busy && !p.queue.empty()) {
                    p.frame = std::move(p.queue.front());
                    p.queue.pop_front();
                    p.busy = true;
                    p.word = 0;
                    p.words = p.frame.empty() ? 1 : (p.frame.size() + nb - 1) / nb;
                }
                if (p.busy && !(r < gap_threshold)) {
                    p.offering = true;
                    std::fill(p.payload.begin(), p.payload.end(), 0);
                    size_t off = p.word * nb;
                    size_t n = std::min<size_t>(nb, p.frame.size() - std::min(off, p.frame.size()));
                    for (size_t b = 0; b < n; b++)
                        p.payload[b / 4] |= uint32_t(p.frame[off + b]) << (8 * (b % 4));
                    for (size_t b = 0; b < (size_t)nb; b++)       // keep: n valid bytes
                        set_bits(p.payload, nb * 8 + (int)b, b < n, 1);
                    set_bits(p.payload, nb * 9, p.word + 1 == p.words, 1);   // last
                    set_bits(p.payload, nb * 9 + 1, 0, 1);                   // error
                    g::set_rx(model, i, 1, p.payload.data());
                } else {
                    g::set_rx(model, i, 0, p.payload.data());
                }
            }
            p.ready = !(q < stall_threshold);
            g::set_tx_ready(model, i, p.ready);
        }
        g::set_clk(model, 0);
        g::eval(model);
        dump(cycle * period_ps);
        // Sample what moves on this edge.
        bool active = false;
        took.assign(ports.size(), 0);
        std::vector<uint32_t>& w = scratch;
        for (int i = 0; i < (int)ports.size(); i++) {
            Port& p = ports[i];
            took[i] = p.offering && g::rx_ready(model, i);
            if (took[i]) active = true;     // quiet counts from the last word in or out
            if (g::tx_valid(model, i)) {
                active = true;
                if (p.ready) {
                    std::fill(w.begin(), w.end(), 0);
                    g::tx_payload(model, i, w.data());
                    uint32_t n = 0;                 // keep is contiguous from byte 0
                    for (int b = 0; b < nb; b++)
                        if (get_bits(w, nb * 8 + b, 1)) n = b + 1;
                    uint32_t last = get_bits(w, nb * 9, 1);
                    if (p.out.empty()) p.out_first = cycle;
                    for (uint32_t b = 0; b < n; b++)
                        p.out.push_back(uint8_t(w[b / 4] >> (8 * (b % 4))));
                    if (last) {
                        uint32_t len = (uint32_t)p.out.size();
                        p.received.push_back(Stamped{std::move(p.out), p.out_first, cycle, len});
                        p.out.clear();
                    }
                }
            }
        }
        // The rising edge.
        g::set_clk(model, 1);
        g::eval(model);
        dump(cycle * period_ps + period_ps / 2);
        for (int i = 0; i < (int)ports.size(); i++) {
            Port& p = ports[i];
            if (took[i]) {
                if (p.word == 0) p.first = cycle;
                p.word++;
                p.offering = false;
                if (p.word == p.words) {
                    p.sent.push_back(
                        Stamped{std::vector<uint8_t>(), p.first, cycle, (uint32_t)p.frame.size()});
                    p.busy = false;
                }
            }
        }
        quiet = active ? 0 : quiet + 1;
        cycle++;
    }
};

extern "C" {

ApiarySim* apiary_new(uint32_t seed, uint64_t gap_threshold, uint64_t stall_threshold,
                      uint64_t idle_cycles, uint64_t period_ps) {
    ApiarySim* s = new ApiarySim;
    s->ctx.reset(new VerilatedContext);
    s->ctx->randReset(0);
    s->model = g::create(s->ctx.get());
    s->gap_threshold = gap_threshold;
    s->stall_threshold = stall_threshold;
    s->idle_cycles = idle_cycles;
    s->period_ps = period_ps ? period_ps : 2;
    s->ports.resize(g::kPorts);
    s->scratch.assign(g::kPayloadWords + 2, 0);
    for (int i = 0; i < g::kPorts; i++) {
        s->ports[i].rx_rng.state = seed_state(seed, 2 * i);
        s->ports[i].tx_rng.state = seed_state(seed, 2 * i + 1);
        s->ports[i].payload.assign(g::kPayloadWords + 1, 0);
        g::set_rx(s->model, i, 0, s->ports[i].payload.data());
        g::set_tx_ready(s->model, i, 0);
    }
    g::set_clk(s->model, 0);
    g::eval(s->model);
    return s;
}

void apiary_free(ApiarySim* s) {
    if (!s) return;
#ifdef APIARY_TRACE
    if (s->vcd) s->vcd->close();
#endif
    g::final(s->model);
    g::destroy(s->model);
    delete s;
}

int apiary_ports() { return g::kPorts; }
int apiary_bytes() { return g::kBytes; }
int apiary_counters_count() { return g::kCounters; }
int apiary_has_trace() {
#ifdef APIARY_TRACE
    return 1;
#else
    return 0;
#endif
}

// Open a VCD file recording cycles start..end (inclusive). Returns 0 on success.
int apiary_trace(ApiarySim* s, const char* path, uint64_t start, uint64_t end) {
#ifdef APIARY_TRACE
    s->ctx->traceEverOn(true);
    s->vcd.reset(new VerilatedVcdC);
    g::trace(s->model, s->vcd.get());
    s->vcd->open(path);
    s->trace_start = start;
    s->trace_end = end;
    s->tracing = true;
    return 0;
#else
    (void)s; (void)path; (void)start; (void)end;
    return -1;
#endif
}

// Queue n frames for port, their bytes concatenated in data, their lengths in lens.
void apiary_push(ApiarySim* s, int port, const uint8_t* data, const uint32_t* lens, int n) {
    Port& p = s->ports[port];
    for (int i = 0; i < n; i++) {
        p.queue.emplace_back(data, data + lens[i]);
        data += lens[i];
    }
}

// Run exactly `cycles` cycles, or (until_idle) until idle, at most `cycles`. Returns cycles run.
uint64_t apiary_run(ApiarySim* s, uint64_t cycles, int until_idle) {
    uint64_t start = s->cycle;
    if (until_idle && s->idle()) return 0;
    while (s->cycle - start < cycles) {
        s->step();
        if (until_idle && s->idle()) break;
    }
    return s->cycle - start;
}

uint64_t apiary_cycle(ApiarySim* s) { return s->cycle; }
int apiary_idle(ApiarySim* s) { return s->idle(); }

// How many frames (and bytes) wait in port's received (which=0) or sent (which=1) list.
uint64_t apiary_count(ApiarySim* s, int port, int which, uint64_t* bytes) {
    std::deque<Stamped>& q = which ? s->ports[port].sent : s->ports[port].received;
    uint64_t total = 0;
    for (const Stamped& f : q) total += f.data.size();
    *bytes = total;
    return q.size();
}

// Move every frame of that list out: bytes concatenated (sent frames: none), lengths, stamps.
void apiary_take(ApiarySim* s, int port, int which, uint8_t* data, uint32_t* lens,
                 uint64_t* first, uint64_t* last) {
    std::deque<Stamped>& q = which ? s->ports[port].sent : s->ports[port].received;
    size_t i = 0;
    for (const Stamped& f : q) {
        if (!which) {
            std::memcpy(data, f.data.data(), f.data.size());
            data += f.data.size();
        }
        lens[i] = f.len;
        first[i] = f.first;
        last[i] = f.last;
        i++;
    }
    q.clear();
}

void apiary_read_counters(ApiarySim* s, uint64_t* out) {
    for (int i = 0; i < g::kCounters; i++) out[i] = g::counter(s->model, i);
}

}  // extern "C"
