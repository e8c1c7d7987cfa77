// "No silent wrong numbers" when the host process meets faults: a hostile hello, an exception inside
// the hook, request frames outliving their memory, signals during a wait or a connect, exit while
// another thread decodes, an engine loaded with RTLD_DEEPBIND, unreachable endpoints and contexts
// decoding at once. The host never crashes and never loses output: each run is bit-identical to the
// engine alone or fails loudly, and the report says what happened.
#include "tests/support/cluster.h"

#include "coordinator/wire/protocol.h"
#include "coordinator/wire/transport.h"

#include <zmq_addon.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace moezip_test;
using nlohmann::json;

namespace {

std::string engine_dir() {
    Dl_info info;
    if (dladdr(reinterpret_cast<const void *>(&ggml_backend_load_all_from_path), &info) == 0 || info.dli_fname == nullptr) return "";
    std::string p = info.dli_fname;
    return p.substr(0, p.rfind('/'));
}

} // namespace

// ---- B4: a hostile hello, an exception inside the hook -------------------------------------------

/// A fake worker's answer: hello_ok with `hello_json` (and the instance 0x1234 in the header) to a
/// hello, an error to anything else.
static std::vector<zmq::message_t> fake_worker_reply(const moezip::MsgHeader & h, const std::string & hello_json) {
    const bool hello = h.kind == (uint16_t) moezip::MsgKind::hello;
    const std::string text = hello ? hello_json : std::string("fake worker computes nothing");
    moezip::MsgHeader r = moezip::msg_header_make(hello ? moezip::MsgKind::hello_ok : moezip::MsgKind::error);
    r.request_id = h.request_id;
    r.instance = 0x1234;
    r.status = hello ? 0 : (int32_t) moezip::ErrorCode::compute_failed;
    moezip::msg_header_set_frame(r, 0, moezip::WireType::none, text.data(), text.size());
    std::vector<zmq::message_t> out;
    out.emplace_back(&r, sizeof r);
    out.emplace_back(text.data(), text.size());
    return out;
}

TEST(HostileWorker, HelloFieldsOfTheWrongTypeAreARefusalUnderThePolicyNeverAFailedDecode) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    const std::string dir = test_dir("hostile_hello");
    const json good_engine = {{"protocol", moezip::kProtocolVersion}, {"instance", moezip::hex64(0x1234)},
                              {"ggml_commit", reference_api().ggml_commit()}, {"cpu_variant", reference_variant()},
                              {"cpu_build_id", reference_build_id()}, {"experts", "4-7"}, {"n_expert", 8}};
    struct Case { const char * name; json hello; const char * said; std::string raw = ""; };
    std::vector<Case> cases;
    json c1 = good_engine; c1["protocol"] = "2";
    cases.push_back({"protocol_as_string", c1, "protocol \"2\""});
    json c2 = good_engine; c2["layers"] = {{{"il", "0"}, {"n_embd", 64}}};
    cases.push_back({"layer_index_as_string", c2, "does not serve this layer"});
    json c3 = good_engine; c3["layers"] = 5;
    cases.push_back({"layers_not_an_array", c3, "does not serve this layer"});
    json c4 = good_engine; c4["layers"] = {{{"il", 0}, {"n_embd", 64}, {"n_ff", 64}, {"n_expert", 8}, {"tensors", "x"}}};
    cases.push_back({"tensors_not_an_array", c4, "malformed tensor list"});
    json c5 = good_engine; c5.erase("instance");
    cases.push_back({"no_instance", c5, "names no worker instance"});
    // "protocol" nested 200000 deep crashed the host in a recursive dump of the value
    {
        json c6 = good_engine;
        c6.erase("protocol");
        std::string deep = c6.dump();
        deep.pop_back();
        deep += ",\"protocol\":" + std::string(200000, '[') + "5" + std::string(200000, ']') + "}";
        cases.push_back({"protocol_nested_deep", json(), "protocol (a JSON array)", deep});
    }
    CommandResult single = run_command({bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "8", "--no-repack", "--quiet",
                                        "--json", dir + "/single.json"});
    ASSERT_EQ(single.exit_code, 0);
    for (const Case & k : cases) {
        std::atomic<int> hellos{0};
        const std::string hello = k.raw.empty() ? k.hello.dump() : k.raw;
        FakeWorkerSocket fake("ipc://" + dir + "/" + k.name + ".sock", [&](const moezip::MsgHeader & h) {
            hellos += h.kind == (uint16_t) moezip::MsgKind::hello;
            return fake_worker_reply(h, hello);
        });
        const std::string cfg = write_moezip_config(dir, k.name, "mode = \"experts\"\n[experts]\nlocal = \"0-3\"\n[dispatch]\non_worker_error = \"local\"\n"
                                                                  "[[worker]]\nendpoint = \"ipc://" + dir + "/" + k.name + ".sock\"\nexperts = \"4-7\"\n");
        CommandResult r = run_preloaded({bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "8", "--no-repack", "--quiet",
                                         "--json", dir + "/" + k.name + "-run.json"}, cfg);
        ASSERT_EQ(r.exit_code, 0) << k.name << ": " << r.err;
        EXPECT_EQ(load_json(dir + "/single.json")["logits_xxh3"], load_json(dir + "/" + k.name + "-run.json")["logits_xxh3"]) << k.name;
        const json rep = load_json(dir + "/" + k.name + ".json");
        EXPECT_TRUE(errors_mention(rep, k.said)) << k.name << ": " << rep["errors"].dump();
        EXPECT_EQ(rep["checks"]["regions_handled"].get<int>(), 16) << k.name << ": every region of the 8 graphs handled here";
        EXPECT_GE(hellos.load(), 1) << k.name;
    }
}

