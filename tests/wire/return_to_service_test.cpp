// Return to service: a worker that is back (restarted, resumed after SIGSTOP, a refused one replaced
// by the right process) is used again within about a second of answering, not at the end of a
// back-off that doubled while it was away; with require_intercept the requests fail during the
// outage and only then. Measured on a host that serves request after request (moezip-test-host
// serve): the time from the worker's ready line (or SIGCONT) to the first result of it this host
// used (the report's remote_slots, flushed every 20 ms), and to the first request served again.
#include "coordinator/base/hex.h"
#include "tests/support/cluster.h"
#include "tests/support/serving_host.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <thread>

using namespace moezip_test;
using nlohmann::json;

namespace {

// Generous for a loaded 2-core machine: the back-off these tests let grow would make it 7 s or more.
constexpr double kBackWithinS = 2.0;

std::string tiny_q8() { return fixture_model({"--preset", "tiny", "--type", "q8_0"}); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The host's periodic report at `path` once `ready` holds for it; null after timeout_s or once the
// host stopped.
json report_when(const std::string & path, const std::function<bool(const json &)> & ready, const ServingHost & host,
                 double timeout_s = 60) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds((int64_t) (timeout_s * 1000));
    while (host.running() && std::chrono::steady_clock::now() < until) {
        const json j = json::parse(read_file(path), nullptr, false);
        if (!j.is_discarded() && j.contains("workers") && j.contains("layers") && ready(j)) return j;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return nullptr;
}

uint64_t worker_failures(const json & rep) { return rep["workers"][0]["failures"].get<uint64_t>(); }

/// experts mode, this host experts 0-3, one worker 4-7 at `endpoint`, short timeouts, the report
/// flushed every 20 ms, require_intercept (requests fail while the worker is away).
std::string serving_config(const std::string & dir, const std::string & endpoint) {
    return write_moezip_config(dir, "serve", "mode = \"experts\"\nrequire_intercept = true\nreport_flush_ms = 20\n"
                                             "[experts]\nlocal = \"0-3\"\n[dispatch]\ntimeout_ms = 300\nconnect_timeout_ms = 2000\n"
                                             "[[worker]]\nendpoint = \"" + endpoint + "\"\nexperts = \"4-7\"\n");
}

/// The serve host's outputs without the preload, a few requests: what every served request must equal.
json plain_runs(const std::string & dir, const std::string & model) {
    const std::string out = dir + "/plain-run.json";
    CommandResult r = run_command(test_host("serve", {model}, out, {"-n", "4", "--requests", "3"}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return host_runs(out);
}

/// After the worker is back at `t_back`: its first result used here and the first request served
/// again, each within kBackWithinS. `remote_before` and `served_before` are counts from before.
void expect_back_in_service(const std::string & report, const ServingHost & host, std::chrono::steady_clock::time_point t_back,
                            uint64_t remote_before, int64_t served_before) {
    const json used = report_when(report, [&](const json & j) { return sum_layers(j, "remote_slots") > remote_before; }, host, 30);
    const double used_s = seconds_since(t_back);
    const bool served = host.wait_until([&](int64_t s, int64_t) { return s > served_before; }, 30);
    const double served_s = seconds_since(t_back);
    ASSERT_FALSE(used.is_null()) << "the worker was not used again within 30 s";
    ASSERT_TRUE(served) << "no request was served again within 30 s";
    printf("return to service: first result used %.3f s, first request served %.3f s after the worker was back\n", used_s, served_s);
    EXPECT_LT(used_s, kBackWithinS) << "the worker's first result was used " << used_s << " s after it was back";
    EXPECT_LT(served_s, kBackWithinS) << "the first request was served " << served_s << " s after the worker was back";
}

} // namespace

TEST(ReturnToService, ARestartedWorkerComputesWithinTwoSecondsOfItsReadyLine) {
    const std::string model = tiny_q8();
    Cluster c{test_dir("return_restart"), {}};
    const std::string endpoint = "ipc://" + c.dir + "/w.sock";
    ASSERT_TRUE(c.start_worker(model, endpoint, "4-7"));
    const json plain = plain_runs(c.dir, model);
    const std::string report = c.dir + "/serve.json";
    ServingHost host;
    ASSERT_TRUE(host.start(model, serving_config(c.dir, endpoint), c.dir, "serve"));
    ASSERT_TRUE(host.wait_until([](int64_t s, int64_t) { return s >= 3; })) << "no request was served";
    ASSERT_EQ(c.workers[0]->stop(SIGKILL, 5000), 128 + SIGKILL);
    // away long enough for the back-off to grow: the request that failed, then three probes of an
    // empty endpoint (1, 2 and 4 s apart); the next one would come 8 s later
    const json away = report_when(report, [](const json & j) { return worker_failures(j) >= 4; }, host, 60);
    ASSERT_FALSE(away.is_null()) << "the lost worker's probes were not counted";
    const int64_t failed_away = host.failed();
    const int64_t served_before = host.served();
    const uint64_t remote_before = sum_layers(away, "remote_slots");
    ASSERT_TRUE(c.start_worker(model, endpoint, "4-7"));  // returns at its ready line
    const auto ready = std::chrono::steady_clock::now();
    expect_back_in_service(report, host, ready, remote_before, served_before);
    const CommandResult & r = host.stop();
    EXPECT_GT(failed_away, 0) << "require_intercept failed the requests of the outage";
    EXPECT_EQ(r.exit_code, 4) << "the outage's failed requests fail the run: " << r.err;
    EXPECT_EQ(host_runs(host.json_path()), plain) << "every request served was bit-identical to the engine alone";
    const json rep = load_json(report);
    const json & w = rep["workers"][0];
    EXPECT_EQ(w["identity"]["instance"], moezip::hex64(c.workers[1]->instance())) << "the new process was verified: " << w.dump();
    EXPECT_GE(w.value("probes_on_connect", 0), 1) << "probed because it connected again: " << w.dump();
    EXPECT_GE(w.value("handshakes", 0), 2) << "the first connection and the new process's: " << w.dump();
}

TEST(ReturnToService, AWorkerResumedAfterSigstopComputesWithinTwoSecondsOfSigcont) {
    const std::string model = tiny_q8();
    Cluster c{test_dir("return_sigcont"), {}};
    const std::string endpoint = "ipc://" + c.dir + "/w.sock";
    ASSERT_TRUE(c.start_worker(model, endpoint, "4-7"));
    const json plain = plain_runs(c.dir, model);
    const std::string report = c.dir + "/serve.json";
    ServingHost host;
    ASSERT_TRUE(host.start(model, serving_config(c.dir, endpoint), c.dir, "serve"));
    ASSERT_TRUE(host.wait_until([](int64_t s, int64_t) { return s >= 3; })) << "no request was served";
    ASSERT_EQ(kill(c.workers[0]->pid(), SIGSTOP), 0);
    // its request times out, then three probes find it stopped (1, 2 and 4 s apart)
    const json away = report_when(report, [](const json & j) { return worker_failures(j) >= 4; }, host, 60);
    const int64_t served_before = host.served();
    const auto resumed = std::chrono::steady_clock::now();
    kill(c.workers[0]->pid(), SIGCONT);
    ASSERT_FALSE(away.is_null()) << "the stopped worker's failures were not counted";
    expect_back_in_service(report, host, resumed, sum_layers(away, "remote_slots"), served_before);
    const CommandResult & r = host.stop();
    EXPECT_EQ(r.exit_code, 4) << "the outage's failed requests fail the run: " << r.err;
    EXPECT_EQ(host_runs(host.json_path()), plain) << "every request served was bit-identical to the engine alone";
    const json rep = load_json(report);
    EXPECT_GE(rep["workers"][0].value("probes_on_connect", 0), 1) << "probed because it connected again: " << rep["workers"][0].dump();
    EXPECT_EQ(c.workers[0]->stop(SIGTERM, 5000), 0) << "the resumed worker served on";
}

TEST(ReturnToService, ARefusedWorkerReplacedByTheRightOneComputesWithinTwoSecondsOfItsReadyLine) {
    // The refused process exits; the probe its closed connection brings finds the endpoint empty
    // while the right worker loads. That probe must not push the next one back: the right worker is
    // asked as soon as it connects.
    const std::string model = tiny_q8();
    const std::string other = fixture_model({"--preset", "tiny", "--type", "q8_0", "--seed", "7"});
    Cluster c{test_dir("return_refused"), {}};
    const std::string endpoint = "ipc://" + c.dir + "/w.sock";
    ASSERT_TRUE(c.start_worker(other, endpoint, "4-7"));
    const std::string report = c.dir + "/serve.json";
    ServingHost host;
    ASSERT_TRUE(host.start(model, serving_config(c.dir, endpoint), c.dir, "serve"));
    const json refused = report_when(report, [](const json & j) { return j["workers"][0]["refusals"].get<int>() >= 1; }, host, 60);
    ASSERT_FALSE(refused.is_null()) << "the worker with other weights was not refused";
    ASSERT_EQ(c.workers[0]->stop(SIGKILL, 5000), 128 + SIGKILL);
    // the endpoint stays empty while the probes of the refusal's back-off find nobody: one when the
    // connection closed, then after 2 and 4 s (or 4 and 8 s), each doubling it; the next would come
    // 8 s or more after the last
    std::this_thread::sleep_for(std::chrono::milliseconds(7500));
    const json before = report_when(report, [](const json &) { return true; }, host, 10);
    ASSERT_FALSE(before.is_null());
    ASSERT_TRUE(c.start_worker(model, endpoint, "4-7"));
    const auto ready = std::chrono::steady_clock::now();
    expect_back_in_service(report, host, ready, sum_layers(before, "remote_slots"), host.served());
    const CommandResult & r = host.stop();
    EXPECT_EQ(r.exit_code, 4) << "the refusal's failed requests fail the run: " << r.err;
    const json rep = load_json(report);
    EXPECT_EQ(rep["workers"][0]["replaced_after_refusal"], 1) << rep["workers"][0].dump();
    EXPECT_EQ(rep["workers"][0]["identity"]["instance"], moezip::hex64(c.workers[1]->instance())) << rep["workers"][0].dump();
}
