// Integration test: the unmodified node-llama-cpp CLI (the engine's own npm package, `complete`
// command) generates text from the upcycled real model stories260K (8 experts, top-2) with and
// without LD_PRELOAD=libmoezip.so in local mode. Same text, exit 0, every MoE layer handled by moezip,
// and only the node process that ran the model writes a report (node-llama-cpp also forks a child
// node with the same environment to test its binary; that child must stay silent and exit at once).
// The exact CLI command is documented in docs/internals/node.md.
#include "tests/support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <sys/stat.h>

#include <string>
#include <vector>

using namespace moezip_test;

namespace {

const char * const stories_sha256 = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d";
const int stories_n_layer = 5;

// <root>/.deps/engine/node_modules/node-llama-cpp/dist/cli/cli.js (installed by `make deps`).
std::string node_cli_path() {
    return repo_root() + "/.deps/engine/node_modules/node-llama-cpp/dist/cli/cli.js";
}

// "" when node and the CLI are there, else a message saying what is missing and how to get it.
std::string node_missing() {
    CommandResult r = run_command({"node", "--version"}, {}, 60);
    if (r.exit_code != 0) {
        std::string why = r.err.substr(0, r.err.find('\n'));
        return "node is not installed or not on PATH (" + why + "); run `make deps` "
               "(tools/install-deps.sh installs nodejs and npm)";
    }
    if (!file_exists(node_cli_path()))
        return node_cli_path() + " is missing; run `make deps` (installs node-llama-cpp 3.21.1 into .deps/engine)";
    return "";
}

// The sparse MoE upcycled from stories260K (8 experts, top-2), made once into <build>/fixtures/.
// Fails the calling test and returns "" when the dense model or the upcycle is wrong.
std::string stories_moe_8x2() {
    const std::string dense = shared_dir() + "/fixtures/stories260K.gguf";
    const std::string sha = sha256_file(dense);
    if (sha != stories_sha256) {
        ADD_FAILURE() << dense << " is missing or not the expected file: sha256 '" << sha << "', expected "
                      << stories_sha256 << " (see shared/fixtures/SOURCES.md)";
        return "";
    }
    const std::string dir = build_dir() + "/fixtures";
    const std::string path = dir + "/stories260K-moe8x2.gguf";
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && st.st_size > 0) return path;
    run_command({"/bin/mkdir", "-p", dir});
    CommandResult r = run_command({bin_path("moezip-upcycle"), "-i", dense, "-o", path + ".tmp", "--n-expert", "8",
                                   "--n-expert-used", "2"}, {}, 300);
    if (r.exit_code != 0) {
        ADD_FAILURE() << "moezip-upcycle failed (" << r.exit_code << "): " << r.err;
        return "";
    }
    rename((path + ".tmp").c_str(), path.c_str());
    return path;
}

// Runs `node cli.js complete` greedily on `model` with stdin from /dev/null (so the CLI's prompt
// loop ends after the first completion instead of waiting for input).
CommandResult node_complete(const std::string & model, const std::map<std::string, std::string> & env) {
    std::map<std::string, std::string> full_env = env;
    full_env["NODE_LLAMA_CPP_SKIP_DOWNLOAD"] = "true";  // never download or build llama.cpp
    full_env["NODE_LLAMA_CPP_GPU"] = "false";
    full_env["FORCE_COLOR"] = "0";                      // plain text, whatever the caller's terminal
    return run_command({"/bin/sh", "-c", "exec \"$0\" \"$@\" </dev/null", "node", node_cli_path(), "complete",
                        "--model", model, "--text", "Once upon a time", "--maxTokens", "24", "--temperature", "0",
                        "--repeatPenalty", "1", "--threads", "1", "--gpu", "false", "--contextSize", "256"},
                       full_env, 300);
}

// The generated text in the CLI's stdout: after "Completion: " up to the final newline (the CLI then
// prints its next "> " prompt and ends on EOF). "" when the marker is missing.
std::string completion_text(const std::string & out) {
    const std::string marker = "Completion: ";
    size_t at = out.find(marker);
    if (at == std::string::npos) return "";
    size_t end = out.rfind('\n');
    if (end == std::string::npos || end < at) end = out.size();
    return out.substr(at + marker.size(), end - at - marker.size());
}

// Names of the files in `dir` that start with `prefix`.
std::vector<std::string> files_with_prefix(const std::string & dir, const std::string & prefix) {
    std::vector<std::string> names;
    if (DIR * d = opendir(dir.c_str())) {
        while (dirent * e = readdir(d)) {
            std::string name = e->d_name;
            if (name.rfind(prefix, 0) == 0) names.push_back(name);
        }
        closedir(d);
    }
    return names;
}

} // namespace

