// The MoE architectures people run, as moezip-fixture writes them: each loads and
// generates under the preload (observe), the report's provider map says per MoE layer whether it
// is dispatchable or why not, and local, rows and experts mode (two workers) give the observe run's
// logits bit for bit — with require_intercept where the arch must be dispatchable, with a named
// reason for each layer a mode leaves to the engine otherwise. Also per-layer expert counts, and a split model (3 files)
// served by workers and mapped lazily here part by part.
#include "tests/support/cluster.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace moezip_test;
using nlohmann::json;

namespace {

/// Runs moezip-run under the preload on `model` with `config_body`; 64 fixture tokens, 16 generated.
CommandResult run_host(const std::string & dir, const std::string & name, const std::string & model,
                       const std::string & config_body) {
    const std::vector<std::string> argv = {bin_path("moezip-run"), "-m", model, "--fixture", "64", "-n", "16", "--quiet",
                                           "--no-repack", "--json", dir + "/" + name + "-run.json"};
    return run_preloaded(argv, write_moezip_config(dir, name, config_body), {{"MOEZIP_LOG", "info"}});
}

void expect_same_logits(const std::string & dir, const std::string & a, const std::string & b) {
    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", dir + "/" + a + ".json", dir + "/" + b + ".json"});
    EXPECT_EQ(cmp.exit_code, 0) << a << " vs " << b << ": " << cmp.out << cmp.err;
    EXPECT_EQ(load_json(dir + "/" + a + "-run.json")["tokens"], load_json(dir + "/" + b + "-run.json")["tokens"]) << b;
}

std::string worker_entry(const std::string & endpoint, const std::string & key, const std::string & value) {
    return "[[worker]]\nendpoint = \"" + endpoint + "\"\n" + key + " = " + value + "\n";
}

/// What the provider map must say about an arch's MoE layers.
enum class expect_kind {
    dispatchable,  ///< every MoE layer dispatchable in every mode, and bit-identical (require_intercept)
    either,        ///< bit-identical in every mode; where a layer is not handled as configured, a named reason
};

/// Runs `mode` (`body` is its config) and checks it against the observe run in c.dir: the same
/// logits always; with expect dispatchable also require_intercept, nothing left to the engine, no
/// fallback and (distributing modes) work sent out; otherwise each layer the mode leaves to the
/// engine has a reason in its provider map entry, and a mode that handles every layer sends work out.
void expect_mode_equals_observe(const Cluster & c, const std::string & model, const std::string & mode,
                                const std::string & body, expect_kind expect) {
    const bool strict = expect == expect_kind::dispatchable;
    CommandResult r = run_host(c.dir, mode, model, (strict ? "require_intercept = true\n" : "") + body);
    ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.err;
    expect_same_logits(c.dir, "observe", mode);
    const json rep = load_json(c.dir + "/" + mode + ".json");
    bool all_handled = true;
    for (const auto & p : rep["provider_map"]) {
        const bool ok = p["dispatchable"].get<bool>();
        all_handled = all_handled && ok;
        EXPECT_TRUE(ok || !p.value("reason", "").empty()) << mode << ": a layer left to the engine says why: " << p.dump();
        EXPECT_TRUE(ok || !strict) << mode << ": " << p.dump();
    }
    EXPECT_EQ(sum_layers(rep, "passthrough") == 0, all_handled) << mode;
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u) << mode;
    if (mode != "local" && all_handled) {
        EXPECT_GT(sum_layers(rep, "remote_slots"), 0u) << mode << " sent nothing out";
    }
    for (const auto & w : rep["workers"]) EXPECT_EQ(w["refused"], "") << mode << ": " << w.dump();
}

/// Starts moezip-worker on `model` without failing the test; the worker's message when it refuses.
std::string try_start_worker(Cluster & c, const std::string & model, const std::string & name, const std::string & experts) {
    std::vector<std::string> args = {"--model", model, "--bind", "ipc://" + c.dir + "/" + name + ".sock", "--threads", "1"};
    if (!experts.empty()) args.insert(args.end(), {"--experts", experts});
    c.workers.emplace_back(new WorkerProcess());
    if (c.workers.back()->start(args, c.dir)) return "";
    return c.workers.back()->error() + " " + c.workers.back()->stderr_text();
}

