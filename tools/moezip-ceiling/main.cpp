// moezip-ceiling: the speed-up over one node that a host and one worker exchanging a decode call's
// messages reach on this machine, with spins in place of the experts' compute (decode_sim.h says
// why), over ZeroMQ (moezip's transport) and over plain TCP with the worker blocking or polling
// (what of it the wake-ups cost; sim_link.h). Prints one JSON object (schema moezip-ceiling/1,
// docs/benchmarking.md):
//   moezip-ceiling --slot-ms 0.19 --moe-share 0.66 [--layers 4 --n-used 8 --n-embd 2048]
//                  [--rounds 60] [--transports zeromq,zeromq_poll,tcp_block,tcp_busy_poll]
//                  [--host-cpu 0 --worker-cpu 1] [--out FILE]
// Per transport the worker is a child process pinned to --worker-cpu (one at a time: a polling
// worker would take the other's core; -1 leaves it the CPUs this process had before it pinned
// itself); this process pins itself to --host-cpu. Rounds run every
// split once, the order reversed on every other round, so drift falls on all alike; each split's
// step time is the median over rounds, and its speed-up is over the one-node steps of the same
// rounds. Exit 0; 1 with "moezip-ceiling: error: ..." on stderr; CLI11's codes for bad flags.
#include "decode_sim.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sched.h>
#include <string>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace moezip_ceiling;

namespace {

cpu_set_t g_start_cpus;  // the CPUs this process could use before it pinned itself

/// Pins the calling process to cpu; cpu < 0 gives it back g_start_cpus.
bool pin_to(int cpu) {
    if (cpu >= CPU_SETSIZE) return false;
    cpu_set_t set;
    if (cpu < 0) {
        set = g_start_cpus;
    } else {
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
    }
    return sched_setaffinity(0, sizeof set, &set) == 0;
}

/// Waits up to timeout_ms for pid to exit, then kills it; its exit status, -1 when killed.
int reap(pid_t pid, int timeout_ms) {
    int status = 0;
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return -1;
}

/// Forks the worker of transport t, pinned to cpu, and returns its pid and endpoint; -1 after an error.
pid_t start_worker(Transport t, int cpu, std::string & endpoint) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the host
        if (getppid() != parent) _exit(1);  // the host died before the line above took effect
        if (!pin_to(cpu)) {
            fprintf(stderr, "moezip-ceiling: error: worker: cannot pin to CPU %d\n", cpu);
            _exit(1);
        }
        _exit(worker_serve(t, fds[1]));
    }
    close(fds[1]);
    if (pid < 0) return -1;
    char buf[256];
    ssize_t n = 0, got;
    while (n < (ssize_t) sizeof buf - 1 && (got = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0) n += got;
    close(fds[0]);
    buf[n] = 0;
    endpoint = buf;
    if (!endpoint.empty() && endpoint.back() == '\n') endpoint.pop_back();
    if (endpoint.empty()) {
        waitpid(pid, nullptr, 0);
        return -1;
    }
    return pid;
}

nlohmann::json split_json(const Split & s, double step_ms, double one_node_ms, double bound) {
    const double speedup = one_node_ms / step_ms;
    return {{"host_slots", s.host_slots}, {"wait", wait_name(s.wait)}, {"step_ms", step_ms},
            {"speedup", speedup}, {"of_bound", speedup / bound}};
}

