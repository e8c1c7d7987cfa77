// moezip: when a change of shard slices pays for itself (`local_share = "auto"` in shard mode).
//
// A new split of n_ff costs every host a repack of its slice at its next call of each layer (this
// host's packed down columns, coordinator/compute/down_slice.h; a worker's packed gate/up/down,
// tools/moezip-worker/model/worker_slices.h): on a3b-L4-q8_0 here about 150 ms a layer on each side,
// and 2.5x that on a worker capped at 40% of a core. A better split saves a little on every call
// after it. Measured in a make bench run: with a slice check every 64 calls, a check that saved 5%
// of a ~2 ms call changed the slices during decode and cost a 64-step decode about 1.2 s, a third
// of its speed (shard1_auto_slow 0.36x of one node).
//
// So a change is taken only once the time the current split has lost against the proposed one
// since the last change (the regret: expected saving per call x calls) reaches what the last change
// cost; this is the rent-or-buy rule, which never pays more than twice the best schedule in
// hindsight. The first change (after the calibration calls, at equal slices) is taken at once and
// its cost measured: per layer, the wall time of its first call at the new slices over the time
// the split predicted for it, and at least a floor the caller derives from this host's own repack
// in that call (ShardHandler: the workers repack too, at their speed, three matrices to this host's
// one). The first change's calls are often a prompt's, whose predicted time is too rough to see a
// repack in: measured in make bench, such a change looked 22 ms dear and the next one cost 1.2-2 s.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>

namespace moezip {

class SliceChangeGate {
public:
    /// At a slice check: the current and the proposed split's expected ms per call over the recent
    /// calls, and the calls since the previous check. Adds the saving to the regret; true when the
    /// proposed split is to be taken now (then changed() must follow).
    bool take(double current_ms_per_call, double proposed_ms_per_call, uint64_t calls);
    /// The slices were changed: the next call of each layer pays the repack (measured by observe_call).
    void changed();
    /// A call of layer `il` just ended: its wall time over the split's expected time, and the least
    /// its repacks can have cost (repack_floor_ms), ms. The first call of each layer after a change
    /// adds the larger of the two to that change's cost; a layer seen again ends the measurement.
    void observe_call(int il, double excess_ms, double repack_floor_ms);
    /// The cost of the last measured change, ms; negative before one was measured.
    double change_cost_ms() const { return cost_ms_; }
    /// {"slice_change_cost_ms" (null before one was measured), "slice_changes_declined" (checks that
    /// proposed a better split whose saving had not yet paid for a change), "regret_ms"}.
    nlohmann::json to_json() const;

private:
    double regret_ms_ = 0;
    double cost_ms_ = -1;        // measured cost of the last change
    double measuring_ms_ = 0;    // the change being measured: excess of the layers' first calls so far
    bool measuring_ = false;
    std::set<int> seen_;         // layers seen since the change being measured
    uint64_t declined_ = 0;
};

} // namespace moezip
