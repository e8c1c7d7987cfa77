#include "coordinator/balance/slice_change_gate.h"

#include <algorithm>

namespace moezip {

bool SliceChangeGate::take(double current_ms_per_call, double proposed_ms_per_call, uint64_t calls) {
    const double saving = std::max(0.0, current_ms_per_call - proposed_ms_per_call) * (double) calls;
    if (cost_ms_ < 0) return !measuring_;  // the first change: taken, and measured
    regret_ms_ += saving;
    if (regret_ms_ >= cost_ms_ && !measuring_) return true;
    ++declined_;
    return false;
}

void SliceChangeGate::changed() {
    regret_ms_ = 0;
    measuring_ = true;
    measuring_ms_ = 0;
    seen_.clear();
}

void SliceChangeGate::observe_call(int il, double excess_ms, double repack_floor_ms) {
    if (!measuring_) return;
    if (!seen_.insert(il).second) {  // every layer has run at the new slices
        cost_ms_ = measuring_ms_;
        measuring_ = false;
        return;
    }
    measuring_ms_ += std::max({0.0, excess_ms, repack_floor_ms});
}

nlohmann::json SliceChangeGate::to_json() const {
    return {{"slice_change_cost_ms", cost_ms_ < 0 ? nlohmann::json(nullptr) : nlohmann::json(cost_ms_)},
            {"slice_changes_declined", declined_},
            {"regret_ms", regret_ms_}};
}

} // namespace moezip