TEST(HookFailure, AnExceptionInsideTheHookFollowsThePolicyAndLaterGraphsAreStillHandled) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    const std::string dir = test_dir("hook_exception");
    auto run = [&](const std::string & name, const std::string & body, std::map<std::string, std::string> env) {
        return run_preloaded({bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "8", "--no-repack", "--quiet",
                              "--json", dir + "/" + name + "-run.json"}, write_moezip_config(dir, name, body), env);
    };
    ASSERT_EQ(run("observe", "mode = \"observe\"\n", {}).exit_code, 0);
    CommandResult r = run("local", "mode = \"local\"\n", {{"MOEZIP_TEST_FAULT", "throw_in_region"}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", dir + "/observe.json", dir + "/local.json"});
    EXPECT_EQ(cmp.exit_code, 0) << "the engine recomputed the failed region: " << cmp.out;
    const json rep = load_json(dir + "/local.json");
    EXPECT_TRUE(errors_mention(rep, "test fault throw_in_region")) << rep["errors"].dump();
    EXPECT_EQ(rep["checks"]["regions_passthrough"], 1);
    EXPECT_EQ(rep["checks"]["regions_handled"], 15) << "the thread was not left marked inside the hook";
    // the failed region is one passthrough, not also a fallback (no worker's part was computed here)
    int passthrough = 0, fallbacks = 0;
    for (const json & l : rep["layers"]) {
        passthrough += l["passthrough"].get<int>();
        fallbacks += l["fallbacks"].get<int>();
    }
    EXPECT_EQ(passthrough, 1) << rep["layers"].dump();
    EXPECT_EQ(fallbacks, 0) << rep["layers"].dump();
    // on_worker_error = "abort": the compute fails, the host says so, nothing crashes, and the exit
    // status is moezip's 4 (the host's own would be 1), as a host that went on would end
    CommandResult ab = run("abort", "mode = \"local\"\n[dispatch]\non_worker_error = \"abort\"\n", {{"MOEZIP_TEST_FAULT", "throw_in_region"}});
    EXPECT_EQ(ab.exit_code, 4) << ab.err;
    EXPECT_NE(ab.err.find("llama_decode failed"), std::string::npos) << ab.err;
    EXPECT_NE(ab.err.find("1 graph compute failed, and with it the host's request that needed it (layer"), std::string::npos) << ab.err;
}

// ---- B5: request frames never outlive their memory ----------------------------------------------

TEST(Transport, RequestFramesAreOwnedByZeroMqOnceSent) {
    // The caller's buffers are overwritten right after send(): the worker must still see what was
    // hashed (a zero-copy frame would now carry the new bytes: bad_hash, or a read of freed memory).
    Cluster c{test_dir("frames_owned"), {}};
    ASSERT_TRUE(c.start_worker(fixture_model({"--preset", "tiny", "--type", "f32"}), "ipc://" + c.dir + "/w.sock", ""));
    zmq::context_t ctx(1);
    moezip::WorkerLink link(ctx, c.workers[0]->endpoint(), 5000);
    link.set_instance(c.workers[0]->instance());
    {
        moezip::MsgHeader hh = moezip::msg_header_make(moezip::MsgKind::hello);
        hh.request_id = 1;
        const std::string plan = hello_json(kRowsPlan);
        ASSERT_TRUE(link.send(hh, {{moezip::WireType::none, {plan.data(), plan.size()}}}));
        moezip::MsgHeader rh;
        zmq::message_t d;
        ASSERT_TRUE(link.recv(1, rh, d));
    }
    for (int i = 0; i < 20; ++i) {
        std::vector<float> hidden(64, 0.25f * i), weights = {0.5f, 0.5f};
        std::vector<int32_t> ids = {i % 8, (i + 3) % 8};
        moezip::MsgHeader h = moezip::msg_header_make(moezip::MsgKind::compute);
        h.request_id = 100 + i; h.layer = 0; h.n_embd = 64; h.n_ff = 64; h.n_used = 2; h.n_rows = 1;
        h.reply = (uint16_t) moezip::ReplyKind::row_sums; h.glu_op = GGML_GLU_OP_SWIGLU;
        ASSERT_TRUE(link.send(h, {{moezip::WireType::f32, {hidden.data(), hidden.size() * 4}},
                                  {moezip::WireType::i32, {ids.data(), ids.size() * 4}},
                                  {moezip::WireType::f32, {weights.data(), weights.size() * 4}}}));
        std::fill(hidden.begin(), hidden.end(), -1.0f);
        ids = {99, 99};
        hidden.clear();
        hidden.shrink_to_fit();  // and freed
        moezip::MsgHeader rh;
        zmq::message_t data;
        moezip::Status st = link.recv(h.request_id, rh, data);
        ASSERT_TRUE(st) << st.to_string();
        EXPECT_EQ(rh.kind, (uint16_t) moezip::MsgKind::result);
    }
    EXPECT_EQ(link.stats().hash_failed, 0u);
    link.reset();
}

// ---- B6: signals the host handles ----------------------------------------------------------------

TEST(Signals, EintrResumesTheWaitForAWorker) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    Cluster c{test_dir("signals"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w0.sock", "0-3", {{"MOEZIP_WORKER_FAULT", "delay_ms=1"}}));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w1.sock", "4-7", {{"MOEZIP_WORKER_FAULT", "delay_ms=1"}}));
    ASSERT_EQ(run_command(test_host("signals", {model}, c.dir + "/plain.json", {"-n", "40"})).exit_code, 0);
    CommandResult r = run_preloaded(test_host("signals", {model}, c.dir + "/dist-run.json", {"-n", "40"}),
                                    write_moezip_config(c.dir, "dist", "require_intercept = true\nmode = \"experts\"\n[dispatch]\non_worker_error = \"abort\"\n" +
                                                                           worker_lines(c, {"0-3", "4-7"})));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(host_runs(c.dir + "/plain.json"), host_runs(c.dir + "/dist-run.json"));
    const json rep = load_json(c.dir + "/dist.json");
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u);
    EXPECT_EQ(rep["errors"]["count"], 0) << rep["errors"].dump();
    for (const auto & w : rep["workers"]) EXPECT_EQ(w["failures"], 0) << w.dump();
}

