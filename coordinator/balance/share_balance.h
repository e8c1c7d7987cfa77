// moezip: automatic shares for rows and shard modes (`local_share = "auto"`, docs/placement.md).
//
// Host h's expected time for u units of a call (rows; or, in shard mode, n_ff blocks for every row
// of the call) is overhead[h] + ms_per_unit[h] x scale x u (scale: 1 in rows mode, the call's
// rows in shard mode). ms_per_unit is a moving average of this host's own compute time and the
// workers' service times from the reply headers. A worker's overhead (its round trip minus its
// service time, worker_overhead.h) is a fixed cost per call plus, in large calls, a cost per row
// the request carries: its own rows in rows mode (so it grows with the share), every row of the
// call in shard mode (so it does not). Speeds and overheads are kept apart for decode and prefill
// calls (CallSize). The shares make every host's expected time equal (a host whose overhead alone
// exceeds that time gets nothing). Unmeasured hosts are assumed as fast as the measured ones, so
// the first calls split evenly; in prefill calls, when every host stated the cores it may use
// (set_cores: its threads under its CPU affinity and quota, coordinator/base/cpu_capacity.h), as fast
// per core instead, so a host capped at 40% of a core starts with its share of a prompt, not half.
// A host left without units is given one to be measured again: in
// rows mode after kShareProbeCalls calls (each call is split afresh), in shard mode after
// ShardHandler::kShardProbeAdjustments slice checks. Hosts: 0 = this host, 1 + w = worker w. Rows
// results do not depend on the split (docs/internals/numerics.md); shard results depend on the slice
// boundaries in the last bits, within the documented tolerance.
#pragma once

#include "coordinator/balance/host_instances.h"
#include "coordinator/balance/worker_overhead.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace moezip {

constexpr uint64_t kShareProbeCalls = 32;

/// What a request carries, for the overhead per row: the rows given to the worker (rows mode) or
/// every row of the call whatever the share (shard mode).
enum class SharePayload { units, call_rows };

/// Recent calls by size class (CallSize): how many and their rows, so that one choice of shard
/// slices can serve decode and prefill calls alike. age() halves the weight of the calls so far.
struct CallMix {
    double calls[2] = {0, 0};
    double rows[2] = {0, 0};
    void add(int64_t n_rows) {
        const int c = (int) call_size(n_rows);
        calls[c] += 1;
        rows[c] += (double) n_rows;
    }
    void age() {
        for (int c = 0; c < 2; ++c) { calls[c] /= 2; rows[c] /= 2; }
    }
};

/// Whole units per host (summing to `units`) nearest to `exact` (its floors, then the largest
/// remainders); negative entries count as 0.
std::vector<int64_t> round_to_units(const std::vector<double> & exact, int64_t units);

/// Moves one unit of `counts` (units per host) to host h from the host with the most, when that
/// host keeps at least one; false (nothing moved) otherwise. How an idle host is given work so
/// that it is measured (ShareBalancer::probe_idle, ShardHandler::seed_prefill_split).
bool give_unit_from_largest(std::vector<int64_t> & counts, size_t h);

class ShareBalancer {
public:
    explicit ShareBalancer(size_t n_hosts = 1, SharePayload payload = SharePayload::units);

