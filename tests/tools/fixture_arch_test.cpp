// moezip-fixture --arch, --split-files and per-layer --n-expert-used: what the files hold (read back
// with the engine's gguf API), that the engine runs them (moezip-run, no preload), and the named
// errors for shapes the engine would refuse. Distributed runs of these models: tests/engine/arch_test.cpp.
#include "tests/support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ggml.h"
#include "gguf.h"

#include <string>
#include <sys/stat.h>
#include <vector>

using namespace moezip_test;

namespace {

CommandResult run_fixture(const std::vector<std::string> & args) { return run_tool("moezip-fixture", args); }

/// A GGUF file's header (metadata and tensor infos only).
struct gguf_header {
    gguf_context * g = nullptr;
    explicit gguf_header(const std::string & path) {
        gguf_init_params params = {/*no_alloc =*/ true, nullptr};
        g = gguf_init_from_file(path.c_str(), params);
    }
    ~gguf_header() { if (g) gguf_free(g); }
    int64_t key(const char * k) const { return gguf_find_key(g, k); }
    bool has_tensor(const std::string & name) const { return gguf_find_tensor(g, name.c_str()) >= 0; }
};

/// moezip-run greedy over 16 fixture tokens, 8 generated; the parsed --json (null after a failure).
nlohmann::json run_model(const std::string & model, const std::string & dir) {
    const std::string json_path = dir + "/run.json";
    CommandResult r = run_command({bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "8", "--json", json_path}, {}, 120);
    EXPECT_EQ(r.exit_code, 0) << model << ": " << r.err;
    if (r.exit_code != 0) return nullptr;
    return nlohmann::json::parse(read_file(json_path), nullptr, false);
}

} // namespace

TEST(FixtureArch, EveryArchWritesWhatItsLoaderAsksForAndRuns) {
    // One tensor per arch that only that layout has (src/models/<arch>.cpp load_arch_tensors).
    const struct { const char * arch; const char * tensor; const char * key; } cases[] = {
        {"qwen3moe", "blk.0.attn_q_norm.weight", "qwen3moe.expert_feed_forward_length"},
        {"qwen2moe", "blk.0.ffn_gate_inp_shexp.weight", "qwen2moe.expert_shared_feed_forward_length"},
        {"deepseek2", "blk.1.attn_kv_a_mqa.weight", "deepseek2.leading_dense_block_count"},
        {"gpt-oss", "blk.0.ffn_down_exps.bias", "gpt-oss.attention.sliding_window"},
        {"llama4", "blk.3.ffn_up_shexp.weight", "llama4.interleave_moe_layer_step"},
        {"olmoe", "blk.0.attn_k_norm.weight", "olmoe.feed_forward_length"},
        {"glm4moe", "blk.1.exp_probs_b.bias", "glm4moe.expert_shared_count"},
        {"llama", "blk.0.ffn_gate_exps.weight", "llama.expert_count"},
    };
    for (const auto & c : cases) {
        const std::string model = fixture_model({"--arch", c.arch, "--type", "q8_0"});
        ASSERT_FALSE(model.empty()) << c.arch;
        gguf_header h(model);
        ASSERT_NE(h.g, nullptr) << model;
        EXPECT_EQ(std::string(gguf_get_val_str(h.g, h.key("general.architecture"))), c.arch);
        EXPECT_TRUE(h.has_tensor(c.tensor)) << c.arch << " lacks " << c.tensor;
        EXPECT_GE(h.key(c.key), 0) << c.arch << " lacks key " << c.key;
        const nlohmann::json report = run_model(model, test_dir(std::string("fixture_arch_") + c.arch));
        ASSERT_TRUE(report.is_object()) << c.arch;
        EXPECT_EQ(report["tokens"].size(), 8u) << c.arch;
    }
}

TEST(FixtureArch, DenseLayersAreWhereTheArchPutsThem) {
    gguf_header ds(fixture_model({"--arch", "deepseek2", "--type", "q8_0"}));   // leading dense layer
    ASSERT_NE(ds.g, nullptr);
    EXPECT_TRUE(ds.has_tensor("blk.0.ffn_down.weight"));
    EXPECT_FALSE(ds.has_tensor("blk.0.ffn_down_exps.weight"));
    EXPECT_TRUE(ds.has_tensor("blk.2.ffn_down_exps.weight"));
    gguf_header l4(fixture_model({"--arch", "llama4", "--type", "q8_0"}));      // MoE every second layer
    ASSERT_NE(l4.g, nullptr);
    for (int il = 0; il < 4; ++il)
        EXPECT_EQ(l4.has_tensor("blk." + std::to_string(il) + ".ffn_gate_exps.weight"), il % 2 == 1) << "layer " << il;
    EXPECT_EQ(gguf_get_val_u32(l4.g, l4.key("llama4.expert_used_count")), 1u) << "llama4 routes top-1";
}

