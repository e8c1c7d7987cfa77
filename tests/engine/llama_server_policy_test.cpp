// The failure policy in the real llama-server (built from the pinned llama.cpp source), in experts
// mode with one worker that serves every expert: while the worker serves, the answers are those of
// the same server without moezip; once it is killed, the request whose compute moezip fails gets
// llama-server's HTTP 500 ("Compute error."), the server takes the next request (and answers again
// as before once a worker is back at the endpoint), and when SIGTERM
// stops it the preload makes its exit status 4 (llama-server's main returns 0), saying why.
// tests/trust/server_policy_test.cpp holds the same policy with moezip's own serving test host.
#include "tests/support/cluster.h"
#include "tests/support/engine_support.h"
#include "tests/support/llama_server.h"
#include "tests/support/worker_harness.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

using namespace moezip_test;
using nlohmann::json;

namespace {

const std::vector<std::string> kPrompts = {"Once upon a time", "The little girl"};
constexpr int kTokens = 24;

struct LlamaPolicyCase {
    const char * name;
    const char * top;       ///< top-level keys of the config
    const char * dispatch;  ///< keys of its [dispatch] table
};

void PrintTo(const LlamaPolicyCase & p, std::ostream * os) { *os << p.name; }

class LlamaServerPolicy : public ::testing::TestWithParam<LlamaPolicyCase> {};

/// llama-server's flags for these tests: one thread, one slot, GGUF-layout experts (no repack).
std::vector<std::string> server_args(const std::string & model) {
    return {"-m", model, "-t", "1", "--parallel", "1", "-c", "1024", "--no-repack", "--no-webui"};
}

} // namespace

TEST_P(LlamaServerPolicy, AKilledWorkerFailsARequestTheServerGoesOnAndExitsWithStatus4) {
    const LlamaPolicyCase & p = GetParam();
    std::string why;
    const TestEngine * e = test_engine("llama.cpp:pinned", &why);
    if (e == nullptr) GTEST_SKIP() << why;
    const std::string model = upcycled_stories(8, 2, "replicate");  // writes English
    const std::string dir = test_dir(std::string("llama_server_policy_") + p.name);

    // the answers of the same server without moezip
    std::vector<std::string> plain;
    {
        LlamaServer s;
        ASSERT_TRUE(s.start(e->program("llama-server"), server_args(model), dir, "plain")) << s.error();
        for (const std::string & q : kPrompts) {
            const ServerAnswer a = s.complete(q, kTokens);
            ASSERT_EQ(a.http_status, 200) << a.body;
            ASSERT_GT(a.text.size(), 20u) << a.body;
            plain.push_back(a.text);
        }
        ASSERT_EQ(s.stop(SIGTERM), 0) << s.stderr_text();
    }

    WorkerProcess w;
    w.set_program(e->tool("moezip-worker"));
    ASSERT_TRUE(w.start({"--model", model, "--bind", "ipc://" + dir + "/w.sock", "--threads", "1", "--experts", "0-7"}, dir))
        << w.error();
    const std::string cfg = write_moezip_config(dir, "moezip", std::string("mode = \"experts\"\n") + p.top +
                                                                  "[[worker]]\nendpoint = \"" + w.endpoint() +
                                                                  "\"\nexperts = \"0-7\"\n[dispatch]\ntimeout_ms = 1000\n" +
                                                                  p.dispatch);
    LlamaServer s;
    ASSERT_TRUE(s.start(e->program("llama-server"), server_args(model), dir, "moezip",
                        {{"LD_PRELOAD", e->preload()}, {"MOEZIP_CONFIG", cfg}}))
        << s.error();
    for (size_t i = 0; i < kPrompts.size(); ++i) {
        const ServerAnswer a = s.complete(kPrompts[i], kTokens);
        ASSERT_EQ(a.http_status, 200) << a.body << "\n" << s.stderr_text();
        EXPECT_EQ(a.text, plain[i]) << kPrompts[i];
    }
    ASSERT_EQ(w.stop(SIGKILL, 5000), 128 + SIGKILL);
    // the request that needs the lost worker fails as llama-server fails a decode ...
    const ServerAnswer failed = s.complete(kPrompts[0], kTokens);
    EXPECT_EQ(failed.http_status, 500) << failed.body;
    EXPECT_NE(failed.body.find("Compute error."), std::string::npos) << failed.body;
    EXPECT_EQ(failed.text, "");
    // ... and the server goes on: the next request gets its answer (the same failure, the worker is gone)
    const ServerAnswer later = s.complete(kPrompts[1], kTokens);
    EXPECT_EQ(later.http_status, 500) << later.body;
    EXPECT_NE(later.body.find("Compute error."), std::string::npos) << later.body;
    // a worker back at the same endpoint: the server answers as before, as the plain server does
    WorkerProcess back;
    back.set_program(e->tool("moezip-worker"));
    ASSERT_TRUE(back.start({"--model", model, "--bind", w.endpoint(), "--threads", "1", "--experts", "0-7"}, dir)) << back.error();
    // (moezip probes it again after its back-off or once the new connection's handshake completes:
    // requests before that fail as above)
    ServerAnswer again;
    for (int i = 0; i < 60 && again.http_status != 200; ++i) {
        if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
        again = s.complete(kPrompts[0], kTokens);
        ASSERT_TRUE(again.http_status == 200 || again.body.find("Compute error.") != std::string::npos) << again.body;
    }
    EXPECT_EQ(again.http_status, 200) << "the server never answered again with the worker back: " << again.body;
    EXPECT_EQ(again.text, plain[0]);

    const int rc = s.stop(SIGTERM);
    const std::string err = s.stderr_text();
    EXPECT_EQ(rc, 4) << err;
    EXPECT_NE(err.find("The run FAILED (exit status 4)"), std::string::npos) << err;
    EXPECT_NE(err.find("graph computes failed"), std::string::npos) << err;
    const json rep = load_json(dir + "/moezip.json");
    EXPECT_EQ(rep["complete"], true);
    EXPECT_EQ(rep["engine"]["built_for"], e->engine_name);
    EXPECT_GE(rep["checks"].value("computes_failed", (int64_t) -1), 2) << "one per failed request at least: " << rep["checks"].dump();
    EXPECT_GT(sum_layers(rep, "remote_slots"), 0u) << "the worker computed the answered requests";
    EXPECT_TRUE(errors_mention(rep, "graph computes failed")) << rep["errors"].dump();
}

INSTANTIATE_TEST_SUITE_P(Policies, LlamaServerPolicy,
                         ::testing::Values(LlamaPolicyCase{"abort", "", "on_worker_error = \"abort\"\n"},
                                           LlamaPolicyCase{"require_intercept", "require_intercept = true\n",
                                                           "on_worker_error = \"local\"\n"}),
                         [](const ::testing::TestParamInfo<LlamaPolicyCase> & i) { return std::string(i.param.name); });
