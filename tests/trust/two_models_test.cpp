// Two models in one process (a server with a draft model for speculative decoding, a program that
// holds two models): only the distributed one goes to the workers. The other runs in the engine
// alone, is named in the report with its reason, is not counted against require_intercept, and
// never gets a worker refused or blamed for weights it was never meant to serve.
#include "tests/support/cluster.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>
#include <string>
#include <vector>

using namespace moezip_test;
using nlohmann::json;

namespace {

std::string model_a() { return fixture_model({"--preset", "tiny", "--type", "f32"}); }
/// Same architecture and shapes as model_a, other random weights (the "draft" model).
std::string model_b() { return fixture_model({"--preset", "tiny", "--type", "f32", "--seed", "7"}); }

std::string real_path(const std::string & p) {
    char buf[PATH_MAX];
    return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

// The workers' side of a run: no refusal, nothing computed here instead, no "weights differ".
void expect_no_worker_blamed(const json & rep) {
    EXPECT_FALSE(errors_mention(rep, "weights differ")) << rep["errors"].dump();
    EXPECT_FALSE(errors_mention(rep, "refused")) << rep["errors"].dump();
    for (const json & w : rep["workers"]) EXPECT_EQ(w["refusals"].get<int>(), 0) << w.dump();
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u) << rep["layers"].dump();
}

// The report names exactly one other model, `path`, with the reason and both of its layers.
void expect_other_model(const json & rep, const std::string & path) {
    ASSERT_EQ(rep["other_models"].size(), 1u) << rep["other_models"].dump();
    const json & o = rep["other_models"][0];
    EXPECT_EQ(o["path"].get<std::string>(), path);
    EXPECT_EQ(o["reason"].get<std::string>(), "not the distributed model (" + path + ")");
    EXPECT_EQ(o["layers"], json::array({0, 1})) << "the tiny fixture has two MoE layers";
    EXPECT_GT(o["regions"].get<int>(), 0);
    EXPECT_EQ(rep["checks"]["regions_other_model"], o["regions"]);
    EXPECT_EQ(rep["checks"]["regions_passthrough"].get<int>(), 0) << "the other model's regions are no passthrough";
}

struct TwoCase {
    const char * name;
    bool configured;  ///< the config names the distributed model (`model`), else the oldest mapped is
};

class TwoModels : public ::testing::TestWithParam<TwoCase> {};

} // namespace

TEST_P(TwoModels, TheSecondModelRunsInTheEngineNamedAndNoWorkerIsBlamed) {
    const TwoCase tc = GetParam();
    const std::string a = model_a(), b = model_b();
    ASSERT_FALSE(a.empty() || b.empty());
    Cluster c{test_dir(std::string("two_models_") + tc.name), {}};
    ASSERT_TRUE(c.start_worker(a, "ipc://" + c.dir + "/w0.sock", "0-3"));
    ASSERT_TRUE(c.start_worker(a, "ipc://" + c.dir + "/w1.sock", "4-7"));
    std::string body = "mode = \"experts\"\nrequire_intercept = true\n";
    if (tc.configured) body += "model = \"" + a + "\"\n";
    body += worker_lines(c, {"0-3", "4-7"});
    const std::vector<std::string> extra = {"--fixture", "24", "-n", "12"};

    ASSERT_EQ(run_command(test_host("two", {a, b}, c.dir + "/plain.json", extra)).exit_code, 0);
    CommandResult dist = run_preloaded(test_host("two", {a, b}, c.dir + "/dist-run.json", extra), write_moezip_config(c.dir, "dist", body));
    ASSERT_EQ(dist.exit_code, 0) << "require_intercept holds: the draft model is not the distributed one\n" << dist.err;
    EXPECT_EQ(dist.err.find("weights differ"), std::string::npos) << dist.err;

    // A's runs bit-identical to the engine alone, and so are B's (computed by the engine alone)
    const json plain = host_runs(c.dir + "/plain.json"), runs = host_runs(c.dir + "/dist-run.json");
    ASSERT_EQ(runs.size(), 3u);
    EXPECT_EQ(plain, runs);

    const json rep = load_json(c.dir + "/dist.json");
    EXPECT_GT(sum_layers(rep, "remote_slots"), 0u) << "A's layers went to the workers: " << rep["layers"].dump();
    expect_no_worker_blamed(rep);
    expect_other_model(rep, real_path(b));
    EXPECT_EQ(rep["plans"]["made"].get<int>(), 2) << "plans only for A's two layers: " << rep["plans"].dump();
    // experts mode maps only the distributed model without MAP_POPULATE: the other is computed whole here
    struct stat st_a;
    ASSERT_EQ(stat(a.c_str(), &st_a), 0);
    EXPECT_EQ(rep["memory"]["model_mapped_lazily_bytes"].get<int64_t>(), (int64_t) st_a.st_size) << rep["memory"].dump();
    const CommandResult show = run_command({bin_path("moezip-report"), "show", c.dir + "/dist.json"});
    EXPECT_NE(show.out.find("other model: not the distributed model (" + real_path(b) + "): " + rep["other_models"][0]["regions"].dump() +
                            " MoE regions computed by the engine alone"),
              std::string::npos) << show.out;
}

INSTANTIATE_TEST_SUITE_P(Config, TwoModels, ::testing::Values(TwoCase{"model_named", true}, TwoCase{"oldest_mapped", false}),
                         [](const ::testing::TestParamInfo<TwoCase> & i) { return std::string(i.param.name); });

