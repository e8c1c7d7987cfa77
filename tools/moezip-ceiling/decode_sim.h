// moezip-ceiling: a decode step of an MoE model simulated with spins, one node or a host and one
// worker, to measure what a dispatch of expert slots can reach on this machine.
//
// Why: the replicas target (docs/performance.md) is a fraction of the Amdahl bound 1 / ((1 - p) + p / 2), which
// counts no cost for crossing to the worker. What a round trip costs here (the wake-ups of a
// paravirtualized VM, ZeroMQ's I/O threads, TCP over loopback) is measured by doing what a decode call
// does with nothing of moezip in it: the host sends the hidden state, computes its share of the
// slots, takes the worker's per-slot outputs; the worker computes the rest. The best step over host
// shares is the ceiling a real run can be held to (docs/history/bench-runs.md, "What a dispatch reaches here").
#pragma once

#include "sim_link.h"

#include <memory>
#include <string>
#include <vector>

namespace moezip_ceiling {

/// One decode step's shape and costs. Times in ms; the MoE layers' non-MoE work (attention, norms,
/// the output head) is split evenly into n_layers + 1 pauses: one before each layer's MoE call and
/// one after the last (the head). The pause before a call is what makes its round trip cost more
/// than a back-to-back one (the other side's threads have gone to sleep).
struct StepShape {
    int    n_layers     = 4;     ///< MoE layers per step
    int    n_used       = 8;     ///< slots per row (n_expert_used, top-k)
    int    n_embd       = 2048;  ///< hidden size: a request carries [n_embd] f32, a reply [n_embd, worker slots] f32
    double slot_ms      = 0.19;  ///< one slot's compute on either host (ms)
    double non_moe_ms   = 3.1;   ///< the rest of a step (ms)
    double moe_ms() const { return n_layers * n_used * slot_ms; }
    double moe_share() const { return moe_ms() / (moe_ms() + non_moe_ms); }
};

/// One way to run a step: the host computes host_slots of n_used (a fraction models a finer split
/// than whole slots), the worker the rest; or, with one_node, the host computes every slot and sends
/// nothing (the reference).
struct Split {
    double host_slots = 0;
    Wait   wait       = Wait::block;
    bool   one_node   = false;
};

/// The host side of the simulation over one transport's link.
class HostSim {
  public:
    HostSim(const StepShape & shape, std::unique_ptr<HostLink> link);

    /// One decode step with this split; returns its wall time (ms).
    double step(const Split & split);
    /// p50 of n round trips of a 16-byte payload back to back, the worker computing nothing (ms):
    /// the RTT0 of tools/bench/floor.js.
    double rtt16_ms(int n);
    /// Tells the worker to exit.
    void stop_worker();

  private:
    void layer_call(const Split & split);

    StepShape shape_;
    std::unique_ptr<HostLink> link_;
    std::vector<char> hidden_;  ///< a decode call's request: [n_embd] f32 hidden state, [n_used] i32 ids and f32 weights
};

/// The splits a run tries: one node first, then from n_used/2 - 2 to n_used/2 + 2 slots in quarter
/// slots (clamped to [1, n_used - 1]), each with both waits.
std::vector<Split> splits_to_try(int n_used);

/// Bytes a ms that no transport here moves faster (10 GB/s: loopback TCP and ZeroMQ copy each byte
/// more than once at a few GB/s): the floor's price of a transfer.
constexpr double kFloorBytesPerMs = 10e6;

/// The least a run takes, ms: every split of splits_to_try(n_used), rounds + 3 times, on each of
/// n_transports, each step at least its compute (the rest of the step plus, per layer, the slower
/// side's slots; one node: all of them) and its bytes at kFloorBytesPerMs. Wake-ups come on top.
double run_floor_ms(const StepShape & shape, int rounds, size_t n_transports);

/// The median of v (the mean of the two middle values for an even count); 0 for an empty vector.
double median(std::vector<double> v);

} // namespace moezip_ceiling
