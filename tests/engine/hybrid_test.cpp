// A hybrid run: llama.cpp built from the pinned source (GGML_RPC=ON, make engines) with a local
// ggml-rpc-server as the accelerator (`--rpc 127.0.0.1:PORT -ngl 99 --cpu-moe`, or `--n-cpu-moe 2`):
// attention, router and norms on the accelerator, the routed experts on this host's CPU, where the
// scheduler gives each MoE layer a split that ends at the per-slot ffn_moe_down. Under the preload in
// experts mode (two workers) and rows mode, with require_intercept, every CPU-resident MoE layer is
// handled, the answers are the same hybrid run's without the preload, and the experts the workers own
// are never made resident here.
#include "tests/support/cluster.h"
#include "tests/support/engine_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char ** environ;

using namespace moezip_test;
using nlohmann::json;

namespace {

/// A ggml-rpc-server of the engine on 127.0.0.1 (one thread), stopped at the end of the test.
class RpcServer {
public:
    ~RpcServer() {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
    }
    /// Starts it on a free port and waits up to 60 s until it accepts connections.
    bool start(const TestEngine & e, const std::string & dir) {
        port_ = free_port();
        const std::string program = e.program("ggml-rpc-server");
        const std::string log = dir + "/rpc-server.log";
        std::vector<std::string> args = {program, "-H", "127.0.0.1", "-p", std::to_string(port_), "-t", "1"};
        std::vector<char *> argv;
        for (auto & a : args) argv.push_back(&a[0]);
        argv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        // the accelerator stands for another device: never under the preload
        std::vector<std::string> env_s;
        for (char ** e = environ; *e != nullptr; ++e)
            if (strncmp(*e, "LD_PRELOAD=", 11) != 0 && strncmp(*e, "MOEZIP_CONFIG=", 14) != 0) env_s.push_back(*e);
        std::vector<char *> envp;
        for (auto & s : env_s) envp.push_back(&s[0]);
        envp.push_back(nullptr);
        const int rc = posix_spawn(&pid_, program.c_str(), &fa, nullptr, argv.data(), envp.data());
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0) { pid_ = -1; return false; }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (std::chrono::steady_clock::now() < deadline) {
            if (waitpid(pid_, nullptr, WNOHANG) == pid_) { pid_ = -1; return false; }
            if (accepts()) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return false;
    }
    std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

private:
    static int free_port() {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
        socklen_t len = sizeof a;
        getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
        close(fd);
        return ntohs(a.sin_port);
    }
    bool accepts() const {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t) port_);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        const bool ok = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0;
        close(fd);
        return ok;
    }
    pid_t pid_ = -1;
    int port_ = 0;
};

/// Workers of the engine over loopback TCP, killed at the end of the test.
struct HybridWorkers {
    std::vector<std::unique_ptr<WorkerProcess>> list;
    bool start(const TestEngine & e, const std::string & dir, const std::string & model, const std::vector<std::string> & experts) {
        for (const std::string & x : experts) {
            list.emplace_back(new WorkerProcess());
            list.back()->set_program(e.tool("moezip-worker"));
            std::vector<std::string> args = {"--model", model, "--bind", "tcp://127.0.0.1:*", "--threads", "1"};
            if (!x.empty()) args.insert(args.end(), {"--experts", x});
            if (!list.back()->start(args, dir)) {
                ADD_FAILURE() << list.back()->error();
                return false;
            }
        }
        return true;
    }
    /// experts mode over workers 0-3 and 4-7 (this host computes none), require_intercept.
    std::string experts_config(const std::string & report) const {
        return "mode = \"experts\"\nno_repack = true\nrequire_intercept = true\nreport = \"" + report + "\"\n" +
               "[[worker]]\nendpoint = \"" + list[0]->endpoint() + "\"\nexperts = \"0-3\"\n" +
               "[[worker]]\nendpoint = \"" + list[1]->endpoint() + "\"\nexperts = \"4-7\"\n";
    }
    /// rows mode, half the rows of every region on the one worker (which holds every expert).
    std::string rows_config(const std::string & report) const {
        return "mode = \"rows\"\nno_repack = true\nrequire_intercept = true\nreport = \"" + report + "\"\n" +
               "[rows]\nlocal_share = 0.5\nmin_rows = 2\n[[worker]]\nendpoint = \"" + list[0]->endpoint() + "\"\nshare = 0.5\n";
    }
};

