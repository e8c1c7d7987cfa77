// Two models in the real llama-server (built from the pinned llama.cpp source): speculative
// decoding with a draft model (`-md`, `--spec-type draft-simple`). Two workers serve the main model
// A in experts mode under require_intercept; the draft model B (another MoE model with the same
// vocabulary) runs in the engine, is named in the report's other_models, gets no worker refused, and
// the server answers exactly as the same server without moezip and exits 0 on SIGTERM; with the
// config's `model` key and without it (the oldest model mapped: llama-server loads A before B).
// tests/trust/two_models_test.cpp holds the same with moezip's own test host.
#include "tests/support/cluster.h"
#include "tests/support/engine_support.h"
#include "tests/support/llama_server.h"
#include "tests/support/worker_harness.h"

#include <gtest/gtest.h>

#include <climits>
#include <csignal>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

using namespace moezip_test;
using nlohmann::json;

namespace {

const std::vector<std::string> kPrompts = {"Once upon a time", "The little girl"};
constexpr int kTokens = 24;

struct DraftCase {
    const char * name;
    bool configured;  ///< the config names the distributed model (`model`)
};

void PrintTo(const DraftCase & c, std::ostream * os) { *os << c.name; }

class LlamaServerDraft : public ::testing::TestWithParam<DraftCase> {};

std::string real_path(const std::string & p) {
    char buf[PATH_MAX];
    return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

/// llama-server with draft model `b` for main model `a`: one thread each, one slot, no repack.
std::vector<std::string> draft_server_args(const std::string & a, const std::string & b) {
    return {"-m", a, "-md", b, "--spec-type", "draft-simple", "--spec-draft-n-max", "4", "--spec-draft-n-min", "1",
            "-t", "1", "-td", "1", "--parallel", "1", "-c", "1024", "--no-repack", "--no-webui"};
}

/// The tokens the draft model proposed for this answer (llama-server's timings.draft_n; 0 without).
int64_t drafted(const ServerAnswer & a) {
    const json j = json::parse(a.body, nullptr, false);
    return j.is_object() && j.contains("timings") ? j["timings"].value("draft_n", (int64_t) 0) : 0;
}

} // namespace

TEST_P(LlamaServerDraft, TheDraftModelRunsInTheEngineAndTheAnswersAreThePlainServers) {
    const DraftCase & tc = GetParam();
    std::string why;
    const TestEngine * e = test_engine("llama.cpp:pinned", &why);
    if (e == nullptr) GTEST_SKIP() << why;
    const std::string a = upcycled_stories(8, 2, "replicate");  // writes English
    const std::string b = upcycled_stories(4, 2, "split");      // the same vocabulary, other weights
    const std::string dir = test_dir(std::string("llama_server_draft_") + tc.name);

    std::vector<std::string> plain;
    {
        LlamaServer s;
        ASSERT_TRUE(s.start(e->program("llama-server"), draft_server_args(a, b), dir, "plain")) << s.error();
        for (const std::string & q : kPrompts) {
            const ServerAnswer ans = s.complete(q, kTokens);
            ASSERT_EQ(ans.http_status, 200) << ans.body;
            ASSERT_GT(ans.text.size(), 20u) << ans.body;
            ASSERT_GT(drafted(ans), 0) << "no speculative decoding: " << ans.body;
            plain.push_back(ans.text);
        }
        ASSERT_EQ(s.stop(SIGTERM), 0) << s.stderr_text();
    }

    WorkerProcess w0, w1;
    w0.set_program(e->tool("moezip-worker"));
    w1.set_program(e->tool("moezip-worker"));
    ASSERT_TRUE(w0.start({"--model", a, "--bind", "ipc://" + dir + "/w0.sock", "--threads", "1", "--experts", "0-3"}, dir))
        << w0.error();
    ASSERT_TRUE(w1.start({"--model", a, "--bind", "ipc://" + dir + "/w1.sock", "--threads", "1", "--experts", "4-7"}, dir))
        << w1.error();
    const std::string cfg = write_moezip_config(dir, "moezip", (tc.configured ? "model = \"" + a + "\"\n" : std::string()) +
                                                                  experts_config({w0.endpoint(), w1.endpoint()}, true));
    LlamaServer s;
    ASSERT_TRUE(s.start(e->program("llama-server"), draft_server_args(a, b), dir, "moezip",
                        {{"LD_PRELOAD", e->preload()}, {"MOEZIP_CONFIG", cfg}}))
        << s.error();
    for (size_t i = 0; i < kPrompts.size(); ++i) {
        const ServerAnswer ans = s.complete(kPrompts[i], kTokens);
        ASSERT_EQ(ans.http_status, 200) << ans.body << "\n" << s.stderr_text();
        EXPECT_EQ(ans.text, plain[i]) << kPrompts[i];
        EXPECT_GT(drafted(ans), 0) << "no speculative decoding: " << ans.body;
    }
    const int rc = s.stop(SIGTERM);
    const std::string err = s.stderr_text();
    EXPECT_EQ(rc, 0) << err;
    EXPECT_EQ(err.find("FAILED"), std::string::npos) << err;

    const json rep = load_json(dir + "/moezip.json");
    EXPECT_EQ(rep["complete"], true);
    EXPECT_EQ(rep["checks"]["regions_passthrough"], 0);
    EXPECT_EQ(rep["checks"].value("computes_failed", (int64_t) -1), 0) << rep["checks"].dump();
    EXPECT_GT(sum_layers(rep, "remote_slots"), 0u) << "A's layers went to the workers: " << rep["layers"].dump();
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u) << rep["layers"].dump();
    const json others = rep.value("other_models", json::array());
    ASSERT_EQ(others.size(), 1u) << others.dump();
    const json & o = others[0];
    EXPECT_EQ(o["path"].get<std::string>(), real_path(b));
    EXPECT_EQ(o["reason"].get<std::string>(), "not the distributed model (" + real_path(b) + ")");
    EXPECT_GT(o["regions"].get<int>(), 0);
    EXPECT_FALSE(errors_mention(rep, "weights differ")) << rep["errors"].dump();
    EXPECT_FALSE(errors_mention(rep, "refused")) << rep["errors"].dump();
    ASSERT_EQ(rep["workers"].size(), 2u);
    for (const json & wk : rep["workers"]) {
        EXPECT_EQ(wk["refused"], "") << wk.dump();
        EXPECT_EQ(wk["refusals"].get<int>(), 0) << wk.dump();
        EXPECT_GT(wk["slots"].get<int>(), 0) << wk.dump();
    }
}

INSTANTIATE_TEST_SUITE_P(Config, LlamaServerDraft,
                         ::testing::Values(DraftCase{"model_key", true}, DraftCase{"oldest_mapped", false}),
                         [](const ::testing::TestParamInfo<DraftCase> & i) { return std::string(i.param.name); });
