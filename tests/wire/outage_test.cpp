// A link outage between a host and a worker (docs/worker.md, "Link outages"): the worker runs in its
// own network namespace behind a veth pair; while the host decodes, every packet between them is
// dropped by blackhole routes on both sides for 6 s, then the link returns, twice. The worker must
// still run and compute again after the link returns, and every run of the host must equal the
// single-node run. Skipped, with the reason, where namespaces cannot be made (not root, no iproute2).
// Whether an outage leaves the connection state that aborted libzmq 4.3.4 depends on the order in
// which both kernels retransmit after it; the other two tests build that state on purpose, on
// loopback, plain and over CURVE.
#include "coordinator/wire/curve_keys.h"
#include "tests/support/cluster.h"
#include "tests/support/netns_link.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>

#include <zmq.hpp>
#include <zmq_addon.hpp>

using namespace moezip_test;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

std::string tiny_q8() { return fixture_model({"--preset", "tiny", "--type", "q8_0"}); }

// The host's periodic report at `path` once `ready` holds for its worker 0; null after timeout_s
// or once the host exited (`running` false).
json report_when(const std::string & path, const std::function<bool(const json &)> & ready, const std::atomic<bool> & running,
                 double timeout_s) {
    const auto until = Clock::now() + std::chrono::milliseconds((int) (timeout_s * 1000));
    while (running && Clock::now() < until) {
        const json j = json::parse(read_file(path), nullptr, false);
        if (!j.is_discarded() && j.contains("workers") && !j["workers"].empty() && ready(j["workers"][0])) return j;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return nullptr;
}

// Ends the host (its stop file) and joins its thread in every path, an early ASSERT's too.
struct HostThread {
    std::string stop_file;
    std::thread thread;
    void finish() {
        if (!thread.joinable()) return;
        std::ofstream(stop_file) << "stop\n";
        thread.join();
    }
    ~HostThread() { finish(); }
};

// Open descriptors of process `pid` (-1 when it is gone).
int open_descriptors(int pid) {
    DIR * d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
    if (!d) return -1;
    int n = 0;
    while (struct dirent * e = readdir(d))
        if (e->d_name[0] != '.') ++n;
    closedir(d);
    return n;
}

// True once process `pid` (a child) has exited; it is left to be reaped by its owner (WNOWAIT).
bool has_exited(int pid) {
    siginfo_t info{};
    return pid > 0 && waitid(P_PID, (id_t) pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

uint64_t hash_ok(const json & report) { return report.is_null() ? 0 : report["workers"][0]["hash_ok"].get<uint64_t>(); }

} // namespace

TEST(Outage, AWorkerBehindABlackholedLinkSurvivesItAndComputesAgain) {
    NetnsLink net("mzo");
    if (!net.ok()) GTEST_SKIP() << "no network namespace for the outage: " << net.why();
    const std::string model = tiny_q8();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("outage_blackhole");
    const std::string stop = dir + "/stop", report = dir + "/outage.json";
    std::remove(report.c_str());

    // the single-node run: the stop file exists already, so one run
    std::ofstream(stop) << "stop\n";
    const CommandResult single = run_command(test_host("until-stop", {model}, dir + "/single-runs.json",
                                                       {"-n", "32", "--fixture", "16", "--stop-file", stop}));
    ASSERT_EQ(single.exit_code, 0) << single.err;
    const json reference = host_runs(dir + "/single-runs.json");
    ASSERT_EQ(reference.size(), 1u);
    std::remove(stop.c_str());

    WorkerProcess w;
    w.set_program(ip_program());
    const std::string endpoint = std::string("tcp://") + NetnsLink::kWorkerAddress + ":5601";
    ASSERT_TRUE(w.start({"netns", "exec", net.worker_ns(), bin_path("moezip-worker"), "--model", model, "--bind", endpoint, "--insecure",
                         "--experts", "4-7", "--threads", "1"},
                        dir))
        << w.error();
    const std::string cfg = write_moezip_config(dir, "outage", "mode = \"experts\"\nreport_flush_ms = 20\n[experts]\nlocal = \"0-3\"\n"
                                                               "[dispatch]\ntimeout_ms = 1000\nconnect_timeout_ms = 1000\n"
                                                               "[[worker]]\nendpoint = \"" + endpoint + "\"\nexperts = \"4-7\"\n");
    // the host runs in the other namespace; env sets the preload after `ip` ran, so only the host has it
    std::vector<std::string> argv = net.exec_in(net.host_ns());
    argv.insert(argv.end(), {"/usr/bin/env", "LD_PRELOAD=" + preload_env(), "MOEZIP_CONFIG=" + cfg});
    for (const std::string & a : test_host("until-stop", {model}, dir + "/outage-runs.json", {"-n", "32", "--fixture", "16", "--stop-file", stop}))
        argv.push_back(a);
    CommandResult host;
    std::atomic<bool> running{true};
    HostThread run{stop, std::thread([&]() {
                       host = run_command(argv, {}, 240);
                       running = false;
                   })};

    const json computing = report_when(report, [](const json & w0) { return w0["hash_ok"].get<int>() >= 20; }, running, 60);
    if (computing.is_null()) {
        run.finish();
        FAIL() << "the worker never computed over the veth pair: " << host.err << w.stderr_text();
    }
    const int fds_before = open_descriptors(w.pid());
    // Two outages: each leaves the state that aborted libzmq 4.3.4 or not, by the order of the two
    // kernels' retransmissions after it (3 of 4 single outages did here); two make a miss rarer.
    struct Outage {
        bool cut = false, restored = false, noticed = false, used_again = false;
        uint64_t ok_at_restore = 0, ok_8s_after = 0;
        int exited = -1;  // the worker's status 8 s after the link returned; -1: still running
    };
    std::vector<Outage> outages;
    for (int k = 0; k < 2; ++k) {
        Outage o;
        const int timeouts_before = report_when(report, [](const json &) { return true; }, running, 2)["workers"][0]["timeouts"].get<int>();
        // 6 s of dropped packets both ways, while the host keeps decoding
        o.cut = net.blackhole(true);
        const auto cut_at = Clock::now();
        o.noticed = !report_when(report, [&](const json & w0) { return w0["timeouts"].get<int>() > timeouts_before; }, running, 6).is_null();
        std::this_thread::sleep_until(cut_at + std::chrono::seconds(6));
        o.restored = net.blackhole(false);
        const auto restored_at = Clock::now();
        o.ok_at_restore = hash_ok(report_when(report, [](const json &) { return true; }, running, 2));
        // used again once its back-off ends (at most 4 s here), then 8 s of traffic after the link
        // returned: with ZMTP heartbeats libzmq 4.3.4 aborted the worker within 10 s of it
        // (a worker that died ends the wait at once)
        const json again = report_when(report, [&](const json & w0) {
            return w0["hash_ok"].get<uint64_t>() >= o.ok_at_restore + 20 || has_exited(w.pid());
        }, running, 20);
        o.used_again = !again.is_null() && again["workers"][0]["hash_ok"].get<uint64_t>() >= o.ok_at_restore + 20;
        while (Clock::now() < restored_at + std::chrono::seconds(8) && !has_exited(w.pid()))
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        o.exited = w.wait_exit(0);
        o.ok_8s_after = hash_ok(report_when(report, [](const json &) { return true; }, running, 2));
        outages.push_back(o);
        if (!o.cut || !o.restored || o.exited != -1) break;
    }
    const int fds_after = open_descriptors(w.pid());
    run.finish();

    const int exited = outages.back().exited;
    for (size_t k = 0; k < outages.size(); ++k) {
        const Outage & o = outages[k];
        SCOPED_TRACE("outage " + std::to_string(k + 1));
        ASSERT_TRUE(o.cut && o.restored) << net.why();
        EXPECT_EQ(o.exited, -1) << "the worker died after the outage (status " << o.exited << "): " << w.stderr_text();
        EXPECT_TRUE(o.noticed) << "the silent worker was not found dead within its 1 s timeout during the outage";
        EXPECT_TRUE(o.used_again) << "the worker computed nothing after the link returned: " << w.stderr_text();
    }
    ASSERT_EQ(host.exit_code, 0) << host.err;
    const json runs = host_runs(dir + "/outage-runs.json");
    ASSERT_GE(runs.size(), 3u) << "the host decoded through the whole outage";
    for (size_t i = 0; i < runs.size(); ++i) {
        EXPECT_EQ(runs[i]["tokens"], reference[0]["tokens"]) << "run " << i;
        EXPECT_EQ(runs[i]["logits_xxh3"], reference[0]["logits_xxh3"]) << "run " << i << " differs from the single-node run";
    }
    const json rep = load_json(report);
    const json & w0 = rep["workers"][0];
    std::string per_outage;
    for (const Outage & o : outages)
        per_outage += " [hash_ok " + std::to_string(o.ok_at_restore) + " at restoration, " + std::to_string(o.ok_8s_after) + " 8 s after]";
    printf("outage: %zu runs; worker: hash_ok %d,%s timeouts %d, failures %d, reconnects %d, disconnects %d; regions computed here "
           "after failures %d; worker descriptors %d before the outages, %d after\n",
           runs.size(), w0["hash_ok"].get<int>(), per_outage.c_str(), w0["timeouts"].get<int>(), w0["failures"].get<int>(),
           w0["reconnects"].get<int>(), w0["disconnects"].get<int>(), (int) sum_layers(rep, "fallbacks"), fds_before, fds_after);
    EXPECT_GT(sum_layers(rep, "fallbacks"), 0u) << "the outage cost fallbacks: it was an outage";
    if (exited == -1) {
        EXPECT_EQ(w.stop(SIGTERM, 5000), 0) << w.stderr_text();
        EXPECT_GT(worker_counter(w.stderr_text(), ", compute"), 0u) << w.stderr_text();
    }
}

namespace {

// A DEALER with the routing id `id`, connected to `endpoint` (linger as given), a CURVE client of
// `server_public` with `client` when the key is not empty.
std::unique_ptr<zmq::socket_t> dealer_with_id(zmq::context_t & ctx, const std::string & endpoint, const std::string & id, int linger_ms,
                                              const std::string & server_public, const moezip::CurveKeyPair & client) {
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, linger_ms);
    s->set(zmq::sockopt::routing_id, id);
    if (!server_public.empty()) {
        s->set(zmq::sockopt::curve_serverkey, server_public);
        s->set(zmq::sockopt::curve_publickey, client.public_key);
        s->set(zmq::sockopt::curve_secretkey, client.secret_key);
    }
    s->connect(endpoint);
    return s;
}

void send_all(zmq::socket_t & s, std::vector<zmq::message_t> frames) {
    for (size_t i = 0; i < frames.size(); ++i) s.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

// The kind of the next reply on `s` within timeout_ms; 0 when none came.
uint16_t reply_kind(zmq::socket_t & s, int timeout_ms) {
    zmq::pollitem_t item = {s.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) <= 0) return 0;
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(s, std::back_inserter(parts)) || parts.empty() || parts[0].size() != sizeof(moezip::MsgHeader)) return 0;
    moezip::MsgHeader h;
    memcpy(&h, parts[0].data(), sizeof h);
    return h.kind;
}

// What an outage can leave behind, made on purpose: a coordinator reconnects with its routing id
// (the worker's ROUTER hands the id over to the new connection), bytes then arrive on the old
// connection (libzmq finds no pipe for them and stops reading it), and the old connection is
// reset. libzmq 4.3.4 marks it failed without closing it; its ZMTP heartbeat timer then wrote to
// it and aborted the worker (`Assertion failed: !_io_error`, src/stream_engine_base.cpp:331)
// within two heartbeat intervals (10 s). With `curve` the worker has keys and both links use them.
void takeover_then_reset(const std::string & name, bool curve) {
    const std::string dir = test_dir(name);
    std::vector<std::string> args = {"--model", tiny_q8(), "--bind", "tcp://127.0.0.1:*"};
    std::string server_public;
    moezip::CurveKeyPair client;
    if (curve) {
        ASSERT_EQ(run_command({bin_path("moezip-worker"), "--keygen", dir + "/w"}).exit_code, 0);
        ASSERT_EQ(run_command({bin_path("moezip-worker"), "--keygen", dir + "/c"}).exit_code, 0);
        moezip::CurveKeyPair worker_keys;
        ASSERT_TRUE(moezip::curve_keypair_read(dir + "/w/moezip.key", worker_keys));
        ASSERT_TRUE(moezip::curve_keypair_read(dir + "/c/moezip.key", client));
        server_public = worker_keys.public_key;
        args.insert(args.end(), {"--key", dir + "/w/moezip.key", "--allow", dir + "/c/moezip.pub"});
    }
    WorkerProcess w;
    ASSERT_TRUE(w.start(args, dir)) << w.error();
    const std::string id = "coordinator-link-7";
    const uint16_t hello_ok = (uint16_t) moezip::MsgKind::hello_ok, pong = (uint16_t) moezip::MsgKind::pong;
    zmq::context_t old_ctx(1), ctx(1);
    auto old_link = dealer_with_id(old_ctx, w.endpoint(), id, 5000, server_public, client);
    send_all(*old_link, simple_frames(moezip::MsgKind::hello, 1, hello_json(kRowsPlan)));
    ASSERT_EQ(reply_kind(*old_link, 10000), hello_ok);
    // the coordinator comes back on a new connection with the same routing id: handed over
    auto link = dealer_with_id(ctx, w.endpoint(), id, 0, server_public, client);
    send_all(*link, simple_frames(moezip::MsgKind::hello, 2, hello_json(kRowsPlan)));
    ASSERT_EQ(reply_kind(*link, 10000), hello_ok) << "the new connection took the routing id over";
    send_all(*link, simple_frames(moezip::MsgKind::ping, 3));
    ASSERT_EQ(reply_kind(*link, 10000), pong);
    const int fds_before = open_descriptors(w.pid());
    // late bytes on the old connection, then it closes: closing the context waits (linger) until
    // they were written, so they are in the worker's kernel before the close; the worker's next
    // write to that connection (a heartbeat, in libzmq 4.3.4) is answered with a reset
    send_all(*old_link, simple_frames(moezip::MsgKind::ping, 4));
    old_link->close();
    old_ctx.close();
    const auto closed_at = Clock::now();
    const int exited = w.wait_exit(12000);  // -1: still running after two heartbeat intervals and a margin
    EXPECT_EQ(exited, -1) << "the worker died (status " << exited << ") " << std::chrono::duration<double>(Clock::now() - closed_at).count()
                          << " s after the old connection was reset: " << w.stderr_text();
    if (exited != -1) return;
    send_all(*link, simple_frames(moezip::MsgKind::ping, 5));
    EXPECT_EQ(reply_kind(*link, 10000), pong) << "the connection that took the routing id over is served";
    printf("takeover and reset (%s): worker descriptors %d before the old connection closed, %d 12 s after\n", curve ? "curve" : "plain",
           fds_before, open_descriptors(w.pid()));
    link->close();
    ASSERT_EQ(w.stop(SIGTERM, 5000), 0) << w.stderr_text();
}

} // namespace