// llama-completion prints through llama.cpp's asynchronous logger, which can drop its last lines when
// the process exits on a loaded machine (server_test.cpp): the texts must agree as far as each was
// printed, and each must have printed something beyond the prompt's length.
bool same_text(const std::string & a, const std::string & b, const std::string & prompt) {
    const size_t n = std::min(a.size(), b.size());
    return n > prompt.size() && a.compare(0, n, b, 0, n) == 0;
}

std::vector<int> layers_of(const json & a) {
    std::vector<int> v;
    for (const auto & x : a) v.push_back(x.get<int>());
    return v;
}

/// Every layer in `cpu` was handled as a split (slot outputs) on every call, none passed through.
void expect_split_layers_handled(const json & rep, const std::vector<int> & cpu, const std::string & name) {
    EXPECT_EQ(rep["engine"]["abi"], "ok") << name;
    EXPECT_EQ(rep["state"], "active") << name;
    EXPECT_EQ(rep["checks"]["regions_passthrough"], 0) << name;
    EXPECT_EQ(rep["checks"]["identity_failed"], 0) << name;
    EXPECT_EQ(rep["errors"]["count"], 0) << name << ": " << rep["errors"].dump();
    ASSERT_TRUE(rep.contains("hybrid")) << name;
    EXPECT_EQ(layers_of(rep["hybrid"]["layers_cpu"]), cpu) << name << ": " << rep["hybrid"].dump();
    EXPECT_TRUE(rep["hybrid"]["layers_offloaded"].empty()) << name;
    std::vector<int> handled;
    for (const auto & l : rep["layers"]) {
        if (l["calls"].get<uint64_t>() > 0) handled.push_back(l["il"].get<int>());
        EXPECT_EQ(l["passthrough"], 0) << name << ": " << l.dump();
        EXPECT_EQ(l["fallbacks"], 0) << name << ": " << l.dump();
    }
    EXPECT_EQ(handled, cpu) << name;
    for (const auto & p : rep["provider_map"]) {
        EXPECT_EQ(p["dispatchable"], true) << name << ": " << p.dump();
        for (const auto & kv : p["patterns"].items())
            EXPECT_NE(kv.key().find(",slots"), std::string::npos) << name << ": not the split form: " << p.dump();
    }
}

/// Experts mode: the workers' experts were left out of this host's mapping and never came in.
void expect_workers_experts_not_resident(const json & rep, const std::string & name) {
    const json & m = rep["memory"];
    EXPECT_GT(m["model_skipped_bytes"].get<uint64_t>(), 0u) << name << ": " << m.dump();
    ASSERT_TRUE(m.contains("worker_experts_mapped_bytes")) << name << ": " << m.dump();
    EXPECT_GT(m["worker_experts_mapped_bytes"].get<uint64_t>(), 0u) << name << ": " << m.dump();
    EXPECT_EQ(m["worker_experts_resident_bytes"].get<uint64_t>(), 0u) << name << ": " << m.dump();
}

const char * kPrompt = "Once upon a time";

std::vector<std::string> completion_argv(const TestEngine & e, const std::string & model, const RpcServer & rpc,
                                         const std::vector<std::string> & placement) {
    std::vector<std::string> argv = {e.program("llama-completion"), "-m", model, "-p", kPrompt, "-n", "40", "--temp", "0",
                                     "--seed", "42", "-t", "1", "--no-repack", "-no-cnv", "-b", "64", "-ub", "64",
                                     "--rpc", rpc.endpoint(), "-ngl", "99"};
    argv.insert(argv.end(), placement.begin(), placement.end());
    return argv;
}

