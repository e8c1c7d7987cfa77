// libmoezip.so under the unmodified engine host (moezip-run): observe vs local must give the same
// logits bit for bit on every weight type, and the report must show every MoE region intercepted.
#include "provider_map/engine_pin.h"
#include "tests/support/cluster.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

using namespace moezip_test;
using nlohmann::json;

namespace {

std::string write_config(const std::string & dir, const std::string & name, const std::string & text) {
    std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    return path;
}

// Runs moezip-run on `model` (64-token fixture prompt, ubatch 32, 32 decode steps) under the preload.
CommandResult run_hooked(const std::string & model, const std::string & config, const std::string & json_out,
                         std::map<std::string, std::string> env = {}) {
    env["LD_PRELOAD"] = preload_env();
    env["MOEZIP_CONFIG"] = config;
    return run_command({bin_path("moezip-run"), "-m", model, "--fixture", "64", "-b", "32", "-n", "32", "--no-repack",
                        "--quiet", "--json", json_out}, env);
}

struct ModelCase {
    const char * preset;
    const char * type;
};

class ObserveVsLocal : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ObserveVsLocal, LogitsBitIdenticalAndEveryRegionIntercepted) {
    const ModelCase mc = GetParam();
    std::string model = fixture_model({"--preset", mc.preset, "--type", mc.type});
    ASSERT_FALSE(model.empty());
    std::string dir = test_dir(std::string("observe_vs_local_") + mc.type);
    std::string obs_cfg = write_config(dir, "observe.toml", "mode = \"observe\"\nno_repack = true\nreport = \"" + dir + "/observe.json\"\n");
    std::string loc_cfg = write_config(dir, "local.toml",
        "mode = \"local\"\nno_repack = true\nrequire_intercept = true\nreport = \"" + dir + "/local.json\"\n");

    CommandResult o = run_hooked(model, obs_cfg, dir + "/observe-run.json");
    ASSERT_EQ(o.exit_code, 0) << o.err;
    CommandResult l = run_hooked(model, loc_cfg, dir + "/local-run.json");
    ASSERT_EQ(l.exit_code, 0) << l.err;

    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", dir + "/observe.json", dir + "/local.json"});
    EXPECT_EQ(cmp.exit_code, 0) << cmp.out << cmp.err;

    json obs = load_json(dir + "/observe.json"), loc = load_json(dir + "/local.json");
    // 2 prefill ubatches + 31 decode graphs each produce logits
    EXPECT_EQ(obs["logits"]["count"], 33);
    EXPECT_EQ(obs["logits"]["chain_xxh3"], loc["logits"]["chain_xxh3"]);
    EXPECT_EQ(loc["state"], "active");
    ASSERT_EQ(loc["provider_map"].size(), 2u);
    for (const auto & p : loc["provider_map"]) {
        EXPECT_TRUE(p["dispatchable"].get<bool>()) << p.dump();
        EXPECT_EQ(p["weights"][0]["type"], mc.type);
        EXPECT_FALSE(p["weights"][0]["repacked"].get<bool>());
    }
    // calls = MoE layers x graphs: every layer handled in each of the 33 graphs, none left to the engine
    for (const auto & layer : loc["layers"]) {
        EXPECT_EQ(layer["calls"], 33) << layer.dump();
        EXPECT_EQ(layer["passthrough"], 0) << layer.dump();
    }
    // routing statistics: every slot handled is counted once, for one of the 8 experts; the 31
    // one-row graphs (decode) apart from the two prefill ubatches
    ASSERT_EQ(loc["routing"].size(), loc["layers"].size());
    for (size_t i = 0; i < loc["routing"].size(); ++i) {
        const json & rt = loc["routing"][i];
        uint64_t prefill = 0, decode = 0;
        for (const auto & n : rt["prefill"]) prefill += n.get<uint64_t>();
        for (const auto & n : rt["decode"]) decode += n.get<uint64_t>();
        EXPECT_EQ(rt["decode"].size(), 8u) << rt.dump();
        EXPECT_EQ(prefill + decode, loc["layers"][i]["slots"].get<uint64_t>()) << rt.dump();
        EXPECT_EQ(decode, 31u * 2) << "31 decode graphs of one row, top-2: " << rt.dump();
    }
    EXPECT_EQ(loc["checks"]["identity_failed"], 0);
    EXPECT_EQ(loc["checks"]["regions_passthrough"], 0);
    EXPECT_EQ(loc["checks"]["regions_handled"], 66);
    // and the host's own view: same tokens, same per-step logits hashes
    json orun = load_json(dir + "/observe-run.json"), lrun = load_json(dir + "/local-run.json");
    EXPECT_EQ(orun["tokens"], lrun["tokens"]);
    EXPECT_EQ(orun["logits_xxh3"], lrun["logits_xxh3"]);
}

