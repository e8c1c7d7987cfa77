#include "tests/support/cluster.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

namespace moezip_test {

nlohmann::json load_json(const std::string & path) {
    nlohmann::json j = nlohmann::json::parse(read_file(path), nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << path;
    return j;
}

uint64_t sum_layers(const nlohmann::json & report, const char * key) {
    uint64_t s = 0;
    if (!report.contains("layers")) return 0;
    for (const auto & l : report["layers"]) s += l[key].get<uint64_t>();
    return s;
}

uint64_t worker_counter(const std::string & text, const std::string & label) {
    const size_t at = text.find(label + " ");
    return at == std::string::npos ? 0 : strtoull(text.c_str() + at + label.size() + 1, nullptr, 10);
}

bool Cluster::start_worker(const std::string & model, const std::string & endpoint, const std::string & experts,
                           const std::map<std::string, std::string> & env, const std::vector<std::string> & extra_args) {
    std::vector<std::string> args = {"--model", model, "--bind", endpoint, "--threads", "1"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    if (!experts.empty()) {
        args.push_back("--experts");
        args.push_back(experts);
    }
    workers.emplace_back(new WorkerProcess());
    const bool ok = workers.back()->start(args, dir, env);
    EXPECT_TRUE(ok) << workers.back()->error();
    return ok;
}

std::string write_moezip_config(const std::string & dir, const std::string & name, const std::string & body) {
    const std::string path = dir + "/" + name + ".toml";
    std::ofstream(path) << "no_repack = true\nreport = \"" << dir << "/" << name << ".json\"\n" << body;
    return path;
}

CommandResult run_preloaded(const std::vector<std::string> & argv, const std::string & config,
                            std::map<std::string, std::string> env, int timeout_s) {
    env["LD_PRELOAD"] = preload_env();
    env["MOEZIP_CONFIG"] = config;
    return run_command(argv, env, timeout_s);
}

bool errors_mention(const nlohmann::json & report, const std::string & text) {
    for (const char * part : {"first", "recent"}) {
        if (!report["errors"].contains(part)) continue;
        for (const auto & e : report["errors"][part])
            if (e.get<std::string>().find(text) != std::string::npos) return true;
    }
    return false;
}

nlohmann::json host_runs(const std::string & path) { return load_json(path)["runs"]; }

std::string worker_lines(const Cluster & c, const std::vector<std::string> & experts, const std::vector<std::string> & shares, size_t first) {
    std::string s;
    for (size_t i = 0; i < std::max(experts.size(), shares.size()); ++i) {
        s += "[[worker]]\nendpoint = \"" + c.workers[first + i]->endpoint() + "\"\n";
        if (i < experts.size() && !experts[i].empty()) s += "experts = \"" + experts[i] + "\"\n";
        if (i < shares.size()) s += "share = " + shares[i] + "\n";
    }
    return s;
}

std::vector<std::string> test_host(const std::string & scenario, const std::vector<std::string> & models, const std::string & json_out,
                                   const std::vector<std::string> & extra) {
    std::vector<std::string> argv = {bin_path("moezip-test-host"), scenario};
    for (const std::string & m : models) { argv.push_back("-m"); argv.push_back(m); }
    argv.push_back("--json");
    argv.push_back(json_out);
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
}

std::thread start_paused_host(CommandResult & host, const std::string & model, const std::string & json_out, const std::string & pause,
                              const std::string & cfg) {
    std::thread t([&host, model, json_out, pause, cfg]() {
        host = run_preloaded(test_host("pause", {model}, json_out, {"--pause-file", pause}), cfg);
    });
    for (int i = 0; i < 6000 && !std::ifstream(pause + ".ready"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return t;
}

} // namespace moezip_test
