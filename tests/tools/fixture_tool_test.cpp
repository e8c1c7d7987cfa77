// moezip-fixture: determinism, engine acceptance of every preset/type used in tests, and its
// error messages. Models are the tiny and small presets only (a few MB, well under a second each).
#include "tests/support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <sys/stat.h>
#include <vector>

using namespace moezip_test;

namespace {

CommandResult run_fixture(const std::vector<std::string> & args) { return run_tool("moezip-fixture", args); }

/// Runs moezip-run on `model` with `args` and a --json report; returns the parsed report
/// (null when the run failed, with the failure recorded in the test).
nlohmann::json run_model(const std::string & model, const std::vector<std::string> & args, const std::string & dir) {
    const std::string json_path = dir + "/out.json";
    std::vector<std::string> argv = {bin_path("moezip-run"), "-m", model};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--json", json_path});
    CommandResult r = run_command(argv, {}, 120);
    EXPECT_EQ(r.exit_code, 0) << "moezip-run failed on " << model << ":\n" << r.err;
    if (r.exit_code != 0) return nullptr;
    nlohmann::json report = nlohmann::json::parse(read_file(json_path), nullptr, false);
    EXPECT_FALSE(report.is_discarded()) << "moezip-run wrote no valid JSON to " << json_path;
    return report.is_discarded() ? nlohmann::json() : report;
}

} // namespace

