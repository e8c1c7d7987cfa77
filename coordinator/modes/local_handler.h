// moezip: mode "local" — the preload computes every region itself, on this host, with the
// engine's kernels (MoeExecutor) and the engine's slot order. It proves the interception and the
// bit-identity argument without any network. With experts.copy_local = true (off by default in this
// mode) every expert is computed from a copy in anonymous memory with huge pages
// (coordinator/memory/own_expert_copies.h): one node with the memory kind an experts-mode
// coordinator and its workers compute from, the reference that tells what distributing gains apart
// from what the memory kind gains (docs/benchmarking.md, variant local_copy).
#pragma once

#include "coordinator/compute/moe_exec.h"
#include "coordinator/config/config.h"
#include "coordinator/memory/own_expert_copies.h"
#include "coordinator/modes/region_handler.h"

namespace moezip {

class LocalHandler : public RegionHandler {
public:
    /// copy_local: compute from copies of the experts in anonymous memory (experts.copy_local).
    LocalHandler(const GgmlApi & api, int n_threads, bool copy_local);
    Status compute(const MoeRegion & r, LayerCounters & c) override;
    void set_threads(int n_threads) override { exec_.set_threads(n_threads); }
    /// The copies: copy_local and the own_copy_* keys of ExpertsHandler's memory section
    /// (docs/report.md), own_copy_slots the slots computed from them.
    nlohmann::json memory_json() const override;
    void forget_plans(const std::vector<uint64_t> & plans) override;
    MoeExecutor & executor() { return exec_; }

private:
    MoeExecutor exec_;
    OwnExpertCopies copies_;
    bool copy_local_;
    uint64_t slots_from_copy_ = 0;
    std::vector<bool> all_;     // [n_expert]: every expert is this host's
    std::vector<int32_t> ids_;
    std::vector<float> weights_;
    std::vector<float> slots_;  // [n_embd, n_used, n_tokens]
};

} // namespace moezip
