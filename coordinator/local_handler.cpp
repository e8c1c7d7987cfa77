#include "coordinator/local_handler.h"

#include <chrono>

namespace moezip {

Status LocalHandler::compute(const MoeRegion & r, LayerCounters & c) {
    auto t0 = std::chrono::steady_clock::now();
    region_gather_routing(r, ids_, weights_);
    slots_.resize((size_t) (r.n_embd * r.n_used * r.n_tokens));
    SlotBatch b;
    b.n_rows = r.n_tokens;
    b.k = r.n_used;
    b.hidden = region_hidden_row(r, 0);
    b.hidden_stride = r.hidden->nb[2];
    b.ids = ids_.data();
    b.weights = weights_.data();
    Status st = exec_.compute_slots(region_expert_weights(r), b, slots_.data());
    if (!st) return st;
    moe_sum_slots(slots_.data(), r.n_embd, r.n_used, r.n_tokens, static_cast<float *>(r.out->data));
    c.local_rows += r.n_tokens;
    c.local_slots += r.n_tokens * r.n_used;
    c.ms_local += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return Status::ok();
}

} // namespace moezip