// A model opened and then deleted (a download replaced under the host, O_TMPFILE) and loaded as
// /proc/self/fd/N: the fd's link reads "... (deleted)". Experts mode read the tensor table through
// that name, could not, and populated nothing, with the reason only on stderr.
TEST(DeletedModel, IsPopulatedExceptTheWorkersExpertsAndDistributed) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    Cluster c{test_dir("deleted_model"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w0.sock", "0-3"));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w1.sock", "4-7"));
    CommandResult plain = run_command(test_host("deleted", {model}, c.dir + "/plain.json"));
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    CommandResult r = run_preloaded(test_host("deleted", {model}, c.dir + "/dist-run.json"),
                                    write_moezip_config(c.dir, "dist", "require_intercept = true\nmode = \"experts\"\n" +
                                                                           worker_lines(c, {"0-3", "4-7"})));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(host_runs(c.dir + "/plain.json"), host_runs(c.dir + "/dist-run.json"));
    const json mem = load_json(c.dir + "/dist.json")["memory"];
    std::ifstream f(model, std::ios::binary | std::ios::ate);
    const uint64_t file_bytes = (uint64_t) f.tellg();
    EXPECT_EQ(mem["model_mapped_lazily_bytes"].get<uint64_t>(), file_bytes) << mem.dump();
    EXPECT_GT(mem["model_skipped_bytes"].get<uint64_t>(), 0u) << "the workers' experts left out: " << mem.dump();
    EXPECT_EQ(mem["model_populated_bytes"].get<uint64_t>() + mem["model_skipped_bytes"].get<uint64_t>(), file_bytes) << mem.dump();
    EXPECT_FALSE(mem.contains("model_populate_error")) << mem.dump();
}

