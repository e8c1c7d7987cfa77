// moezip: mode "local" — the preload computes every region itself, on this host, with the
// engine's kernels (MoeExecutor) and the engine's slot order. It proves the interception and the
// bit-identity argument without any network.
#pragma once

#include "coordinator/compute/moe_exec.h"
#include "coordinator/modes/region_handler.h"

namespace moezip {

class LocalHandler : public RegionHandler {
public:
    LocalHandler(const GgmlApi & api, int n_threads) : exec_(api, n_threads) {}
    Status compute(const MoeRegion & r, LayerCounters & c) override;
    void set_threads(int n_threads) override { exec_.set_threads(n_threads); }
    MoeExecutor & executor() { return exec_; }

private:
    MoeExecutor exec_;
    std::vector<int32_t> ids_;
    std::vector<float> weights_;
    std::vector<float> slots_;  // [n_embd, n_used, n_tokens]
};

} // namespace moezip
