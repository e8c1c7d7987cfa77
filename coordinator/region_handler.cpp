#include "coordinator/region_handler.h"

namespace moezip {

void region_gather_routing(const MoeRegion & r, std::vector<int32_t> & ids, std::vector<float> & weights) {
    const int64_t k = r.n_used, n = r.n_tokens;
    ids.resize(k * n);
    weights.resize(k * n);
    const char * ib = static_cast<const char *>(r.ids->data);
    const char * wb = static_cast<const char *>(r.weights->data);
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t s = 0; s < k; ++s) {
            ids[t * k + s] = *reinterpret_cast<const int32_t *>(ib + s * r.ids->nb[0] + t * r.ids->nb[1]);
            // weights: [1, n_used, n_tokens]
            weights[t * k + s] = *reinterpret_cast<const float *>(wb + s * r.weights->nb[1] + t * r.weights->nb[2]);
        }
    }
}

ExpertWeights region_expert_weights(const MoeRegion & r) {
    ExpertWeights w;
    w.gate_exps = r.gate_exps;
    w.up_exps = r.up_exps;
    w.down_exps = r.down_exps;
    w.glu_op = r.glu_op;
    return w;
}

} // namespace moezip