namespace {
void on_test_signal(int) {}
}

TEST(Signals, OpeningALinkResumesAfterEintr) {
    // A link is opened at the first MoE call, on the engine's decoding thread; zmq_connect returns
    // EINTR when a handled signal lands in it. CI once failed the whole run this way ("internal error
    // while handling the region: Interrupted system call"): opening must simply be done again.
    struct sigaction sa = {}, old = {};
    sa.sa_handler = on_test_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART
    ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
    const pthread_t opener = pthread_self();
    std::atomic<bool> done{false};
    std::atomic<uint64_t> sent{0};
    std::thread pest([&]() {
        while (!done) {
            pthread_kill(opener, SIGUSR1);
            ++sent;
            std::this_thread::sleep_for(std::chrono::microseconds(5));
        }
    });
    zmq::context_t ctx(1);
    const std::string endpoint = "ipc://" + test_dir("eintr_open") + "/nobody.sock";
    int opened = 0;
    std::string error;
    for (int i = 0; i < 3000 && error.empty(); ++i) {
        try {
            moezip::WorkerLink link(ctx, endpoint, 100);
            ++opened;
        } catch (const std::exception & e) {
            error = e.what();
        }
        // closed sockets are reaped by ZeroMQ's own thread: let it keep up, or the fds run out
        if (i % 100 == 99) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    done = true;
    pest.join();
    sigaction(SIGUSR1, &old, nullptr);
    EXPECT_EQ(error, "");
    EXPECT_EQ(opened, 3000);
    EXPECT_GT(sent.load(), 1000u);  // the signals really came
}

// ---- B7: exit while another thread decodes -------------------------------------------------------

TEST(ExitMidDecode, AddsNoCrashAndDoesNotWaitForAStoppedWorker) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    Cluster c{test_dir("exit_mid_decode"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w0.sock", "0-3"));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w1.sock", "4-7"));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/s0.sock", ""));  // shard workers serve every expert
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/s1.sock", ""));
    for (const char * mode : {"experts", "shard"}) {
        const std::string b = std::string(mode) == "shard" ? "mode = \"shard\"\n[shard]\nlocal_share = 0.5\n" + worker_lines(c, {}, {"0.25", "0.25"}, 2)
                                                           : "mode = \"experts\"\n" + worker_lines(c, {"0-3", "4-7"});
        const std::string cfg = write_moezip_config(c.dir, mode, b);
        int crashes = 0, ok = 0;
        for (int i = 0; i < 15; ++i) {
            CommandResult r = run_preloaded(test_host("exit-mid-decode", {model}, c.dir + "/x.json", {"--after-ms", std::to_string(20 + 25 * i)}), cfg, {}, 60);
            if (r.exit_code >= 128) ++crashes;
            if (r.exit_code == 0) ++ok;
            EXPECT_LT(r.exit_code, 128) << mode << " run " << i << ": " << r.err;
        }
        EXPECT_EQ(crashes, 0) << mode;
        EXPECT_EQ(ok, 15) << mode;
    }
    // a stopped worker: the decoding thread waits for it (timeouts of 30 s); exit must not
    WorkerProcess & w = *c.workers[1];
    ASSERT_EQ(kill(w.pid(), SIGSTOP), 0);
    const std::string cfg = write_moezip_config(c.dir, "stopped", "mode = \"experts\"\n[dispatch]\ntimeout_ms = 30000\nconnect_timeout_ms = 30000\n" +
                                                                       worker_lines(c, {"0-3", "4-7"}));
    auto t0 = std::chrono::steady_clock::now();
    CommandResult r = run_preloaded(test_host("exit-mid-decode", {model}, c.dir + "/x.json", {"--after-ms", "500"}), cfg, {}, 60);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    kill(w.pid(), SIGCONT);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_LT(s, 15.0) << "exit waited for the stopped worker's 30 s timeout";
}

