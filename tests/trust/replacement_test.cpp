// "No silent wrong numbers" when what a run planned for is replaced under it: a model freed and
// another (or the same) loaded in one process, a worker restarted or replaced behind its endpoint, two
// [[worker]] entries reaching one process, the warmup graph, a worker's model file damaged in the
// middle of an expert. Each run is either bit-identical to the engine alone or refuses loudly, by
// name, and the report says what happened.
#include "tests/support/cluster.h"

#include "gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace moezip_test;
using nlohmann::json;

namespace {

std::string model_a() { return fixture_model({"--preset", "tiny", "--type", "f32"}); }
/// Same architecture and shapes as model_a, other random weights.
std::string model_b() { return fixture_model({"--preset", "tiny", "--type", "f32", "--seed", "7"}); }

} // namespace

// ---- A1: a model replaced in one process ------------------------------------------------------

struct SwapCase {
    const char * mode;
    bool no_mmap;
};

class ModelSwap : public ::testing::TestWithParam<SwapCase> {};

TEST_P(ModelSwap, AnotherModelIsVerifiedByContentAndTheSameModelIsDistributedAgain) {
    const SwapCase sc = GetParam();
    const std::string mode = sc.mode;
    const std::string a = model_a(), b = model_b();
    Cluster c{test_dir(std::string("swap_") + sc.mode + (sc.no_mmap ? "_no_mmap" : "")), {}};
    const bool experts = mode == "experts";
    ASSERT_TRUE(c.start_worker(a, "ipc://" + c.dir + "/w0.sock", experts ? "0-3" : ""));
    ASSERT_TRUE(c.start_worker(a, "ipc://" + c.dir + "/w1.sock", experts ? "4-7" : ""));
    std::string body = "mode = \"" + mode + "\"\n";
    if (mode == "rows") body += "[rows]\nlocal_share = 0.5\n" + worker_lines(c, {"", ""}, {"0.25", "0.25"});
    else if (mode == "shard") body += "[shard]\nlocal_share = 0.5\n" + worker_lines(c, {"", ""}, {"0.25", "0.25"});
    else body += worker_lines(c, {"0-3", "4-7"});
    std::vector<std::string> extra = {"--fixture", "24", "-n", "12"};
    if (sc.no_mmap) extra.push_back("--no-mmap");

    ASSERT_EQ(run_command(test_host("swap", {a, b, a}, c.dir + "/plain.json", extra)).exit_code, 0);
    CommandResult aba = run_preloaded(test_host("swap", {a, b, a}, c.dir + "/aba-run.json", extra), write_moezip_config(c.dir, "aba", body));
    ASSERT_EQ(aba.exit_code, 0) << aba.err;
    CommandResult ab = run_preloaded(test_host("swap", {a, b}, c.dir + "/ab-run.json", extra), write_moezip_config(c.dir, "ab", body));
    ASSERT_EQ(ab.exit_code, 0) << ab.err;

    const json plain = host_runs(c.dir + "/plain.json"), dist = host_runs(c.dir + "/aba-run.json");
    ASSERT_EQ(dist.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(plain[i]["tokens"], dist[i]["tokens"]) << "run " << i;
        // rows and experts are bit-identical; shard sums partial n_ff slices (close, not exact)
        if (mode != "shard") {
            EXPECT_EQ(plain[i]["logits_xxh3"], dist[i]["logits_xxh3"]) << "run " << i << " (model " << (i == 1 ? "B" : "A") << ")";
        }
    }
    const json rep = load_json(c.dir + "/aba.json");
    EXPECT_GE(rep["plans"]["model_epochs"].get<int>(), 2) << rep["plans"].dump();
    EXPECT_EQ(rep["plans"]["made"].get<int>(), 6) << "two layers, three models loaded: " << rep["plans"].dump();
    EXPECT_TRUE(errors_mention(rep, "weights differ from this host's")) << "the workers serve A, not B: " << rep["errors"].dump();
    EXPECT_GT(sum_layers(rep, "fallbacks"), 0u) << "B was computed here";
    // A loaded again is distributed again: more went to the workers than in the run without it
    const json rep_ab = load_json(c.dir + "/ab.json");
    EXPECT_GT(sum_layers(rep, "remote_slots"), sum_layers(rep_ab, "remote_slots")) << rep["layers"].dump();

    // require_intercept: B's first decode fails instead of being answered by this host alone
    CommandResult strict = run_preloaded(test_host("swap", {a, b}, c.dir + "/strict-run.json", extra),
                                         write_moezip_config(c.dir, "strict", "require_intercept = true\n" + body));
    EXPECT_EQ(strict.exit_code, 4) << strict.err;
    EXPECT_NE(strict.err.find("model 1"), std::string::npos) << "the host's decode of B fails: " << strict.err;
    EXPECT_NE(strict.err.find("weights differ"), std::string::npos) << strict.err;
}