    /// Units per host (they sum to `units`) for a call of `size` whose per-unit cost is multiplied
    /// by `scale`. Counts probes: a host left without units for kShareProbeCalls calls gets one.
    std::vector<int64_t> split(int64_t units, double scale, CallSize size);
    /// The units per host that make the expected finishes equal (no probes, nothing counted).
    std::vector<int64_t> solve(int64_t units, double scale, CallSize size) const;
    /// Whether any host has a compute measurement for calls of `size`.
    bool measured(CallSize size) const;
    /// Expected time of the calls of `mix` under `counts` (each measured size class at its mean
    /// rows), ms.
    double mix_ms(const std::vector<int64_t> & counts, const CallMix & mix) const;
    /// Among `current`, the equal-finish split of each size class in `mix`, and three blends of the
    /// two, the split with the least expected time over `mix`; `current` unless that saves >= 5%.
    /// A unit's cost is taken at scale = the call's rows (shard mode's units: n_ff blocks of every row).
    std::vector<int64_t> best_for_mix(int64_t units, const CallMix & mix, const std::vector<int64_t> & current) const;
    /// A host with no units in `counts` for `after` calls of this in a row gets one unit from the
    /// largest (counted as a probe), so it is measured again; while `allowed` is false (shard mode:
    /// SliceChangeGate::probe_affordable) its idle calls are still counted but nothing is given.
    /// Counted apart for the splits of decode and prefill calls (`size`), which shard mode keeps apart.
    void probe_idle(std::vector<int64_t> & counts, uint64_t after, CallSize size = CallSize::large, bool allowed = true);
    /// Host h may keep `cores` cores busy (0: unknown). Used only for prefill calls, and only while
    /// h is unmeasured in them and every host's cores are known (per_unit); a quota caps sustained
    /// work, while a decode call is a burst that runs at full speed within a period's budget.
    void set_cores(size_t h, double cores) { cores_[h] = cores > 0 ? cores : 0; }
    /// What set_cores said of host h (0: unknown).
    double cores(size_t h) const { return cores_[h]; }
    /// Whether every host stated its cores and they differ (by more than 5%): then the first prefill
    /// split is not an even one.
    bool cores_differ() const;
    /// Adds one call's units per host to the totals the report shows.
    void count(const std::vector<int64_t> & counts);
    /// Expected time of the slowest host (ms) for `counts` units each at `scale`, in a call of `size`.
    double makespan(const std::vector<int64_t> & counts, double scale, CallSize size) const;
    /// Host h computed `units` units (already multiplied by scale) in `ms`, in a call of `size`
    /// (a decode call reads every weight for one row; a prefill call reads it once for many rows).
    void observe(size_t h, CallSize size, double units, double ms);
    /// A worker's round trip minus service time (overhead_sample(), worker_overhead.h; payload: the
    /// rows of its request).
    void observe_overhead(size_t h, const OverheadSample & s) { overhead_[h].observe(s); }
    /// Host h's next measurements come from worker process `instance` (its reply header's; 0:
    /// unknown). True when h's estimates came from another process: its speeds, overheads and the
    /// cores that process stated are forgotten (host_instances.h); the units and probes it was given
    /// stay counted. Call before observe() and observe_overhead() of that reply.
    bool bind_instance(size_t h, uint64_t instance);
    /// Keeps the shares of call `call` in the history (the first 32 calls, then every 64th, at most
    /// 256). `call_size`: "decode" or "prefill" when the split serves only those calls (shard mode);
    /// `why`: what chose it (shard mode: "even" or "cores" for the first splits, then "calibration",
    /// "paid" (its saving paid for the repack, slice_change_gate.h) or "probe").
    void record(uint64_t call, const std::vector<int64_t> & counts, bool always = false, const char * call_size = nullptr,
                const char * why = nullptr);
    /// {"unit", "hosts": [{"host", "ms_per_unit_small", "ms_per_unit_large", "samples_small",
    /// "samples_large", "overhead_ms_per_call", "overhead_ms_per_row_large", "units", "probes", "cores" (null: unknown),
    /// "instance" (the worker process measured, hex; null: this host or none yet), "instances_replaced"}],
    /// "history": [{"call", "shares": [...], "call_size" (when the split serves only decode or prefill calls), "why"}]}.
    nlohmann::json to_json(const std::vector<std::string> & names, const std::string & unit) const;
    /// Host h's expected ms per unit (at scale 1) in calls of `size`: measured, or the measured
    /// hosts' mean, or 1.
    double per_unit(size_t h, CallSize size) const;

private:
    /// Host h's expected time as fixed + per_unit x u for u > 0 units, ms.
    void cost_terms(size_t h, double scale, CallSize size, double & fixed, double & per_unit_ms) const;

    SharePayload payload_;
    std::vector<std::array<double, 2>> ms_per_unit_;  // by CallSize
    std::vector<WorkerOverhead> overhead_;
    std::vector<std::array<uint64_t, 2>> samples_;    // by CallSize
    std::vector<double> cores_;                       // set_cores; 0 = unknown
    std::vector<uint64_t> units_, probes_;
    std::vector<std::array<uint64_t, 2>> idle_calls_;  // by CallSize
    HostInstances instances_;
    nlohmann::json history_ = nlohmann::json::array();
};

} // namespace moezip
