#include "coordinator/balance/slice_change_gate.h"

#include <algorithm>

namespace moezip {

bool SliceChangeGate::take(double current_ms_per_call, double proposed_ms_per_call, uint64_t calls) {
    if (changes_ == 0) return true;  // the calibration's change: the first slices were equal by default
    regret_ms_ += std::max(0.0, current_ms_per_call - proposed_ms_per_call) * (double) calls;
    if (cost_ms_ >= 0 && regret_ms_ >= cost_ms_ && !measuring_) return true;
    ++declined_;
    return false;
}

void SliceChangeGate::changed() {
    ++changes_;
    regret_ms_ = 0;
    measuring_ = true;
    measuring_ms_ = 0;
    seen_.clear();
}

void SliceChangeGate::observe_call(int il, double call_ms, double expected_ms, double repack_floor_ms) {
    if (first_packs_) {
        // every host packs its first slices at its first call of each layer: that call's whole time
        // (a repack and, if it is a prompt's, its compute: the estimate errs on the dear side)
        if (first_seen_.insert(il).second) first_ms_ += std::max(0.0, call_ms);
        else { first_packs_ = false; cost_ms_ = std::max(cost_ms_, first_ms_); }
    }
    if (!measuring_) return;
    if (!seen_.insert(il).second) {  // every layer has run at the new slices
        cost_ms_ = std::max(cost_ms_, measuring_ms_);  // the dearest change seen: on the safe side
        measuring_ = false;
        return;
    }
    measuring_ms_ += std::max({0.0, call_ms - expected_ms, repack_floor_ms});
}

nlohmann::json SliceChangeGate::to_json() const {
    return {{"slice_change_cost_ms", cost_ms_ < 0 ? nlohmann::json(nullptr) : nlohmann::json(cost_ms_)},
            {"slice_changes_declined", declined_},
            {"regret_ms", regret_ms_}};
}

} // namespace moezip