INSTANTIATE_TEST_SUITE_P(Modes, ModelSwap,
                         ::testing::Values(SwapCase{"experts", false}, SwapCase{"experts", true}, SwapCase{"rows", true},
                                           SwapCase{"shard", false}),
                         [](const ::testing::TestParamInfo<SwapCase> & i) {
                             return std::string(i.param.mode) + (i.param.no_mmap ? "_no_mmap" : "_mmap");
                         });

TEST(WorkerFileChanged, AMappedWorkerWhoseModelFileChangedIsRefusedAndCountedAsSuch) {
    // A --mmap worker whose file really changed still answered hello with its digests from
    // load, so this host probed it every back-off; each compute was refused and computed here, but
    // the report showed no refusal. Now its hello and computes say model_changed, counted as a
    // refusal of that instance.
    const std::string a = model_a();
    Cluster c{test_dir("worker_file_changed"), {}};
    const std::string served = c.dir + "/served.gguf";
    ASSERT_EQ(run_command({"/bin/cp", a, served}).exit_code, 0);
    const std::string endpoint = "ipc://" + c.dir + "/w.sock";
    ASSERT_TRUE(c.start_worker(served, endpoint, "", {}, {"--mmap"}));
    const std::string pause = c.dir + "/pause";
    std::ofstream(c.dir + "/plain-pause.go") << "go\n";
    ASSERT_EQ(run_command(test_host("pause", {a}, c.dir + "/plain.json", {"--pause-file", c.dir + "/plain-pause"})).exit_code, 0);
    const std::string cfg = write_moezip_config(c.dir, "dist", "mode = \"experts\"\n" + worker_lines(c, {"0-7"}));
    CommandResult host;
    std::thread t = start_paused_host(host, a, c.dir + "/dist-run.json", pause, cfg);
    // the same size, other weights, written in place: the mapping now reads them
    const bool rewritten = run_command({"/bin/dd", "if=" + model_b(), "of=" + served, "conv=notrunc", "status=none"}).exit_code == 0;
    std::ofstream(pause + ".go") << "go\n";
    t.join();
    ASSERT_TRUE(rewritten);
    ASSERT_EQ(host.exit_code, 0) << host.err;
    EXPECT_EQ(host_runs(c.dir + "/plain.json"), host_runs(c.dir + "/dist-run.json")) << "bit-identical to the engine alone";
    const json rep = load_json(c.dir + "/dist.json");
    const json & w = rep["workers"][0];
    ASSERT_EQ(w["refusals"].get<int>(), 1) << "one refusal of one instance, however often it is probed: " << w.dump();
    const std::string first = w["refusals_first"][0].get<std::string>();
    EXPECT_NE(first.find("model_changed"), std::string::npos) << first;
    EXPECT_NE(first.find("instance " + moezip::hex64(c.workers[0]->instance())), std::string::npos) << first;
    EXPECT_GE(sum_layers(rep, "fallbacks"), 1u) << "its part was computed here";
    ASSERT_EQ(c.workers[0]->stop(SIGTERM, 5000), 0);
    const std::string counters = c.workers[0]->stderr_text();
    EXPECT_NE(counters.find("model_changed"), std::string::npos) << counters;
}

// ---- A2: a worker replaced behind its endpoint --------------------------------------------------

struct Replacement {
    const char * name;
    bool same_model;
};

class WorkerReplaced : public ::testing::TestWithParam<Replacement> {};

