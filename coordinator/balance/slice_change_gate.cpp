#include "coordinator/balance/slice_change_gate.h"

#include <algorithm>

namespace moezip {

bool SliceChangeGate::take(CallSize size, double current_ms_per_call, double proposed_ms_per_call, uint64_t calls, bool calibration) {
    if (calibration && !chosen_[(int) size]) return true;  // equal slices by default: no measure chose them
    double & regret = regret_ms_[(int) size];
    regret += std::max(0.0, current_ms_per_call - proposed_ms_per_call) * (double) calls;
    // while a change of this split is being measured its price is not known yet: the cost may rise.
    // A change of the other split does not hold this one: its measurement ends only with calls of
    // its size, and a prompt's change at its end was measured through a whole decode (seen:
    // 6000 decode calls, regret 31x the price, every decode change declined)
    if (cost_ms_ >= 0 && regret >= cost_ms_ && !measuring_[(int) size].on) return true;
    ++declined_;
    return false;
}

void SliceChangeGate::changed(CallSize size) {
    chosen_[(int) size] = true;
    regret_ms_[(int) size] = 0;
    measuring_[(int) size] = Measuring{true, 0, {}};
}

void SliceChangeGate::observe_call(CallSize size, int il, double call_ms, double expected_ms, double repack_floor_ms) {
    if (first_packs_) {
        // every host packs its first slices at its first call of each layer: that call's whole time
        // (a repack and, if it is a prompt's, its compute: the estimate errs on the dear side)
        if (first_seen_.insert(il).second) first_ms_ += std::max(0.0, call_ms);
        else { first_packs_ = false; cost_ms_ = std::max(cost_ms_, first_ms_); }
    }
    Measuring & m = measuring_[(int) size];
    if (!m.on) return;
    if (!m.seen.insert(il).second) {  // every layer has run at the new slices
        cost_ms_ = std::max(cost_ms_, m.ms);  // the dearest change seen: on the safe side
        m.on = false;
        return;
    }
    m.ms += std::max({0.0, call_ms - expected_ms, repack_floor_ms});
}

nlohmann::json SliceChangeGate::to_json() const {
    return {{"slice_change_cost_ms", cost_ms_ < 0 ? nlohmann::json(nullptr) : nlohmann::json(cost_ms_)},
            {"slice_changes_declined", declined_},
            {"regret_ms", regret_ms_[0] + regret_ms_[1]},
            {"regret_ms_decode", regret_ms_[0]},
            {"regret_ms_prefill", regret_ms_[1]}};
}

} // namespace moezip
