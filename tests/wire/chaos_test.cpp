// Bounded chaos and fuzzing (docs/security.md): workers stopped, killed and restarted while the host
// decodes must leave the output of the single-node run; random, mutated and truncated messages must
// each get a reply (an error naming what is wrong, or a result) from a worker that keeps serving
// the right bits. Counts are printed with the test output.
#include "coordinator/wire/protocol.h"
#include "tests/support/cluster.h"

#include <gtest/gtest.h>

#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <csignal>
#include <cstring>
#include <map>
#include <random>
#include <thread>

using namespace moezip_test;
using moezip::ErrorCode;
using moezip::MsgHeader;
using moezip::MsgKind;
using nlohmann::json;

namespace {

std::string tiny_q8() { return fixture_model({"--preset", "tiny", "--type", "q8_0"}); }

} // namespace

// The host's periodic report at `path` (report_flush_ms), once `ready` holds for it; null after
// timeout_s or when the host exited first (`running` false).
json wait_for_report(const std::string & path, const std::function<bool(const json &)> & ready, const std::atomic<bool> & running,
                     double timeout_s = 60) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds((int) (timeout_s * 1000));
    while (running && std::chrono::steady_clock::now() < until) {
        const json j = json::parse(read_file(path), nullptr, false);
        if (!j.is_discarded() && j.contains("workers") && ready(j)) return j;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return nullptr;
}