TEST_P(WorkerReplaced, ANewInstanceIsVerifiedAgainBeforeItComputes) {
    // The worker is replaced while the host is idle between two requests, so nothing times out:
    // only the instance id tells that another process answers now.
    const Replacement rp = GetParam();
    const std::string a = model_a();
    Cluster c{test_dir(std::string("replaced_") + rp.name), {}};
    const std::string endpoint = "ipc://" + c.dir + "/w.sock";
    ASSERT_TRUE(c.start_worker(a, endpoint, ""));
    const std::string pause = c.dir + "/pause";
    std::ofstream(c.dir + "/plain-pause.go") << "go\n";  // the run without the preload does not pause
    ASSERT_EQ(run_command(test_host("pause", {a}, c.dir + "/plain.json", {"--pause-file", c.dir + "/plain-pause"})).exit_code, 0);
    const std::string cfg = write_moezip_config(c.dir, "dist", "mode = \"experts\"\n" + worker_lines(c, {"0-7"}));
    CommandResult host;
    std::thread t = start_paused_host(host, a, c.dir + "/dist-run.json", pause, cfg);
    const uint64_t first = c.workers[0]->instance();
    c.workers[0]->stop(SIGKILL, 2000);
    const bool restarted = c.start_worker(rp.same_model ? a : model_b(), endpoint, "");
    std::ofstream(pause + ".go") << "go\n";
    t.join();
    ASSERT_TRUE(restarted);
    ASSERT_EQ(host.exit_code, 0) << host.err;
    EXPECT_EQ(host_runs(c.dir + "/plain.json"), host_runs(c.dir + "/dist-run.json")) << "both runs bit-identical to the engine alone";
    const json rep = load_json(c.dir + "/dist.json");
    const json & w = rep["workers"][0];
    EXPECT_EQ(w["foreign_instance_replies"], 1) << "the first request after the restart was answered by another instance: " << w.dump();
    EXPECT_EQ(w["reverifications"], 1) << w.dump();
    EXPECT_EQ(w["timeouts"], 0) << "noticed by its instance, not by a timeout: " << w.dump();
    ASSERT_EQ(c.workers[1]->stop(SIGTERM, 5000), 0);
    const std::string counters = c.workers[1]->stderr_text();
    EXPECT_NE(counters.find("bad_instance 1"), std::string::npos) << "it refused the request meant for " << moezip::hex64(first) << ": " << counters;
    if (rp.same_model) {
        // verified again (hello, digests) and then used: it computed rows for this host
        EXPECT_EQ(counters.find("rows 0,"), std::string::npos) << counters;
        EXPECT_EQ(w["identity"]["instance"].get<std::string>(), moezip::hex64(c.workers[1]->instance())) << w.dump();
        EXPECT_EQ(sum_layers(rep, "fallbacks"), 1u) << "only the request the new instance refused";
    } else {
        // another model: refused by content, never computed anything for this host
        EXPECT_NE(counters.find("rows 0, pairs 0"), std::string::npos) << counters;
        EXPECT_TRUE(errors_mention(rep, "weights differ from this host's")) << rep["errors"].dump();
        // the final report keeps the refusal, though the engine freed the model (and its plans) at
        // exit; `refused` was empty and no plans_refused after such a run
        EXPECT_GE(w["refusals"].get<int>(), 1) << w.dump();
        ASSERT_TRUE(w.contains("refusals_first")) << w.dump();
        const std::string first_refusal = w["refusals_first"][0].get<std::string>();
        EXPECT_NE(first_refusal.find("instance " + moezip::hex64(c.workers[1]->instance())), std::string::npos) << first_refusal;
        EXPECT_NE(first_refusal.find("weights differ from this host's"), std::string::npos) << first_refusal;
    }
}

INSTANTIATE_TEST_SUITE_P(Restarts, WorkerReplaced, ::testing::Values(Replacement{"same_model", true}, Replacement{"other_model", false}),
                         [](const ::testing::TestParamInfo<Replacement> & i) { return std::string(i.param.name); });