/// Shard mode (this host and the worker with every expert, n_ff halves) with every call shadowed:
/// either every layer distributed with the shadow's largest difference and smallest cosine inside
/// the default verify tolerances (docs/internals/numerics.md: shard sums partial results in another order, so
/// it is not bit-identical), or, for layers with expert biases (gpt-oss), left to the engine with a
/// reason naming them and the observe run's logits.
void expect_shard_within_tolerance(const Cluster & c, const std::string & model) {
    const std::string body = "mode = \"shard\"\n[shard]\nlocal_share = 0.5\nshadow_every = 1\n" +
                             worker_entry(c.workers[0]->endpoint(), "share", "0.5");
    CommandResult r = run_host(c.dir, "shard", model, body);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json rep = load_json(c.dir + "/shard.json");
    bool biased = false;
    for (const auto & p : rep["provider_map"]) {
        const std::string pattern = p.value("pattern", "");
        if (pattern.find("_bias") == std::string::npos) {
            EXPECT_TRUE(p["dispatchable"].get<bool>()) << p.dump();
            continue;
        }
        biased = true;
        EXPECT_FALSE(p["dispatchable"].get<bool>()) << p.dump();
        EXPECT_NE(p.value("reason", "").find("biases"), std::string::npos) << p.dump();
    }
    if (biased) {
        expect_same_logits(c.dir, "observe", "shard");
        return;
    }
    EXPECT_EQ(sum_layers(rep, "passthrough"), 0u);
    EXPECT_EQ(sum_layers(rep, "fallbacks"), 0u);
    json shadow;
    for (const auto & w : rep["workers"]) if (w.contains("shadow")) shadow = w["shadow"];
    ASSERT_FALSE(shadow.is_null()) << rep["workers"].dump();
    EXPECT_EQ(shadow["calls"].get<uint64_t>(), sum_layers(rep, "calls")) << "every call shadowed";
    EXPECT_GE(shadow["min_cosine"].get<double>(), 0.99999) << shadow.dump();
    EXPECT_LE(shadow["max_abs_err"].get<double>(), 1e-4) << shadow.dump();
    EXPECT_EQ(shadow["exceeded"].get<uint64_t>(), 0u) << shadow.dump();
}

/// Local, rows (one worker with every expert) and experts (two workers, 0-3 and 4-7) mode against
/// observe (expect_mode_equals_observe), then shard (expect_shard_within_tolerance). `worker_refusal`: what a worker that refuses the model must
/// name (expect either); the distributing modes are then not run.
void expect_every_mode_equals_observe(Cluster & c, const std::string & model, expect_kind expect,
                                      const char * worker_refusal = "") {
    expect_mode_equals_observe(c, model, "local", "mode = \"local\"\n", expect);
    for (const char * w : {"all", "e0", "e1"}) {
        const std::string why = try_start_worker(c, model, w, std::string(w) == "all" ? "" : std::string(w) == "e0" ? "0-3" : "4-7");
        if (why.empty()) continue;
        ASSERT_EQ(expect, expect_kind::either) << "the worker refused the model: " << why;
        EXPECT_NE(why.find(worker_refusal), std::string::npos) << "the worker's refusal names " << worker_refusal << ": " << why;
        return;
    }
    expect_mode_equals_observe(c, model, "rows",
                               "mode = \"rows\"\n[rows]\nlocal_share = 0.5\n" + worker_entry(c.workers[0]->endpoint(), "share", "0.5"),
                               expect);
    expect_mode_equals_observe(c, model, "experts",
                               "mode = \"experts\"\n" + worker_entry(c.workers[1]->endpoint(), "experts", "\"0-3\"") +
                                   worker_entry(c.workers[2]->endpoint(), "experts", "\"4-7\""),
                               expect);
    expect_shard_within_tolerance(c, model);
}

struct arch_case {
    const char * arch;
    std::vector<int> moe_layers;  ///< the layers with routed experts in the tiny fixture
    expect_kind expect;
    const char * node;            ///< expect either: what a reason names where the layer is not recognised
    const char * worker_refusal;  ///< expect either: what a worker that refuses the model names
};

std::string case_name(const ::testing::TestParamInfo<arch_case> & i) {
    std::string n = i.param.arch;
    for (char & ch : n) if (ch == '-') ch = '_';
    return n;
}

class ArchModes : public ::testing::TestWithParam<arch_case> {};

