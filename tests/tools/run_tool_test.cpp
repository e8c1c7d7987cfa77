// Tests of moezip-run (tools/moezip-run/): the unmodified host that libmoezip.so is later preloaded
// into. Runs the built binary on the real trained model ../shared/fixtures/stories260K.gguf.
#include "tests/support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace moezip_test;

namespace {

CommandResult run_tool(std::vector<std::string> args) {
    args.insert(args.begin(), bin_path("moezip-run"));
    return run_command(args, {}, 120);
}

// Runs moezip-run with --json into dir/name.json and returns the parsed report (null on failure).
nlohmann::json run_json(const std::string & dir, const std::string & name, std::vector<std::string> args) {
    const std::string json_path = dir + "/" + name + ".json";
    args.push_back("--json");
    args.push_back(json_path);
    args.push_back("--quiet");
    CommandResult r = run_tool(args);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    if (r.exit_code != 0) return nullptr;
    return nlohmann::json::parse(read_file(json_path), nullptr, false);
}

// A failed run: non-zero, not killed by a signal (>= 128), and stderr names `file`.
void expect_clean_failure(const CommandResult & r, const std::string & file) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_LT(r.exit_code, 128) << "moezip-run crashed: " << r.err;
    EXPECT_NE(r.err.find(file), std::string::npos) << "message does not name " << file << ": " << r.err;
}

} // namespace