// Waits up to timeout_ms for process `pid` to hold at most `limit` descriptors; the last count.
int descriptors_settle(int pid, int limit, int timeout_ms) {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    int n = open_descriptors(pid);
    while (n > limit && Clock::now() < end) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        n = open_descriptors(pid);
    }
    return n;
}

constexpr int kVanishingCoordinators = 200;

// Coordinators that vanish (SIGKILL right after their hello was answered) 200 times: the worker
// keeps serving a coordinator connected all along, and its descriptors come back to what they were
// (a bounded number: a worker that runs for months sees many such ends).
TEST(Outage, CoordinatorsKilledAfterTheirHelloLeaveNoDescriptorsBehind) {
    const std::string dir = test_dir("outage_killed_coordinators");
    WorkerProcess w;
    ASSERT_TRUE(w.start({"--model", tiny_q8(), "--bind", "tcp://127.0.0.1:*"}, dir)) << w.error();
    const uint16_t hello_ok = (uint16_t) moezip::MsgKind::hello_ok, pong = (uint16_t) moezip::MsgKind::pong;
    const int fds_before = open_descriptors(w.pid());
    int answered = 0;
    for (int i = 0; i < kVanishingCoordinators; ++i) {
        const pid_t child = fork();
        ASSERT_GE(child, 0);
        if (child == 0) {  // a coordinator of its own: says hello, then is killed
            zmq::context_t ctx(1);
            auto s = dealer_with_id(ctx, w.endpoint(), "vanishing-" + std::to_string(i), 0, "", moezip::CurveKeyPair{});
            send_all(*s, simple_frames(moezip::MsgKind::hello, 1, hello_json(kRowsPlan)));
            const bool ok = reply_kind(*s, 10000) == hello_ok;
            if (!ok) _exit(1);
            raise(SIGKILL);
            _exit(2);
        }
        int status = 0;
        ASSERT_EQ(waitpid(child, &status, 0), child);
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ++answered;
    }
    EXPECT_EQ(answered, kVanishingCoordinators) << "each coordinator's hello was answered before it was killed";
    zmq::context_t ctx(1);
    auto link = dealer_with_id(ctx, w.endpoint(), "staying", 0, "", moezip::CurveKeyPair{});
    send_all(*link, simple_frames(moezip::MsgKind::ping, 1));
    EXPECT_EQ(reply_kind(*link, 10000), pong) << "the worker serves the next coordinator";
    // +1: the staying link's own connection
    const int fds_after = descriptors_settle(w.pid(), fds_before + 1, 20000);
    EXPECT_LE(fds_after, fds_before + 1) << kVanishingCoordinators << " killed coordinators: descriptors " << fds_before << " before, "
                                         << fds_after << " after";
    link->close();
    EXPECT_EQ(w.stop(SIGTERM, 5000), 0) << w.stderr_text();
}

