// moezip-worker: serves the routed-expert FFN computations of one GGUF model's MoE layers to moezip
// coordinators over ZeroMQ (protocol: coordinator/wire/protocol.h, docs/protocol.md; usage: docs/worker.md).
//
//   moezip-worker --model M.gguf [--bind tcp://127.0.0.1:5601] [--experts 0-63,96-127]
//                 [--threads N] [--mmap] [--engine DIR] [--config F.toml]
//
// Prints one line to stdout once the socket is bound and the experts are loaded:
//   moezip-worker: serving <endpoint> experts <ranges> of <n_expert> (<n> MoE layers, <x> MiB of
//   expert weights in memory, cpu <variant>, instance <id>; layers <ranges> from <file>)
// where a split model lists each file with the layers whose expert tensors it holds:
//   ...; layers 0-3 from 3 files: m-00001-of-00003.gguf (0), m-00002-of-00003.gguf (1-2), ...)
// Serves until SIGTERM/SIGINT, prints its counters to stderr and exits 0. Exit 2: bad flags or
// config; exit 1: the engine or the model could not be loaded, or the endpoint could not be bound.
#include "coordinator/config/config.h"
#include "coordinator/config/config_endpoint.h"
#include "coordinator/config/expert_range.h"
#include "coordinator/base/log.h"
#include "tools/moezip-worker/worker_engine.h"
#include "tools/moezip-worker/worker_fault.h"
#include "tools/moezip-worker/worker_model.h"
#include "tools/moezip-worker/worker_server.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>

namespace {

constexpr const char * kDefaultBind = "tcp://127.0.0.1:5601";

/// The resolved settings: the config's [worker_server] table, then the flags given on top.
struct WorkerSettings {
    std::string model;
    std::string bind = kDefaultBind;
    std::vector<moezip::ExpertRange> experts;  ///< empty = all
    int threads = 1;
    bool use_mmap = false;
};

/// Layer indices as ranges ("0-2,5"), "none" when empty.
std::string layers_text(const std::vector<int> & layers) {
    std::vector<moezip::ExpertRange> ranges;
    for (int il : layers) {
        if (!ranges.empty() && ranges.back().last + 1 == il) ranges.back().last = il;
        else ranges.push_back({il, il});
    }
    return ranges.empty() ? "none" : moezip::expert_ranges_format(ranges);
}

/// "layers 0-1 from m.gguf", or for a split model every file with the layers it holds.
std::string files_text(const moezip::WorkerModel & w) {
    std::vector<int> all;
    for (const auto & l : w.layers()) all.push_back(l.il);
    const std::vector<moezip::WorkerFile> files = w.files();
    std::string text = "layers " + layers_text(all) + " from ";
    if (files.size() == 1) return text + files[0].path;
    text += std::to_string(files.size()) + " files: ";
    for (size_t k = 0; k < files.size(); ++k)
        text += (k ? ", " : "") + files[k].path + " (" + layers_text(files[k].layers) + ")";
    return text;
}

int fail(int code, const std::string & message) {
    fprintf(stderr, "moezip-worker: %s\n", message.c_str());
    return code;
}

} // namespace