TEST_P(ArchModes, ObserveMapsEveryMoeLayerAndEveryModeIsBitIdentical) {
    const arch_case ac = GetParam();
    const std::string model = fixture_model({"--arch", ac.arch, "--type", "q8_0"});
    ASSERT_FALSE(model.empty());
    Cluster c{test_dir(std::string("arch_") + ac.arch), {}};
    CommandResult observe = run_host(c.dir, "observe", model, "mode = \"observe\"\n");
    ASSERT_EQ(observe.exit_code, 0) << observe.err;
    EXPECT_EQ(load_json(c.dir + "/observe-run.json")["tokens"].size(), 16u);
    const json rep = load_json(c.dir + "/observe.json");
    std::set<int> layers;
    for (const auto & p : rep["provider_map"]) {
        layers.insert(p["il"].get<int>());
        if (p["dispatchable"].get<bool>()) continue;
        const std::string reason = p.value("reason", "");
        EXPECT_NE(reason.find(ac.node), std::string::npos) << ac.arch << " layer " << p["il"] << ": the reason names the node: " << reason;
        EXPECT_EQ(ac.expect, expect_kind::either) << ac.arch << " layer " << p["il"] << " is not recognised: " << reason;
    }
    EXPECT_EQ(layers, std::set<int>(ac.moe_layers.begin(), ac.moe_layers.end())) << rep["provider_map"].dump();
    expect_every_mode_equals_observe(c, model, ac.expect, ac.worker_refusal);
}

INSTANTIATE_TEST_SUITE_P(
    Archs, ArchModes,
    ::testing::Values(arch_case{"qwen3moe", {0, 1}, expect_kind::dispatchable, "", ""},
                      arch_case{"qwen2moe", {0, 1}, expect_kind::dispatchable, "", ""},
                      arch_case{"deepseek2", {1, 2}, expect_kind::dispatchable, "", ""},
                      arch_case{"olmoe", {0, 1}, expect_kind::dispatchable, "", ""},
                      arch_case{"glm4moe", {1, 2}, expect_kind::dispatchable, "", ""},
                      arch_case{"llama", {0, 1}, expect_kind::dispatchable, "", ""},
                      // gpt-oss (expert biases, swiglu_oai) and llama4 (routing weight before the FFN,
                      // top-1): workers compute their forms since protocol v4 (ffn_flags, glu_alpha,
                      // glu_limit in the header); before, rows and experts mode left them to the engine
                      // ("... not yet by workers") and moezip-worker refused gpt-oss's bias tensors.
                      arch_case{"gpt-oss", {0, 1}, expect_kind::dispatchable, "", ""},
                      arch_case{"llama4", {1, 3}, expect_kind::dispatchable, "", ""}),
    case_name);

TEST(PerLayerExperts, CountsOfEveryLayerAreDispatchableAndBitIdentical) {
    // expert_used_count [4, 2, 2]: the engine routes 4 experts in every layer and sums the layer's
    // own count of them (src/llama-graph.cpp build_moe_ffn), so layers 1 and 2 show "sum2of4".
    const std::string model = fixture_model({"--n-layer", "3", "--n-expert-used", "4,2,2", "--type", "q8_0"});
    ASSERT_FALSE(model.empty());
    Cluster c{test_dir("arch_per_layer_used"), {}};
    CommandResult observe = run_host(c.dir, "observe", model, "mode = \"observe\"\n");
    ASSERT_EQ(observe.exit_code, 0) << observe.err;
    const json map = load_json(c.dir + "/observe.json")["provider_map"];
    ASSERT_EQ(map.size(), 3u) << map.dump();
    const char * sums[] = {",sum4", ",sum2of4", ",sum2of4"};
    for (const auto & p : map) {
        EXPECT_TRUE(p["dispatchable"].get<bool>()) << p.dump();
        const std::string pattern = p["pattern"];
        EXPECT_EQ(pattern.substr(pattern.rfind(',')), sums[p["il"].get<int>()]) << p.dump();
    }
    expect_every_mode_equals_observe(c, model, expect_kind::dispatchable);
}

uint64_t file_size(const std::string & path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? (uint64_t) st.st_size : 0;
}