TEST(WorkerReplaced, ARefusedWorkerReplacedByAGoodOneIsVerifiedAndUsedAgain) {
    // A refusal belongs to the process that was refused: A, then B with another model (refused by
    // content), then A again at the same endpoint. The fault held: the last worker was never
    // contacted again, for the rest of the run.
    const std::string a = model_a();
    Cluster c{test_dir("replaced_after_refusal"), {}};
    const std::string endpoint = "ipc://" + c.dir + "/w.sock";
    ASSERT_TRUE(c.start_worker(a, endpoint, ""));
    const std::string pause = c.dir + "/pause";
    std::ofstream(c.dir + "/plain-pause.go") << "go\n";
    std::ofstream(c.dir + "/plain-pause-2.go") << "go\n";
    ASSERT_EQ(run_command(test_host("pause", {a}, c.dir + "/plain.json", {"--pause-file", c.dir + "/plain-pause", "--pauses", "2"})).exit_code, 0);
    const std::string cfg = write_moezip_config(c.dir, "dist", "mode = \"experts\"\n" + worker_lines(c, {"0-7"}));
    CommandResult host;
    std::thread t([&]() { host = run_preloaded(test_host("pause", {a}, c.dir + "/dist-run.json", {"--pause-file", pause, "--pauses", "2"}), cfg); });
    auto wait_for = [](const std::string & f) {
        for (int i = 0; i < 6000 && !std::ifstream(f); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    };
    wait_for(pause + ".ready");
    c.workers[0]->stop(SIGKILL, 2000);
    const bool b_started = c.start_worker(model_b(), endpoint, "");
    std::ofstream(pause + ".go") << "go\n";
    wait_for(pause + "-2.ready");
    c.workers[1]->stop(SIGKILL, 2000);
    const bool a_again = c.start_worker(a, endpoint, "");
    // no wait for the refusal's back-off (1 s, doubling with every probe of a long run): B's closed
    // connection makes the next call say hello to whatever answers now
    std::ofstream(pause + "-2.go") << "go\n";
    t.join();
    ASSERT_TRUE(b_started);
    ASSERT_TRUE(a_again);
    ASSERT_EQ(host.exit_code, 0) << host.err;
    EXPECT_EQ(host_runs(c.dir + "/plain.json"), host_runs(c.dir + "/dist-run.json")) << "all three runs bit-identical to the engine alone";
    const json rep = load_json(c.dir + "/dist.json");
    const json & w = rep["workers"][0];
    EXPECT_TRUE(errors_mention(rep, "weights differ from this host's")) << "B was refused by content: " << rep["errors"].dump();
    EXPECT_EQ(w["replaced_after_refusal"], 1) << w.dump();
    EXPECT_EQ(w["identity"]["instance"].get<std::string>(), moezip::hex64(c.workers[2]->instance())) << w.dump();
    EXPECT_EQ(w.value("plans_refused", json::object()).size(), 0u) << "B's refusals were dropped with B: " << w.dump();
    EXPECT_GE(w["refusals"].get<int>(), 1) << "... and are still counted: " << w.dump();
    ASSERT_EQ(c.workers[2]->stop(SIGTERM, 5000), 0);
    // the three runs are the same prompt and length: A again computed every MoE region of the third
    EXPECT_EQ(worker_counter(c.workers[2]->stderr_text(), "compute"), rep["checks"]["regions_handled"].get<uint64_t>() / 3)
        << "A again computed the whole third run: " << c.workers[2]->stderr_text();
}

TEST(WorkerReplaced, TwoWorkerEntriesReachingOneProcessAreRefusedByItsInstance) {
    // tcp://127.0.0.1:P and tcp://localhost:P passed the config's duplicate
    // endpoint check (text) and both were used: one process computed both entries' experts.
    const std::string a = model_a();
    Cluster c{test_dir("one_process_two_entries"), {}};
    ASSERT_TRUE(c.start_worker(a, "tcp://127.0.0.1:*", ""));
    const std::string ep = c.workers[0]->endpoint();
    const std::string port = ep.substr(ep.rfind(':') + 1);
    auto run = [&](const std::string & name, const std::string & body) {
        return run_preloaded({bin_path("moezip-run"), "-m", a, "--fixture", "16", "-n", "8", "--no-repack", "--quiet",
                              "--json", c.dir + "/" + name + "-run.json"}, write_moezip_config(c.dir, name, body));
    };
    ASSERT_EQ(run("single", "mode = \"observe\"\n").exit_code, 0);
    CommandResult host = run("dist", "mode = \"experts\"\n[experts]\nlocal = \"0-3\"\n"
                                     "[[worker]]\nendpoint = \"" + ep + "\"\nexperts = \"4-5\"\n"
                                     "[[worker]]\nendpoint = \"tcp://localhost:" + port + "\"\nexperts = \"6-7\"\n");
    ASSERT_EQ(host.exit_code, 0) << host.err;
    EXPECT_EQ(load_json(c.dir + "/single-run.json")["logits_xxh3"], load_json(c.dir + "/dist-run.json")["logits_xxh3"])
        << "the refused entry's experts computed here";
    const json rep = load_json(c.dir + "/dist.json");
    EXPECT_TRUE(errors_mention(rep, "is the same worker process")) << rep["errors"].dump();
    int used = 0, refused = 0;
    for (const json & w : rep["workers"]) {
        if (w["refusals"].get<int>() > 0) ++refused;
        if (w["slots"].is_number() && w["slots"].get<int>() > 0) ++used;
    }
    EXPECT_EQ(refused, 1) << rep["workers"].dump();
    EXPECT_EQ(used, 1) << "the first entry to say hello keeps the process: " << rep["workers"].dump();
}

TEST(WorkerReplaced, ComputeForAnotherInstanceIsRefusedByTheWorker) {
    // the protocol side of it: a request addressed to the instance before the restart is not computed
    Cluster c{test_dir("replaced_protocol"), {}};
    ASSERT_TRUE(c.start_worker(model_a(), "ipc://" + c.dir + "/w.sock", ""));
    WorkerClient client(c.workers[0]->endpoint(), c.workers[0]->instance() ^ 0x10);
    ComputeRequest r;
    r.n_embd = 64; r.n_ff = 64; r.n_used = 2; r.n_rows = 1;
    r.hidden.assign(64, 0.5f); r.ids = {0, 1}; r.weights = {0.5f, 0.5f};
    client.send(compute_frames(compute_header(r, client.instance()), r));
    WorkerReply rep;
    ASSERT_TRUE(client.recv(rep));
    EXPECT_EQ(rep.h.kind, (uint16_t) moezip::MsgKind::error);
    EXPECT_EQ(rep.h.status, (int32_t) moezip::ErrorCode::bad_instance) << rep.text();
    EXPECT_EQ(rep.h.instance, c.workers[0]->instance()) << "the reply names who answered";
}

// ---- A3: the warmup graph ------------------------------------------------------------------------

TEST(WarmupGraph, IsComputedExactlyAndLaterGraphsStayDistributed) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    Cluster c{test_dir("warmup"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w0.sock", "0-3"));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w1.sock", "4-7"));
    ASSERT_EQ(run_command(test_host("warmup", {model}, c.dir + "/plain.json")).exit_code, 0);
    CommandResult obs = run_preloaded(test_host("warmup", {model}, c.dir + "/observe-run.json"), write_moezip_config(c.dir, "observe", "mode = \"observe\"\n"));
    ASSERT_EQ(obs.exit_code, 0) << obs.err;
    CommandResult ex = run_preloaded(test_host("warmup", {model}, c.dir + "/experts-run.json"),
                                     write_moezip_config(c.dir, "experts", "require_intercept = true\nmode = \"experts\"\n" + worker_lines(c, {"0-3", "4-7"})));
    ASSERT_EQ(ex.exit_code, 0) << ex.err;
    EXPECT_EQ(host_runs(c.dir + "/plain.json"), host_runs(c.dir + "/experts-run.json"));
    // the warmup graph's own logits too (the report hashes every graph's output)
    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", c.dir + "/observe.json", c.dir + "/experts.json"});
    EXPECT_EQ(cmp.exit_code, 0) << cmp.out;
    const json rep = load_json(c.dir + "/experts.json");
    for (const auto & p : rep["provider_map"]) {
        EXPECT_EQ(p["patterns"].value("up,gate,swiglu,down,weighted,sum2of8", 0), 1) << "one warmup graph: " << p.dump();
        EXPECT_GT(p["patterns"].value("up,gate,swiglu,down,weighted,sum2", 0), 1) << p.dump();
    }
    EXPECT_EQ(rep["checks"]["regions_passthrough"], 0);
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u);
    EXPECT_GT(sum_layers(rep, "remote_slots"), 0u);
}