// ---- B8: an engine loaded with RTLD_DEEPBIND -----------------------------------------------------

namespace {

// moezip-deepbind-host on the tiny model for 6 steps with `how` ("", "--variants-too", ...), alone and
// under the preload in mode local with require_intercept (report <test dir>/<name>.json); the plain
// run succeeds and the engine's output is the same under the preload (checked here).
struct DeepbindRuns {
    CommandResult plain, preloaded;
    json report;
};
DeepbindRuns run_deepbind_host(const std::string & name, const std::string & how) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    const std::string dir = test_dir("deepbind_" + name);
    std::vector<std::string> argv = {bin_path("moezip-deepbind-host"), engine_dir(), model, "6"};
    if (!how.empty()) argv.push_back(how);
    DeepbindRuns r;
    r.plain = run_command(argv);
    r.preloaded = run_preloaded(argv, write_moezip_config(dir, name, "mode = \"local\"\nrequire_intercept = true\n"));
    r.report = json::parse(read_file(dir + "/" + name + ".json"), nullptr, false);
    EXPECT_EQ(r.plain.exit_code, 0) << r.plain.err;
    EXPECT_EQ(r.plain.out, r.preloaded.out) << "the engine's own output is untouched";
    return r;
}

} // namespace

TEST(Deepbind, AnEngineBoundPastEveryHookIsNamedAndRequireInterceptFailsTheRun) {
    if (MOEZIP_TEST_ASAN) GTEST_SKIP() << "the ASan runtime refuses libraries dlopened with RTLD_DEEPBIND";
    ASSERT_FALSE(engine_dir().empty());
    const DeepbindRuns d = run_deepbind_host("bypassed", "--variants-too");
    const CommandResult & r = d.preloaded;
    const json & rep = d.report;
    EXPECT_EQ(r.exit_code, 4) << r.err;
    EXPECT_NE(r.err.find("intercepted nothing"), std::string::npos) << r.err;
    ASSERT_FALSE(rep.is_discarded()) << "no report";
    EXPECT_EQ(rep["state"], "passthrough");
    EXPECT_NE(rep["passthrough_reason"].get<std::string>().find("RTLD_DEEPBIND"), std::string::npos) << rep.dump();
}