TEST(FixtureTool, SameFlagsGiveSameBytes) {
    const std::string dir = test_dir("fixture_same_flags");
    for (const char * name : {"a.gguf", "b.gguf"}) {
        CommandResult r = run_fixture({"--preset", "small", "--type", "q4_K", "--seed", "7", "-o", dir + "/" + name});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    const std::string a = sha256_file(dir + "/a.gguf");
    ASSERT_EQ(a.size(), 64u);
    EXPECT_EQ(a, sha256_file(dir + "/b.gguf"));
}

TEST(FixtureTool, DifferentSeedGivesDifferentBytes) {
    const std::string dir = test_dir("fixture_seed");
    ASSERT_EQ(run_fixture({"--preset", "tiny", "--type", "q8_0", "--seed", "1", "-o", dir + "/s1.gguf"}).exit_code, 0);
    ASSERT_EQ(run_fixture({"--preset", "tiny", "--type", "q8_0", "--seed", "2", "-o", dir + "/s2.gguf"}).exit_code, 0);
    const std::string s1 = sha256_file(dir + "/s1.gguf");
    ASSERT_EQ(s1.size(), 64u);
    EXPECT_NE(s1, sha256_file(dir + "/s2.gguf"));
}

/// (preset, type) pairs that tests and benchmarks use.
class FixtureToolModel : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(FixtureToolModel, LoadsAndDecodesEightTokens) {
    const auto & p = GetParam();
    const std::string model = fixture_model({"--preset", p.first, "--type", p.second});
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("fixture_decode_" + p.first + "_" + p.second);
    nlohmann::json report = run_model(model, {"--fixture", "16", "-n", "8", "-t", "1"}, dir);
    ASSERT_TRUE(report.is_object());
    ASSERT_TRUE(report["tokens"].is_array());
    EXPECT_EQ(report["tokens"].size(), 8u);
    EXPECT_EQ(report["logits_xxh3"].size(), 8u);
}

INSTANTIATE_TEST_SUITE_P(FixtureTool, FixtureToolModel,
                         ::testing::Values(std::make_pair("tiny", "f32"), std::make_pair("tiny", "f16"),
                                           std::make_pair("tiny", "q8_0"), std::make_pair("small", "q4_K"),
                                           std::make_pair("small", "q6_K")),
                         [](const ::testing::TestParamInfo<std::pair<std::string, std::string>> & info) {
                             return info.param.first + "_" + info.param.second;
                         });

TEST(FixtureTool, EnglishWordsAreSingleTokens) {
    // BOS plus one piece per word: the vocab holds "▁once", "▁upon", ... and their prefixes.
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("fixture_english");
    nlohmann::json report = run_model(model, {"-p", "once upon a time there was a little girl", "-n", "2"}, dir);
    ASSERT_TRUE(report.is_object());
    ASSERT_TRUE(report["prompt_tokens"].is_array());
    EXPECT_EQ(report["prompt_tokens"].size(), 10u) << report["prompt_tokens"].dump();
    EXPECT_EQ(report["prompt_tokens"][0], 1) << "first token should be BOS <s> (id 1)";
}

TEST(FixtureTool, VocabSizeOverridePadsTheVocab) {
    const std::string dir = test_dir("fixture_vocab_size");
    CommandResult r = run_fixture({"--preset", "tiny", "--type", "q8_0", "--vocab-size", "2048", "--n-layer", "3",
                                   "-o", dir + "/v.gguf"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json report = run_model(dir + "/v.gguf", {"--fixture", "8", "-n", "4"}, dir);
    ASSERT_TRUE(report.is_object());
    EXPECT_EQ(report["n_vocab"], 2048);
    EXPECT_EQ(report["tokens"].size(), 4u);
}

TEST(FixtureTool, BlockSizeMismatchNamesTheTensor) {
    const std::string dir = test_dir("fixture_block_size");
    CommandResult r = run_fixture({"--preset", "tiny", "--type", "q4_K", "-o", dir + "/bad.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("token_embd.weight"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ne0=64"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("q4_K"), std::string::npos) << r.err;
    EXPECT_FALSE(file_exists(dir + "/bad.gguf")) << "no file may be left for a rejected type";
}

TEST(FixtureTool, UnknownPresetIsRejected) {
    const std::string dir = test_dir("fixture_bad_preset");
    CommandResult r = run_fixture({"--preset", "huge", "-o", dir + "/x.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("unknown --preset 'huge'"), std::string::npos) << r.err;
}

TEST(FixtureTool, UnknownTypeIsRejected) {
    const std::string dir = test_dir("fixture_bad_type");
    CommandResult r = run_fixture({"--type", "q9_9", "-o", dir + "/x.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("unknown --type 'q9_9'"), std::string::npos) << r.err;
}

// Type names are ggml's, compared without case (tools/model-common/writable_types.h).
TEST(FixtureTool, TypeNamesAreReadWithoutCase) {
    const std::string dir = test_dir("fixture_type_case");
    for (const char * type : {"q8_0", "Q8_0"}) {
        CommandResult r = run_fixture({"--preset", "tiny", "--type", type, "-o", dir + "/" + type + ".gguf"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
    }
    const std::string lower = sha256_file(dir + "/q8_0.gguf");
    ASSERT_EQ(lower.size(), 64u);
    EXPECT_EQ(lower, sha256_file(dir + "/Q8_0.gguf"));
}

TEST(FixtureTool, BadDimensionsAreRejected) {
    const std::string dir = test_dir("fixture_bad_dims");
    CommandResult r = run_fixture({"--n-head", "4", "--n-head-kv", "3", "-o", dir + "/x.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("--n-head-kv"), std::string::npos) << r.err;
    r = run_fixture({"--n-expert-used", "9", "-o", dir + "/x.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("--n-expert-used"), std::string::npos) << r.err;
}

TEST(FixtureTool, UnwritableOutputIsReported) {
    CommandResult r = run_fixture({"-o", "/nonexistent-dir/x.gguf"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("cannot create /nonexistent-dir/x.gguf"), std::string::npos) << r.err;
    r = run_fixture({"-o", "/dev/full"}); // every write fails with ENOSPC
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("cannot write /dev/full"), std::string::npos) << r.err;
}

TEST(FixtureTool, OutputIsRequired) {
    CommandResult r = run_fixture({"--preset", "tiny"});
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("--output"), std::string::npos) << r.err;
}
