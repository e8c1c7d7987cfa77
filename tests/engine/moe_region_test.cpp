// MoE region recognition and the graph runner on graphs built here with ggml in the shape of
// build_moe_ffn (src/llama-graph.cpp), without llama: the pattern, its variants, and bit-identity
// of the runner's piecewise compute with the engine's whole-graph compute.
#include "coordinator/compute/graph_runner.h"
#include "coordinator/modes/local_handler.h"
#include "provider_map/moe_region.h"
#include "tests/support/worker_harness.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <random>
#include <xxhash.h>

using namespace moezip;
using moezip_test::compute_whole_graph;
using moezip_test::reference_api;

namespace {

/// Variants of build_moe_ffn the recogniser must tell apart.
enum class Variant {
    standard, top1, fused_gate_up, weight_before_ffn, foreign_reader, shared_expert_after,
    gpt_oss,      ///< per-expert biases on up, gate and down (ggml_add_id) and swiglu_oai (alpha 1.702, limit 7)
    llama4,       ///< top-1, routing weight applied to the input (weight_before_ffn)
    warmup,       ///< every expert routed (n_used = n_expert) but only 2 slots summed (llama_set_warmup)
    precision_on_down,  ///< a precision set on the down matmul, as newer ggml's ggml_prec_set_acc does
};

struct MoeGraph {
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * out = nullptr;
    ~MoeGraph() { if (ctx) ggml_free(ctx); }
};

void fill(ggml_tensor * t, std::mt19937 & rng, float scale) {
    std::uniform_real_distribution<float> u(-scale, scale);
    float * d = static_cast<float *>(t->data);
    for (int64_t i = 0; i < ggml_nelements(t); ++i) d[i] = u(rng);
}

// One MoE layer (il = 0) as build_moe_ffn makes it: router, top-k, weights normalised, experts.
void build(MoeGraph & g, Variant v, int64_t n_embd = 64, int64_t n_ff = 32, int64_t n_expert = 8, int64_t n_used = 2,
           int64_t n_tokens = 7) {
    if (v == Variant::top1 || v == Variant::llama4) n_used = 1;
    const int64_t n_sum = v == Variant::warmup ? n_used : 0;  // slots the ADD chain sums (warmup only)
    if (v == Variant::warmup) n_used = n_expert;
    const bool before = v == Variant::weight_before_ffn || v == Variant::llama4;
    const bool biases = v == Variant::gpt_oss;
    ggml_init_params ip = {64u << 20, nullptr, false};
    g.ctx = ggml_init(ip);
    ggml_context * ctx = g.ctx;
    std::mt19937 rng(42);
    ggml_tensor * cur = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_embd, n_tokens);
    ggml_tensor * gate_inp = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_embd, n_expert);
    ggml_tensor * gate_exps = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_embd, n_ff, n_expert);
    ggml_tensor * up_exps = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_embd, n_ff, n_expert);
    ggml_tensor * gate_up_exps = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_embd, 2 * n_ff, n_expert);
    ggml_tensor * down_exps = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_ff, n_embd, n_expert);
    ggml_tensor * up_b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_ff, n_expert);
    ggml_tensor * gate_b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_ff, n_expert);
    ggml_tensor * down_b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_embd, n_expert);
    for (ggml_tensor * t : {cur, gate_inp, gate_exps, up_exps, gate_up_exps, down_exps, up_b, gate_b, down_b}) fill(t, rng, 0.5f);
    ggml_set_name(up_b, "blk.0.ffn_up_exps.bias");
    ggml_set_name(gate_b, "blk.0.ffn_gate_exps.bias");
    ggml_set_name(down_b, "blk.0.ffn_down_exps.bias");
    ggml_set_name(gate_exps, "blk.0.ffn_gate_exps.weight");
    ggml_set_name(up_exps, "blk.0.ffn_up_exps.weight");
    ggml_set_name(down_exps, "blk.0.ffn_down_exps.weight");
    g.gf = ggml_new_graph(ctx);

    ggml_tensor * logits = ggml_mul_mat(ctx, gate_inp, cur);
    ggml_set_name(logits, "ffn_moe_logits-0");
    ggml_tensor * probs = ggml_soft_max(ctx, logits);
    ggml_set_name(probs, "ffn_moe_probs-0");
    ggml_tensor * selected = ggml_argsort_top_k(ctx, probs, (int) n_used);
    ggml_set_name(selected, "ffn_moe_topk-0");
    ggml_tensor * weights = ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, n_expert, n_tokens), selected);
    ggml_set_name(weights, "ffn_moe_weights-0");
    weights = ggml_reshape_2d(ctx, weights, n_used, n_tokens);
    weights = ggml_div(ctx, weights, ggml_sum_rows(ctx, weights));
    ggml_set_name(weights, "ffn_moe_weights_norm-0");
    weights = ggml_reshape_3d(ctx, weights, 1, n_used, n_tokens);
    ggml_build_forward_expand(g.gf, weights);

    ggml_tensor * x = ggml_reshape_3d(ctx, cur, n_embd, 1, n_tokens);
    if (before) {
        x = ggml_mul(ctx, ggml_repeat_4d(ctx, x, n_embd, n_used, n_tokens, 1), weights);
        ggml_set_name(x, "ffn_moe_weighted-0");
    }
    ggml_tensor *up, *gate;
    if (v == Variant::fused_gate_up) {
        ggml_tensor * gu = ggml_mul_mat_id(ctx, gate_up_exps, x, selected);
        ggml_set_name(gu, "ffn_moe_gate_up-0");
        gate = ggml_view_3d(ctx, gu, n_ff, gu->ne[1], gu->ne[2], gu->nb[1], gu->nb[2], 0);
        up = ggml_view_3d(ctx, gu, n_ff, gu->ne[1], gu->ne[2], gu->nb[1], gu->nb[2], n_ff * gu->nb[0]);
        ggml_set_name(up, "ffn_moe_up-0");
        ggml_set_name(gate, "ffn_moe_gate-0");
    } else {  // build_moe_ffn's order: up [+ bias], then gate [+ bias]
        up = ggml_mul_mat_id(ctx, up_exps, x, selected);
        ggml_set_name(up, "ffn_moe_up-0");
        if (biases) {
            up = ggml_add_id(ctx, up, up_b, selected);
            ggml_set_name(up, "ffn_moe_up_biased-0");
        }
        gate = ggml_mul_mat_id(ctx, gate_exps, x, selected);
        ggml_set_name(gate, "ffn_moe_gate-0");
        if (biases) {
            gate = ggml_add_id(ctx, gate, gate_b, selected);
            ggml_set_name(gate, "ffn_moe_gate_biased-0");
        }
    }
    ggml_tensor * act = biases ? ggml_swiglu_oai(ctx, gate, up, 1.702f, 7.0f) : ggml_swiglu_split(ctx, gate, up);
    ggml_set_name(act, biases ? "ffn_moe_swiglu_oai-0" : "ffn_moe_swiglu-0");
    ggml_tensor * experts = ggml_mul_mat_id(ctx, down_exps, act, selected);
    ggml_set_name(experts, "ffn_moe_down-0");
    // as ggml_prec_set_acc(experts, GGML_PREC_F32) does in newer ggml (node-llama-cpp 3.22's, for mistral4)
    if (v == Variant::precision_on_down) ggml_set_op_params_i32(experts, 0, 10);
    if (biases) {
        experts = ggml_add_id(ctx, experts, down_b, selected);
        ggml_set_name(experts, "ffn_moe_down_biased-0");
    }
    if (!before) {
        experts = ggml_mul(ctx, experts, weights);
        ggml_set_name(experts, "ffn_moe_weighted-0");
    }
    ggml_build_forward_expand(g.gf, experts);
    const int64_t n_summed = n_sum > 0 ? n_sum : n_used;
    std::vector<ggml_tensor *> views;
    for (int64_t i = 0; i < n_summed; ++i) {
        views.push_back(ggml_view_2d(ctx, experts, n_embd, n_tokens, experts->nb[2], i * experts->nb[1]));
        ggml_build_forward_expand(g.gf, views.back());
    }
    ggml_tensor * moe_out = views[0];
    for (int64_t i = 1; i < n_summed; ++i) {
        moe_out = ggml_add(ctx, moe_out, views[i]);
        ggml_build_forward_expand(g.gf, moe_out);
    }
    if (n_summed == 1) moe_out = ggml_cont(ctx, moe_out);
    ggml_set_name(moe_out, "ffn_moe_out-0");
    ggml_tensor * result = moe_out;
    if (v == Variant::foreign_reader) result = ggml_add(ctx, moe_out, ggml_cont(ctx, ggml_view_2d(ctx, experts, n_embd, n_tokens, experts->nb[2], 0)));
    if (v == Variant::shared_expert_after) {
        ggml_tensor * shexp = ggml_mul_mat(ctx, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_embd, n_embd), cur);
        memset(shexp->src[0]->data, 0, ggml_nbytes(shexp->src[0]));
        ggml_set_name(shexp, "ffn_shexp-0");
        result = ggml_add(ctx, moe_out, shexp);
    }
    // a node after the region that consumes it, as the residual add does
    result = ggml_scale(ctx, result, 0.5f);
    ggml_set_name(result, "result_output");
    ggml_build_forward_expand(g.gf, result);
    g.out = moe_out;
}