TEST(Deepbind, WhenOnlyLibllamaIsDeepboundGraphsAreHandledAndTheLostHooksAreNamed) {
    if (MOEZIP_TEST_ASAN) GTEST_SKIP() << "the ASan runtime refuses libraries dlopened with RTLD_DEEPBIND";
    const DeepbindRuns d = run_deepbind_host("partial", "");
    const CommandResult & r = d.preloaded;
    const json & rep = d.report;
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("ggml_backend_buffer_free"), std::string::npos) << "the lost free event is said: " << r.err;
    ASSERT_FALSE(rep.is_discarded()) << "no report";
    EXPECT_EQ(rep["checks"]["regions_handled"], 12);
    EXPECT_EQ(rep["hook_bindings"]["libggml-cpu:ggml_graph_compute"], "moezip");
    EXPECT_EQ(rep["hook_bindings"]["libllama:ggml_backend_buffer_free"].get<std::string>().find("bypassed"), 0u) << rep["hook_bindings"].dump();
}

TEST(Deepbind, ACpuVariantDeepboundToItselfIsNamedAsTheBypass) {
    // Only the CPU backend variants are dlopened with RTLD_DEEPBIND: libllama meets the hooks, the
    // backend's call of its own ggml_graph_compute does not, so no graph is intercepted. That slot
    // holds the variant's own definition, which was read as "not bound yet" (its own PLT) and the
    // bypass went unnamed.
    if (MOEZIP_TEST_ASAN) GTEST_SKIP() << "the ASan runtime refuses libraries dlopened with RTLD_DEEPBIND";
    const DeepbindRuns d = run_deepbind_host("variants_only", "--variants-only");
    const CommandResult & r = d.preloaded;
    const json & rep = d.report;
    EXPECT_EQ(r.exit_code, 4) << r.err;
    ASSERT_FALSE(rep.is_discarded()) << "no report";
    const std::string cpu = rep["hook_bindings"]["libggml-cpu:ggml_graph_compute"].get<std::string>();
    EXPECT_EQ(cpu.find("bypassed: bound to "), 0u) << rep["hook_bindings"].dump();
    EXPECT_NE(cpu.find("libggml-cpu"), std::string::npos) << cpu;
    EXPECT_NE(cpu.find("(its own definition)"), std::string::npos) << cpu;
    EXPECT_EQ(rep["hook_bindings"]["libllama:ggml_backend_sched_graph_compute_async"], "moezip") << rep["hook_bindings"].dump();
    EXPECT_NE(r.err.find("calls ggml_graph_compute in its own definition"), std::string::npos) << r.err;
}

TEST(PeriodicReport, CarriesTheHookBindingsAsTheyAreThen) {
    // A host killed by a signal it does not handle (llama.cpp's programs on SIGTERM) leaves the last
    // periodic report: its hook_bindings were {} (read at exit only).
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    const std::string dir = test_dir("periodic_bindings");
    const std::string pause = dir + "/pause";
    CommandResult host;
    std::thread t = start_paused_host(host, model, dir + "/run.json", pause,
                                      write_moezip_config(dir, "local", "mode = \"local\"\nrequire_intercept = true\nreport_flush_ms = 1\n"));
    const json during = load_json(dir + "/local.json");  // the host waits for pause.go: the last periodic report
    std::ofstream(pause + ".go") << "go\n";
    t.join();
    ASSERT_EQ(host.exit_code, 0) << host.err;
    EXPECT_EQ(during["complete"], false) << during.dump();
    const json & bound = during["hook_bindings"];
    EXPECT_EQ(bound.value("libggml-cpu:ggml_graph_compute", ""), "moezip") << bound.dump();
    EXPECT_EQ(bound.value("libllama:ggml_backend_sched_graph_compute_async", ""), "moezip") << bound.dump();
    const json after = load_json(dir + "/local.json");
    EXPECT_EQ(after["complete"], true);
    EXPECT_EQ(after["hook_bindings"], during["hook_bindings"]);
}

