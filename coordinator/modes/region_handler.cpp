#include "coordinator/modes/region_handler.h"

#include "coordinator/wire/protocol.h"

#include <cstring>

namespace moezip {

void region_gather_routing(const MoeRegion & r, std::vector<int32_t> & ids, std::vector<float> & weights) {
    const int64_t k = r.n_used, n = r.n_tokens;
    ids.resize(k * n);
    weights.resize(k * n);
    const char * ib = static_cast<const char *>(r.ids->data);
    const char * wb = r.weights != nullptr ? static_cast<const char *>(r.weights->data) : nullptr;
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t s = 0; s < k; ++s) {
            ids[t * k + s] = *reinterpret_cast<const int32_t *>(ib + s * r.ids->nb[0] + t * r.ids->nb[1]);
            // weights: [1, n_used, n_tokens]; the split form without them computes its slots unweighted,
            // which x * 1.0f gives bit for bit (IEEE 754 multiplication by one is exact)
            weights[t * k + s] = wb == nullptr ? 1.0f : *reinterpret_cast<const float *>(wb + s * r.weights->nb[1] + t * r.weights->nb[2]);
        }
    }
}

namespace {

bool dense_f32(const ggml_tensor * t, int64_t ne0, int64_t ne1, int64_t ne2) {
    return t != nullptr && t->data != nullptr && t->type == GGML_TYPE_F32 && t->ne[0] == ne0 && t->ne[1] == ne1 &&
           t->ne[2] == ne2 && t->nb[0] == sizeof(float) && t->nb[1] == ne0 * sizeof(float) && t->nb[2] == ne0 * ne1 * sizeof(float);
}

} // namespace

bool memory_overlaps(const void * a, size_t na, const void * b, size_t nb) {
    const char * pa = static_cast<const char *>(a), * pb = static_cast<const char *>(b);
    return pa < pb + nb && pb < pa + na;
}

bool region_engine_buffers(const MoeRegion & r, MoeBuffers & b, bool out_may_overlap) {
    // only the plain form has exactly the four intermediates MoeBuffers describes; in the split form
    // ffn_moe_down is the output itself
    if (r.weight_before || r.up_b || r.gate_b || r.down_b || r.slot_out) return false;
    // the nodes' shapes have every routed slot (n_used_ids); any n_used <= n_used_ids of them fit
    const int64_t n = r.n_tokens, k = r.n_used_ids, ff = r.n_ff, E = r.n_embd;
    if (!dense_f32(r.up, ff, k, n) || !dense_f32(r.gate, ff, k, n) || !dense_f32(r.act, ff, k, n) || !dense_f32(r.down, E, k, n) ||
        !dense_f32(r.weighted, E, k, n) || r.out == nullptr || r.out->data == nullptr)
        return false;
    if (!out_may_overlap) {
        const size_t out_bytes = (size_t) (E * n) * sizeof(float);
        for (const ggml_tensor * t : {r.up, r.gate, r.act, r.down})
            if (memory_overlaps(r.out->data, out_bytes, t->data, (size_t) (t->ne[0] * k * n) * sizeof(float))) return false;
    }
    b.up = r.up->data; b.gate = r.gate->data; b.act = r.act->data; b.down = r.down->data;
    return true;
}

void region_write_slots(const MoeRegion & r, const float * slots) {
    memcpy(r.out->data, slots, (size_t) (r.n_embd * r.n_used * r.n_tokens) * sizeof(float));
}

ExpertWeights region_expert_weights(const MoeRegion & r) {
    ExpertWeights w;
    w.gate_exps = r.gate_exps;
    w.up_exps = r.up_exps;
    w.down_exps = r.down_exps;
    w.glu_op = r.glu_op;
    w.glu_alpha = r.glu_alpha;
    w.glu_limit = r.glu_limit;
    w.gate_b = r.gate_b;
    w.up_b = r.up_b;
    w.down_b = r.down_b;
    w.weight_before = r.weight_before;
    return w;
}

uint32_t region_ffn_flags(const MoeRegion & r) {
    return (r.weight_before ? kFfnWeightBefore : 0u) | (r.gate_b ? kFfnGateBias : 0u) | (r.up_b ? kFfnUpBias : 0u) |
           (r.down_b ? kFfnDownBias : 0u);
}

} // namespace moezip