std::vector<MoeRegion> regions_of(MoeGraph & g) {
    return moe_regions_find(g.gf->nodes, g.gf->n_nodes, nullptr);
}

TEST(MoeRegion, RecognisesTheBuildMoeFfnPattern) {
    MoeGraph g;
    build(g, Variant::standard);
    auto regions = regions_of(g);
    ASSERT_EQ(regions.size(), 1u);
    const MoeRegion & r = regions[0];
    EXPECT_TRUE(r.dispatchable) << r.reason;
    EXPECT_EQ(r.pattern, "up,gate,swiglu,down,weighted,sum2");
    EXPECT_EQ(r.n_embd, 64); EXPECT_EQ(r.n_ff, 32); EXPECT_EQ(r.n_expert, 8); EXPECT_EQ(r.n_used, 2); EXPECT_EQ(r.n_tokens, 7);
    EXPECT_EQ(r.out, g.out);
    EXPECT_STREQ(r.gate_exps->name, "blk.0.ffn_gate_exps.weight");
    EXPECT_STREQ(g.gf->nodes[r.last_node]->name, "ffn_moe_out-0");
    // the router (topk, weights) lies before the region: its outputs exist when the region starts
    for (int i = r.first_node; i <= r.last_node; ++i)
        EXPECT_EQ(strstr(g.gf->nodes[i]->name, "topk"), nullptr) << g.gf->nodes[i]->name;
}

