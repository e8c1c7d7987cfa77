// The split form of a MoE region: the graph ggml's scheduler gives the CPU backend in a hybrid run
// (--cpu-moe: experts in CPU memory, the rest of the layer on an accelerator). Its inputs are
// copies of the FFN input and of the ids (ggml/src/ggml-backend.cpp, ggml_backend_sched_split_graph:
// a tensor with the source's layout, so the ids copy keeps the argsort view's row stride); it ends
// at the per-slot ffn_moe_down (or ffn_moe_weighted) that the accelerator weights and sums. Built here
// with ggml in that shape, without llama: recognised, computed by moezip bit for bit as the engine's
// own nodes compute it, and the forms moezip does not handle named with the nodes found.
#include "coordinator/compute/graph_runner.h"
#include "coordinator/modes/local_handler.h"
#include "provider_map/moe_region.h"
#include "tests/support/worker_harness.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <random>

using namespace moezip;
using moezip_test::compute_whole_graph;
using moezip_test::reference_api;

namespace {

enum class SplitForm {
    down,            ///< up, gate, swiglu, down: the output is ffn_moe_down (llama.cpp with --cpu-moe, RPC accelerator)
    weighted,        ///< ... and ffn_moe_weighted = MUL(down, weights) in the split; only the sum elsewhere
    gpt_oss,         ///< biases (ADD_ID) on up, gate and down, swiglu_oai; the output is ffn_moe_down_biased
    weight_in,       ///< llama4: REPEAT(x) * weights (ffn_moe_weighted) in the split, then the experts; output down
    weighted_input,  ///< llama4 with the weighted input computed elsewhere: one input row per slot (not handled)
    warmup,          ///< every expert routed (ids [n_expert, n_tokens]): every slot is an output
};

struct SplitGraph {
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * out = nullptr;  // the split's output: what the next split copies
    ~SplitGraph() { if (ctx) ggml_free(ctx); }
};

void fill(ggml_tensor * t, std::mt19937 & rng, float scale) {
    std::uniform_real_distribution<float> u(-scale, scale);
    float * d = static_cast<float *>(t->data);
    for (int64_t i = 0; i < ggml_nelements(t); ++i) d[i] = u(rng);
}

// One layer's CPU split (il = 3), inputs filled with the same numbers for every call.
void build_split(SplitGraph & g, SplitForm f, int64_t n_tokens = 5) {
    const int64_t n_embd = 64, n_ff = 32, n_expert = 8;
    const int64_t n_used = f == SplitForm::warmup ? n_expert : (f == SplitForm::weight_in ? 1 : 2);
    const bool biases = f == SplitForm::gpt_oss;
    ggml_init_params ip = {32u << 20, nullptr, false};
    g.ctx = ggml_init(ip);
    ggml_context * ctx = g.ctx;
    std::mt19937 rng(7);
    ggml_tensor * gate_exps = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_embd, n_ff, n_expert);
    ggml_tensor * up_exps = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_embd, n_ff, n_expert);
    ggml_tensor * down_exps = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_ff, n_embd, n_expert);
    ggml_tensor * up_b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_ff, n_expert);
    ggml_tensor * gate_b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_ff, n_expert);
    ggml_tensor * down_b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_embd, n_expert);
    for (ggml_tensor * t : {gate_exps, up_exps, down_exps, up_b, gate_b, down_b}) fill(t, rng, 0.5f);
    ggml_set_name(gate_exps, "blk.3.ffn_gate_exps.weight");
    ggml_set_name(up_exps, "blk.3.ffn_up_exps.weight");
    ggml_set_name(down_exps, "blk.3.ffn_down_exps.weight");
    // the split's input copies (leafs, op NONE), named as the scheduler names them
    const int64_t rows_per_token = f == SplitForm::weighted_input ? n_used : 1;
    ggml_tensor * x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_embd, rows_per_token, n_tokens);
    fill(x, rng, 1.0f);
    ggml_set_name(x, "CPU#ffn_norm-3 (reshaped)#0");
    // ids: a copy of ffn_moe_topk, a view [n_used, n_tokens] of the argsort [n_expert, n_tokens]:
    // the copy keeps that layout (row stride n_expert * 4 bytes)
    ggml_tensor * sorted = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n_expert, n_tokens);
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<int32_t> perm(n_expert);
        for (int64_t e = 0; e < n_expert; ++e) perm[e] = (int32_t) e;
        std::shuffle(perm.begin(), perm.end(), rng);
        memcpy(static_cast<int32_t *>(sorted->data) + t * n_expert, perm.data(), n_expert * sizeof(int32_t));
    }
    ggml_tensor * ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n_used, n_tokens);
    ids->nb[1] = sorted->nb[1];
    ids->nb[2] = ids->nb[3] = sorted->nb[1] * n_tokens;
    ids->data = sorted->data;
    ggml_set_name(ids, "CPU#ffn_moe_topk-3#0");
    ggml_tensor * weights = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, n_used, n_tokens);
    fill(weights, rng, 1.0f);
    ggml_set_name(weights, "CPU#ffn_moe_weights_norm-3 (reshaped)#0");
    g.gf = ggml_new_graph(ctx);

    ggml_tensor * in = x;
    if (f == SplitForm::weight_in) {
        in = ggml_mul(ctx, ggml_repeat_4d(ctx, x, n_embd, n_used, n_tokens, 1), weights);
        ggml_set_name(in, "ffn_moe_weighted-3");
    }
    ggml_tensor * up = ggml_mul_mat_id(ctx, up_exps, in, ids);
    ggml_set_name(up, "ffn_moe_up-3");
    if (biases) { up = ggml_add_id(ctx, up, up_b, ids); ggml_set_name(up, "ffn_moe_up_biased-3"); }
    ggml_tensor * gate = ggml_mul_mat_id(ctx, gate_exps, in, ids);
    ggml_set_name(gate, "ffn_moe_gate-3");
    if (biases) { gate = ggml_add_id(ctx, gate, gate_b, ids); ggml_set_name(gate, "ffn_moe_gate_biased-3"); }
    ggml_tensor * act = biases ? ggml_swiglu_oai(ctx, gate, up, 1.702f, 7.0f) : ggml_swiglu_split(ctx, gate, up);
    ggml_set_name(act, biases ? "ffn_moe_swiglu_oai-3" : "ffn_moe_swiglu-3");
    ggml_tensor * experts = ggml_mul_mat_id(ctx, down_exps, act, ids);
    ggml_set_name(experts, "ffn_moe_down-3");
    if (biases) { experts = ggml_add_id(ctx, experts, down_b, ids); ggml_set_name(experts, "ffn_moe_down_biased-3"); }
    if (f == SplitForm::weighted) {
        experts = ggml_mul(ctx, experts, weights);
        ggml_set_name(experts, "ffn_moe_weighted-3");
    }
    ggml_build_forward_expand(g.gf, experts);
    g.out = experts;
}

