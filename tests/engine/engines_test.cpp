// moezip on more than one engine release: each test engine (TEST_ENGINES, built by `make engines`)
// with moezip built for it must give its own single-node logits bit for bit in rows and experts mode;
// a build of the pinned source is accepted by the default build, workers bind a default build's
// single libggml-cpu.so through --engine, and an engine of another source or a mix of builds is
// refused by name.
#include "tests/support/cluster.h"
#include "tests/support/engine_support.h"
#include "provider_map/engine_pin.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>

using namespace moezip_test;
using nlohmann::json;

namespace {

/// Workers of one test, killed when it ends.
struct Workers {
    std::vector<std::unique_ptr<WorkerProcess>> list;
    std::vector<std::string> endpoints;
    bool start(const std::string & program, const std::string & dir, const std::string & model, const std::string & experts,
               const std::vector<std::string> & extra = {}) {
        static int n_started = 0;  // one socket per worker of the process, whichever Workers it belongs to
        std::vector<std::string> args = {"--model", model, "--bind", "ipc://" + dir + "/w" + std::to_string(n_started++) + ".sock",
                                         "--threads", "1"};
        if (!experts.empty()) args.insert(args.end(), {"--experts", experts});
        args.insert(args.end(), extra.begin(), extra.end());
        list.emplace_back(new WorkerProcess());
        list.back()->set_program(program);
        bool ok = list.back()->start(args, dir);
        EXPECT_TRUE(ok) << list.back()->error();
        if (ok) endpoints.push_back(list.back()->endpoint());
        return ok;
    }
};

void expect_distributed(const json & rep, const std::string & name) {
    EXPECT_EQ(rep["engine"]["abi"], "ok") << name;
    EXPECT_EQ(rep["state"], "active") << name;
    EXPECT_GT(sum_layers(rep, "remote_slots"), 0u) << name << " sent nothing to its workers";
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u) << name;
    EXPECT_EQ(rep["checks"]["identity_failed"], 0) << name;
    for (const auto & w : rep["workers"]) {
        EXPECT_EQ(w["refused"], "") << name;
        EXPECT_GT(w["requests"].get<int>(), 0) << name << ": " << w.dump();
        EXPECT_EQ(w["hash_failed"], 0) << name;
    }
}

class EngineModes : public ::testing::TestWithParam<const char *> {};

TEST_P(EngineModes, RowsAndExpertsEqualItsOwnSingleNodeRun) {
    std::string why;
    const TestEngine * e = test_engine(GetParam(), &why);
    if (e == nullptr) GTEST_SKIP() << why;
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("engine_" + e->name);
    Workers all, halves;
    ASSERT_TRUE(all.start(e->tool("moezip-worker"), dir, model, ""));
    ASSERT_TRUE(halves.start(e->tool("moezip-worker"), dir, model, "0-3"));
    ASSERT_TRUE(halves.start(e->tool("moezip-worker"), dir, model, "4-7"));
    EXPECT_NE(all.list[0]->ready_line().find("cpu "), std::string::npos);

    CommandResult single = run_engine_host(e->tool("moezip-run"), e->preload(), dir, "single", model, "mode = \"observe\"\n");
    ASSERT_EQ(single.exit_code, 0) << single.err;
    const json srep = load_json(dir + "/single.json");
    EXPECT_EQ(srep["engine"]["built_for"], e->engine_name);
    EXPECT_EQ(srep["engine"]["ggml_version"], e->ggml_version);
    EXPECT_EQ(srep["engine"]["ggml_commit"], e->binary_commit);
    EXPECT_EQ(srep["engine"]["abi"], "ok");

    const std::string rows = "require_intercept = true\nmode = \"rows\"\n[rows]\nlocal_share = 0.5\n[[worker]]\nendpoint = \"" +
                             all.endpoints[0] + "\"\nshare = 0.5\n";
    CommandResult r = run_engine_host(e->tool("moezip-run"), e->preload(), dir, "rows", model, rows);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_run(dir, "single", "rows");
    expect_distributed(load_json(dir + "/rows.json"), e->name + " rows");

    CommandResult x = run_engine_host(e->tool("moezip-run"), e->preload(), dir, "experts", model, experts_config(halves.endpoints));
    ASSERT_EQ(x.exit_code, 0) << x.err;
    expect_same_run(dir, "single", "experts");
    expect_distributed(load_json(dir + "/experts.json"), e->name + " experts");
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineModes, ::testing::Values("llama.cpp:pinned", "npm:3.22.1", "npm:3.20.0"),
                         [](const ::testing::TestParamInfo<const char *> & i) {
                             std::string n = i.param;
                             for (char & c : n) if (!isalnum((unsigned char) c)) c = '_';
                             return n;
                         });

