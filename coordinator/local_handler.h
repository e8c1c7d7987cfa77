// moezip: mode "local" — the preload computes every region itself, on this host, with the
// engine's kernels (MoeExecutor) and the engine's slot order. It proves the interception and the
// bit-identity argument without any network.
#pragma once

#include "coordinator/moe_exec.h"
#include "coordinator/region_handler.h"

namespace moezip {

class LocalHandler : public RegionHandler {
public:
    LocalHandler(const GgmlApi & api, int n_threads) : exec_(api, n_threads) {}
    Status compute(const MoeRegion & r, LayerCounters & c) override;
    void set_threads(int n_threads) override { exec_.set_threads(n_threads); }
    MoeExecutor & executor() { return exec_; }

private:
    /// The region's own node memory for the executor, when every node is dense f32 of the expected
    /// shape and ffn_moe_out does not overlap the slots except at the same address.
    bool engine_buffers(const MoeRegion & r, MoeBuffers & b, float *& slots) const;
    MoeExecutor exec_;
    std::vector<int32_t> ids_;
    std::vector<float> weights_;
    std::vector<float> slots_;  // [n_embd, n_used, n_tokens]
};

} // namespace moezip
