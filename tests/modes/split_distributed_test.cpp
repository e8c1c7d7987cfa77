// The split form of a MoE region (a hybrid run's CPU graph: the expert FFN ending at the per-slot
// ffn_moe_down) distributed to real moezip-worker processes in experts and rows mode: every slot's
// output must be the engine's own node's, bit for bit, with the workers' slots computed there.
// The graph is built here with the fixture model's layer-0 experts (the workers serve the same file).
#include "coordinator/compute/graph_runner.h"
#include "coordinator/config/config.h"
#include "coordinator/modes/dispatch_handler.h"
#include "preload/engine_locate.h"
#include "tests/support/cluster.h"
#include "tests/support/worker_harness.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <random>

using namespace moezip;
using namespace moezip_test;

namespace {

// One layer's CPU split over the model's layer-0 experts: inputs as the scheduler copies them.
struct FixtureSplit {
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    ggml_tensor * down = nullptr;
    ~FixtureSplit() { if (ctx) ggml_free(ctx); }
    void build(const ReferenceModel & m, int64_t n_tokens) {
        ggml_tensor * gate_exps = m.tensor(0, "ffn_gate_exps.weight");
        ggml_tensor * up_exps = m.tensor(0, "ffn_up_exps.weight");
        ggml_tensor * down_exps = m.tensor(0, "ffn_down_exps.weight");
        const int64_t n_embd = gate_exps->ne[0], n_expert = gate_exps->ne[2], n_used = 2;
        ggml_init_params ip = {16u << 20, nullptr, false};
        ctx = ggml_init(ip);
        std::mt19937 rng(11);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        ggml_tensor * x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_embd, 1, n_tokens);
        for (int64_t i = 0; i < ggml_nelements(x); ++i) static_cast<float *>(x->data)[i] = u(rng);
        ggml_set_name(x, "CPU#ffn_norm-0 (reshaped)#0");
        ggml_tensor * ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, n_used, n_tokens);
        for (int64_t t = 0; t < n_tokens; ++t) {
            int32_t a = (int32_t) (rng() % n_expert), b = (int32_t) (rng() % (n_expert - 1));
            if (b >= a) ++b;  // two different experts, from both workers' halves over the rows
            static_cast<int32_t *>(ids->data)[t * 2] = a;
            static_cast<int32_t *>(ids->data)[t * 2 + 1] = b;
        }
        ggml_set_name(ids, "CPU#ffn_moe_topk-0#0");
        gf = ggml_new_graph(ctx);
        ggml_tensor * up = ggml_mul_mat_id(ctx, up_exps, x, ids);
        ggml_set_name(up, "ffn_moe_up-0");
        ggml_tensor * gate = ggml_mul_mat_id(ctx, gate_exps, x, ids);
        ggml_set_name(gate, "ffn_moe_gate-0");
        ggml_tensor * act = ggml_swiglu_split(ctx, gate, up);
        ggml_set_name(act, "ffn_moe_swiglu-0");
        down = ggml_mul_mat_id(ctx, down_exps, act, ids);
        ggml_set_name(down, "ffn_moe_down-0");
        ggml_build_forward_expand(gf, down);
    }
};

// Computes the split with the engine's kernels (the reference) and with the runner and `handler`;
// expects the same bytes in ffn_moe_down and `remote_slots` > 0.
void expect_split_distributed(const ReferenceModel & m, RegionHandler & handler, int64_t n_tokens, const std::string & what) {
    const GgmlApi & api = reference_api();
    FixtureSplit ref, mine;
    ref.build(m, n_tokens);
    mine.build(m, n_tokens);
    ASSERT_EQ(compute_whole_graph(api, ref.gf), GGML_STATUS_SUCCESS);
    Evidence ev;
    std::mutex mu;
    RunnerOptions opt;
    opt.handle_regions = true;
    opt.require_intercept = true;
    BackendVariant v;
    v.name = reference_variant();
    v.build_id = reference_build_id();
    v.path = loaded_object_path(("libggml-cpu-" + v.name).c_str());
    GraphRunner runner(api, v, ev, mu, &handler, opt);
    memset(mine.down->data, 0xff, ggml_nbytes(mine.down));  // NaNs: a slot left unwritten cannot pass
    ggml_cplan plan2 = api.ggml_graph_plan(mine.gf, 1, nullptr);
    std::vector<uint8_t> work2(plan2.work_size);
    plan2.work_data = work2.data();
    ASSERT_EQ(runner.compute(mine.gf, &plan2), GGML_STATUS_SUCCESS) << what << ": " << (ev.errors.empty() ? "" : ev.errors[0]);
    EXPECT_EQ(ev.regions_handled, 1u) << what;
    EXPECT_GT(ev.layers[0].remote_slots, 0u) << what << ": nothing was computed by a worker";
    EXPECT_EQ(ev.layers[0].fallbacks, 0u) << what;
    EXPECT_EQ(memcmp(ref.down->data, mine.down->data, ggml_nbytes(ref.down)), 0) << what << ": per-slot outputs differ";
}

EngineIdentity self_identity() {
    BackendVariant v;
    v.name = reference_variant();
    v.build_id = reference_build_id();
    v.path = loaded_object_path(("libggml-cpu-" + v.name).c_str());
    return EngineIdentity{reference_api().ggml_commit(), v};
}

TEST(SplitDistributed, ExpertsAndRowsModeGiveTheEnginesPerSlotOutputs) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    ASSERT_FALSE(model.empty());
    ReferenceModel m;
    ASSERT_TRUE(m.load(model));
    Cluster c{test_dir("split_distributed"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w0.sock", "0-3"));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w1.sock", "4-7"));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/all.sock", ""));
    (void) reference_api();  // the engine's CPU variant loaded before its identity is read

    Config experts;
    Status st = config_load_string("mode = \"experts\"\n[dispatch]\non_worker_error = \"abort\"\n[[worker]]\nendpoint = \"" +
                                       c.workers[0]->endpoint() + "\"\nexperts = \"0-3\"\n[[worker]]\nendpoint = \"" +
                                       c.workers[1]->endpoint() + "\"\nexperts = \"4-7\"\n",
                                   "experts.toml", experts);
    ASSERT_TRUE(st) << st.message();
    ExpertsHandler xh(experts, reference_api(), self_identity());
    for (int64_t n : {1, 9}) expect_split_distributed(m, xh, n, "experts, " + std::to_string(n) + " rows");
    xh.shutdown();

    Config rows;
    st = config_load_string("mode = \"rows\"\n[dispatch]\non_worker_error = \"abort\"\n[rows]\nlocal_share = 0.5\n[[worker]]\nendpoint = \"" +
                                c.workers[2]->endpoint() + "\"\nshare = 0.5\n",
                            "rows.toml", rows);
    ASSERT_TRUE(st) << st.message();
    RowsHandler rh(rows, reference_api(), self_identity());
    expect_split_distributed(m, rh, 9, "rows, 9 rows");
    rh.shutdown();
}

} // namespace