// ---- A3: a worker's copy of the model damaged in the middle of an expert ------------------------

/// Copies `src` to `dst` and writes `value` over the f32 weight at byte `at` of expert `e`'s slice of
/// tensor `name` (GGUF layout: slice e = bytes [e*nb[2], (e+1)*nb[2]) of the tensor's data). False
/// when the tensor is not found or the file cannot be written.
static bool copy_with_weight_changed(const std::string & src, const std::string & dst, const char * name, int e, size_t at, float value) {
    gguf_init_params params = {/*no_alloc =*/ true, nullptr};
    gguf_context * g = gguf_init_from_file(src.c_str(), params);
    if (g == nullptr) return false;
    const int64_t id = gguf_find_tensor(g, name);
    const size_t offset = id < 0 ? 0 : gguf_get_data_offset(g) + gguf_get_tensor_offset(g, id);
    const size_t slice = id < 0 ? 0 : gguf_get_tensor_size(g, id) / 8;  // the tiny preset: 8 experts
    gguf_free(g);
    if (id < 0 || at + sizeof value > slice) return false;
    std::string bytes = read_file(src);
    memcpy(&bytes[offset + (size_t) e * slice + at], &value, sizeof value);
    std::ofstream(dst, std::ios::binary).write(bytes.data(), (std::streamsize) bytes.size());
    return read_file(dst).size() == bytes.size();
}