TEST(Chaos, WorkersStoppedKilledAndRestartedMidDecodeLeaveTheSingleNodeOutput) {
    // Two workers that answer after 3 ms each, so the decode (800 tokens, 1600 MoE regions) lasts at
    // least 4.8 s however fast the machine. The chaos follows the host's progress, read from its
    // periodic report, not the clock (a fixed timeline from the host's start misses on a machine of
    // another speed): worker 1 is stopped once it has computed (its next request times out; it is
    // down for its 1 s back-off) and continued once that timeout is counted (probed again with a
    // hello, used again); once it computes again, worker 0 is killed and a new process started on
    // its endpoint (another instance: verified again before it computes anything).
    const std::string model = tiny_q8();
    Cluster c{test_dir("chaos"), {}};
    const std::map<std::string, std::string> slow = {{"MOEZIP_WORKER_FAULT", "delay_ms=3"}};
    const std::string e0 = "ipc://" + c.dir + "/w0.sock", e1 = "ipc://" + c.dir + "/w1.sock";
    ASSERT_TRUE(c.start_worker(model, e0, "0-3", slow));
    ASSERT_TRUE(c.start_worker(model, e1, "4-7", slow));
    const std::vector<std::string> argv = {bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "800", "--no-repack", "--quiet"};
    auto with_json = [&](const std::string & name) {
        std::vector<std::string> a = argv;
        a.push_back("--json");
        a.push_back(c.dir + "/" + name + "-run.json");
        return a;
    };
    ASSERT_EQ(run_preloaded(with_json("single"), write_moezip_config(c.dir, "single", "mode = \"observe\"\n")).exit_code, 0);
    const std::string report = c.dir + "/chaos.json";
    std::remove(report.c_str());
    const std::string cfg = write_moezip_config(c.dir, "chaos", "mode = \"experts\"\nreport_flush_ms = 20\n"
                                                                "[dispatch]\ntimeout_ms = 300\nconnect_timeout_ms = 300\n"
                                                                "[[worker]]\nendpoint = \"" + e0 + "\"\nexperts = \"0-3\"\n"
                                                                "[[worker]]\nendpoint = \"" + e1 + "\"\nexperts = \"4-7\"\n");
    CommandResult host;
    std::atomic<bool> running{true};
    std::thread run([&]() {
        host = run_preloaded(with_json("chaos"), cfg);
        running = false;
    });
    WorkerProcess restarted;
    const json computing = wait_for_report(report, [](const json & j) { return j["workers"][1]["requests"].get<int>() >= 3; }, running);
    kill(c.workers[1]->pid(), SIGSTOP);
    const json timed_out = wait_for_report(report, [](const json & j) { return j["workers"][1]["timeouts"].get<int>() >= 1; }, running);
    kill(c.workers[1]->pid(), SIGCONT);
    // one worker down at a time: the other's 3 ms answers keep the decode going (with both down the
    // fallbacks here finish it before any back-off ends)
    const int sent_before = timed_out.is_null() ? 1 << 30 : timed_out["workers"][1]["requests"].get<int>();
    const json back = wait_for_report(report, [&](const json & j) { return j["workers"][1]["requests"].get<int>() >= sent_before + 2; }, running);
    c.workers[0]->stop(SIGKILL, 2000);
    const bool up = restarted.start({"--model", model, "--bind", e0, "--experts", "0-3", "--threads", "1"}, c.dir, slow);
    const json after_chaos = wait_for_report(report, [](const json &) { return true; }, running, 1);
    run.join();
    ASSERT_FALSE(computing.is_null()) << "worker 1 never computed: " << host.err;
    ASSERT_FALSE(timed_out.is_null()) << "the stopped worker's timeout was never counted: " << host.err;
    ASSERT_FALSE(back.is_null()) << "worker 1 was not used again after it came back: " << host.err;
    ASSERT_TRUE(up) << restarted.error();
    ASSERT_EQ(host.exit_code, 0) << host.err;
    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", c.dir + "/single.json", report});
    EXPECT_EQ(cmp.exit_code, 0) << "the chaos changed the output: " << cmp.out;
    const json rep = load_json(report);
    for (int i = 0; i < 2; ++i) {
        const json & w = rep["workers"][i];
        printf("chaos: worker %d: requests %d, timeouts %d, failures %d, fallbacks %d, reverifications %d, foreign-instance replies %d, "
               "stale replies %d, reconnects %d\n", i, w["requests"].get<int>(), w["timeouts"].get<int>(), w["failures"].get<int>(),
               w["fallbacks"].get<int>(), w["reverifications"].get<int>(), w["foreign_instance_replies"].get<int>(),
               w["stale_replies"].get<int>(), w["reconnects"].get<int>());
    }
    printf("chaos: MoE regions %d, %d when the chaos was over; computed here after worker failures %d\n",
           rep["checks"]["regions_handled"].get<int>(), after_chaos.is_null() ? -1 : after_chaos["checks"]["regions_handled"].get<int>(),
           (int) sum_layers(rep, "fallbacks"));
    EXPECT_GT(sum_layers(rep, "fallbacks"), 0u) << "a stopped and a killed worker cost fallbacks";
    EXPECT_GE(rep["workers"][1]["timeouts"].get<int>(), 1) << "the stopped worker is noticed by its timeout";
    EXPECT_EQ(rep["workers"][0]["identity"]["instance"], moezip::hex64(restarted.instance()))
        << "the new process on worker 0's endpoint was verified and used: " << rep["workers"][0].dump();
    ASSERT_EQ(restarted.stop(SIGTERM, 5000), 0);
    ASSERT_EQ(c.workers[1]->stop(SIGTERM, 5000), 0) << "the stopped worker was left serving";
    EXPECT_GT(worker_counter(restarted.stderr_text(), "compute"), 0u) << "the returning workers were tested: " << restarted.stderr_text();
    // its first hello, and at least one after it came back (another after a later slow reply is right too)
    EXPECT_GE(worker_counter(c.workers[1]->stderr_text(), "(hello"), 2u) << "probed again after it came back: " << c.workers[1]->stderr_text();
    EXPECT_GT(worker_counter(c.workers[1]->stderr_text(), "compute"), (uint64_t) timed_out["workers"][1]["requests"].get<int>())
        << "used again after it came back: " << c.workers[1]->stderr_text();
}