std::vector<MoeRegion> split_regions(SplitGraph & g) { return moe_regions_find(g.gf->nodes, g.gf->n_nodes, nullptr); }

TEST(SplitRegion, RecognisesEachFormAScheduledSplitHolds) {
    struct Case { SplitForm f; const char * pattern; bool weights; int64_t n_used; };
    for (const Case & c : {Case{SplitForm::down, "up,gate,swiglu,down,slots2", false, 2},
                           Case{SplitForm::weighted, "up,gate,swiglu,down,weighted,slots2", true, 2},
                           Case{SplitForm::gpt_oss, "up,up_bias,gate,gate_bias,swiglu_oai,down,down_bias,slots2", false, 2},
                           Case{SplitForm::weight_in, "weight_in,up,gate,swiglu,down,slots1", true, 1},
                           Case{SplitForm::warmup, "up,gate,swiglu,down,slots8", false, 8}}) {
        SplitGraph g;
        build_split(g, c.f);
        auto regions = split_regions(g);
        ASSERT_EQ(regions.size(), 1u) << c.pattern;
        const MoeRegion & r = regions[0];
        EXPECT_TRUE(r.dispatchable) << c.pattern << ": " << r.reason;
        EXPECT_TRUE(r.slot_out) << c.pattern;
        EXPECT_EQ(r.pattern, c.pattern);
        EXPECT_EQ(r.il, 3);
        EXPECT_EQ(r.out, g.out) << c.pattern << ": the output must be the tensor the next split copies";
        EXPECT_EQ(r.weights != nullptr, c.weights) << c.pattern;
        EXPECT_EQ(r.n_used, c.n_used) << c.pattern;
        EXPECT_EQ(r.n_used_ids, c.n_used) << c.pattern;
        EXPECT_EQ(r.n_tokens, 5) << c.pattern;
        EXPECT_EQ(r.first_node, 0) << c.pattern;
        EXPECT_EQ(r.last_node, g.gf->n_nodes - 1) << c.pattern;
    }
}