INSTANTIATE_TEST_SUITE_P(WeightTypes, ObserveVsLocal,
                         ::testing::Values(ModelCase{"tiny", "f32"}, ModelCase{"tiny", "f16"}, ModelCase{"tiny", "q8_0"},
                                           ModelCase{"small", "q4_K"}, ModelCase{"small", "q6_K"}),
                         [](const ::testing::TestParamInfo<ModelCase> & i) { return std::string(i.param.type); });

TEST(Preload, HookedRunEqualsUnhookedRun) {
    std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    std::string dir = test_dir("hooked_vs_unhooked");
    std::string cfg = write_config(dir, "local.toml", "mode = \"local\"\nno_repack = true\nreport = \"" + dir + "/r.json\"\n");
    CommandResult plain = run_command({bin_path("moezip-run"), "-m", model, "--fixture", "64", "-b", "32", "-n", "32",
                                       "--no-repack", "--quiet", "--json", dir + "/plain.json"});
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    CommandResult hooked = run_hooked(model, cfg, dir + "/hooked.json");
    ASSERT_EQ(hooked.exit_code, 0) << hooked.err;
    EXPECT_EQ(load_json(dir + "/plain.json")["logits_xxh3"], load_json(dir + "/hooked.json")["logits_xxh3"]);
}

