// moezip: balanced dispatch of replicated experts (experts.replicas, docs/placement.md).
//
// When an expert is owned by several hosts, each call decides which owner computes that expert's
// slots. The decision only moves work: the exact combine adds every slot's output in the engine's
// slot order, and a slot's output is the same bits on every host (same kernels, per-slot
// arithmetic: docs/internals/numerics.md), so the result does not depend on it.
//
// The model of a host: expected time of a part = a worker's overhead (transfer and ZeroMQ, the round
// trip minus the worker's own service time: a fixed cost per call, plus a cost per slot in large
// calls, where the reply carries every slot's output; worker_overhead.h; 0 for this host)
// + ms_per_slot x slots, with
// ms_per_slot measured per call size (few rows: every slot reads its expert's weights; many rows:
// an expert's weights are read once for many slots) as a moving average of this host's own compute
// time and the workers' service times from the reply headers. Each call, experts with one usable
// owner are placed first; the replicated ones, largest first, go to the owner whose expected finish
// is earliest (longest-processing-time-first). A usable owner that got nothing for kProbeCalls
// calls is given the smallest replicated expert once, so a host that was slow for a while is
// measured again. Hosts: 0 = this host, 1 + w = worker w.
#pragma once

#include "coordinator/balance/host_instances.h"
#include "coordinator/balance/worker_overhead.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace moezip {

/// Calls a usable owner may go without work before it is given some to be measured again.
constexpr uint64_t kProbeCalls = 32;

/// One expert's slots in a call and the hosts that may compute them (usable owners, host indices).
struct ExpertGroup {
    int expert = 0;
    int64_t slots = 0;
    std::vector<int> hosts;  ///< at least one; a single host is not a decision
};

/// A host's measured speed (see the file comment); 0 = not measured yet.
struct HostSpeed {
    double ms_per_slot[2] = {0, 0};  ///< by CallSize
    uint64_t samples[2] = {0, 0};    ///< compute measurements by CallSize
    WorkerOverhead overhead;         ///< workers: round trip - service (payload: slots); this host: 0
};

class ExpertBalancer {
public:
    /// n_hosts: this host + the workers.
    explicit ExpertBalancer(size_t n_hosts = 1);

    /// The host that computes each group (same order as `groups`), for a call of `size`.
    std::vector<int> assign(const std::vector<ExpertGroup> & groups, CallSize size);
    /// Host h computed `slots` slots in `ms` (this host: its compute; a worker: its service time).
    void observe_compute(size_t h, CallSize size, int64_t slots, double ms);
    /// Worker host h's round trip minus its service time (overhead_sample(), worker_overhead.h; the
    /// payload is the slots of the part): an observed sample is the overhead, an upper bound only
    /// lowers an estimate made of observed ones.
    void observe_overhead(size_t h, const OverheadSample & s) { speed_[h].overhead.observe(s); }
    /// Host h's next measurements come from worker process `instance` (its reply header's; 0:
    /// unknown). True when h's estimates came from another process: its speed is forgotten
    /// (host_instances.h); the slots it was given stay counted. Call before observing that reply.
    bool bind_instance(size_t h, uint64_t instance) {
        if (!instances_.rebind(h, instance)) return false;
        speed_[h] = HostSpeed();
        return true;
    }
    /// Slots of a failed worker's part computed by this host because it owns them too.
    void count_covered(size_t h, int64_t slots) { covered_[h] += (uint64_t) slots; }
    const HostSpeed & speed(size_t h) const { return speed_[h]; }
    /// Expected time of `slots` more slots on host h, ms: their compute and, in large calls, their
    /// transfer; plus the fixed cost of a call when the host has no work yet (`first`).
    double expected_ms(size_t h, CallSize size, int64_t slots, bool first) const;
    /// The report's `balance` section: per host (named by `names`, same indices) the slots it was
    /// given, how many of them were replicated decisions, its speed estimates, probes, covered slots;
    /// and the calls with decisions and their mean expected finish (ms) of the busiest host.
    nlohmann::json to_json(const std::vector<std::string> & names) const;

private:
    double per_slot(size_t h, CallSize size) const;

    std::vector<HostSpeed> speed_;
    HostInstances instances_;
    std::vector<uint64_t> slots_, replicated_slots_, probes_, covered_, idle_calls_;
    uint64_t calls_ = 0, balanced_calls_ = 0, groups_decided_ = 0;
    double makespan_ms_sum_ = 0;
};

/// A one-row call (decode) with exact combine, after ExpertBalancer::assign: when this host and one
/// worker share its k slots and the worker has m >= 2 of them, gives the worker the first m slots in
/// the engine's slot order (ids[0..k), the router's top-k) and this host the rest, if every expert
/// involved lets that host compute it (`groups`: its usable owners). The counts per host stay, so the
/// balancer's expected times do too (one slot per expert in a one-row call); the worker's reply can
/// then be one partial sum, the first m adds of the engine's ADD chain, instead of m slot outputs
/// (moe_sum_slots_after_prefix, coordinator/compute/moe_exec.h). host_of: per expert, 0 = this host,
/// 1 + w = worker w; rewritten only when the whole prefix assignment is possible. True when the
/// worker's slots are such a prefix afterwards.
bool prefer_slot_prefix(const int32_t * ids, int64_t k, const std::vector<ExpertGroup> & groups, std::vector<int> & host_of);

} // namespace moezip