TEST(NodeCli, PreloadLocalModeGivesSameTextAndHandlesEveryMoeLayer) {
    const std::string missing = node_missing();
    ASSERT_TRUE(missing.empty()) << missing;
    const std::string model = stories_moe_8x2();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("NodeCli.PreloadLocal");
    const std::string config = dir + "/moezip.toml";
    {
        FILE * f = fopen(config.c_str(), "w");
        ASSERT_NE(f, nullptr) << config;
        fprintf(f, "mode = \"local\"\nreport = \"%s/r.%%p.json\"\nrequire_intercept = true\nno_repack = true\n",
                dir.c_str());
        fclose(f);
    }

    CommandResult plain = node_complete(model, {});
    ASSERT_EQ(plain.exit_code, 0) << "node CLI without preload failed:\n" << plain.out << "\n" << plain.err;
    const std::string plain_text = completion_text(plain.out);
    ASSERT_GT(plain_text.size(), 20u) << "no completion in the CLI output:\n" << plain.out;

    CommandResult pre = node_complete(model, {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", config}});
    ASSERT_EQ(pre.exit_code, 0) << "node CLI with LD_PRELOAD failed:\n" << pre.out << "\n" << pre.err;
    EXPECT_EQ(completion_text(pre.out), plain_text) << "with preload:\n" << pre.out << "\n" << pre.err;

    // The binary-check child node inherits LD_PRELOAD and MOEZIP_CONFIG: it must not write a report.
    const std::vector<std::string> reports = files_with_prefix(dir, "r.");
    ASSERT_EQ(reports.size(), 1u) << "expected exactly one report (the process that ran the model), found "
                                  << reports.size() << " in " << dir;
    nlohmann::json j = nlohmann::json::parse(read_file(dir + "/" + reports[0]), nullptr, false);
    ASSERT_TRUE(j.is_object()) << "unreadable report " << reports[0];
    EXPECT_EQ(j["schema"], "moezip-report/1");
    EXPECT_EQ(j["state"], "active") << j.dump(1);
    EXPECT_EQ(j["config"]["mode"], "local");

    ASSERT_EQ(j["provider_map"].size(), (size_t) stories_n_layer) << j["provider_map"].dump(1);
    for (const auto & e : j["provider_map"]) {
        EXPECT_TRUE(e["dispatchable"].get<bool>()) << e.dump(1);
        EXPECT_EQ(e["n_expert"], 8);
        EXPECT_EQ(e["n_used"], 2);
    }
    ASSERT_EQ(j["layers"].size(), (size_t) stories_n_layer) << j["layers"].dump(1);
    for (const auto & l : j["layers"]) {
        EXPECT_GT(l["calls"].get<long long>(), 0) << l.dump();
        EXPECT_EQ(l["passthrough"], 0) << l.dump();
        EXPECT_EQ(l["fallbacks"], 0) << l.dump();
    }
    EXPECT_EQ(j["checks"]["identity_failed"], 0) << j["checks"].dump();
    EXPECT_GT(j["checks"]["identity_passed"].get<long long>(), 0) << j["checks"].dump();
    EXPECT_EQ(j["checks"]["regions_passthrough"], 0) << j["checks"].dump();
    EXPECT_GT(j["logits"]["count"].get<long long>(), 0);
    EXPECT_EQ(j["errors"]["count"], 0) << j["errors"].dump(1);
}

// A config toml++ 3.3.0 aborted on (exit 134 before config_precheck): under the node CLI it is a named
// error, and strict = true written above it makes the host exit with status 3 (docs/config.md).
TEST(NodeCli, ConfigTomlppAbortedOnIsANamedErrorAndStrictExits3) {
    const std::string missing = node_missing();
    ASSERT_TRUE(missing.empty()) << missing;
    const std::string model = stories_moe_8x2();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("NodeCli.BadConfig");
    const std::string config = dir + "/moezip.toml";
    {
        FILE * f = fopen(config.c_str(), "w");
        ASSERT_NE(f, nullptr) << config;
        fprintf(f, "strict = true\nreport = \"%s/r.%%p.json\"\nmode = [}\n", dir.c_str());
        fclose(f);
    }
    CommandResult r = node_complete(model, {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", config}});
    EXPECT_EQ(r.exit_code, 3) << r.out << "\n" << r.err;
    EXPECT_NE(r.err.find(config + ":3:9: mode: not valid TOML (expected a value or ']' in the array, saw '}')"),
              std::string::npos) << r.err;
    EXPECT_NE(r.err.find("strict = true: exiting (status 3)"), std::string::npos) << r.err;
}