TEST(Preload, NoRepackKeepsExpertsInGgufLayout) {
    std::string model = fixture_model({"--preset", "small", "--type", "q4_K"});
    std::string dir = test_dir("no_repack_config");
    // no --no-repack on the host: the config alone hides the extra buffer types
    std::string cfg = write_config(dir, "local.toml", "mode = \"local\"\nno_repack = true\nrequire_intercept = true\nreport = \"" + dir + "/r.json\"\n");
    CommandResult r = run_command({bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "2", "--quiet"},
                                  {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", cfg}});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json rep = load_json(dir + "/r.json");
    for (const auto & p : rep["provider_map"]) EXPECT_TRUE(p["dispatchable"].get<bool>()) << p.dump();
}

TEST(Preload, AbiMismatchStaysPassthroughAndSaysSo) {
    // q4_0 experts are repacked by the engine's default (CPU_REPACK): a config asking for no_repack
    // and experts mode's lazy model mapping must not act on an engine the guard refuses, so the
    // refused run is the engine exactly as without the preload.
    std::string model = fixture_model({"--preset", "tiny", "--type", "q4_0"});
    std::string dir = test_dir("abi_mismatch");
    std::string cfg = write_config(dir, "experts.toml", "mode = \"experts\"\nno_repack = true\nreport = \"" + dir + "/r.json\"\n"
                                                        "[[worker]]\nendpoint = \"ipc://" + dir + "/none.sock\"\nexperts = \"4-7\"\n");
    auto run = [&](const std::string & name, std::vector<std::string> extra, std::map<std::string, std::string> env) {
        std::vector<std::string> argv = {bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "8", "--quiet",
                                         "--json", dir + "/" + name + ".json"};
        argv.insert(argv.end(), extra.begin(), extra.end());
        return run_command(argv, env);
    };
    CommandResult plain = run("plain", {}, {});
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    CommandResult unrepacked = run("unrepacked", {"--no-repack"}, {});
    ASSERT_EQ(unrepacked.exit_code, 0) << unrepacked.err;
    CommandResult r = run("hooked", {}, {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", cfg}, {"MOEZIP_TEST_GGML_COMMIT", "0000000"}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const moezip::EnginePin & pin = moezip::engine_pin();
    const std::string loaded = std::string("loaded ggml ") + pin.ggml_version + " (" + pin.binary_commit + ", ";
    EXPECT_NE(r.err.find(loaded), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("is not the engine this moezip was built for"), std::string::npos) << r.err;
    // a self-built engine names its source by ggml_commit(), node-llama-cpp's by the bundle its package ships
    EXPECT_TRUE(r.err.find(std::string("its commit ") + pin.binary_commit + " names another source than 0000000") != std::string::npos ||
                r.err.find("its node-llama-cpp package ships the source 80fb11ac73e6, not 0000000") != std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(std::string("`make ENGINE=") + pin.engine_dir), std::string::npos) << "the command to rebuild: " << r.err;
    EXPECT_NE(r.err.find("running passthrough"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("no_repack: hiding"), std::string::npos) << "no_repack acted on a refused engine: " << r.err;
    EXPECT_EQ(r.err.find("mapped the model"), std::string::npos) << "the lazy mapping acted on a refused engine: " << r.err;
    const json p = load_json(dir + "/plain.json"), h = load_json(dir + "/hooked.json"), u = load_json(dir + "/unrepacked.json");
    EXPECT_EQ(p["tokens"], h["tokens"]);
    EXPECT_EQ(p["logits_xxh3"], h["logits_xxh3"]) << "passthrough must be the engine exactly as without the preload";
    json rep = load_json(dir + "/r.json");
    EXPECT_EQ(rep["engine"]["abi"].get<std::string>().find(loaded), 0u);
    EXPECT_EQ(rep["memory"]["model_mapped_lazily_bytes"], 0);
    // (the repacked kernels give other bits than the plain ones here, which is what makes the check above bite)
    EXPECT_NE(p["logits_xxh3"], u["logits_xxh3"]) << "this CPU does not repack q4_0: the check above cannot tell";
}

TEST(Preload, RequireInterceptFailsTheComputeWhenMoezipIsPassthrough) {
    // the failure reaches the request (llama_decode fails), not only the exit status
    std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    std::string dir = test_dir("abi_mismatch_required");
    std::string cfg = write_config(dir, "local.toml", "mode = \"local\"\nno_repack = true\nrequire_intercept = true\nreport = \"" + dir + "/r.json\"\n");
    CommandResult r = run_command({bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "8", "--no-repack", "--quiet"},
                                  {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", cfg}, {"MOEZIP_TEST_GGML_COMMIT", "0000000"}});
    EXPECT_EQ(r.exit_code, 4) << "require_intercept must fail a run that bypassed moezip: " << r.err;
    EXPECT_NE(r.err.find("require_intercept: moezip is not active"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("moezip-run: error"), std::string::npos) << "the host's decode must fail: " << r.err;
}

TEST(Preload, BadConfigNamesTheKeyAndRunsPassthrough) {
    std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    std::string dir = test_dir("bad_config");
    std::string cfg = write_config(dir, "bad.toml", "mode = \"local\"\nno_repak = true\n");
    // run in `dir`: the report of a bad config goes to the default path, relative to the working directory
    CommandResult r = run_command({"/bin/sh", "-c", "cd \"$0\" && rm -f moezip-report.*.json && exec \"$@\"", dir, bin_path("moezip-run"), "-m",
                                   model, "--fixture", "16", "-n", "4", "--quiet"},
                                  {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", cfg}});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("bad.toml:2"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("no_repak"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("running passthrough"), std::string::npos) << r.err;
    // the evidence of the run is still written, naming the config it refused
    CommandResult ls = run_command({"/bin/sh", "-c", "cat \"$0\"/moezip-report.*.json", dir});
    ASSERT_EQ(ls.exit_code, 0) << "no report in " << dir << ": " << ls.err;
    const nlohmann::json rep = nlohmann::json::parse(ls.out, nullptr, false);
    ASSERT_FALSE(rep.is_discarded()) << ls.out;
    EXPECT_EQ(rep["config"]["path"], cfg);
    EXPECT_EQ(rep["state"], "passthrough") << rep["state"];
}

TEST(Preload, StrictBadConfigExitsWithStatus3) {
    std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    std::string dir = test_dir("strict_config");
    std::string cfg = write_config(dir, "bad.toml", "strict = true\nmode = \"sideways\"\nthreads = -1\n");
    CommandResult r = run_command({bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "4", "--quiet"},
                                  {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", cfg}});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("bad.toml:2"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("mode"), std::string::npos) << r.err;
    // every problem is its own log line with the process prefix (the second one once had none)
    std::istringstream lines(r.err);
    int problems = 0;
    for (std::string line; std::getline(lines, line);) {
        if (line.find("bad.toml:") == std::string::npos) continue;
        ++problems;
        EXPECT_EQ(line.rfind("moezip[", 0), 0u) << line;
    }
    EXPECT_EQ(problems, 2) << r.err;
}

TEST(Preload, WithoutConfigItIsInertAndSaysSoOnce) {
    std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    CommandResult r = run_command({bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "4", "--quiet"},
                                  {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", ""}});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    size_t first = r.err.find("MOEZIP_CONFIG is not set");
    ASSERT_NE(first, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("MOEZIP_CONFIG is not set", first + 1), std::string::npos) << "said more than once: " << r.err;
}

TEST(Preload, ExportsOnlyTheHookedSymbols) {
    CommandResult r = run_command({"nm", "-D", "--defined-only", preload_path()});
    ASSERT_EQ(r.exit_code, 0);
    std::string syms;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
        std::string name = line.substr(line.rfind(' ') + 1);
        if (line.find(" T ") != std::string::npos || line.find(" W ") != std::string::npos || line.find(" D ") != std::string::npos ||
            line.find(" B ") != std::string::npos)
            syms += name + " ";
    }
    EXPECT_EQ(syms, "ggml_backend_buffer_free ggml_backend_reg_get_proc_address ggml_backend_sched_free "
                    "ggml_backend_sched_graph_compute_async ggml_graph_compute mmap ");
    CommandResult dyn = run_command({"readelf", "-d", preload_path()});
    ASSERT_EQ(dyn.exit_code, 0);
    EXPECT_EQ(dyn.out.find("ggml"), std::string::npos) << "no link-time dependency on ggml: " << dyn.out;
    EXPECT_EQ(dyn.out.find("libstdc++"), std::string::npos) << "libstdc++ is linked statically and hidden: " << dyn.out;
}

} // namespace

namespace {

TEST(Preload, BadConfigWithRequireInterceptFailsTheRunLoudly) {
    // a config mistake must not turn a "fail if not distributed" run into a quiet single-node success
    std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    std::string dir = test_dir("bad_config_require_intercept");
    std::string cfg = dir + "/typo.toml";
    std::ofstream(cfg) << "require_intercept = true\nmode = \"local\"\nno_repak = true\nreport = \"" << dir << "/r.json\"\n";
    CommandResult r = run_command({bin_path("moezip-run"), "-m", model, "--fixture", "16", "-n", "4", "--quiet"},
                                  {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", cfg}});
    EXPECT_EQ(r.exit_code, 4) << r.err;
    EXPECT_NE(r.err.find("typo.toml:3: no_repak"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("require_intercept: the config is invalid"), std::string::npos) << r.err;
    json rep = load_json(dir + "/r.json");  // the report goes where the file said, even so
    EXPECT_EQ(rep["state"], "passthrough");
}

} // namespace

namespace {

// The engine's default repacks q4_0 and q4_K experts (CPU_REPACK) on AVX2/AVX-512 machines: moezip
// computes them with the engine's tensors, buffer and kernel traits, so the repack kernels run here
// too. Shard mode cannot slice interleaved rows; a worker holding GGUF layout is refused by name.
class RepackedExperts : public ::testing::TestWithParam<ModelCase> {};

TEST_P(RepackedExperts, LocalModeRunsTheRepackKernelsAndOtherModesSayWhatTheyCannotDo) {
    const ModelCase mc = GetParam();
    std::string model = fixture_model({"--preset", mc.preset, "--type", mc.type});
    Cluster c{test_dir(std::string("repacked_") + mc.type), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w.sock", "4-7"));
    auto run = [&](const std::string & name, const std::string & body) {
        std::ofstream(c.dir + "/" + name + ".toml") << "report = \"" << c.dir << "/" << name << ".json\"\n" << body;
        return run_preloaded({bin_path("moezip-run"), "-m", model, "--fixture", "64", "-b", "32", "-n", "16", "--quiet",
                              "--json", c.dir + "/" + name + "-run.json"}, c.dir + "/" + name + ".toml");
    };
    ASSERT_EQ(run("observe", "mode = \"observe\"\n").exit_code, 0);
    CommandResult loc = run("local", "mode = \"local\"\nrequire_intercept = true\n");
    ASSERT_EQ(loc.exit_code, 0) << loc.err;
    EXPECT_EQ(run_command({bin_path("moezip-report"), "compare", c.dir + "/observe.json", c.dir + "/local.json"}).exit_code, 0);
    json rep = load_json(c.dir + "/local.json");
    for (const auto & p : rep["provider_map"]) {
        EXPECT_TRUE(p["dispatchable"].get<bool>()) << p.dump();
        EXPECT_EQ(p["weights"][0]["buffer_type"], "CPU_REPACK") << "this CPU does not repack " << mc.type << ": " << p.dump();
    }
    EXPECT_EQ(rep["checks"]["regions_passthrough"], 0);

    CommandResult shard = run("shard", "mode = \"shard\"\n[shard]\nlocal_share = 0.5\n[[worker]]\nendpoint = \"" +
                                           c.workers[0]->endpoint() + "\"\nshare = 0.5\n");
    ASSERT_EQ(shard.exit_code, 0) << shard.err;
    EXPECT_EQ(load_json(c.dir + "/shard-run.json")["logits_xxh3"], load_json(c.dir + "/observe-run.json")["logits_xxh3"]);
    rep = load_json(c.dir + "/shard.json");
    EXPECT_NE(rep["provider_map"][0].value("reason", "").find("CPU_REPACK interleaves"), std::string::npos) << rep["provider_map"][0].dump();

    CommandResult ex = run("experts", "mode = \"experts\"\n[experts]\nlocal = \"0-3\"\n[[worker]]\nendpoint = \"" +
                                          c.workers[0]->endpoint() + "\"\nexperts = \"4-7\"\n");
    ASSERT_EQ(ex.exit_code, 0) << ex.err;
    EXPECT_EQ(run_command({bin_path("moezip-report"), "compare", c.dir + "/observe.json", c.dir + "/experts.json"}).exit_code, 0);
    EXPECT_NE(ex.err.find("it holds the experts in gguf layout, this host in repacked"), std::string::npos) << ex.err;

    // Workers that repack their experts as the engine does (--repack) are used, and every mode that
    // can slice nothing is bit-identical to the repacked single node: experts (this host 0-3 on the
    // engine's tensors, the worker 4-7 on its own CPU_REPACK copies of only those) and rows (a worker
    // holding all of them). The ready line says so; hello_ok's layout is "repacked".
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/rp.sock", "4-7", {}, {"--repack"}));
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/rpall.sock", "", {}, {"--repack"}));
    EXPECT_NE(c.workers[1]->ready_line().find("repacked where the engine repacks"), std::string::npos) << c.workers[1]->ready_line();
    for (const auto & m : {std::make_pair("experts_repacked", "mode = \"experts\"\n[experts]\nlocal = \"0-3\"\n[[worker]]\nendpoint = \"" +
                                                                  c.workers[1]->endpoint() + "\"\nexperts = \"4-7\"\n"),
                           std::make_pair("rows_repacked", "mode = \"rows\"\n[rows]\nlocal_share = 0.5\n[[worker]]\nendpoint = \"" +
                                                               c.workers[2]->endpoint() + "\"\nshare = 0.5\n")}) {
        CommandResult r = run(m.first, "require_intercept = true\n" + m.second);
        ASSERT_EQ(r.exit_code, 0) << m.first << ": " << r.err;
        EXPECT_EQ(run_command({bin_path("moezip-report"), "compare", c.dir + "/observe.json", c.dir + "/" + m.first + ".json"}).exit_code, 0)
            << m.first;
        EXPECT_EQ(load_json(c.dir + "/" + m.first + "-run.json")["tokens"], load_json(c.dir + "/observe-run.json")["tokens"]) << m.first;
        const json rr = load_json(c.dir + "/" + m.first + ".json");
        EXPECT_GT(sum_layers(rr, "remote_slots"), 0u) << m.first;
        EXPECT_EQ(sum_layers(rr, "fallbacks"), 0u) << m.first;
        for (const auto & w : rr["workers"]) EXPECT_EQ(w.value("refused", ""), "") << w.dump();
    }
}

INSTANTIATE_TEST_SUITE_P(Types, RepackedExperts,
                         ::testing::Values(ModelCase{"tiny", "q4_0"}, ModelCase{"small", "q4_K"}),
                         [](const ::testing::TestParamInfo<ModelCase> & i) { return std::string(i.param.type); });

} // namespace