// A llama.cpp built from the pinned source with default flags reports commit
// 80fb11a, not the npm binaries' 5b4ebc5. Same source, same layout: the default build accepts it.
TEST(Engines, TheDefaultBuildAcceptsASelfBuiltEngineOfTheSameSource) {
    std::string why;
    const TestEngine * e = test_engine_beside_pinned("llama.cpp:pinned", &why);
    if (e == nullptr) GTEST_SKIP() << why;
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    const std::string dir = test_dir("engine_same_source");
    CommandResult single = run_engine_host(e->tool("moezip-run"), preload_env(), dir, "single", model, "mode = \"observe\"\n");
    ASSERT_EQ(single.exit_code, 0) << single.err;
    CommandResult local = run_engine_host(e->tool("moezip-run"), preload_env(), dir, "local", model,
                                          "mode = \"local\"\nrequire_intercept = true\n");
    ASSERT_EQ(local.exit_code, 0) << local.err;
    expect_same_run(dir, "single", "local");
    const json rep = load_json(dir + "/local.json");
    EXPECT_EQ(rep["engine"]["abi"], "ok");
    EXPECT_EQ(rep["engine"]["ggml_commit"], e->binary_commit);
    EXPECT_EQ(rep["engine"]["cpu_variant"], "default") << "the single libggml-cpu.so of a default build";
    EXPECT_EQ(rep["checks"]["regions_passthrough"], 0);
}

// The other way round: moezip built for the self-built engine under node-llama-cpp 3.21.1's binaries,
// which report 5b4ebc5 but whose package ships the same source: accepted.
TEST(Engines, AMoezipBuiltForASelfBuiltEngineAcceptsTheNpmBinariesOfItsSource) {
    std::string why;
    const TestEngine * e = test_engine_beside_pinned("llama.cpp:pinned", &why);
    if (e == nullptr) GTEST_SKIP() << why;
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    const std::string dir = test_dir("engine_npm_of_same_source");
    CommandResult single = run_engine_host(bin_path("moezip-run"), e->preload(), dir, "single", model, "mode = \"observe\"\n");
    ASSERT_EQ(single.exit_code, 0) << single.err;
    CommandResult local = run_engine_host(bin_path("moezip-run"), e->preload(), dir, "local", model,
                                          "mode = \"local\"\nrequire_intercept = true\n");
    ASSERT_EQ(local.exit_code, 0) << local.err;
    expect_same_run(dir, "single", "local");
    const json rep = load_json(dir + "/local.json");
    EXPECT_EQ(rep["engine"]["abi"], "ok");
    EXPECT_EQ(rep["engine"]["built_for"], e->engine_name);
    EXPECT_EQ(rep["engine"]["ggml_commit"], moezip::engine_pin().binary_commit) << "the npm binaries' own string";
}

// A worker of the default build serves a self-built host of the same source by loading that
// host's libraries (--engine: its CMake build folder), so both compute with the same kernels.
TEST(Engines, AWorkerBindsAHostsSingleCpuLibraryThroughEngineDir) {
    std::string why;
    const TestEngine * e = test_engine_beside_pinned("llama.cpp:pinned", &why);
    if (e == nullptr) GTEST_SKIP() << why;
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    const std::string dir = test_dir("engine_worker_engine_dir");
    Workers w;
    ASSERT_TRUE(w.start(bin_path("moezip-worker"), dir, model, "0-3", {"--engine", e->engine}));
    ASSERT_TRUE(w.start(bin_path("moezip-worker"), dir, model, "4-7", {"--engine", e->engine}));
    EXPECT_NE(w.list[0]->ready_line().find("cpu default"), std::string::npos) << w.list[0]->ready_line();
    CommandResult single = run_engine_host(e->tool("moezip-run"), preload_env(), dir, "single", model, "mode = \"observe\"\n");
    ASSERT_EQ(single.exit_code, 0) << single.err;
    CommandResult x = run_engine_host(e->tool("moezip-run"), preload_env(), dir, "experts", model, experts_config(w.endpoints));
    ASSERT_EQ(x.exit_code, 0) << x.err;
    expect_same_run(dir, "single", "experts");
    const json rep = load_json(dir + "/experts.json");
    expect_distributed(rep, "self-built host, default-build workers with --engine");
    for (const auto & wk : rep["workers"]) EXPECT_EQ(wk["identity"]["cpu_variant"], "default") << wk.dump();
}

