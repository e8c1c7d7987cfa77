// Who may use a worker (docs/security.md): CURVE keys over tcp (good keys served; a wrong key, no
// key and a plain peer refused at the handshake and counted by the worker), a non-loopback bind
// without keys refusing to start, the real coordinator over CURVE, and the per-connection plan (a
// connection computes only the shapes its hello planned).
#include "coordinator/wire/curve_keys.h"
#include "coordinator/wire/protocol.h"
#include "coordinator/wire/transport.h"
#include "tests/support/cluster.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <random>
#include <thread>

using namespace moezip_test;
using nlohmann::json;

namespace {

std::string tiny_q8() { return fixture_model({"--preset", "tiny", "--type", "q8_0"}); }

// A key pair in <dir>/<name>/moezip.{key,pub}, made by moezip-worker --keygen.
moezip::CurveKeyPair keygen(const std::string & dir, const std::string & name) {
    CommandResult r = run_command({bin_path("moezip-worker"), "--keygen", dir + "/" + name});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    moezip::CurveKeyPair pair;
    moezip::Status st = moezip::curve_keypair_read(dir + "/" + name + "/moezip.key", pair);
    EXPECT_TRUE(st) << st.to_string();
    return pair;
}

ClientKeys client_keys(const moezip::CurveKeyPair & worker, const moezip::CurveKeyPair & me) {
    return {worker.public_key, me.public_key, me.secret_key};
}

// Says hello with the rows plan; true when hello_ok came back within timeout_ms.
bool hello_answered(WorkerClient & c, int timeout_ms) {
    c.send(simple_frames(moezip::MsgKind::hello, 5, hello_json(kRowsPlan)));
    WorkerReply rep;
    return c.recv(rep, timeout_ms) && rep.h.kind == (uint16_t) moezip::MsgKind::hello_ok;
}

// The id of the thread of process `pid` whose name (comm) is `name`, or 0.
int thread_named(int pid, const std::string & name) {
    for (int i = 0; i < 100; ++i) {  // the thread is started with the socket: named a moment later
        const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
        if (DIR * d = opendir(tasks.c_str())) {
            int found = 0;
            while (dirent * e = readdir(d)) {
                std::string comm;
                std::getline(std::ifstream(tasks + "/" + e->d_name + "/comm"), comm);
                if (e->d_name[0] != '.' && comm == name) found = atoi(e->d_name);
            }
            closedir(d);
            if (found > 0) return found;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
}

ComputeRequest tiny_request(int32_t a, int32_t b) {
    ComputeRequest r;
    r.n_embd = 64; r.n_ff = 64; r.n_used = 2; r.n_rows = 1;
    r.hidden.assign(64, 0.25f); r.ids = {a, b}; r.weights = {0.5f, 0.5f};
    return r;
}

} // namespace

TEST(Curve, KeygenWritesAPrivateKeyPairAndNeverOverwritesIt) {
    ASSERT_TRUE(moezip::curve_available()) << "this libzmq has no CURVE (zmq_has(\"curve\"))";
    const std::string dir = test_dir("curve_keygen");
    CommandResult r = run_command({bin_path("moezip-worker"), "--keygen", dir + "/k"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    CommandResult deep = run_command({bin_path("moezip-worker"), "--keygen", dir + "/etc/moezip/me"});
    EXPECT_EQ(deep.exit_code, 0) << "missing parents are made: " << deep.err;
    struct stat sb;
    ASSERT_EQ(stat((dir + "/k/moezip.key").c_str(), &sb), 0);
    EXPECT_EQ(sb.st_mode & 0777, 0600u) << "the key pair is private";
    moezip::CurveKeyPair pair;
    ASSERT_TRUE(moezip::curve_keypair_read(dir + "/k/moezip.key", pair));
    std::vector<std::string> pubs;
    ASSERT_TRUE(moezip::curve_public_keys_read(dir + "/k/moezip.pub", pubs));
    ASSERT_EQ(pubs.size(), 1u);
    EXPECT_EQ(pubs[0], pair.public_key);
    EXPECT_NE(r.out.find(pair.public_key), std::string::npos) << "the public key is printed: " << r.out;
    EXPECT_EQ(r.out.find(pair.secret_key), std::string::npos) << "the secret key is not";
    EXPECT_EQ(read_file(dir + "/k/moezip.pub").find(pair.secret_key), std::string::npos);
    CommandResult again = run_command({bin_path("moezip-worker"), "--keygen", dir + "/k"});
    EXPECT_EQ(again.exit_code, 2);
    EXPECT_NE(again.err.find("never overwritten"), std::string::npos) << again.err;
    chmod((dir + "/k/moezip.key").c_str(), 0644);
    moezip::Status st = moezip::curve_keypair_read(dir + "/k/moezip.key", pair);
    EXPECT_FALSE(st);
    EXPECT_NE(st.message().find("chmod 600"), std::string::npos) << st.message();
}

TEST(Curve, KeyFilesThatAreNotRegularFilesAreRefusedBeforeTheyAreRead) {
    // A FIFO blocked the host forever; a character device (or /dev/zero as --allow) was read until
    // memory ran out; a directory was reported as "chmod 600 it". Each is now named at once.
    const std::string dir = test_dir("curve_not_regular");
    const std::string fifo = dir + "/fifo.key", folder = dir + "/folder.key";
    unlink(fifo.c_str());
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    mkdir(folder.c_str(), 0700);
    chmod(folder.c_str(), 0700);
    moezip::CurveKeyPair pair;
    std::vector<std::string> pubs;
    for (const std::string & path : {fifo, folder, std::string("/dev/zero")}) {
        moezip::Status a = moezip::curve_keypair_read(path, pair);
        EXPECT_FALSE(a) << path;
        EXPECT_NE(a.message().find("is not a regular file"), std::string::npos) << path << ": " << a.message();
        moezip::Status b = moezip::curve_public_keys_read(path, pubs);
        EXPECT_FALSE(b) << path;
        EXPECT_NE(b.message().find("is not a regular file"), std::string::npos) << path << ": " << b.message();
    }
}

TEST(Curve, OnlyAllowedCoordinatorKeysAreServedAndRefusalsAreCounted) {
    const std::string dir = test_dir("curve_serve");
    const moezip::CurveKeyPair wk = keygen(dir, "worker"), ck = keygen(dir, "coordinator"), intruder = keygen(dir, "intruder");
    WorkerProcess w;
    ASSERT_TRUE(w.start({"--model", tiny_q8(), "--bind", "tcp://127.0.0.1:*", "--key", dir + "/worker/moezip.key", "--allow",
                         dir + "/coordinator/moezip.pub"}, dir)) << w.error();
    EXPECT_NE(w.ready_line().find("curve " + wk.public_key), std::string::npos) << w.ready_line();
    {
        WorkerClient good(w.endpoint(), w.instance(), kRowsPlan, client_keys(wk, ck));
        ASSERT_TRUE(good.planned()) << "the allowed coordinator key is served";
        good.send(compute_frames(compute_header(tiny_request(1, 5), w.instance()), tiny_request(1, 5)));
        WorkerReply rep;
        ASSERT_TRUE(good.recv(rep));
        EXPECT_EQ(rep.h.kind, (uint16_t) moezip::MsgKind::result) << rep.text();
    }
    {
        WorkerClient wrong_key(w.endpoint(), w.instance(), "", client_keys(wk, intruder));
        EXPECT_FALSE(hello_answered(wrong_key, 700)) << "a key not in the allow-list is refused";
        WorkerClient plain(w.endpoint(), w.instance(), "");
        EXPECT_FALSE(hello_answered(plain, 700)) << "a plain peer is refused";
        WorkerClient wrong_worker(w.endpoint(), w.instance(), "", client_keys(intruder, ck));
        EXPECT_FALSE(hello_answered(wrong_worker, 700)) << "a client expecting another worker key never completes the handshake";
    }
    // the coordinator's own transport: the same verdicts, and a message that says what to check
    zmq::context_t ctx(1);
    moezip::WorkerLink link(ctx, w.endpoint(), 700, {wk.public_key, intruder});
    moezip::MsgHeader h = moezip::msg_header_make(moezip::MsgKind::ping);
    moezip::Status st = link.send(h, {});
    EXPECT_EQ(st.code(), moezip::Status::Code::timeout) << st.to_string();
    EXPECT_NE(st.message().find("CURVE handshake did not complete"), std::string::npos) << st.message();
    moezip::WorkerLink ok_link(ctx, w.endpoint(), 5000, {wk.public_key, ck});
    h.request_id = 9;
    ASSERT_TRUE(ok_link.send(h, {}));
    moezip::MsgHeader rh;
    zmq::message_t data;
    ASSERT_TRUE(ok_link.recv(9, rh, data));
    EXPECT_EQ(rh.kind, (uint16_t) moezip::MsgKind::pong);
    link.reset();
    ok_link.reset();
    ASSERT_EQ(w.stop(SIGTERM, 5000), 0);
    const std::string counters = w.stderr_text();
    EXPECT_GE(worker_counter(counters, "key accepted"), 2u) << counters;
    EXPECT_GE(worker_counter(counters, "key refused"), 2u) << "the intruder's key, twice: " << counters;
    EXPECT_GE(worker_counter(counters, "failed protocol (plain peer, wrong worker key or junk)"), 2u) << counters;
    EXPECT_EQ(counters.find(wk.secret_key), std::string::npos) << "no secret in the worker's output";
}

// The worker's ZAP handler answers every CURVE handshake on a thread of its own: a signal taken
// there in the middle of a request's parts left its REP socket half through it, and no handshake
// after that was answered. That thread now blocks signals (worker_auth.cpp); this test aims them at
// it (tgkill: a process-directed signal usually lands on the main thread, which handles EINTR).
TEST(Curve, HandshakesAreAnsweredWhileSignalsAreAimedAtTheZapThread) {
    const std::string dir = test_dir("curve_signals");
    const moezip::CurveKeyPair wk = keygen(dir, "worker"), ck = keygen(dir, "coordinator");
    WorkerProcess w;
    // signal_every_us installs the SIGALRM handler that does nothing (its timer hits the main thread)
    ASSERT_TRUE(w.start({"--model", tiny_q8(), "--bind", "tcp://127.0.0.1:*", "--key", dir + "/worker/moezip.key", "--allow",
                         dir + "/coordinator/moezip.pub"}, dir, {{"MOEZIP_WORKER_FAULT", "signal_every_us=1000000"}})) << w.error();
    const int zap = thread_named(w.pid(), "moezip-zap");
    ASSERT_GT(zap, 0) << "no thread moezip-zap in /proc/" << w.pid() << "/task";
    std::atomic<bool> done{false};
    std::atomic<uint64_t> sent{0};
    std::thread aim([&]() {
        while (!done) {
            if (syscall(SYS_tgkill, w.pid(), zap, SIGALRM) == 0) ++sent;
            std::this_thread::yield();
        }
    });
    constexpr int kClients = 60;
    int served = 0;
    for (int i = 0; i < kClients; ++i) {
        WorkerClient c(w.endpoint(), w.instance(), "", client_keys(wk, ck));
        if (hello_answered(c, 5000)) ++served;
        else break;
    }
    done = true;
    aim.join();
    EXPECT_GT(sent.load(), 100u) << "signals aimed at the thread";
    EXPECT_EQ(served, kClients) << "handshakes answered before one was not";
    ASSERT_EQ(w.stop(SIGTERM, 5000), 0) << w.stderr_text();
    EXPECT_EQ(worker_counter(w.stderr_text(), "key accepted"), (uint64_t) kClients) << w.stderr_text();
}

TEST(Curve, ANonLoopbackBindWithoutKeysRefusesToStart) {
    const std::string dir = test_dir("curve_bind");
    CommandResult r = run_command({bin_path("moezip-worker"), "--model", tiny_q8(), "--bind", "tcp://0.0.0.0:*"}, {}, 60);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("refusing to serve without keys"), std::string::npos) << r.err;
    r = run_command({bin_path("moezip-worker"), "--model", tiny_q8(), "--bind", "tcp://0.0.0.0:*", "--key", dir + "/none.key"}, {}, 60);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("--key needs --allow"), std::string::npos) << r.err;
    keygen(dir, "w");
    r = run_command({bin_path("moezip-worker"), "--model", tiny_q8(), "--bind", "tcp://0.0.0.0:*", "--key", dir + "/w/moezip.key",
                     "--allow", dir + "/w/moezip.key"}, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << "a key pair file is not an allow-list";
    EXPECT_NE(r.err.find("a secret key in a public-key file"), std::string::npos) << r.err;
    WorkerProcess insecure;
    ASSERT_TRUE(insecure.start({"--model", tiny_q8(), "--bind", "tcp://0.0.0.0:*", "--insecure"}, dir)) << insecure.error();
    EXPECT_NE(insecure.stderr_text().find("warning: --insecure"), std::string::npos) << insecure.stderr_text();
    EXPECT_NE(insecure.ready_line().find(", plain;"), std::string::npos) << insecure.ready_line();
}

TEST(Curve, TheRealCoordinatorOverCurveEqualsTheSingleNodeRunAndAnUnknownKeyFailsLoudly) {
    const std::string model = tiny_q8();
    Cluster c{test_dir("curve_distributed"), {}};
    const moezip::CurveKeyPair w0 = keygen(c.dir, "w0"), w1 = keygen(c.dir, "w1"), coord = keygen(c.dir, "coordinator");
    keygen(c.dir, "stranger");
    for (int i = 0; i < 2; ++i)
        ASSERT_TRUE(c.start_worker(model, "tcp://127.0.0.1:*", i == 0 ? "0-3" : "4-7", {},
                                   {"--key", c.dir + "/w" + std::to_string(i) + "/moezip.key", "--allow", c.dir + "/coordinator/moezip.pub"}));
    auto run = [&](const std::string & name, const std::string & body) {
        return run_preloaded({bin_path("moezip-run"), "-m", model, "--fixture", "32", "-n", "16", "--no-repack", "--quiet", "--json",
                              c.dir + "/" + name + "-run.json"}, write_moezip_config(c.dir, name, body));
    };
    ASSERT_EQ(run("single", "mode = \"observe\"\n").exit_code, 0);
    auto body = [&](const std::string & client_key) {
        return "require_intercept = true\nmode = \"experts\"\n[dispatch]\nconnect_timeout_ms = 1000\nclient_key = \"" + client_key + "\"\n"
               "[[worker]]\nendpoint = \"" + c.workers[0]->endpoint() + "\"\nexperts = \"0-3\"\npublic_key = \"" + w0.public_key + "\"\n"
               "[[worker]]\nendpoint = \"" + c.workers[1]->endpoint() + "\"\nexperts = \"4-7\"\npublic_key = \"" + w1.public_key + "\"\n";
    };
    CommandResult r = run("curve", body(c.dir + "/coordinator/moezip.key"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", c.dir + "/single.json", c.dir + "/curve.json"});
    EXPECT_EQ(cmp.exit_code, 0) << cmp.out;
    const json rep = load_json(c.dir + "/curve.json");
    for (const auto & w : rep["workers"]) {
        EXPECT_EQ(w["curve"], true) << w.dump();
        EXPECT_GT(w["slots"].get<int>(), 0) << w.dump();
    }
    const std::string report_text = read_file(c.dir + "/curve.json");
    EXPECT_EQ(report_text.find(coord.secret_key), std::string::npos) << "the secret key is never in the report";
    EXPECT_EQ(r.err.find(coord.secret_key), std::string::npos) << "nor in the log";
    // a coordinator whose key the workers do not know: refused at the handshake, the run fails (status 4)
    CommandResult stranger = run("stranger", body(c.dir + "/stranger/moezip.key"));
    EXPECT_EQ(stranger.exit_code, 4) << stranger.err;
    EXPECT_NE(stranger.err.find("CURVE handshake did not complete"), std::string::npos) << stranger.err;
    // a key file that cannot be used refuses its workers by name, before anything is sent
    chmod((c.dir + "/stranger/moezip.key").c_str(), 0644);
    CommandResult leaky = run("leaky", body(c.dir + "/stranger/moezip.key"));
    EXPECT_EQ(leaky.exit_code, 4) << leaky.err;
    EXPECT_NE(leaky.err.find("refused: client_key: key file " + c.dir + "/stranger/moezip.key may be read by group or others"),
              std::string::npos) << leaky.err;
    for (auto & w : c.workers) ASSERT_EQ(w->stop(SIGTERM, 5000), 0);
    EXPECT_GE(worker_counter(c.workers[0]->stderr_text(), "key refused"), 1u) << c.workers[0]->stderr_text();
}

TEST(Plan, AConnectionComputesOnlyWhatItsHelloPlanned) {
    const std::string dir = test_dir("plan");
    WorkerProcess w;
    ASSERT_TRUE(w.start({"--model", tiny_q8(), "--bind", "ipc://" + dir + "/w.sock", "--experts", "0-5"}, dir)) << w.error();
    auto ask = [&](WorkerClient & c, std::vector<zmq::message_t> frames) {
        c.send(std::move(frames));
        WorkerReply rep;
        EXPECT_TRUE(c.recv(rep)) << "no reply";
        return rep;
    };
    auto compute = [&](WorkerClient & c, int32_t a, int32_t b) {
        return ask(c, compute_frames(compute_header(tiny_request(a, b), w.instance()), tiny_request(a, b)));
    };
    WorkerClient none(w.endpoint(), w.instance(), "");
    WorkerReply rep = compute(none, 0, 1);
    EXPECT_EQ(rep.h.status, (int32_t) moezip::ErrorCode::bad_plan) << "no hello, no compute: " << rep.text();
    WorkerClient experts(w.endpoint(), w.instance(), R"({"mode":"experts","experts":"0-3"})");
    ASSERT_TRUE(experts.planned());
    EXPECT_EQ(compute(experts, 2, 3).h.kind, (uint16_t) moezip::MsgKind::result);
    rep = compute(experts, 2, 4);
    EXPECT_EQ(rep.h.status, (int32_t) moezip::ErrorCode::bad_plan) << "expert 4 is served here, but not planned: " << rep.text();
    EXPECT_NE(rep.text().find("outside this connection's plan (experts 0-3)"), std::string::npos) << rep.text();
    WorkerClient rows(w.endpoint(), w.instance());
    EXPECT_EQ(compute(rows, 2, 4).h.kind, (uint16_t) moezip::MsgKind::result) << "the rows plan takes every served expert";
    // hellos whose plans this worker cannot take are refused, with the reason
    struct Case { const char * plan; const char * said; };
    const Case bad[] = {{R"({"mode":"experts","experts":"0-7"})", "expert 6, not served here"},
                        {R"({"mode":"shard","shares":[0.5,0.6],"slice":1})", "sum to 1"},
                        {R"({"mode":"shard","shares":[0.5,0.5],"slice":2})", "index into shares"},
                        {R"({"mode":"shard","shares":[1,0],"slice":1})", "slice 1 has share 0: an empty n_ff slice"},
                        // smaller than one block of n_ff in every layer: empty too (once accepted, then every request refused)
                        {R"({"mode":"shard","shares":[1,1e-300],"slice":1})", "holds no whole block of n_ff in any layer"},
                        {R"({"mode":"anything"})", "unknown"},
                        {R"(NaN)", "hello: not JSON"},
                        {R"(["not an object"])", "missing"}};
    for (const Case & k : bad) {
        WorkerClient c(w.endpoint(), w.instance(), "");
        WorkerReply h = ask(c, simple_frames(moezip::MsgKind::hello, 3, std::string(R"({"protocol":3,"plan":)") + k.plan + "}"));
        EXPECT_EQ(h.h.status, (int32_t) moezip::ErrorCode::bad_plan) << k.plan;
        EXPECT_NE(h.text().find(k.said), std::string::npos) << k.plan << ": " << h.text();
    }
    // a refused hello leaves no earlier plan behind on its connection
    WorkerReply again = ask(rows, simple_frames(moezip::MsgKind::hello, 4, R"({"protocol":3,"plan":{"mode":"nonsense"}})"));
    EXPECT_EQ(again.h.status, (int32_t) moezip::ErrorCode::bad_plan);
    EXPECT_EQ(compute(rows, 2, 4).h.status, (int32_t) moezip::ErrorCode::bad_plan) << "the rows plan is gone";
    ASSERT_EQ(w.stop(SIGTERM, 5000), 0);
    EXPECT_EQ(worker_counter(w.stderr_text(), "bad_plan"), 2u + 8u + 2u) << w.stderr_text();
}
