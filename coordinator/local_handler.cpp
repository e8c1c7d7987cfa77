#include "coordinator/local_handler.h"

#include <chrono>

namespace moezip {

namespace {

bool dense_f32(const ggml_tensor * t, int64_t ne0, int64_t ne1, int64_t ne2) {
    return t != nullptr && t->data != nullptr && t->type == GGML_TYPE_F32 && t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2 &&
           t->nb[0] == sizeof(float) && t->nb[1] == ne0 * sizeof(float) && t->nb[2] == ne0 * ne1 * sizeof(float);
}

bool overlap(const void * a, size_t na, const void * b, size_t nb) {
    const char * pa = static_cast<const char *>(a), * pb = static_cast<const char *>(b);
    return pa < pb + nb && pb < pa + na;
}

} // namespace

// The region is computed in the memory the engine's allocator gave its own nodes: no scratch of
// ours is touched (first-touch of new memory is slow on some VMs: ~125 MB/s measured here), the
// engine's buffers are already warm, and the process needs no extra memory. This is safe because
// the executor runs the engine's ops in the engine's order on the same tensors.
bool LocalHandler::engine_buffers(const MoeRegion & r, MoeBuffers & b, float *& slots) const {
    const int64_t n = r.n_tokens, k = r.n_used, ff = r.n_ff, E = r.n_embd;
    if (!dense_f32(r.up, ff, k, n) || !dense_f32(r.gate, ff, k, n) || !dense_f32(r.act, ff, k, n) || !dense_f32(r.down, E, k, n) ||
        !dense_f32(r.weighted, E, k, n))
        return false;
    const size_t slots_bytes = (size_t) (E * k * n) * sizeof(float), out_bytes = (size_t) (E * n) * sizeof(float);
    // moe_sum_slots may write out over slots only from the same address (a CONT in place, n_used = 1)
    if (r.out->data != r.weighted->data && overlap(r.out->data, out_bytes, r.weighted->data, slots_bytes)) return false;
    b.up = r.up->data; b.gate = r.gate->data; b.act = r.act->data; b.down = r.down->data;
    slots = static_cast<float *>(r.weighted->data);
    return true;
}

Status LocalHandler::compute(const MoeRegion & r, LayerCounters & c) {
    auto t0 = std::chrono::steady_clock::now();
    region_gather_routing(r, ids_, weights_);
    MoeBuffers bufs;
    float * slots = nullptr;
    const bool in_engine = engine_buffers(r, bufs, slots);
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