/// Every split of shape over transport t, `rounds` timed rounds after 3 untimed: the transport's
/// JSON object (rtt16_ms, one_node_step_ms, splits, best, best_whole_slots, worker_exit), or null
/// after an error printed on stderr.
nlohmann::json measure(Transport t, const StepShape & shape, int rounds, int worker_cpu, double bound) {
    std::string endpoint;
    const pid_t worker = start_worker(t, worker_cpu, endpoint);
    if (worker < 0) {
        fprintf(stderr, "moezip-ceiling: error: the %s worker did not start\n", transport_name(t));
        return nullptr;
    }
    const std::vector<Split> splits = splits_to_try(shape.n_used);
    std::vector<std::vector<double>> times(splits.size());
    double rtt16 = 0;
    try {
        HostSim host(shape, connect_host_link(t, endpoint));
        rtt16 = host.rtt16_ms(1000);
        for (int r = 0; r < rounds + 3; ++r) {
            for (size_t i = 0; i < splits.size(); ++i) {
                const size_t k = r % 2 ? splits.size() - 1 - i : i;
                const double ms = host.step(splits[k]);
                if (r >= 3) times[k].push_back(ms);
            }
        }
        host.stop_worker();
    } catch (const std::exception & e) {
        fprintf(stderr, "moezip-ceiling: error: %s: %s\n", transport_name(t), e.what());
        reap(worker, 0);
        return nullptr;
    }
    const int worker_exit = reap(worker, 5000);

    const double one_node_ms = median(times[0]);
    nlohmann::json res = nlohmann::json::array();
    nlohmann::json best, best_whole;
    for (size_t i = 1; i < splits.size(); ++i) {
        nlohmann::json j = split_json(splits[i], median(times[i]), one_node_ms, bound);
        if (best.is_null() || j["speedup"] > best["speedup"]) best = j;
        const bool whole = splits[i].host_slots == (int) splits[i].host_slots;
        if (whole && (best_whole.is_null() || j["speedup"] > best_whole["speedup"])) best_whole = j;
        res.push_back(std::move(j));
    }
    return {{"rtt16_ms", rtt16}, {"one_node_step_ms", one_node_ms}, {"splits", res}, {"best", best},
            {"best_whole_slots", best_whole}, {"worker_exit", worker_exit}};
}

} // namespace

