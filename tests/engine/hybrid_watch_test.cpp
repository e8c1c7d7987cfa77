// Where a hybrid run's scheduler put each MoE layer's experts (provider_map/expert_placement.h) and
// what experts mode does to op offload before any backend reads GGML_OP_OFFLOAD_MIN_BATCH
// (preload/hybrid_watch.h). The scheduler's answers are injected: no accelerator is needed.
#include "preload/hybrid_watch.h"
#include "provider_map/expert_placement.h"
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

using namespace moezip;

namespace {

// Four layers' down matmuls as a scheduled graph holds them; layer il's weights carry its index.
struct FourLayers {
    ggml_context * ctx = nullptr;
    std::vector<ggml_tensor *> nodes;
    FourLayers() {
        ggml_init_params ip = {8u << 20, nullptr, true};
        ctx = ggml_init(ip);
        for (int il = 0; il < 4; ++il) {
            ggml_tensor * w = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 32, 64, 8);
            ggml_tensor * act = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 32, 2, 5);
            ggml_tensor * ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 2, 5);
            ggml_set_name(w, ("blk." + std::to_string(il) + ".ffn_down_exps.weight").c_str());
            ggml_tensor * down = ggml_mul_mat_id(ctx, w, act, ids);
            ggml_set_name(down, ("ffn_moe_down-" + std::to_string(il)).c_str());
            ggml_tensor * other = ggml_scale(ctx, down, 1.0f);  // a node that is no expert matmul
            ggml_set_name(other, ("ffn_moe_weighted-" + std::to_string(il)).c_str());
            nodes.push_back(down);
            nodes.push_back(other);
        }
    }
    ~FourLayers() { ggml_free(ctx); }
    static int layer_of(const ggml_tensor * w) { return w->name[4] - '0'; }  // "blk.N.ffn_down_exps.weight"
};

TEST(ExpertPlacement, TellsCpuAcceleratorAndOffloadedLayersApart) {
    FourLayers g;
    PlacementProbe probe;
    // layers 2 and 3 as --n-cpu-moe 2 leaves them: weights in the accelerator's memory
    probe.weights_in_host = [](const ggml_tensor * w) { return FourLayers::layer_of(w) < 2; };
    // layer 1's batch taken by op offload
    probe.backend_of = [](const ggml_tensor * node) -> std::string {
        const char * dash = strrchr(node->name, '-');
        const int il = atoi(dash + 1);
        return il == 0 ? "" : "CUDA0";  // layers 2, 3: where their weights are
    };
    const std::vector<LayerPlacement> p = expert_placements(g.nodes.data(), (int) g.nodes.size(), probe);
    ASSERT_EQ(p.size(), 4u);
    EXPECT_EQ(p[0].place, ExpertPlace::cpu);
    EXPECT_EQ(p[0].backend, "CPU");
    EXPECT_EQ(p[1].place, ExpertPlace::offloaded);
    EXPECT_EQ(p[1].backend, "CUDA0");
    EXPECT_EQ(p[2].place, ExpertPlace::accelerator);
    EXPECT_EQ(p[3].place, ExpertPlace::accelerator);
    EXPECT_EQ(p[1].n_tokens, 5);
    for (int il = 0; il < 4; ++il) EXPECT_EQ(p[il].il, il);
}

// Restores GGML_OP_OFFLOAD_MIN_BATCH as the test found it.
struct EnvGuard {
    std::string saved;
    bool had = false;
    EnvGuard() {
        if (const char * v = getenv("GGML_OP_OFFLOAD_MIN_BATCH")) { had = true; saved = v; }
    }
    ~EnvGuard() {
        if (had) setenv("GGML_OP_OFFLOAD_MIN_BATCH", saved.c_str(), 1);
        else unsetenv("GGML_OP_OFFLOAD_MIN_BATCH");
        unsetenv("MOEZIP_OP_OFFLOAD_SET");
    }
};

TEST(OpOffload, ExpertsModeTurnsItOffUnlessTheUserSetIt) {
    EnvGuard guard;
    const std::string dir = moezip_test::test_dir("op_offload_default");
    const std::string experts = dir + "/experts.toml", rows = dir + "/rows.toml";
    std::ofstream(experts) << "mode = \"experts\"\n[[worker]]\nendpoint = \"tcp://127.0.0.1:5601\"\nexperts = \"0-7\"\n";
    std::ofstream(rows) << "mode = \"rows\"\n[rows]\nlocal_share = 0.5\n[[worker]]\nendpoint = \"tcp://127.0.0.1:5601\"\nshare = 0.5\n";

    unsetenv("GGML_OP_OFFLOAD_MIN_BATCH");
    unsetenv("MOEZIP_OP_OFFLOAD_SET");
    hybrid_op_offload_default(rows.c_str());
    EXPECT_EQ(getenv("GGML_OP_OFFLOAD_MIN_BATCH"), nullptr) << "rows mode holds every expert here: op offload stays";

    hybrid_op_offload_default(experts.c_str());
    ASSERT_NE(getenv("GGML_OP_OFFLOAD_MIN_BATCH"), nullptr);
    EXPECT_STREQ(getenv("GGML_OP_OFFLOAD_MIN_BATCH"), "2147483647");
    EXPECT_EQ(hybrid_json()["op_offload_min_batch"]["set_by"], "moezip");

    // a host started under the preload by a wrapper that is under it too (timeout, sh -c) inherits
    // moezip's value with its marker: still moezip's, not the user's
    hybrid_op_offload_default(experts.c_str());
    EXPECT_EQ(hybrid_json()["op_offload_min_batch"]["set_by"], "moezip");

    unsetenv("MOEZIP_OP_OFFLOAD_SET");
    setenv("GGML_OP_OFFLOAD_MIN_BATCH", "64", 1);
    hybrid_op_offload_default(experts.c_str());
    EXPECT_STREQ(getenv("GGML_OP_OFFLOAD_MIN_BATCH"), "64") << "the user's value is never replaced";
    EXPECT_EQ(hybrid_json()["op_offload_min_batch"]["set_by"], "user");
    EXPECT_EQ(hybrid_json()["op_offload_min_batch"]["value"], "64");
}

} // namespace
