// The failure policy in a host that serves requests and goes on after a failed one, as llama-server
// does (it answers HTTP 500 "Compute error." and takes the next request, and its main returns 0 when
// SIGINT or SIGTERM stops it): on_worker_error = "abort" and require_intercept fail the requests
// whose computes they cannot let pass, and the process still ends with status 4, saying why in words
// that match what happened (it went on serving). The host is moezip-test-host serve.
#include "tests/support/cluster.h"
#include "tests/support/serving_host.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <ostream>
#include <string>

using namespace moezip_test;
using nlohmann::json;

namespace {

std::string tiny_q8() { return fixture_model({"--preset", "tiny", "--type", "q8_0"}); }

struct PolicyCase {
    const char * name;
    const char * top;       ///< top-level keys of the config
    const char * dispatch;  ///< keys of its [dispatch] table
};

// gtest prints a failed case by this, not by its bytes
void PrintTo(const PolicyCase & p, std::ostream * os) { *os << p.name; }

class ServerPolicy : public ::testing::TestWithParam<PolicyCase> {};

/// experts mode, this host experts 0-3, the cluster's one worker 4-7, a request timeout of 500 ms.
std::string policy_config(const Cluster & c, const std::string & name, const PolicyCase & p) {
    return write_moezip_config(c.dir, name, std::string("mode = \"experts\"\n") + p.top + "[experts]\nlocal = \"0-3\"\n[dispatch]\n" +
                                                 "timeout_ms = 500\n" + p.dispatch + worker_lines(c, {"4-7"}));
}

} // namespace

TEST_P(ServerPolicy, AWorkerLostWhileServingFailsItsRequestsAndTheServerExitsWithStatus4) {
    const PolicyCase & p = GetParam();
    const std::string model = tiny_q8();
    Cluster c{test_dir(std::string("server_policy_") + p.name), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w.sock", "4-7"));
    const std::string cfg = policy_config(c, "serve", p);
    ServingHost host;
    ASSERT_TRUE(host.start(model, cfg, c.dir, "serve"));
    ASSERT_TRUE(host.wait_until([](int64_t served, int64_t) { return served >= 3; })) << "no request was served";
    ASSERT_EQ(host.failed(), 0) << "a request failed while the worker served";
    ASSERT_EQ(c.workers[0]->stop(SIGKILL, 5000), 128 + SIGKILL);
    // the requests that need the lost worker fail, and the server takes the next one
    const bool failed = host.wait_until([](int64_t, int64_t f) { return f >= 3; });
    const CommandResult & r = host.stop();
    ASSERT_TRUE(failed) << "no request failed after the worker was killed: " << r.err;
    const json counts = load_json(host.json_path())["serve"];
    EXPECT_GE(counts["failed"].get<int64_t>(), 3) << counts.dump();
    EXPECT_NE(r.err.find("moezip-test-host: serve:"), std::string::npos) << "it served until SIGTERM: " << r.err;
    // ... and still did not end as a success
    EXPECT_EQ(r.exit_code, 4) << r.err;
    EXPECT_NE(r.err.find("The run FAILED (exit status 4)"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("graph computes failed, and with them the host's requests"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("the process will exit with status 4"), std::string::npos) << "said when the first compute failed: " << r.err;
    EXPECT_EQ(r.err.find("the run stops"), std::string::npos) << "the server went on serving: " << r.err;
    const json rep = load_json(c.dir + "/serve.json");
    EXPECT_EQ(rep["complete"], true);
    // every failed request failed in a compute moezip failed (a request computes several graphs)
    EXPECT_GE(rep["checks"].value("computes_failed", (int64_t) -1), counts["failed"].get<int64_t>()) << rep["checks"].dump();
    EXPECT_TRUE(errors_mention(rep, "graph computes failed")) << rep["errors"].dump();
}

TEST_P(ServerPolicy, AServerWhoseWorkerServedEveryRequestExitsWith0) {
    const PolicyCase & p = GetParam();
    const std::string model = tiny_q8();
    Cluster c{test_dir(std::string("server_policy_ok_") + p.name), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w.sock", "4-7"));
    ServingHost host;
    ASSERT_TRUE(host.start(model, policy_config(c, "serve", p), c.dir, "serve"));
    const bool served = host.wait_until([](int64_t s, int64_t) { return s >= 5; });
    const CommandResult & r = host.stop();
    ASSERT_TRUE(served) << r.err;
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(load_json(host.json_path())["serve"]["failed"], 0);
    const json rep = load_json(c.dir + "/serve.json");
    EXPECT_EQ(rep["checks"].value("computes_failed", (int64_t) -1), 0) << rep["checks"].dump();
    EXPECT_GT(sum_layers(rep, "remote_slots"), 0u);
}

// A worker that stops answering without closing its link (SIGSTOP: each request times out), and
// the server stopped by SIGINT during that outage: under "abort" it still exits with status 4, its
// report complete and counting the failed computes; the stopped worker does not delay the exit.
TEST(ServerPolicyOutage, SigintDuringASilentWorkersOutageUnderAbortExitsWithStatus4AndACompleteReport) {
    const std::string model = tiny_q8();
    Cluster c{test_dir("server_policy_sigint_outage"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w.sock", "4-7"));
    const PolicyCase p{"abort", "", "on_worker_error = \"abort\"\n"};
    ServingHost host;
    ASSERT_TRUE(host.start(model, policy_config(c, "serve", p), c.dir, "serve"));
    ASSERT_TRUE(host.wait_until([](int64_t served, int64_t) { return served >= 3; })) << "no request was served";
    ASSERT_EQ(kill(c.workers[0]->pid(), SIGSTOP), 0);
    const bool failed = host.wait_until([](int64_t, int64_t f) { return f >= 2; });
    const auto t0 = std::chrono::steady_clock::now();
    const CommandResult & r = host.stop(SIGINT);
    const double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    kill(c.workers[0]->pid(), SIGCONT);
    ASSERT_TRUE(failed) << "no request failed while the worker was stopped: " << r.err;
    EXPECT_LT(stop_s, 10.0) << "the stopped worker held the exit up: " << r.err;
    EXPECT_EQ(r.exit_code, 4) << r.err;
    EXPECT_NE(r.err.find("The run FAILED (exit status 4)"), std::string::npos) << r.err;
    const json counts = load_json(host.json_path())["serve"];
    const json rep = load_json(c.dir + "/serve.json");
    EXPECT_EQ(rep["complete"], true);
    EXPECT_GE(rep["checks"].value("computes_failed", (int64_t) -1), counts["failed"].get<int64_t>()) << rep["checks"].dump();
    EXPECT_GE(rep["workers"][0]["timeouts"].get<int64_t>(), 1) << rep["workers"][0].dump();
}

INSTANTIATE_TEST_SUITE_P(Policies, ServerPolicy,
                         ::testing::Values(PolicyCase{"abort", "", "on_worker_error = \"abort\"\n"},
                                           PolicyCase{"abort_require_intercept", "require_intercept = true\n", "on_worker_error = \"abort\"\n"},
                                           PolicyCase{"local_require_intercept", "require_intercept = true\n", "on_worker_error = \"local\"\n"}),
                         [](const ::testing::TestParamInfo<PolicyCase> & i) { return std::string(i.param.name); });
