#include "coordinator/modes/local_handler.h"

#include <chrono>

namespace moezip {

Status LocalHandler::compute(const MoeRegion & r, LayerCounters & c) {
    auto t0 = std::chrono::steady_clock::now();
    region_gather_routing(r, ids_, weights_);
    MoeBuffers bufs;
    float * slots = nullptr;
    // The region is computed in its own node memory (region_engine_buffers); ffn_moe_out is written
    // last, so it may share memory with the intermediates as the engine's allocator allows.
    bool in_engine = region_engine_buffers(r, bufs, /*out_may_overlap =*/ true);
    if (in_engine) {
        const size_t slots_bytes = (size_t) (r.n_embd * r.n_used * r.n_tokens) * sizeof(float);
        const size_t out_bytes = (size_t) (r.n_embd * r.n_tokens) * sizeof(float);
        // moe_sum_slots may write out over the slots only from the same address (a CONT in place, n_used = 1)
        in_engine = r.out->data == r.weighted->data || !memory_overlaps(r.out->data, out_bytes, r.weighted->data, slots_bytes);
        slots = static_cast<float *>(r.weighted->data);
    }
    if (!in_engine) {
        slots_.resize((size_t) (r.n_embd * r.n_used * r.n_tokens));
        slots = slots_.data();
    }
    SlotBatch b;
    b.n_rows = r.n_tokens;
    b.k = r.n_used;
    b.hidden = region_hidden_row(r, 0);
    b.hidden_stride = r.hidden->nb[2];
    b.ids = ids_.data();
    b.weights = weights_.data();
    Status st = exec_.compute_slots(region_expert_weights(r), b, slots, in_engine ? &bufs : nullptr);
    if (!st) return st;
    moe_sum_slots(slots, r.n_embd, r.n_used, r.n_tokens, static_cast<float *>(r.out->data));
    c.local_rows += r.n_tokens;
    c.local_slots += r.n_tokens * r.n_used;
    c.ms_local += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return Status::ok();
}

} // namespace moezip