TEST(RunTool, StoriesGivesKnownGreedyContinuation) {
    const std::string model = stories_model();
    ASSERT_FALSE(model.empty());
    CommandResult r = run_tool({"-m", model, "-p", "Once upon a time", "-n", "40"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u) << r.out;
    const std::string expected = ", there was a little girl named Lily. She loved to play outside in the park. "
                                 "One day, she saw a big, red ball.";
    EXPECT_NE(r.out.find(expected), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("prefill 5 tokens"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("decode 39 tokens"), std::string::npos) << r.err;
}

// One wall time per decode step, adding up to the decode's ms, and their median.
static void expect_decode_steps(const nlohmann::json & j, size_t n_steps) {
    const auto & d = j["decode"];
    ASSERT_EQ(d["step_ms"].size(), n_steps) << d.dump();
    std::vector<double> steps;
    double sum = 0;
    for (const auto & s : d["step_ms"]) {
        steps.push_back(s.get<double>());
        EXPECT_GT(steps.back(), 0.0);
        sum += steps.back();
    }
    EXPECT_NEAR(sum, d["ms"].get<double>(), 1e-6 * sum);
    std::sort(steps.begin(), steps.end());
    const size_t h = n_steps / 2;
    const double median = n_steps % 2 ? steps[h] : (steps[h - 1] + steps[h]) / 2;
    EXPECT_DOUBLE_EQ(d["step_ms_median"].get<double>(), median) << d.dump();
}

TEST(RunTool, JsonReportHasSchemaAndOneHashPerToken) {
    const std::string model = stories_model();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("RunTool.JsonReport");
    nlohmann::json j = run_json(dir, "a", {"-m", model, "-p", "Once upon a time", "-n", "12", "-c", "300"});
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["schema"], "moezip-run/1");
    EXPECT_EQ(j["model"], model);
    EXPECT_EQ(j["model_bytes"], 1185376);
    EXPECT_EQ(j["settings"]["ctx"], 300);
    EXPECT_EQ(j["settings"]["prompt"], "Once upon a time");
    EXPECT_EQ(j["settings"]["threads"], 1);
    EXPECT_EQ(j["settings"]["mmap"], true);
    EXPECT_EQ(j["prompt_tokens"].size(), 5u);  // BOS + 4 pieces
    EXPECT_EQ(j["tokens"].size(), 12u);
    ASSERT_EQ(j["logits_xxh3"].size(), 12u);
    for (const auto & h : j["logits_xxh3"]) EXPECT_EQ(h.get<std::string>().size(), 16u);
    EXPECT_EQ(j["text"].get<std::string>().rfind(", there was a little girl", 0), 0u) << j["text"];
    EXPECT_EQ(j["prefill"]["tokens"], 5);
    EXPECT_EQ(j["decode"]["tokens"], 11);  // the last generated token is not fed back
    EXPECT_GT(j["decode"]["tok_s"].get<double>(), 0.0);
    expect_decode_steps(j, 11);
    // an even number of steps: the median is the mean of the middle two
    expect_decode_steps(run_json(dir, "even", {"-m", model, "-p", "Once upon a time", "-n", "5", "-c", "300"}), 4);
    // one token: no decode step, so no rate and no median (null, not a measured-looking 0)
    const nlohmann::json one = run_json(dir, "one", {"-m", model, "-p", "Once upon a time", "-n", "1", "-c", "300"});
    EXPECT_EQ(one["decode"]["tokens"], 0);
    EXPECT_TRUE(one["decode"]["tok_s"].is_null()) << one["decode"].dump();
    EXPECT_TRUE(one["decode"]["step_ms_median"].is_null()) << one["decode"].dump();
    EXPECT_GT(one["prefill"]["tok_s"].get<double>(), 0.0);
}

TEST(RunTool, SameFlagsGiveSameTokensAndLogits) {
    const std::string model = stories_model();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("RunTool.SameFlags");
    const std::vector<std::string> args = {"-m", model, "-p", "Once upon a time", "-n", "24"};
    nlohmann::json a = run_json(dir, "a", args);
    nlohmann::json b = run_json(dir, "b", args);
    ASSERT_TRUE(a.is_object() && b.is_object());
    EXPECT_EQ(a["tokens"], b["tokens"]);
    EXPECT_EQ(a["logits_xxh3"], b["logits_xxh3"]);
    EXPECT_EQ(a["tokens"].size(), 24u);
}

TEST(RunTool, FixtureGivesSameIdsForSameSeed) {
    const std::string model = stories_model();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("RunTool.Fixture");
    nlohmann::json a = run_json(dir, "a", {"-m", model, "--fixture", "16", "-n", "4"});
    nlohmann::json b = run_json(dir, "b", {"-m", model, "--fixture", "16", "-n", "4"});
    nlohmann::json c = run_json(dir, "c", {"-m", model, "--fixture", "16", "-n", "4", "--seed", "2"});
    ASSERT_TRUE(a.is_object() && b.is_object() && c.is_object());
    EXPECT_EQ(a["prompt_tokens"].size(), 16u);
    EXPECT_EQ(a["prompt_tokens"], b["prompt_tokens"]);
    EXPECT_EQ(a["logits_xxh3"], b["logits_xxh3"]);
    EXPECT_NE(a["prompt_tokens"], c["prompt_tokens"]) << "another seed should give other ids";
    EXPECT_EQ(a["settings"]["fixture"], 16);
    for (const auto & t : a["prompt_tokens"]) {  // stories260K: 1 <s> and 2 </s> are control tokens
        EXPECT_GE(t.get<int>(), 0);
        EXPECT_LT(t.get<int>(), 512);
        EXPECT_NE(t.get<int>(), 1);
        EXPECT_NE(t.get<int>(), 2);
    }
}

// The prefill is split into llama_decode calls of n_batch tokens. The result is bit-identical:
// the CPU backend computes every row of a matrix product by itself (ggml-cpu mul_mat splits work by
// rows, never reduces across tokens), so a token's activations do not depend on which other tokens
// share its ubatch, and attention reads the same f16 KV cache either way. Measured equal on this
// F32 model; if a future engine differed only by rounding, the tokens check below would still hold.
TEST(RunTool, SmallUbatchGivesSameTokensAndLogits) {
    const std::string model = stories_model();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("RunTool.Ubatch");
    nlohmann::json small = run_json(dir, "b16", {"-m", model, "--fixture", "64", "-b", "16", "-n", "16"});
    nlohmann::json large = run_json(dir, "b512", {"-m", model, "--fixture", "64", "-b", "512", "-n", "16"});
    ASSERT_TRUE(small.is_object() && large.is_object());
    EXPECT_EQ(small["prompt_tokens"].size(), 64u);
    EXPECT_EQ(small["settings"]["ubatch"], 16);
    EXPECT_EQ(small["tokens"], large["tokens"]);
    EXPECT_EQ(small["logits_xxh3"], large["logits_xxh3"]);
}

// --warmup evaluates the prompt once untimed and clears the KV cache: the timed run that follows must
// be the same computation as a fresh one (a KV cache left over would change every logit).
TEST(RunTool, WarmupLeavesTokensAndLogitsUnchanged) {
    const std::string model = stories_model();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("RunTool.Warmup");
    nlohmann::json cold = run_json(dir, "cold", {"-m", model, "--fixture", "64", "-n", "24"});
    nlohmann::json warm = run_json(dir, "warm", {"-m", model, "--fixture", "64", "-n", "24", "--warmup"});
    ASSERT_TRUE(cold.is_object() && warm.is_object());
    EXPECT_EQ(warm["settings"]["warmup"], true);
    EXPECT_EQ(cold["settings"]["warmup"], false);
    EXPECT_EQ(warm["tokens"], cold["tokens"]);
    EXPECT_EQ(warm["logits_xxh3"], cold["logits_xxh3"]);
    EXPECT_EQ(warm["decode"]["tokens"], 23) << "the warm-up's decode step is not counted";
}

// --no-mmap reads the same bytes into anonymous memory and --no-repack only changes buffer types
// (stories260K is all F32, which the CPU backend never repacks): same results, settings recorded.
TEST(RunTool, NoMmapAndNoRepackGiveSameLogits) {
    const std::string model = stories_model();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("RunTool.NoMmap");
    nlohmann::json plain = run_json(dir, "plain", {"-m", model, "--fixture", "16", "-n", "8"});
    nlohmann::json other = run_json(dir, "other", {"-m", model, "--fixture", "16", "-n", "8", "--no-mmap", "--no-repack"});
    ASSERT_TRUE(plain.is_object() && other.is_object());
    EXPECT_EQ(plain["settings"]["mmap"], true);
    EXPECT_EQ(plain["settings"]["no_repack"], false);
    EXPECT_EQ(other["settings"]["mmap"], false);
    EXPECT_EQ(other["settings"]["no_repack"], true);
    EXPECT_EQ(plain["logits_xxh3"], other["logits_xxh3"]);
}

TEST(RunTool, NonGgufFileIsRejectedByName) {
    const std::string dir = test_dir("RunTool.NonGguf");
    const std::string path = dir + "/not-a-model.gguf";
    run_command({"/bin/sh", "-c", "echo 'this is not a model' > " + path});
    CommandResult r = run_tool({"-m", path, "-p", "hi"});
    expect_clean_failure(r, path);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("not a GGUF file"), std::string::npos) << r.err;
}