// The outage state of takeover_then_reset, made 200 times with 200 routing ids: the worker keeps
// serving, and its descriptors stay bounded (each reset connection's descriptor is freed).
// Disabled: it fails with libzmq 4.3.4, which keeps each such descriptor until the worker exits
// (docs/worker.md "Link outages": 200 events, 17 descriptors before, 218 after); run it with
// --gtest_also_run_disabled_tests once the worker or libzmq frees them.
TEST(Outage, DISABLED_ConnectionsTakenOverAndThenResetLeaveNoDescriptorsBehind) {
    const std::string dir = test_dir("outage_takeover_reset_many");
    WorkerProcess w;
    ASSERT_TRUE(w.start({"--model", tiny_q8(), "--bind", "tcp://127.0.0.1:*"}, dir)) << w.error();
    const uint16_t hello_ok = (uint16_t) moezip::MsgKind::hello_ok, pong = (uint16_t) moezip::MsgKind::pong;
    const int fds_before = open_descriptors(w.pid());
    zmq::context_t ctx(1);
    std::vector<std::unique_ptr<zmq::socket_t>> links;
    for (int i = 0; i < kVanishingCoordinators; ++i) {
        const std::string id = "taken-over-" + std::to_string(i);
        zmq::context_t old_ctx(1);
        auto old_link = dealer_with_id(old_ctx, w.endpoint(), id, 5000, "", moezip::CurveKeyPair{});
        send_all(*old_link, simple_frames(moezip::MsgKind::hello, 1, hello_json(kRowsPlan)));
        ASSERT_EQ(reply_kind(*old_link, 10000), hello_ok) << "cycle " << i;
        auto link = dealer_with_id(ctx, w.endpoint(), id, 0, "", moezip::CurveKeyPair{});
        send_all(*link, simple_frames(moezip::MsgKind::hello, 2, hello_json(kRowsPlan)));
        ASSERT_EQ(reply_kind(*link, 10000), hello_ok) << "cycle " << i;
        send_all(*old_link, simple_frames(moezip::MsgKind::ping, 3));  // late bytes on the old connection
        old_link->close();
        old_ctx.close();
        link->close();  // the new one ends too: the coordinator went away for good
    }
    auto link = dealer_with_id(ctx, w.endpoint(), "staying", 0, "", moezip::CurveKeyPair{});
    send_all(*link, simple_frames(moezip::MsgKind::ping, 1));
    EXPECT_EQ(reply_kind(*link, 10000), pong) << "the worker serves the next coordinator";
    const int fds_after = descriptors_settle(w.pid(), fds_before + 1 + 8, 20000);
    EXPECT_LE(fds_after, fds_before + 1 + 8) << kVanishingCoordinators << " taken-over connections reset: descriptors " << fds_before
                                             << " before, " << fds_after << " after";
    link->close();
    EXPECT_EQ(w.stop(SIGTERM, 5000), 0) << w.stderr_text();
}

TEST(Outage, AConnectionWhoseRoutingIdWasTakenOverAndThenResetDoesNotAbortTheWorker) {
    takeover_then_reset("outage_takeover_reset", false);
}

TEST(Outage, AConnectionWhoseRoutingIdWasTakenOverAndThenResetDoesNotAbortACurveWorker) {
    takeover_then_reset("outage_takeover_reset_curve", true);
}