TEST(SplitRegion, AWeightedInputComputedElsewhereIsNamedNotDispatchable) {
    SplitGraph g;
    build_split(g, SplitForm::weighted_input);
    auto regions = split_regions(g);
    ASSERT_EQ(regions.size(), 1u);
    EXPECT_FALSE(regions[0].dispatchable);
    const std::string & why = regions[0].reason;
    EXPECT_NE(why.find("CPU#ffn_norm-3 (reshaped)#0 has 2 rows per token"), std::string::npos) << why;
    EXPECT_NE(why.find("found ffn_moe_down, ffn_moe_gate, ffn_moe_swiglu, ffn_moe_up"), std::string::npos) << why;
}

TEST(SplitRegion, ALayerWithoutItsDownMatmulNamesWhatItFound) {
    // a split that ends after the activation (the down matmul placed elsewhere): named, left alone
    SplitGraph g;
    build_split(g, SplitForm::down);
    int n = g.gf->n_nodes;
    while (n > 0 && strcmp(g.gf->nodes[n - 1]->name, "ffn_moe_down-3") == 0) --n;
    auto regions = moe_regions_find(g.gf->nodes, n, nullptr);
    ASSERT_EQ(regions.size(), 1u);
    EXPECT_FALSE(regions[0].dispatchable);
    EXPECT_EQ(regions[0].reason, "incomplete pattern: no node ffn_moe_down in this layer (found ffn_moe_gate, ffn_moe_swiglu, ffn_moe_up)");
}

// The runner computes the split with the region done by LocalHandler: each slot's output must be the
// engine's own MUL_MAT_ID result for that slot, bit for bit (the accelerator weights and sums them).
class SplitBitIdentity : public ::testing::TestWithParam<SplitForm> {};

TEST_P(SplitBitIdentity, PerSlotOutputsEqualTheEnginesNodes) {
    const GgmlApi & api = reference_api();
    ASSERT_TRUE(api.cpu_bound);
    for (int64_t n_tokens : {1, 5, 33}) {
        SplitGraph ref, mine;
        build_split(ref, GetParam(), n_tokens);
        build_split(mine, GetParam(), n_tokens);
        ASSERT_EQ(compute_whole_graph(api, ref.gf), GGML_STATUS_SUCCESS);

        Evidence ev;
        std::mutex mu;
        LocalHandler handler(api, 1, /*copy_local =*/ false);
        RunnerOptions opt;
        opt.handle_regions = true;
        opt.require_intercept = true;
        GraphRunner runner(api, BackendVariant{}, ev, mu, &handler, opt);
        memset(mine.out->data, 0xff, ggml_nbytes(mine.out));  // NaNs: a slot left unwritten cannot pass
        ggml_cplan plan2 = api.ggml_graph_plan(mine.gf, 1, nullptr);
        std::vector<uint8_t> work2(plan2.work_size);
        plan2.work_data = work2.data();
        ASSERT_EQ(runner.compute(mine.gf, &plan2), GGML_STATUS_SUCCESS);
        EXPECT_EQ(ev.regions_handled, 1u) << "the split's region was not handled by moezip";
        EXPECT_EQ(ev.regions_passthrough, 0u);
        ASSERT_EQ(ggml_nbytes(ref.out), ggml_nbytes(mine.out));
        EXPECT_EQ(memcmp(ref.out->data, mine.out->data, ggml_nbytes(ref.out)), 0) << "per-slot outputs differ, " << n_tokens << " rows";
    }
}

const char * form_name(SplitForm f) {
    switch (f) {
        case SplitForm::down: return "down";
        case SplitForm::weighted: return "weighted";
        case SplitForm::gpt_oss: return "gpt_oss";
        case SplitForm::weight_in: return "weight_in";
        case SplitForm::warmup: return "warmup";
        default: return "other";
    }
}

INSTANTIATE_TEST_SUITE_P(Forms, SplitBitIdentity,
                         ::testing::Values(SplitForm::down, SplitForm::weighted, SplitForm::gpt_oss, SplitForm::weight_in, SplitForm::warmup),
                         [](const ::testing::TestParamInfo<SplitForm> & i) { return std::string(form_name(i.param)); });

} // namespace