TEST(Deepbind, AnUnusedVariantDeepboundToItselfIsNoBypassWhenGraphsAreHandled) {
    // A variant loaded with RTLD_DEEPBIND that never computes (the engine uses
    // its best one, which meets the hooks) was reported as the bypass, with a warning that no graph
    // could be intercepted, over a run whose every graph was.
    if (MOEZIP_TEST_ASAN) GTEST_SKIP() << "the ASan runtime refuses libraries dlopened with RTLD_DEEPBIND";
    const DeepbindRuns d = run_deepbind_host("unused_variant", "--unused-variant");
    const CommandResult & r = d.preloaded;
    const json & rep = d.report;
    ASSERT_FALSE(rep.is_discarded()) << "no report: " << r.err;
    if (rep["engine"].value("cpu_variant", "") == "x64") GTEST_SKIP() << "x64 is this CPU's best variant: it is the one in use";
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(rep["state"], "active");
    EXPECT_EQ(rep["checks"]["regions_handled"], 12);
    EXPECT_EQ(rep["hook_bindings"].value("libggml-cpu:ggml_graph_compute", ""), "moezip") << rep["hook_bindings"].dump();
    EXPECT_EQ(r.err.find("in its own definition"), std::string::npos) << r.err;
}

// ---- C11: endpoints that cannot be reached -------------------------------------------------------

TEST(Endpoints, AnUnreachableWorkerIsNamedWithTheCause) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    const std::string dir = test_dir("unreachable");
    const std::string cfg = write_moezip_config(dir, "r", "mode = \"experts\"\n[dispatch]\nconnect_timeout_ms = 300\n"
                                                          "[[worker]]\nendpoint = \"tcp://nohost.invalid:5601\"\nexperts = \"4-7\"\n"
                                                          "[[worker]]\nendpoint = \"ipc://" + dir + "/nobody.sock\"\nexperts = \"0-1\"\n"
                                                          "[[worker]]\nendpoint = \"tcp://127.0.0.1:1\"\nexperts = \"2-3\"\n");
    CommandResult r = run_preloaded({bin_path("moezip-run"), "-m", model, "--fixture", "8", "-n", "2", "--no-repack", "--quiet"}, cfg);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("host 'nohost.invalid' does not resolve"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("No such file or directory (" + dir + "/nobody.sock)"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tcp://127.0.0.1:1: not connected within 300 ms: Connection refused"), std::string::npos) << r.err;
}

// ---- C12: contexts decoding at once --------------------------------------------------------------

TEST(ParallelContexts, RunsCompareEqualStreamByStream) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    Cluster c{test_dir("parallel"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w0.sock", "0-3"));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w1.sock", "4-7"));
    const std::vector<std::string> extra = {"--contexts", "2", "-n", "24"};
    CommandResult obs = run_preloaded(test_host("parallel", {model}, c.dir + "/obs-run.json", extra), write_moezip_config(c.dir, "observe", "mode = \"observe\"\n"));
    ASSERT_EQ(obs.exit_code, 0) << obs.err;
    CommandResult ex = run_preloaded(test_host("parallel", {model}, c.dir + "/ex-run.json", extra),
                                     write_moezip_config(c.dir, "experts", "require_intercept = true\nmode = \"experts\"\n" + worker_lines(c, {"0-3", "4-7"})));
    ASSERT_EQ(ex.exit_code, 0) << ex.err;
    const json ro = load_json(c.dir + "/observe.json"), re = load_json(c.dir + "/experts.json");
    EXPECT_EQ(ro["logits"]["streams"].size(), 2u) << ro["logits"].dump();
    EXPECT_EQ(re["logits"]["streams"].size(), 2u);
    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", c.dir + "/observe.json", c.dir + "/experts.json"});
    EXPECT_EQ(cmp.exit_code, 0) << cmp.out << cmp.err;
    EXPECT_NE(cmp.out.find("2 streams"), std::string::npos) << cmp.out;
}