size_t count_of(const std::string & text, const std::string & what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

TEST(SplitModel, WorkersServeEveryPartAndExpertsModeIsBitIdentical) {
    const std::vector<std::string> args = {"--n-layer", "4", "--type", "q8_0"};
    const std::string first = fixture_model_split(args, 3);
    ASSERT_FALSE(first.empty());
    Cluster c{test_dir("split_model"), {}};
    // the single-file model is the reference: the same tensors, the same logits
    CommandResult observe = run_host(c.dir, "observe", fixture_model(args), "mode = \"observe\"\n");
    ASSERT_EQ(observe.exit_code, 0) << observe.err;
    ASSERT_TRUE(c.start_worker(first, "ipc://" + c.dir + "/e0.sock", "0-3"));
    ASSERT_TRUE(c.start_worker(first, "ipc://" + c.dir + "/e1.sock", "4-7"));
    // the ready line says which file holds which layer's experts (the cut falls inside layers 1 and 2)
    const std::string ready = c.workers[0]->ready_line();
    EXPECT_NE(ready.find("4 MoE layers"), std::string::npos) << ready;
    EXPECT_NE(ready.find("layers 0-3 from 3 files: " + first + " (0-1), " + split_part_path(first, 1, 3) + " (1-2), " +
                         split_part_path(first, 2, 3) + " (3)"), std::string::npos) << ready;
    const std::string body = "require_intercept = true\nmode = \"experts\"\n" +
                             worker_entry(c.workers[0]->endpoint(), "experts", "\"0-3\"") +
                             worker_entry(c.workers[1]->endpoint(), "experts", "\"4-7\"");
    CommandResult r = run_host(c.dir, "experts", first, body);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_same_logits(c.dir, "observe", "experts");
    const json rep = load_json(c.dir + "/experts.json");
    EXPECT_EQ(rep["provider_map"].size(), 4u);
    EXPECT_GT(sum_layers(rep, "remote_slots"), 0u);
    for (const auto & w : rep["workers"]) EXPECT_EQ(w["refused"], "") << w.dump();
    // every part was mapped lazily and planned from its own tensor table: no part fell back to
    // "pages come in on first use", and the workers' experts were left out of each
    uint64_t total = 0;
    for (int k = 0; k < 3; ++k) total += file_size(split_part_path(first, k, 3));
    const json mem = rep["memory"];
    EXPECT_EQ(mem["model_mapped_lazily_bytes"].get<uint64_t>(), total) << mem.dump();
    EXPECT_EQ(mem["model_populated_bytes"].get<uint64_t>() + mem["model_skipped_bytes"].get<uint64_t>(), total) << mem.dump();
    EXPECT_EQ(count_of(r.err, "without the workers' experts"), 3u) << r.err;
    EXPECT_EQ(count_of(r.err, "pages come in on first use"), 0u) << r.err;
}

TEST(SplitModel, AMissingPartIsANamedWorkerError) {
    const std::string first = fixture_model_split({"--n-layer", "4", "--type", "q8_0"}, 3);
    ASSERT_FALSE(first.empty());
    const std::string dir = test_dir("split_missing_part");
    const std::string copy = dir + "/m-00001-of-00003.gguf";
    ASSERT_EQ(run_command({"/bin/cp", first, copy}).exit_code, 0);
    ASSERT_EQ(run_command({"/bin/cp", split_part_path(first, 2, 3), dir + "/m-00003-of-00003.gguf"}).exit_code, 0);
    const std::vector<std::string> worker = {bin_path("moezip-worker"), "--bind", "ipc://" + dir + "/w.sock", "--model"};
    std::vector<std::string> argv = worker;
    argv.push_back(copy);
    CommandResult r = run_command(argv, {}, 60);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("split part 2 of 3, " + dir + "/m-00002-of-00003.gguf: No such file or directory"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find("serving"), std::string::npos) << r.out;
    // a later part given instead of the first: named, as llama.cpp requires the first
    argv = worker;
    argv.push_back(dir + "/m-00003-of-00003.gguf");
    r = run_command(argv, {}, 60);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("is part 3 of 3 of a split model: give the first part (-00001-of-00003.gguf)"), std::string::npos)
        << r.err;
    // a first part renamed: the others cannot be found by name
    ASSERT_EQ(run_command({"/bin/cp", first, dir + "/renamed.gguf"}).exit_code, 0);
    argv = worker;
    argv.push_back(dir + "/renamed.gguf");
    r = run_command(argv, {}, 60);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("is the first of 3 split files (split.count) but its name does not end in -00001-of-00003.gguf"),
              std::string::npos) << r.err;
}

} // namespace