TEST(Identity, AWorkerFileDamagedInTheMiddleOfAnExpertIsRefused) {
    // One weight in the middle of expert 5's up slice of layer 0 (16 KiB into a 64 KiB slice: far from
    // the first and last 256 bytes that protocol 4's sampled digest read, which let this file pass
    // and changed the logits with a clean report).
    const std::string a = model_a();
    Cluster c{test_dir("identity_damaged"), {}};
    const std::string damaged = c.dir + "/damaged.gguf";
    ASSERT_TRUE(copy_with_weight_changed(a, damaged, "blk.0.ffn_up_exps.weight", 5, 8192, 100.0f));
    ASSERT_TRUE(c.start_worker(damaged, "ipc://" + c.dir + "/w.sock", "4-7"));
    const std::vector<std::string> run = {bin_path("moezip-run"), "-m", a, "--fixture", "16", "-n", "8", "--quiet"};
    std::vector<std::string> single = run, dist = run;
    single.insert(single.end(), {"--json", c.dir + "/single.json"});
    dist.insert(dist.end(), {"--json", c.dir + "/dist-run.json"});
    ASSERT_EQ(run_command(single).exit_code, 0);
    const std::string cfg = write_moezip_config(c.dir, "dist", "mode = \"experts\"\n[experts]\nlocal = \"0-3\"\n"
                                                               "[dispatch]\non_worker_error = \"local\"\n" + worker_lines(c, {"4-7"}));
    CommandResult r = run_preloaded(dist, cfg);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(load_json(c.dir + "/single.json")["logits_xxh3"], load_json(c.dir + "/dist-run.json")["logits_xxh3"]);
    const json rep = load_json(c.dir + "/dist.json");
    EXPECT_TRUE(errors_mention(rep, "refused for layer 0: expert 5 weights differ from this host's")) << rep["errors"].dump();
    // layer 0 was computed here, layer 1 (undamaged) still by the worker
    ASSERT_EQ(rep["layers"].size(), 2u) << rep["layers"].dump();
    EXPECT_EQ(rep["layers"][0]["remote_slots"].get<uint64_t>(), 0u) << rep["layers"].dump();
    EXPECT_GT(rep["layers"][1]["remote_slots"].get<uint64_t>(), 0u) << rep["layers"].dump();
    // this host read the worker's experts once per plan for the digests (2 layers x 4 experts x 3 slices)
    const uint64_t slice_bytes = 64 * 64 * sizeof(float);
    EXPECT_EQ(rep["memory"]["identity_digest_bytes"].get<uint64_t>(), 2 * 4 * 3 * slice_bytes) << rep["memory"].dump();
}