TEST(FixtureArch, PerLayerExpertCountsAreWrittenAsAnArray) {
    const std::string model = fixture_model({"--n-layer", "3", "--n-expert-used", "4,2,2", "--type", "q8_0"});
    gguf_header h(model);
    ASSERT_NE(h.g, nullptr);
    const int64_t id = h.key("qwen3moe.expert_used_count");
    ASSERT_GE(id, 0);
    ASSERT_EQ(gguf_get_kv_type(h.g, id), GGUF_TYPE_ARRAY);
    ASSERT_EQ(gguf_get_arr_n(h.g, id), 3u);
    const uint32_t * v = static_cast<const uint32_t *>(gguf_get_arr_data(h.g, id));
    EXPECT_EQ(v[0], 4u);
    EXPECT_EQ(v[1], 2u);
    EXPECT_EQ(v[2], 2u);
    EXPECT_TRUE(run_model(model, test_dir("fixture_per_layer")).is_object());
}

TEST(FixtureArch, SplitFilesFollowLlamaCppsConventionAndRunLikeOneFile) {
    const std::vector<std::string> args = {"--n-layer", "4", "--type", "q8_0"};
    const std::string first = fixture_model_split(args, 3);
    ASSERT_FALSE(first.empty());
    EXPECT_NE(first.find("_split3-00001-of-00003.gguf"), std::string::npos) << first;
    int64_t n_tensors = 0;
    for (int k = 0; k < 3; ++k) {
        gguf_header h(split_part_path(first, k, 3));
        ASSERT_NE(h.g, nullptr) << "part " << k + 1;
        EXPECT_EQ(gguf_get_val_u16(h.g, h.key("split.no")), k);
        EXPECT_EQ(gguf_get_val_u16(h.g, h.key("split.count")), 3);
        EXPECT_EQ(gguf_get_val_i32(h.g, h.key("split.tensors.count")), 51);  // 1 + 4 x 12 + 2
        EXPECT_EQ(h.key("general.architecture") >= 0, k == 0) << "metadata is in the first part only";
        EXPECT_GT(gguf_get_n_tensors(h.g), 0);
        n_tensors += gguf_get_n_tensors(h.g);
    }
    EXPECT_EQ(n_tensors, 51);
    // the same tensors and values as the single file: the engine computes the same logits
    const nlohmann::json split = run_model(first, test_dir("fixture_split"));
    const nlohmann::json whole = run_model(fixture_model(args), test_dir("fixture_split_whole"));
    ASSERT_TRUE(split.is_object() && whole.is_object());
    EXPECT_EQ(split["logits_xxh3"], whole["logits_xxh3"]);
}

TEST(FixtureArch, ShapesTheEngineRefusesAreNamedErrors) {
    const std::string dir = test_dir("fixture_arch_errors");
    const std::string out = dir + "/x.gguf";
    const struct { std::vector<std::string> args; const char * message; } cases[] = {
        {{"--arch", "mixtral"}, "unknown --arch 'mixtral' (known: qwen3moe"},
        {{"--arch", "llama4", "--n-layer", "3"}, "--arch llama4 needs --n-layer at least 4, got 3"},
        {{"--arch", "deepseek2", "--n-layer", "2"}, "--arch deepseek2 needs --n-layer at least 3"},
        {{"--arch", "olmoe", "--n-head-kv", "2"}, "--arch olmoe needs --n-head-kv = --n-head"},
        {{"--arch", "qwen2moe", "--head-dim", "32"}, "needs --n-head x --head-dim = --n-embd"},
        {{"--n-layer", "3", "--n-expert-used", "4,2"}, "--n-expert-used lists 2 counts for 3 layers"},
        {{"--n-layer", "3", "--n-expert-used", "2,4,4"}, "layer 1 count must be in 1..2, got 4"},
        {{"--n-expert-used", "2,x"}, "expected a count or a comma-separated list"},
        {{"--split-files", "0"}, "--split-files must be in 1..27"},
        {{"--split-files", "28"}, "--split-files must be in 1..27"},
    };
    for (const auto & c : cases) {
        std::vector<std::string> args = c.args;
        args.insert(args.end(), {"-o", out});
        CommandResult r = run_fixture(args);
        EXPECT_EQ(r.exit_code, 1) << c.message;
        EXPECT_NE(r.err.find(c.message), std::string::npos) << "expected '" << c.message << "' in: " << r.err;
        EXPECT_FALSE(file_exists(out)) << c.message;
    }
}

TEST(FixtureArch, AFailedSplitWriteLeavesNoPart) {
    const std::string dir = test_dir("fixture_split_fail");
    // the second part's name is taken by a directory: it cannot be created, and the first is removed
    ASSERT_EQ(run_command({"/bin/mkdir", dir + "/m-00002-of-00003.gguf"}).exit_code, 0);
    CommandResult r = run_fixture({"--split-files", "3", "-o", dir + "/m.gguf"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("cannot create " + dir + "/m-00002-of-00003.gguf"), std::string::npos) << r.err;
    EXPECT_FALSE(file_exists(dir + "/m-00001-of-00003.gguf"));
}