int main(int argc, char ** argv) {
    CLI::App app{"What a host and one worker reach of the Amdahl bound on this machine, over ZeroMQ and plain TCP"};
    StepShape shape;
    double moe_share = 0.66;
    int rounds = 60, host_cpu = -1, worker_cpu = -1, max_minutes = 30;
    std::vector<std::string> transports = {"zeromq", "zeromq_poll", "tcp_block", "tcp_busy_poll"};
    std::string out_path;
    app.add_option("--slot-ms", shape.slot_ms, "one slot's compute (ms)")->check(CLI::Range(0.001, 100.0));
    app.add_option("--moe-share", moe_share, "the MoE share p of one node's decode step")->check(CLI::Range(0.01, 0.99));
    app.add_option("--layers", shape.n_layers, "MoE layers per step")->check(CLI::Range(1, 512));
    app.add_option("--n-used", shape.n_used, "slots per row (n_expert_used)")->check(CLI::Range(2, 64));
    app.add_option("--n-embd", shape.n_embd, "hidden size")->check(CLI::Range(1, 65536));
    app.add_option("--rounds", rounds, "rounds of every split (3 more are run first, untimed)")->check(CLI::Range(1, 100000));
    app.add_option("--transports", transports, "some of zeromq, zeromq_poll, tcp_block, tcp_busy_poll (sim_link.h)")
        ->delimiter(',')->check(CLI::IsMember({"zeromq", "zeromq_poll", "tcp_block", "tcp_busy_poll"}));
    app.add_option("--host-cpu", host_cpu, "pin this process to a CPU (-1: not pinned)")->check(CLI::Range(-1, CPU_SETSIZE - 1));
    app.add_option("--worker-cpu", worker_cpu, "pin the worker to a CPU (-1: the CPUs this process may use)")
        ->check(CLI::Range(-1, CPU_SETSIZE - 1));
    app.add_option("--out", out_path, "write the JSON here instead of stdout");
    app.add_option("--max-minutes", max_minutes, "refuse a shape and rounds whose measuring takes longer than this at least")
        ->check(CLI::Range(1, 1440));
    CLI11_PARSE(app, argc, argv);
    for (size_t i = 0; i < transports.size(); ++i)
        for (size_t k = 0; k < i; ++k)
            if (transports[i] == transports[k]) {
                fprintf(stderr, "moezip-ceiling: error: --transports: %s is named twice\n", transports[i].c_str());
                return 1;
            }
    // CLI::Range compares, and NaN fails every comparison: it came through, and so past the floor
    for (const auto & [flag, v] : {std::make_pair("--slot-ms", shape.slot_ms), std::make_pair("--moe-share", moe_share)})
        if (std::isnan(v)) {
            fprintf(stderr, "moezip-ceiling: error: %s: not a number\n", flag);
            return 1;
        }
    // p = moe / (moe + rest), so the rest of a step follows from p and the MoE's own time
    shape.non_moe_ms = shape.moe_ms() * (1 - moe_share) / moe_share;
    const double floor_s = run_floor_ms(shape, rounds, transports.size()) / 1000;
    if (floor_s > max_minutes * 60.0) {
        fprintf(stderr, "moezip-ceiling: error: this shape and --rounds %d take at least %.0f minutes of measuring, over "
                        "--max-minutes %d: lower --rounds, --layers or --slot-ms, or raise --max-minutes\n",
                rounds, floor_s / 60, max_minutes);
        return 1;
    }
    fprintf(stderr, "moezip-ceiling: %zu transport%s, at least %.0f s of measuring\n", transports.size(),
            transports.size() == 1 ? "" : "s", floor_s);
    // checked before minutes of measuring, not after; written at the end through a temporary file,
    // so a run stopped half way leaves an earlier result as it was
    const std::string out_tmp = out_path + ".tmp";
    if (!out_path.empty()) {
        const bool writable = std::ofstream(out_path, std::ios::app) && std::ofstream(out_tmp);
        std::remove(out_tmp.c_str());  // made again at the end: a run stopped before leaves none behind
        if (!writable) {
            fprintf(stderr, "moezip-ceiling: error: --out: cannot write %s\n", out_path.c_str());
            return 1;
        }
    }
    if (sched_getaffinity(0, sizeof g_start_cpus, &g_start_cpus) != 0) {
        fprintf(stderr, "moezip-ceiling: error: cannot read this process's CPUs\n");
        return 1;
    }
    if (!pin_to(host_cpu)) {
        fprintf(stderr, "moezip-ceiling: error: cannot pin to CPU %d\n", host_cpu);
        return 1;
    }

    const double p = shape.moe_share(), bound = 1 / ((1 - p) + p / 2);
    nlohmann::json out = {
        {"schema", "moezip-ceiling/1"},
        {"shape", {{"n_layers", shape.n_layers}, {"n_used", shape.n_used}, {"n_embd", shape.n_embd},
                   {"slot_ms", shape.slot_ms}, {"non_moe_ms", shape.non_moe_ms}, {"moe_share", p}}},
        {"rounds", rounds}, {"host_cpu", host_cpu}, {"worker_cpu", worker_cpu}, {"amdahl_bound", bound}};
    for (const std::string & name : transports) {
        Transport t = Transport::zeromq;
        transport_from_name(name, t);  // CLI11 took only known names
        nlohmann::json m = measure(t, shape, rounds, worker_cpu, bound);
        if (m.is_null()) return 1;
        out[name] = std::move(m);
    }
    const std::string text = out.dump(1) + "\n";
    if (out_path.empty()) {
        fputs(text.c_str(), stdout);
    } else {
        std::ofstream out_file(out_tmp);
        out_file << text;
        out_file.close();
        if (!out_file || rename(out_tmp.c_str(), out_path.c_str()) != 0) {
            fprintf(stderr, "moezip-ceiling: error: cannot write %s\n", out_path.c_str());
            return 1;
        }
    }
    return 0;
}
