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
// since the last change (the regret: expected saving per call x calls) reaches what a change costs;
// this is the rent-or-buy rule, which never pays more than twice the best schedule in hindsight.
// The cost is known before any change: every host packs its first slices at its first call of each
// layer, so those calls' whole time is a change's cost (a prompt's compute in them only makes it
// dearer: the gate errs on the side of fewer changes). Each change is measured too (per layer, the
// first call at the new slices over its expected time, and at least a floor the caller derives from
// this host's own repack), and the dearest cost seen is kept. The first change (after the
// calibration calls at equal slices, which were not chosen from any measurement) is taken at once.
// In make bench, a change measured on a prompt's calls alone looked 22 ms dear; the next cost 1.2-6 s
// on a worker capped at 40% of a core.
//
// Decode and prefill calls have a split each (a worker throttled under sustained load, as a CPU
// quota does, keeps its speed in short decode calls and loses it in long prefill ones): the regret
// and the changes being measured are kept per call size, the price is shared (a repack costs the
// same whichever calls asked for the new slice). A change being measured holds back further changes
// of its own split only: its measurement ends with calls of its size, which may not come for long.
#pragma once

#include "coordinator/balance/worker_overhead.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <set>

namespace moezip {

class SliceChangeGate {
public:
    /// At a slice check of the split of `size` calls: its current and the proposed split's
    /// expected ms per call over the recent calls of that size, and those calls since the previous
    /// check. Adds the saving to that split's regret; true when the proposed split is to be taken now
    /// (then changed(size) must follow). At the calibration check (`calibration`: the first, after
    /// the calibration calls) a change is taken at once unless the split was chosen (mark_chosen):
    /// equal slices by default are no measure; a split from the hosts' cores is a guess, judged as any
    /// other (make bench: a calibration that measured a 40%-capped worker while it packed its slices
    /// within that same quota moved the split from the cores, 0.29 of n_ff, to 0.08 for the whole run).
    bool take(CallSize size, double current_ms_per_call, double proposed_ms_per_call, uint64_t calls, bool calibration);
    /// The split of `size` calls was chosen before any call measured it (ShardHandler's first split of
    /// prefill calls, from the cores each host states): the calibration does not replace it at once.
    void mark_chosen(CallSize size) { chosen_[(int) size] = true; }
    /// True once the split of `size` calls was chosen (mark_chosen) or changed (changed).
    bool chosen(CallSize size) const { return chosen_[(int) size]; }
    /// The split of `size` calls changed: their next call of each layer pays the repack (observe_call).
    void changed(CallSize size);
    /// Whether a probe (a host left without a slice given one block to be measured again: a change
    /// of the split, with its repacks, that no saving pays for) may be taken `ms_since_change` after
    /// the split last changed: once that is kProbeCostRatio times a change's price, so probes'
    /// repacks take at most about a tenth of the time. Unpriced (before the first packs ended): yes.
    /// Without it a run flipped a worker's decode slice off and on every 192 calls (paid, probe,
    /// paid, ...), a repack each time on both sides.
    bool probe_affordable(double ms_since_change) const { return cost_ms_ < 0 || ms_since_change >= kProbeCostRatio * cost_ms_; }
    static constexpr double kProbeCostRatio = 10;
    /// A call of layer `il` and `size` just ended: its wall time, the split's expected time for it,
    /// and the least its repacks can have cost (repack_floor_ms), ms. The first call of each layer of
    /// the run counts whole (the first packs), whatever its size; after a change of the split of
    /// `size` calls, max(call - expected, floor); a layer seen again ends that measurement.
    void observe_call(CallSize size, int il, double call_ms, double expected_ms, double repack_floor_ms);
    /// The dearest change measured (the first packs included), ms; negative before one was.
    double change_cost_ms() const { return cost_ms_; }
    /// {"slice_change_cost_ms" (null before one was measured), "slice_changes_declined" (checks that
    /// proposed a better split whose saving had not yet paid for a change), "regret_ms" (both
    /// splits'), "regret_ms_decode", "regret_ms_prefill"}.
    nlohmann::json to_json() const;

private:
    double regret_ms_[2] = {0, 0};  // by CallSize
    bool chosen_[2] = {false, false};  // by CallSize: mark_chosen() or changed()
    double cost_ms_ = -1;        // the dearest change measured
    bool first_packs_ = true;    // the run's first call of each layer is still being measured
    double first_ms_ = 0;
    std::set<int> first_seen_;
    struct Measuring {           // a change of one split being measured
        bool on = false;
        double ms = 0;           // excess of the layers' first calls so far
        std::set<int> seen;      // layers seen since the change
    };
    Measuring measuring_[2];     // by CallSize
    uint64_t declined_ = 0;
};

} // namespace moezip