int main(int argc, char ** argv) {
    CLI::App app{"moezip-worker: computes MoE experts of a GGUF model for moezip coordinators (ZeroMQ ROUTER).\n"
                 "Binding a non-loopback address exposes an unauthenticated compute service to the network."};
    std::string model, bind, experts_text, config_path, engine_dir;
    int threads = 1;
    bool use_mmap = false;
    app.add_option("--model", model, "GGUF model file (or [worker_server] model)");
    app.add_option("--bind", bind, "endpoint to bind: tcp://127.0.0.1:5601 (default), tcp://127.0.0.1:* (any free port), ipc:///path");
    app.add_option("--experts", experts_text, "experts to serve, e.g. 0-63,96-127 (default: all)");
    app.add_option("--threads", threads, "compute threads (default 1)")->check(CLI::Range(1, 256));
    app.add_flag("--mmap", use_mmap, "map the model file instead of reading the served experts into memory");
    app.add_option("--engine", engine_dir, "the host's llama.cpp: its lib folder, CMake build folder or node-llama-cpp install "
                                           "(default: the engine moezip was built for)");
    app.add_option("--config", config_path, "moezip TOML file: its [worker_server] table gives defaults, flags override it");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        return app.exit(e) == 0 ? 0 : 2;  // --help: 0; bad flags: CLI11 printed why (docs/worker.md: exit 2)
    }

    WorkerSettings s;
    if (!config_path.empty()) {
        moezip::Config cfg;
        moezip::Status st = moezip::config_load_file(config_path, cfg);
        if (!st) return fail(2, st.message());
        moezip::log_set_default(cfg.log);
        const moezip::WorkerServerConfig & ws = cfg.worker_server;
        if (!ws.model.empty()) s.model = ws.model;
        if (!ws.bind.empty()) s.bind = ws.bind;
        s.experts = ws.experts;
        s.threads = ws.threads;
        s.use_mmap = ws.mmap;
    }
    if (app.count("--model")) s.model = model;
    if (app.count("--bind")) s.bind = bind;
    if (app.count("--threads")) s.threads = threads;
    if (app.count("--mmap")) s.use_mmap = use_mmap;
    if (app.count("--experts")) {
        moezip::Status st = moezip::expert_ranges_parse(experts_text, s.experts);
        if (!st) return fail(2, "--experts " + experts_text + ": " + st.message());
        if (s.experts.empty()) return fail(2, "--experts is empty (leave it out to serve every expert)");
    }
    if (s.model.empty()) return fail(2, "no model: give --model FILE (or model in the config's [worker_server])");
    std::string why;
    if (!moezip::config_endpoint_valid(s.bind, true, why))
        return fail(2, "--bind " + s.bind + ": " + why + " (expected tcp://HOST:PORT with PORT 1..65535 or *, or ipc:///path)");

    moezip::WorkerServerOptions opt;
    opt.bind = s.bind;
    opt.n_threads = s.threads;
    opt.instance = moezip::worker_instance_new();
    moezip::Status st = moezip::worker_faults_parse(getenv(moezip::kWorkerFaultEnv), opt.faults);
    if (!st) return fail(2, st.message());

    moezip::WorkerEngine engine;
    st = moezip::worker_engine_load(engine, engine_dir);
    if (!st) return fail(1, st.message());
    moezip::WorkerModel weights;
    st = weights.load({s.model, s.experts, s.use_mmap}, engine.read_api());
    if (!st) return fail(1, st.message());
    if (!moezip::worker_endpoint_is_loopback(s.bind))
        fprintf(stderr, "moezip-worker: warning: %s is not a loopback endpoint: anyone who can reach it can use this "
                        "unauthenticated compute service\n", s.bind.c_str());

    moezip::worker_install_signal_handlers();
    moezip::WorkerCounters counters;
    bool served = false;
    auto on_ready = [&](const std::string & endpoint) {
        served = true;
        printf("moezip-worker: serving %s experts %s of %lld (%zu MoE layers, %.1f MiB of expert weights %s, cpu %s, instance %s; "
               "%s)\n",
               endpoint.c_str(), moezip::expert_ranges_format(weights.served()).c_str(), (long long) weights.n_expert(),
               weights.layers().size(), (double) weights.served_bytes() / (1024.0 * 1024.0),
               s.use_mmap ? "mapped from the file (resident once read)" : "read into memory", engine.cpu_variant.c_str(),
               moezip::hex64(opt.instance).c_str(), files_text(weights).c_str());
        fflush(stdout);
    };
    st = moezip::worker_serve(opt, weights, engine, on_ready, counters);
    if (served) fprintf(stderr, "moezip-worker: %s\n", moezip::worker_counters_text(counters).c_str());
    if (!st) return fail(1, st.message());
    return 0;
}