TEST(Chaos, AStoppedWorkersHandshakeIsCountedAsSetupNotAsComputeHere) {
    // The fault held: layer 0's ms_local held the 1.5 s this host waited for a stopped worker's
    // handshake (connect_timeout_ms), as if it had computed that long. Waits for a worker to become
    // usable (hello, identity and plan checks) are setup.
    const std::string model = tiny_q8();
    Cluster c{test_dir("stopped_handshake"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w.sock", "4-7"));
    ASSERT_EQ(kill(c.workers[0]->pid(), SIGSTOP), 0);
    const std::string cfg = write_moezip_config(c.dir, "stopped", "mode = \"experts\"\n[experts]\nlocal = \"0-3\"\n"
                                                                  "[dispatch]\nconnect_timeout_ms = 1000\n"
                                                                  "[[worker]]\nendpoint = \"" + c.workers[0]->endpoint() + "\"\nexperts = \"4-7\"\n");
    CommandResult r = run_preloaded({bin_path("moezip-run"), "-m", model, "--fixture", "8", "-n", "4", "--no-repack", "--quiet"}, cfg);
    kill(c.workers[0]->pid(), SIGCONT);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json rep = load_json(c.dir + "/stopped.json");
    const json & l0 = rep["layers"][0];
    EXPECT_GE(l0["ms_setup"].get<double>(), 900.0) << "the handshake's wait: " << l0.dump();
    EXPECT_LT(l0["ms_local"].get<double>(), 500.0) << "computing 8 tiny rows here takes ms: " << l0.dump();
    EXPECT_LT(l0["first_call"]["ms_local"].get<double>(), 500.0) << l0.dump();
    EXPECT_GE(l0["first_call"]["ms_setup"].get<double>(), 900.0) << l0.dump();
    EXPECT_GT(l0["fallbacks"].get<int>(), 0) << "the stopped worker's part was computed here: " << l0.dump();
}

namespace {

// Fuzzing: messages built from one valid request. Every message must get exactly one reply.
struct Fuzzer {
    std::mt19937 rng;
    ComputeRequest base;

    explicit Fuzzer(uint32_t seed) : rng(seed) {
        base.n_embd = 64; base.n_ff = 64; base.n_used = 2; base.n_rows = 3;
        for (int i = 0; i < 64 * 3; ++i) base.hidden.push_back((float) (i % 17) * 0.0625f - 0.5f);
        base.ids = {0, 5, 3, -1, 7, 1};
        base.weights = {0.5f, 0.25f, 1.0f, 0.0f, 0.75f, 0.125f};
    }
    uint32_t below(uint32_t n) { return n ? rng() % n : 0; }
    std::string bytes(size_t n) {
        std::string s(n, '\0');
        for (char & ch : s) ch = (char) rng();
        return s;
    }
    static void rehash(MsgHeader & h, const std::vector<zmq::message_t> & f) {
        for (size_t i = 1; i < f.size() && i <= 4; ++i) {
            h.frame_bytes[i - 1] = f[i].size();
            h.frame_xxh3[i - 1] = XXH3_64bits(f[i].data(), f[i].size());
        }
    }
    // One fuzzed message; `kind` names the mutation class for the counts.
    std::vector<zmq::message_t> next(uint64_t instance, std::string & kind) {
        MsgHeader h = compute_header(base, instance);
        std::vector<zmq::message_t> f = compute_frames(h, base);
        switch (below(6)) {
            case 0: {  // random parts, the first one header-sized half of the time
                kind = "random";
                f.clear();
                const uint32_t n = 1 + below(7);
                for (uint32_t i = 0; i < n; ++i) {
                    const std::string b = bytes(i == 0 && below(2) ? sizeof(MsgHeader) : below(300));
                    f.emplace_back(b.data(), b.size());
                }
                return f;
            }
            case 1: {  // random bytes over the header, hashes left as they were
                kind = "header bytes";
                for (uint32_t k = 1 + below(6); k > 0; --k) reinterpret_cast<uint8_t *>(&h)[below(sizeof h)] = (uint8_t) rng();
                break;
            }
            case 2: {  // a field set to an extreme or random value, then everything rehashed
                kind = "header field";
                const int32_t v[] = {0, -1, 1, INT32_MAX, INT32_MIN, (int32_t) rng(), 64, 1 << 20, 257};
                const int32_t x = v[below(9)];
                switch (below(9)) {
                    case 0: h.n_rows = x; break;
                    case 1: h.n_used = x; break;
                    case 2: h.layer = x; break;
                    case 3: h.n_embd = x; break;
                    case 4: h.n_ff = x; break;
                    case 5: h.reply = (uint16_t) x; break;
                    case 6: h.glu_op = (uint32_t) x; break;
                    case 7: h.dtype[below(4)] = (uint8_t) x; break;
                    default: h.kind = (uint16_t) (1 + below(8)); break;
                }
                break;
            }
            case 3: {  // data bytes changed (ids, weights, hidden), rehashed: validation must go deeper
                kind = "data";
                const size_t i = 1 + below(3);
                for (uint32_t k = 1 + below(4); k > 0 && f[i].size() > 0; --k)
                    static_cast<uint8_t *>(f[i].data())[below((uint32_t) f[i].size())] = (uint8_t) rng();
                rehash(h, f);
                break;
            }
            case 4: {  // truncated: parts dropped, or a frame cut short (rehashed or not)
                kind = "truncated";
                if (below(2)) f.resize(1 + below((uint32_t) f.size() - 1));
                else {
                    const size_t i = 1 + below(3);
                    zmq::message_t cut(f[i].data(), below((uint32_t) f[i].size()));
                    f[i] = std::move(cut);
                    if (below(2)) rehash(h, f);
                }
                break;
            }
            default: {  // extra parts: an n_ff slice the plan does not allow, or many parts
                kind = "extra parts";
                const int32_t slice[2] = {(int32_t) below(3) * 32, 32};
                if (below(2)) {
                    moezip::msg_header_set_frame(h, 3, moezip::WireType::i32, slice, sizeof slice);
                    f.emplace_back(slice, sizeof slice);
                } else {
                    for (uint32_t k = 2 + below(8); k > 0; --k) {
                        const std::string b = bytes(below(64));
                        f.emplace_back(b.data(), b.size());
                    }
                }
                break;
            }
        }
        f[0] = zmq::message_t(&h, sizeof h);
        return f;
    }
};

} // namespace

TEST(WorkerFuzz, RandomMutatedAndTruncatedMessagesEachGetAReplyAndTheWorkerKeepsServing) {
    const std::string dir = test_dir("fuzz");
    WorkerProcess w;
    ASSERT_TRUE(w.start({"--model", tiny_q8(), "--bind", "ipc://" + dir + "/w.sock"}, dir)) << w.error();
    WorkerClient ref(w.endpoint(), w.instance());
    Fuzzer fz(20251130);
    auto ask_valid = [&](WorkerClient & c) {
        c.send(compute_frames(compute_header(fz.base, w.instance()), fz.base));
        WorkerReply rep;
        EXPECT_TRUE(c.recv(rep, 5000));
        EXPECT_EQ(rep.h.kind, (uint16_t) MsgKind::result) << rep.text();
        return rep.frames.empty() ? std::string() : rep.text();
    };
    const std::string before = ask_valid(ref);
    const int kMessages = 2000;
    std::map<std::string, int> by_reply, by_kind;
    int answered = 0;
    {
        WorkerClient c(w.endpoint(), w.instance());
        for (int i = 0; i < kMessages; ++i) {
            std::string kind;
            c.send(fz.next(w.instance(), kind));
            ++by_kind[kind];
            WorkerReply rep;
            if (!c.recv(rep, 5000)) {
                ADD_FAILURE() << "message " << i << " (" << kind << ") got no reply";
                break;
            }
            ++answered;
            const std::string what = rep.h.kind == (uint16_t) MsgKind::error ? moezip::error_code_name((ErrorCode) rep.h.status)
                                                                               : moezip::msg_kind_name(rep.h.kind);
            ++by_reply[what];
        }
    }
    std::string counts;
    for (const auto & kv : by_kind) counts += " " + kv.first + " " + std::to_string(kv.second) + ",";
    counts += " replies:";
    for (const auto & kv : by_reply) counts += " " + kv.first + " " + std::to_string(kv.second) + ",";
    printf("fuzz: %d messages (seed 20251130), %d answered; sent:%s\n", kMessages, answered, counts.c_str());
    EXPECT_EQ(answered, kMessages);
    EXPECT_EQ(ask_valid(ref), before) << "the same request gives the same bits after the fuzzing";
    EXPECT_GE(by_reply.size(), 6u) << "the fuzzing reached several checks";
    ASSERT_EQ(w.stop(SIGTERM, 5000), 0) << "the worker is alive and exits cleanly";
}