TEST(RunTool, TruncatedModelIsRejectedByName) {
    const std::string model = stories_model();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("RunTool.Truncated");
    const std::string path = dir + "/stories260K-first1000.gguf";
    run_command({"/bin/sh", "-c", "head -c 1000 '" + model + "' > '" + path + "'"});
    CommandResult r = run_tool({"-m", path, "-p", "hi"});
    expect_clean_failure(r, path);
    EXPECT_EQ(r.exit_code, 1);
    // A copy cut inside the tensor data (the metadata parses) is named as truncated too.
    const std::string half = dir + "/stories260K-first600000.gguf";
    run_command({"/bin/sh", "-c", "head -c 600000 '" + model + "' > '" + half + "'"});
    r = run_tool({"-m", half, "-p", "hi"});
    expect_clean_failure(r, half);
    EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
}

TEST(RunTool, MissingModelIsRejectedByName) {
    const std::string path = test_dir("RunTool.Missing") + "/no-such-model.gguf";
    CommandResult r = run_tool({"-m", path, "-p", "hi"});
    expect_clean_failure(r, path);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
}

TEST(RunTool, PromptLongerThanContextIsRuntimeError) {
    const std::string model = stories_model();
    ASSERT_FALSE(model.empty());
    CommandResult r = run_tool({"-m", model, "--fixture", "64", "-c", "32"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("longer than the context of 32 tokens"), std::string::npos) << r.err;
}

TEST(RunTool, BadFlagsAreUsageErrors) {
    const std::string model = stories_model();
    ASSERT_FALSE(model.empty());
    struct bad_case { std::vector<std::string> args; std::string named; };
    const std::vector<bad_case> cases = {
        {{"-p", "hi"}, "--model"},                                   // no model
        {{"-m", model}, "--fixture"},                                // no prompt source
        {{"-m", model, "-p", "hi", "--fixture", "4"}, "--fixture"},  // both prompt sources
        {{"-m", model, "-p", "hi", "-t", "0"}, "--threads"},
        {{"-m", model, "-p", "hi", "-b", "0"}, "--ubatch"},
        {{"-m", model, "-p", "hi", "-n", "-3"}, "--n-predict"},
        {{"-m", model, "-p", "hi", "--no-such-flag"}, "--no-such-flag"},
    };
    for (const auto & c : cases) {
        CommandResult r = run_tool(c.args);
        EXPECT_EQ(r.exit_code, 2) << c.named << ": " << r.err;
        EXPECT_NE(r.err.find(c.named), std::string::npos) << r.err;
    }
}
