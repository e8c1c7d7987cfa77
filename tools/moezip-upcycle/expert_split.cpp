#include "tools/moezip-upcycle/expert_split.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

namespace moezip_upcycle {

bool expert_kind_from_name(const std::string & name, expert_kind & out) {
    if (name == "split")     { out = expert_kind::split;     return true; }
    if (name == "replicate") { out = expert_kind::replicate; return true; }
    if (name == "none")      { out = expert_kind::none;      return true; }
    return false;
}

const char * expert_kind_name(expert_kind kind) {
    switch (kind) {
        case expert_kind::split:     return "split";
        case expert_kind::replicate: return "replicate";
        case expert_kind::none:      return "none";
    }
    return "?";
}

bool split_kind_from_name(const std::string & name, split_kind & out) {
    if (name == "contiguous") { out = split_kind::contiguous; return true; }
    if (name == "interleave") { out = split_kind::interleave; return true; }
    if (name == "cluster")    { out = split_kind::cluster;    return true; }
    return false;
}

const char * split_kind_name(split_kind kind) {
    switch (kind) {
        case split_kind::contiguous: return "contiguous";
        case split_kind::interleave: return "interleave";
        case split_kind::cluster:    return "cluster";
    }
    return "?";
}

const char * router_kind_name(router_kind kind) {
    return kind == router_kind::zero ? "zero" : "gate_mean";
}

int64_t expert_n_ff(int64_t n_ff, int64_t n_expert) {
    return (n_ff + n_expert - 1) / n_expert;
}

// Units per expert: n_ff / n_expert, the first n_ff % n_expert experts one more.
static std::vector<int64_t> expert_sizes(int64_t n_ff, int64_t n_expert) {
    std::vector<int64_t> sizes((size_t) n_expert, n_ff / n_expert);
    for (int64_t e = 0; e < n_ff % n_expert; ++e) sizes[(size_t) e] += 1;
    return sizes;
}

static unit_assignment assignment_init(int64_t n_ff, int64_t n_expert) {
    unit_assignment a;
    a.n_expert = n_expert;
    a.n_ff_exp = expert_n_ff(n_ff, n_expert);
    a.units.assign((size_t) (a.n_ff_exp * n_expert), -1);
    return a;
}

// Fills the assignment from a per-unit expert index, units ascending inside each expert.
static void assignment_from_labels(unit_assignment & a, const std::vector<int64_t> & label) {
    std::vector<int64_t> fill((size_t) a.n_expert, 0);
    for (size_t i = 0; i < label.size(); ++i) {
        const int64_t e = label[i];
        a.units[(size_t) (e * a.n_ff_exp + fill[(size_t) e]++)] = (int64_t) i;
    }
}

static std::vector<float> unit_rows_normalized(const dense_ffn & ffn) {
    std::vector<float> feat(ffn.gate);
    for (int64_t i = 0; i < ffn.n_ff; ++i) {
        float * row = feat.data() + i * ffn.n_embd;
        double norm = 0.0;
        for (int64_t k = 0; k < ffn.n_embd; ++k) norm += (double) row[k] * row[k];
        const float inv = norm > 0.0 ? (float) (1.0 / std::sqrt(norm)) : 0.0f;
        for (int64_t k = 0; k < ffn.n_embd; ++k) row[k] *= inv;
    }
    return feat;
}

static float dot(const float * a, const float * b, int64_t n) {
    double s = 0.0;
    for (int64_t k = 0; k < n; ++k) s += (double) a[k] * b[k];
    return (float) s;
}

// Farthest-point initialisation: the first centroid is unit 0, each next one the unit least
// similar to all centroids chosen so far (ties: lowest index).
static std::vector<float> cluster_init(const std::vector<float> & feat, int64_t n_ff, int64_t n_embd,
                                       int64_t n_expert) {
    std::vector<float> cent((size_t) (n_expert * n_embd));
    std::vector<float> best_sim((size_t) n_ff, -INFINITY);
    int64_t pick = 0;
    for (int64_t e = 0; e < n_expert; ++e) {
        std::copy_n(feat.data() + pick * n_embd, n_embd, cent.data() + e * n_embd);
        int64_t next = 0;
        float next_sim = INFINITY;
        for (int64_t i = 0; i < n_ff; ++i) {
            best_sim[(size_t) i] = std::max(best_sim[(size_t) i], dot(feat.data() + i * n_embd, cent.data() + e * n_embd, n_embd));
            if (best_sim[(size_t) i] < next_sim) { next_sim = best_sim[(size_t) i]; next = i; }
        }
        pick = next;
    }
    return cent;
}

// Balanced assignment: (unit, expert) pairs by descending cosine, each unit to its best expert
// that still has room (capacity = expert_sizes). Ties broken by unit, then expert index.
static std::vector<int64_t> cluster_assign(const std::vector<float> & feat, const std::vector<float> & cent,
                                           int64_t n_ff, int64_t n_embd, int64_t n_expert) {
    std::vector<std::tuple<float, int64_t, int64_t>> pairs;
    pairs.reserve((size_t) (n_ff * n_expert));
    for (int64_t i = 0; i < n_ff; ++i) {
        for (int64_t e = 0; e < n_expert; ++e) {
            pairs.emplace_back(-dot(feat.data() + i * n_embd, cent.data() + e * n_embd, n_embd), i, e);
        }
    }
    std::sort(pairs.begin(), pairs.end());
    std::vector<int64_t> room = expert_sizes(n_ff, n_expert);
    std::vector<int64_t> label((size_t) n_ff, -1);
    for (const auto & p : pairs) {
        const int64_t i = std::get<1>(p), e = std::get<2>(p);
        if (label[(size_t) i] >= 0 || room[(size_t) e] == 0) continue;
        label[(size_t) i] = e;
        room[(size_t) e] -= 1;
    }
    return label;
}

// Centroid of each expert: the normalised sum of its members' features (kept if it has none).
static void cluster_update(const std::vector<float> & feat, const std::vector<int64_t> & label,
                           std::vector<float> & cent, int64_t n_embd, int64_t n_expert) {
    std::vector<double> sum((size_t) (n_expert * n_embd), 0.0);
    for (size_t i = 0; i < label.size(); ++i) {
        for (int64_t k = 0; k < n_embd; ++k) sum[(size_t) (label[i] * n_embd + k)] += feat[i * (size_t) n_embd + (size_t) k];
    }
    for (int64_t e = 0; e < n_expert; ++e) {
        double norm = 0.0;
        for (int64_t k = 0; k < n_embd; ++k) norm += sum[(size_t) (e * n_embd + k)] * sum[(size_t) (e * n_embd + k)];
        if (norm <= 0.0) continue;
        for (int64_t k = 0; k < n_embd; ++k) cent[(size_t) (e * n_embd + k)] = (float) (sum[(size_t) (e * n_embd + k)] / std::sqrt(norm));
    }
}

static std::vector<int64_t> cluster_labels(const dense_ffn & ffn, int64_t n_expert) {
    const std::vector<float> feat = unit_rows_normalized(ffn);
    std::vector<float> cent = cluster_init(feat, ffn.n_ff, ffn.n_embd, n_expert);
    std::vector<int64_t> label;
    const int max_iter = 50;
    for (int it = 0; it < max_iter; ++it) {
        std::vector<int64_t> next = cluster_assign(feat, cent, ffn.n_ff, ffn.n_embd, n_expert);
        if (next == label) break;
        label = std::move(next);
        cluster_update(feat, label, cent, ffn.n_embd, n_expert);
    }
    return label;
}

unit_assignment split_units(const dense_ffn & ffn, int64_t n_expert, split_kind kind) {
    unit_assignment a = assignment_init(ffn.n_ff, n_expert);
    std::vector<int64_t> label((size_t) ffn.n_ff);
    if (kind == split_kind::contiguous) {
        const std::vector<int64_t> sizes = expert_sizes(ffn.n_ff, n_expert);
        int64_t i = 0;
        for (int64_t e = 0; e < n_expert; ++e) {
            for (int64_t r = 0; r < sizes[(size_t) e]; ++r) label[(size_t) i++] = e;
        }
    } else if (kind == split_kind::interleave) {
        for (int64_t i = 0; i < ffn.n_ff; ++i) label[(size_t) i] = i % n_expert;
    } else {
        label = cluster_labels(ffn, n_expert);
    }
    assignment_from_labels(a, label);
    return a;
}

unit_assignment replicate_units(int64_t n_ff, int64_t n_expert) {
    unit_assignment a;
    a.n_expert = n_expert;
    a.n_ff_exp = n_ff;
    a.units.resize((size_t) (n_ff * n_expert));
    const int64_t shift = expert_n_ff(n_ff, n_expert);
    for (int64_t e = 0; e < n_expert; ++e) {
        for (int64_t r = 0; r < n_ff; ++r) a.units[(size_t) (e * n_ff + r)] = (r + e * shift) % n_ff;
    }
    return a;
}

// Router row of one expert: sum_i c_i gate_i / sum_i c_i over its units, c_i = ||up_i|| * ||down_i||
// (how strongly a unit's activation reaches the output), times router_scale.
static void router_gate_mean(const dense_ffn & ffn, const unit_assignment & a, int64_t e, float scale, float * row) {
    std::vector<double> acc((size_t) ffn.n_embd, 0.0);
    double c_sum = 0.0;
    for (int64_t r = 0; r < a.n_ff_exp; ++r) {
        const int64_t i = a.units[(size_t) (e * a.n_ff_exp + r)];
        if (i < 0) continue;
        const double up_norm = std::sqrt((double) dot(ffn.up.data() + i * ffn.n_embd, ffn.up.data() + i * ffn.n_embd, ffn.n_embd));
        double down_sq = 0.0;
        for (int64_t j = 0; j < ffn.n_embd; ++j) down_sq += (double) ffn.down[(size_t) (j * ffn.n_ff + i)] * ffn.down[(size_t) (j * ffn.n_ff + i)];
        const double c = up_norm * std::sqrt(down_sq);
        for (int64_t k = 0; k < ffn.n_embd; ++k) acc[(size_t) k] += c * ffn.gate[(size_t) (i * ffn.n_embd + k)];
        c_sum += c;
    }
    for (int64_t k = 0; k < ffn.n_embd; ++k) row[k] = c_sum > 0.0 ? (float) (scale * acc[(size_t) k] / c_sum) : 0.0f;
}

moe_ffn build_moe_ffn(const dense_ffn & ffn, const unit_assignment & a, const unit_assignment & router_groups,
                      const moe_build_params & params) {
    const int64_t n_embd = ffn.n_embd, n_ff = ffn.n_ff, n_ff_exp = a.n_ff_exp, n_expert = a.n_expert;
    moe_ffn out;
    out.gate_inp.assign((size_t) (n_embd * n_expert), 0.0f);
    out.gate_exps.assign((size_t) (n_embd * n_ff_exp * n_expert), 0.0f);
    out.up_exps.assign(out.gate_exps.size(), 0.0f);
    out.down_exps.assign((size_t) (n_ff_exp * n_embd * n_expert), 0.0f);
    for (int64_t e = 0; e < n_expert; ++e) {
        for (int64_t r = 0; r < n_ff_exp; ++r) {
            const int64_t i = a.units[(size_t) (e * n_ff_exp + r)];
            if (i < 0) continue;  // padding slot: stays zero
            const size_t dst = (size_t) ((e * n_ff_exp + r) * n_embd);
            std::copy_n(ffn.gate.data() + i * n_embd, n_embd, out.gate_exps.data() + dst);
            std::copy_n(ffn.up.data() + i * n_embd, n_embd, out.up_exps.data() + dst);
            for (int64_t j = 0; j < n_embd; ++j) {
                out.down_exps[(size_t) ((e * n_embd + j) * n_ff_exp + r)] = ffn.down[(size_t) (j * n_ff + i)] * params.down_scale;
            }
        }
        if (params.router == router_kind::gate_mean) {
            router_gate_mean(ffn, router_groups, e, params.router_scale, out.gate_inp.data() + e * n_embd);
        }
    }
    return out;
}

} // namespace moezip_upcycle