TEST(MoeRegion, TopOneWithContIsDispatchable) {
    MoeGraph g;
    build(g, Variant::top1);
    auto regions = regions_of(g);
    ASSERT_EQ(regions.size(), 1u);
    EXPECT_TRUE(regions[0].dispatchable) << regions[0].reason;
    EXPECT_EQ(regions[0].pattern, "up,gate,swiglu,down,weighted,sum1");
}

TEST(MoeRegion, SharedExpertAddedAfterTheOutputIsOutsideTheRegion) {
    MoeGraph g;
    build(g, Variant::shared_expert_after);
    auto regions = regions_of(g);
    ASSERT_EQ(regions.size(), 1u);
    EXPECT_TRUE(regions[0].dispatchable) << regions[0].reason;
}

TEST(MoeRegion, FusedGateUpIsReportedNotDispatchable) {
    MoeGraph g;
    build(g, Variant::fused_gate_up);
    auto regions = regions_of(g);
    ASSERT_EQ(regions.size(), 1u);
    EXPECT_FALSE(regions[0].dispatchable);
    EXPECT_NE(regions[0].reason.find("fused gate_up"), std::string::npos) << regions[0].reason;
}

TEST(MoeRegion, RecognisesTheVariantsOfBuildMoeFfn) {
    struct Case { Variant v; const char * pattern; bool before; bool biases; int64_t n_used, n_used_ids; };
    for (const Case & c : {Case{Variant::weight_before_ffn, "weight_in,up,gate,swiglu,down,sum2", true, false, 2, 2},
                           Case{Variant::llama4, "weight_in,up,gate,swiglu,down,sum1", true, false, 1, 1},
                           Case{Variant::gpt_oss, "up,up_bias,gate,gate_bias,swiglu_oai,down,down_bias,weighted,sum2", false, true, 2, 2},
                           Case{Variant::warmup, "up,gate,swiglu,down,weighted,sum2of8", false, false, 2, 8}}) {
        MoeGraph g;
        build(g, c.v);
        auto regions = regions_of(g);
        ASSERT_EQ(regions.size(), 1u);
        const MoeRegion & r = regions[0];
        EXPECT_TRUE(r.dispatchable) << c.pattern << ": " << r.reason;
        EXPECT_EQ(r.pattern, c.pattern);
        EXPECT_EQ(r.weight_before, c.before) << c.pattern;
        EXPECT_EQ(r.up_b != nullptr && r.gate_b != nullptr && r.down_b != nullptr, c.biases) << c.pattern;
        EXPECT_EQ(r.n_used, c.n_used) << c.pattern;
        EXPECT_EQ(r.n_used_ids, c.n_used_ids) << c.pattern;
        if (c.biases) {
            EXPECT_EQ(r.glu_op, GGML_GLU_OP_SWIGLU_OAI);
            EXPECT_FLOAT_EQ(r.glu_alpha, 1.702f);
            EXPECT_FLOAT_EQ(r.glu_limit, 7.0f);
        }
    }
}

