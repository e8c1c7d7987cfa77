#include "tests/support/engine_support.h"

#include "provider_map/engine_pin.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

namespace moezip_test {

namespace {

std::vector<TestEngine> load_engines(std::string & why) {
    std::vector<TestEngine> out;
    const std::string path = build_dir() + "/engines.json";
    nlohmann::json j = nlohmann::json::parse(read_file(path), nullptr, false);
    if (j.is_discarded() || !j.contains("engines")) {
        why = "no " + path + " (make engines builds moezip for the engines of TEST_ENGINES)";
        return out;
    }
    for (const auto & e : j["engines"]) {
        const nlohmann::json & x = e["engine"];
        out.push_back({e.value("spec", ""), e.value("name", ""), e.value("build", ""), x.value("name", ""), x.value("kind", ""),
                       x.value("engine", ""), x.value("bin", ""), x.value("ggml_version", ""), x.value("source_commit", ""),
                       x.value("binary_commit", "")});
    }
    why = "not in " + path + " (make test TEST_ENGINES=... chose other engines)";
    return out;
}

} // namespace

const TestEngine * test_engine(const std::string & spec, std::string * why) {
    static std::string reason;
    static const std::vector<TestEngine> engines = load_engines(reason);
    for (const TestEngine & e : engines)
        if (e.spec == spec) return &e;
    if (why) *why = spec + ": " + reason;
    return nullptr;
}

const TestEngine * test_engine_beside_pinned(const std::string & spec, std::string * why) {
    if (std::string(moezip::engine_pin().name) != "node-llama-cpp 3.21.1") {
        if (why) *why = std::string("this build is for ") + moezip::engine_pin().name + ", not the pinned node-llama-cpp 3.21.1";
        return nullptr;
    }
    return test_engine(spec, why);
}

CommandResult run_engine_host(const std::string & host, const std::string & preload, const std::string & dir,
                              const std::string & name, const std::string & model, const std::string & config_body,
                              const std::map<std::string, std::string> & extra_env) {
    const std::string cfg = dir + "/" + name + ".toml";
    std::ofstream(cfg) << "no_repack = true\nreport = \"" << dir << "/" << name << ".json\"\n" << config_body;
    std::map<std::string, std::string> env = extra_env;
    env["LD_PRELOAD"] = preload;
    env["MOEZIP_CONFIG"] = cfg;
    return run_command({host, "-m", model, "-n", "32", "-b", "512", "--quiet", "--no-repack", "--fixture", "128", "--json",
                        dir + "/" + name + "-run.json"},
                       env);
}

void expect_same_run(const std::string & dir, const std::string & a, const std::string & b) {
    CommandResult cmp = run_command({bin_path("moezip-report"), "compare", dir + "/" + a + ".json", dir + "/" + b + ".json"});
    EXPECT_EQ(cmp.exit_code, 0) << a << " vs " << b << ": " << cmp.out << cmp.err;
    EXPECT_EQ(cmp.out.rfind("equal: ", 0), 0u) << cmp.out;
    nlohmann::json ra = nlohmann::json::parse(read_file(dir + "/" + a + "-run.json"), nullptr, false);
    nlohmann::json rb = nlohmann::json::parse(read_file(dir + "/" + b + "-run.json"), nullptr, false);
    ASSERT_FALSE(ra.is_discarded() || rb.is_discarded()) << "run outputs of " << a << ", " << b;
    EXPECT_EQ(ra["tokens"], rb["tokens"]) << a << " vs " << b;
    EXPECT_FALSE(ra["tokens"].empty());
}

std::string experts_config(const std::vector<std::string> & endpoints, bool require_intercept) {
    std::string s = std::string(require_intercept ? "require_intercept = true\n" : "") + "mode = \"experts\"\n";
    const int per = 8 / (int) endpoints.size();
    for (size_t i = 0; i < endpoints.size(); ++i)
        s += "[[worker]]\nendpoint = \"" + endpoints[i] + "\"\nexperts = \"" + std::to_string(i * per) + "-" +
             std::to_string((i + 1) * per - 1) + "\"\n";
    return s;
}

} // namespace moezip_test