const TestEngine * hybrid_engine(std::string & why) {
    const TestEngine * e = test_engine("llama.cpp:pinned", &why);
    if (e != nullptr && !file_exists(e->program("ggml-rpc-server"))) {
        why = e->program("ggml-rpc-server") + " is missing (llama.cpp built without GGML_RPC)";
        return nullptr;
    }
    return e;
}

TEST(Hybrid, LlamaCompletionCpuMoeInExpertsAndRowsModeEqualsThePlainHybridRun) {
    std::string why;
    const TestEngine * e = hybrid_engine(why);
    if (e == nullptr) GTEST_SKIP() << why;
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0", "--n-layer", "4"});
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("hybrid_completion");
    RpcServer rpc;
    ASSERT_TRUE(rpc.start(*e, dir)) << read_file(dir + "/rpc-server.log");
    HybridWorkers halves, all;
    ASSERT_TRUE(halves.start(*e, dir, model, {"0-3", "4-7"}));
    ASSERT_TRUE(all.start(*e, dir, model, {""}));
    const std::vector<std::string> argv = completion_argv(*e, model, rpc, {"--cpu-moe"});

    CommandResult plain = run_command(argv, {}, 300);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    std::ofstream(dir + "/experts.toml") << halves.experts_config(dir + "/experts.json");
    CommandResult experts = run_command(argv, {{"LD_PRELOAD", e->preload()}, {"MOEZIP_CONFIG", dir + "/experts.toml"}}, 300);
    ASSERT_EQ(experts.exit_code, 0) << experts.err;
    std::ofstream(dir + "/rows.toml") << all.rows_config(dir + "/rows.json");
    CommandResult rows = run_command(argv, {{"LD_PRELOAD", e->preload()}, {"MOEZIP_CONFIG", dir + "/rows.toml"}}, 300);
    ASSERT_EQ(rows.exit_code, 0) << rows.err;

    EXPECT_GT(std::max({plain.out.size(), experts.out.size(), rows.out.size()}), 40u) << plain.out;
    EXPECT_TRUE(same_text(experts.out, plain.out, kPrompt)) << "experts: " << experts.out << "\nplain: " << plain.out;
    EXPECT_TRUE(same_text(rows.out, plain.out, kPrompt)) << "rows: " << rows.out << "\nplain: " << plain.out;

    const json x = load_json(dir + "/experts.json");
    expect_split_layers_handled(x, {0, 1, 2, 3}, "experts");
    EXPECT_GT(x["layers"][0]["remote_slots"].get<uint64_t>(), 0u);
    EXPECT_EQ(x["layers"][0]["local_slots"], 0) << "this host owns no expert";
    for (const auto & w : x["workers"]) EXPECT_GT(w["slots"].get<uint64_t>(), 0u) << w.dump();
    // the batches of the prompt stayed on the CPU split: op offload is off in experts mode
    EXPECT_EQ(x["hybrid"]["op_offload_min_batch"]["set_by"], "moezip");
    EXPECT_NE(experts.err.find("GGML_OP_OFFLOAD_MIN_BATCH=2147483647 set by moezip"), std::string::npos) << experts.err;
    expect_workers_experts_not_resident(x, "experts");

    const json r = load_json(dir + "/rows.json");
    expect_split_layers_handled(r, {0, 1, 2, 3}, "rows");
    EXPECT_GT(r["layers"][0]["remote_rows"].get<uint64_t>(), 0u) << "the prompt's rows were split";
    EXPECT_EQ(r["hybrid"]["op_offload_min_batch"]["set_by"], "nobody (the engine's default, 32)");
}