TEST(MoeRegion, AReaderOfAnIntermediateOutsideTheRegionMakesItNotDispatchable) {
    MoeGraph g;
    build(g, Variant::foreign_reader);
    auto regions = regions_of(g);
    ASSERT_EQ(regions.size(), 1u);
    EXPECT_FALSE(regions[0].dispatchable);
    EXPECT_NE(regions[0].reason.find("reads its intermediate"), std::string::npos) << regions[0].reason;
}

TEST(MoeRegion, AnExpertMatmulWithAPrecisionSetIsReportedNotDispatchable) {
    MoeGraph g;
    build(g, Variant::precision_on_down);
    auto regions = regions_of(g);
    ASSERT_EQ(regions.size(), 1u);
    EXPECT_FALSE(regions[0].dispatchable);
    EXPECT_NE(regions[0].reason.find("ffn_moe_down-0 carries op params"), std::string::npos) << regions[0].reason;
}

TEST(MoeRegion, NodeNameParsing) {
    std::string what;
    int il = -1;
    EXPECT_TRUE(moe_node_name_parse("ffn_moe_gate_up-12", what, il));
    EXPECT_EQ(what, "gate_up");
    EXPECT_EQ(il, 12);
    EXPECT_FALSE(moe_node_name_parse("ffn_moe_weighted-0 (view)", what, il));
    EXPECT_FALSE(moe_node_name_parse("ffn_moe_out", what, il));
    EXPECT_FALSE(moe_node_name_parse("attn_norm-3", what, il));
}

// The runner computes the graph in pieces with the region done by LocalHandler; the result must be
// the whole-graph compute's, bit for bit (same kernels, same per-row arithmetic, slot-order sum).
class RunnerBitIdentity : public ::testing::TestWithParam<Variant> {};

TEST_P(RunnerBitIdentity, PiecewiseWithLocalRegionEqualsWholeGraph) {
    const GgmlApi & api = reference_api();
    ASSERT_TRUE(api.cpu_bound);
    MoeGraph ref, mine;
    build(ref, GetParam());
    build(mine, GetParam());
    ASSERT_EQ(compute_whole_graph(api, ref.gf), GGML_STATUS_SUCCESS);

    Evidence ev;
    std::mutex mu;
    LocalHandler handler(api, 1, /*copy_local =*/ false);
    RunnerOptions opt;
    opt.handle_regions = true;
    GraphRunner runner(api, BackendVariant{}, ev, mu, &handler, opt);
    ggml_cplan plan2 = api.ggml_graph_plan(mine.gf, 1, nullptr);
    std::vector<uint8_t> work2(plan2.work_size);
    plan2.work_data = work2.data();
    ASSERT_EQ(runner.compute(mine.gf, &plan2), GGML_STATUS_SUCCESS);
    EXPECT_EQ(ev.regions_handled, 1u) << "the region was not handled by moezip";
    ASSERT_EQ(ggml_nbytes(ref.out), ggml_nbytes(mine.out));
    EXPECT_EQ(memcmp(ref.out->data, mine.out->data, ggml_nbytes(ref.out)), 0) << "ffn_moe_out differs";
    ASSERT_EQ(ev.logits.size(), 1u);
    ggml_tensor * ref_res = ref.gf->nodes[ref.gf->n_nodes - 1];
    EXPECT_EQ(ev.logits[0].xxh3, XXH3_64bits(ref_res->data, ggml_nbytes(ref_res)));
}