TEST(TwoModelsConfigured, TheNamedModelIsDistributedEvenWhenLoadedSecond) {
    // The workers serve B, the host loads A first: without `model` A (the oldest) would be
    // distributed and refused; `model = B` distributes B and leaves A to the engine.
    const std::string a = model_a(), b = model_b();
    ASSERT_FALSE(a.empty() || b.empty());
    Cluster c{test_dir("two_models_named_second"), {}};
    ASSERT_TRUE(c.start_worker(b, "ipc://" + c.dir + "/w0.sock", "0-7"));
    const std::string body = "mode = \"experts\"\nrequire_intercept = true\nmodel = \"" + b + "\"\n" + worker_lines(c, {"0-7"});
    const std::vector<std::string> extra = {"--fixture", "24", "-n", "8"};
    ASSERT_EQ(run_command(test_host("two", {a, b}, c.dir + "/plain.json", extra)).exit_code, 0);
    CommandResult dist = run_preloaded(test_host("two", {a, b}, c.dir + "/dist-run.json", extra), write_moezip_config(c.dir, "dist", body));
    ASSERT_EQ(dist.exit_code, 0) << dist.err;
    EXPECT_EQ(host_runs(c.dir + "/plain.json"), host_runs(c.dir + "/dist-run.json"));
    const json rep = load_json(c.dir + "/dist.json");
    EXPECT_GT(sum_layers(rep, "remote_slots"), 0u) << "B's layers went to the worker: " << rep["layers"].dump();
    expect_no_worker_blamed(rep);
    expect_other_model(rep, real_path(a));
}

TEST(TwoModelsConfigured, AModelFileThatIsNotThereNamesTheKeyAndFailsRequireIntercept) {
    const std::string a = model_a();
    ASSERT_FALSE(a.empty());
    Cluster c{test_dir("two_models_missing_file"), {}};
    ASSERT_TRUE(c.start_worker(a, "ipc://" + c.dir + "/w0.sock", "0-7"));
    const std::string missing = c.dir + "/no-such-model.gguf";
    const std::string cfg = write_moezip_config(c.dir, "dist", "mode = \"experts\"\nrequire_intercept = true\nmodel = \"" + missing +
                                                                  "\"\n" + worker_lines(c, {"0-7"}));
    CommandResult dist = run_preloaded(test_host("two", {a, a}, c.dir + "/dist-run.json", {"-n", "4"}), cfg);
    EXPECT_EQ(dist.exit_code, 4) << dist.err;
    // write_moezip_config writes two lines first: `model` is on line 5
    EXPECT_NE(dist.err.find(cfg + ":5: model: \"" + missing + "\": No such file or directory"), std::string::npos) << dist.err;
}

// `model` names a GGUF file the host never loads (a typo'd path that happens to exist, an old
// file): nothing is distributed, so require_intercept must fail the run (exit 4) and say that the
// configured model was never loaded, rather than pass a run computed by the engine alone.
TEST(TwoModelsConfigured, AConfiguredModelThatIsNeverLoadedFailsRequireIntercept) {
    const std::string a = model_a(), b = model_b();
    ASSERT_FALSE(a.empty() || b.empty());
    Cluster c{test_dir("two_models_named_never_loaded"), {}};
    ASSERT_TRUE(c.start_worker(b, "ipc://" + c.dir + "/w0.sock", "0-7"));
    const std::string body = "mode = \"experts\"\nrequire_intercept = true\nmodel = \"" + b + "\"\n" + worker_lines(c, {"0-7"});
    CommandResult dist = run_preloaded(test_host("two", {a, a}, c.dir + "/dist-run.json", {"--fixture", "24", "-n", "4"}),
                                       write_moezip_config(c.dir, "dist", body));
    const json rep = load_json(c.dir + "/dist.json");
    EXPECT_EQ(sum_layers(rep, "remote_slots"), 0u) << rep["layers"].dump();
    EXPECT_EQ(dist.exit_code, 4) << "require_intercept with no region of the configured model handled\n" << dist.err;
    EXPECT_TRUE(errors_mention(rep, "require_intercept: no MoE layer of the distributed model was seen")) << rep["errors"].dump();
}

// The same file loaded under two names (a symlink), the config naming it by the link: both loads
// are the distributed model, the workers compute for both, and the runs equal the engine's.
TEST(TwoModelsConfigured, TheSameFileUnderTwoNamesIsDistributedTwiceBitForBit) {
    const std::string a = model_a();
    ASSERT_FALSE(a.empty());
    Cluster c{test_dir("two_models_same_file"), {}};
    const std::string link = c.dir + "/a-link.gguf";
    unlink(link.c_str());
    ASSERT_EQ(symlink(a.c_str(), link.c_str()), 0);
    ASSERT_TRUE(c.start_worker(a, "ipc://" + c.dir + "/w0.sock", "4-7"));
    const std::string body = "mode = \"experts\"\nrequire_intercept = true\nmodel = \"" + link + "\"\n[experts]\nlocal = \"0-3\"\n" +
                             worker_lines(c, {"4-7"});
    const std::vector<std::string> extra = {"--fixture", "24", "-n", "8"};
    ASSERT_EQ(run_command(test_host("two", {a, link}, c.dir + "/plain.json", extra)).exit_code, 0);
    CommandResult dist = run_preloaded(test_host("two", {a, link}, c.dir + "/dist-run.json", extra), write_moezip_config(c.dir, "dist", body));
    ASSERT_EQ(dist.exit_code, 0) << dist.err;
    EXPECT_EQ(host_runs(c.dir + "/plain.json"), host_runs(c.dir + "/dist-run.json"));
    const json rep = load_json(c.dir + "/dist.json");
    expect_no_worker_blamed(rep);
    EXPECT_EQ(rep["other_models"].size(), 0u) << rep["other_models"].dump();
    EXPECT_GT(sum_layers(rep, "remote_slots"), 0u);
}