TEST(Hybrid, NCpuMoeTwoHandlesTheCpuLayersAndNamesTheOthers) {
    std::string why;
    const TestEngine * e = hybrid_engine(why);
    if (e == nullptr) GTEST_SKIP() << why;
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0", "--n-layer", "4"});
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("hybrid_n_cpu_moe");
    RpcServer rpc;
    ASSERT_TRUE(rpc.start(*e, dir)) << read_file(dir + "/rpc-server.log");
    HybridWorkers halves;
    ASSERT_TRUE(halves.start(*e, dir, model, {"0-3", "4-7"}));
    const std::vector<std::string> argv = completion_argv(*e, model, rpc, {"--n-cpu-moe", "2"});
    CommandResult plain = run_command(argv, {}, 300);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    std::ofstream(dir + "/experts.toml") << halves.experts_config(dir + "/experts.json");
    CommandResult experts = run_command(argv, {{"LD_PRELOAD", e->preload()}, {"MOEZIP_CONFIG", dir + "/experts.toml"}}, 300);
    ASSERT_EQ(experts.exit_code, 0) << experts.err;
    EXPECT_TRUE(same_text(experts.out, plain.out, kPrompt)) << "experts: " << experts.out << "\nplain: " << plain.out;
    const json x = load_json(dir + "/experts.json");
    expect_split_layers_handled(x, {0, 1}, "n-cpu-moe 2");
    EXPECT_EQ(layers_of(x["hybrid"]["layers_accelerator"]), std::vector<int>({2, 3})) << x["hybrid"].dump();
    EXPECT_NE(experts.err.find("layers 2, 3: experts in the accelerator's memory"), std::string::npos) << experts.err;
}

TEST(Hybrid, LlamaServerTwoSlotsCpuMoeAnswersLikeThePlainHybridServer) {
    std::string why;
    const TestEngine * e = hybrid_engine(why);
    if (e == nullptr) GTEST_SKIP() << why;
    // a model that writes English: the random-weights fixture's text is no valid chat answer, and
    // the plain server itself answers the chat request with HTTP 500 ("does not match the expected
    // Content-only format"); stories260K has 5 layers, upcycled to 8 experts top-2
    const std::string model = upcycled_stories(8, 2, "replicate");
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("hybrid_server");
    RpcServer rpc;
    ASSERT_TRUE(rpc.start(*e, dir)) << read_file(dir + "/rpc-server.log");
    HybridWorkers halves;
    ASSERT_TRUE(halves.start(*e, dir, model, {"0-3", "4-7"}));
    std::ofstream(dir + "/moezip.toml") << halves.experts_config(dir + "/report.%p.json");
    CommandResult r = run_command({repo_root() + "/tools/server-check.sh", "--server", e->program("llama-server"), "--preload",
                                   e->library(), "--config", dir + "/moezip.toml", "--model", model, "--out", dir + "/check", "--",
                                   "--rpc", rpc.endpoint(), "-ngl", "99", "--cpu-moe"},
                                  {}, 600);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("identical: yes"), std::string::npos) << r.out << r.err;
    for (const char * q : {"completion", "chat", "stream", "parallel_a", "parallel_b"}) {
        const std::string plain = read_file(dir + "/check/plain/" + q + ".txt");
        EXPECT_GT(plain.size(), 20u) << q << ": '" << plain << "'";
        EXPECT_EQ(plain.find("ERROR"), std::string::npos) << q << ": " << plain;
        EXPECT_EQ(read_file(dir + "/check/moezip/" + q + ".txt"), plain) << q;
    }
    const std::string log = read_file(dir + "/check/moezip/server.err");
    EXPECT_NE(log.find("id  1 |"), std::string::npos) << "the second slot never ran";
    const json rep = load_json(dir + "/check/moezip/report.json");
    EXPECT_EQ(rep["complete"], true);
    expect_split_layers_handled(rep, {0, 1, 2, 3, 4}, "llama-server");
    for (const auto & w : rep["workers"]) EXPECT_GT(w["slots"].get<uint64_t>(), 0u) << w.dump();
    expect_workers_experts_not_resident(rep, "llama-server");
}

} // namespace