const char * variant_name(Variant v) {
    switch (v) {
        case Variant::standard: return "standard";
        case Variant::top1: return "top1";
        case Variant::shared_expert_after: return "shared_expert";
        case Variant::weight_before_ffn: return "weight_before_ffn";
        case Variant::llama4: return "llama4";
        case Variant::gpt_oss: return "gpt_oss";
        case Variant::warmup: return "warmup";
        default: return "other";
    }
}

INSTANTIATE_TEST_SUITE_P(Variants, RunnerBitIdentity,
                         ::testing::Values(Variant::standard, Variant::top1, Variant::shared_expert_after, Variant::weight_before_ffn,
                                           Variant::llama4, Variant::gpt_oss, Variant::warmup),
                         [](const ::testing::TestParamInfo<Variant> & i) { return std::string(variant_name(i.param)); });

class PairsEqualRows : public ::testing::TestWithParam<Variant> {};

TEST_P(PairsEqualRows, PerSlotPairsEqualTheBatchedRows) {
    // experts mode sends (row, slot) pairs with k = 1; rows mode sends rows with k = n_used: same bits
    const GgmlApi & api = reference_api();
    MoeGraph g;
    build(g, GetParam());
    auto regions = regions_of(g);
    ASSERT_EQ(regions.size(), 1u);
    ASSERT_EQ(compute_whole_graph(api, g.gf), GGML_STATUS_SUCCESS);  // router outputs now exist
    const MoeRegion & r = regions[0];
    std::vector<int32_t> ids;
    std::vector<float> w;
    region_gather_routing(r, ids, w);
    MoeExecutor exec(api, 1);
    const int64_t E = r.n_embd, k = r.n_used, n = r.n_tokens;
    std::vector<float> batched(E * k * n), pairs(E * k * n), hidden(E * k * n);
    SlotBatch b{n, k, region_hidden_row(r, 0), r.hidden->nb[2], ids.data(), w.data()};
    ASSERT_TRUE(exec.compute_slots(region_expert_weights(r), b, batched.data()));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t s = 0; s < k; ++s) memcpy(&hidden[(t * k + s) * E], region_hidden_row(r, t), E * sizeof(float));
    SlotBatch p{n * k, 1, hidden.data(), E * sizeof(float), ids.data(), w.data()};
    ASSERT_TRUE(exec.compute_slots(region_expert_weights(r), p, pairs.data()));
    EXPECT_EQ(memcmp(batched.data(), pairs.data(), batched.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Variants, PairsEqualRows, ::testing::Values(Variant::standard, Variant::llama4, Variant::gpt_oss, Variant::warmup),
                         [](const ::testing::TestParamInfo<Variant> & i) { return std::string(variant_name(i.param)); });

TEST(MoeExecutor, RejectsAnExpertIdOutOfRangeWithoutAborting) {
    const GgmlApi & api = reference_api();
    MoeGraph g;
    build(g, Variant::standard);
    auto regions = regions_of(g);
    ASSERT_EQ(regions.size(), 1u);
    std::vector<float> hidden(64, 0.f), w(2, 0.5f), out(64 * 2);
    std::vector<int32_t> ids = {1, 8};
    MoeExecutor exec(api, 1);
    Status st = exec.compute_slots(region_expert_weights(regions[0]), SlotBatch{1, 2, hidden.data(), 64 * sizeof(float), ids.data(), w.data()}, out.data());
    EXPECT_FALSE(st);
    EXPECT_NE(st.message().find("expert id 8 out of range [0, 8)"), std::string::npos) << st.message();
}

} // namespace