// Host on the npm binaries (zen4 & co. variants), workers on a self-built llama.cpp of the same
// source: the same ggml layout, but other kernels, so other bits. Refused, and named so.
TEST(Engines, AMixOfBuildsIsRefusedWithTheReason) {
    std::string why;
    const TestEngine * e = test_engine_beside_pinned("llama.cpp:pinned", &why);
    if (e == nullptr) GTEST_SKIP() << why;
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    const std::string dir = test_dir("engine_mix_refused");
    Workers w;
    ASSERT_TRUE(w.start(bin_path("moezip-worker"), dir, model, "0-3", {"--engine", e->engine}));
    ASSERT_TRUE(w.start(bin_path("moezip-worker"), dir, model, "4-7", {"--engine", e->engine}));
    CommandResult single = run_engine_host(bin_path("moezip-run"), preload_env(), dir, "single", model, "mode = \"observe\"\n");
    ASSERT_EQ(single.exit_code, 0) << single.err;
    // require_intercept: the computes the refused workers should have done fail, naming why
    CommandResult req =
        run_engine_host(bin_path("moezip-run"), preload_env(), dir, "mixed_required", model, experts_config(w.endpoints));
    EXPECT_EQ(req.exit_code, 4) << "require_intercept fails a run whose workers were refused: " << req.err;
    EXPECT_NE(req.err.find("different kernels give different bits"), std::string::npos) << req.err;
    // without it (on_worker_error = "local"), their part is computed here: still the single-node answer
    CommandResult x = run_engine_host(bin_path("moezip-run"), preload_env(), dir, "mixed", model, experts_config(w.endpoints, false));
    ASSERT_EQ(x.exit_code, 0) << x.err;
    expect_same_run(dir, "single", "mixed");
    const json rep = load_json(dir + "/mixed.json");
    ASSERT_EQ(rep["workers"].size(), 2u);
    for (const auto & wk : rep["workers"]) {
        const std::string refused = wk["refused"].get<std::string>();
        EXPECT_NE(refused.find("it computes with CPU variant default"), std::string::npos) << refused;
        EXPECT_NE(refused.find("different kernels give different bits"), std::string::npos) << refused;
    }
    EXPECT_EQ(sum_layers(rep, "remote_slots"), 0u);
}

// The default build under node-llama-cpp 3.22.1 (ggml 0.25.1): refused by name, with the command.
TEST(Engines, AnEngineOfAnotherSourceIsRefusedWithTheCommandToBuildForIt) {
    std::string why;
    const TestEngine * e = test_engine_beside_pinned("npm:3.22.1", &why);
    if (e == nullptr) GTEST_SKIP() << why;
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    const std::string dir = test_dir("engine_other_source");
    CommandResult plain = run_command({e->tool("moezip-run"), "-m", model, "-n", "8", "--quiet", "--no-repack", "--fixture", "16",
                                       "--json", dir + "/plain-run.json"});
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    std::ofstream(dir + "/c.toml") << "mode = \"local\"\nrequire_intercept = true\nreport = \"" << dir << "/r.json\"\n";
    std::ofstream(dir + "/p.toml") << "mode = \"local\"\nreport = \"" << dir << "/p.json\"\n";
    const std::vector<std::string> hooked = {e->tool("moezip-run"), "-m", model, "-n", "8", "--quiet", "--no-repack", "--fixture", "16",
                                             "--json", dir + "/hooked-run.json"};
    CommandResult r = run_command(hooked, {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", dir + "/c.toml"}});
    EXPECT_EQ(r.exit_code, 4) << "require_intercept: the refused engine's computes fail: " << r.err;
    const std::string loaded = "loaded ggml " + e->ggml_version + " (" + e->binary_commit + ", ";
    EXPECT_NE(r.err.find(loaded), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("its ggml version is " + e->ggml_version + ", not 0.23.0"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("`make ENGINE=" + e->engine + " BUILD=build-ggml-" + e->ggml_version + "`"), std::string::npos) << r.err;
    EXPECT_EQ(load_json(dir + "/r.json")["engine"]["abi"].get<std::string>().find(loaded), 0u);
    // without require_intercept the engine runs alone, exactly as without the preload
    CommandResult pass = run_command(hooked, {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", dir + "/p.toml"}});
    ASSERT_EQ(pass.exit_code, 0) << pass.err;
    EXPECT_EQ(load_json(dir + "/plain-run.json")["tokens"], load_json(dir + "/hooked-run.json")["tokens"]);
    EXPECT_EQ(load_json(dir + "/plain-run.json")["logits_xxh3"], load_json(dir + "/hooked-run.json")["logits_xxh3"]);
    // the worker refuses the same engine the same way
    CommandResult wk = run_command({bin_path("moezip-worker"), "--model", model, "--engine", e->engine}, {}, 60);
    EXPECT_EQ(wk.exit_code, 1) << wk.err;
    EXPECT_NE(wk.err.find(loaded), std::string::npos) << wk.err;
}

// make ENGINE=... with a source tree that is not the libraries' (engine-config.sh's third argument,
// which the pinned build uses for .deps/llama.cpp): refused before anything is compiled.
TEST(Engines, LibrariesAndASourceOfAnotherVersionDoNotBelongTogether) {
    std::string why;
    const TestEngine * e = test_engine("npm:3.22.1", &why);
    if (e == nullptr) GTEST_SKIP() << why;
    const std::string dir = test_dir("engine_config_mismatch");
    CommandResult r = run_command({repo_root() + "/tools/engines/engine-config.sh", e->engine, dir + "/out",
                                   repo_root() + "/.deps/llama.cpp"}, {}, 120);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("its libraries report ggml " + e->ggml_version + " but its source tree " + repo_root() +
                         "/.deps/llama.cpp is ggml 0.23.0: they do not belong together"), std::string::npos) << r.err;
}

} // namespace
