// moezip-worker: serves the routed-expert FFN computations of one GGUF model's MoE layers to moezip
// coordinators over ZeroMQ (protocol: coordinator/wire/protocol.h, docs/internals/protocol.md; usage: docs/worker.md;
// keys and threat model: docs/security.md).
//
//   moezip-worker --model M.gguf [--bind tcp://127.0.0.1:5601] [--experts 0-63,96-127]
//                 [--threads N] [--mmap | --repack] [--engine DIR] [--config F.toml]
//                 [--key DIR/moezip.key --allow COORDINATORS.pub ... | --insecure]
//                 [--max-rows N] [--max-slots N] [--max-in-mib N] [--max-out-mib N] [--max-scratch-mib N]
//   moezip-worker --keygen DIR      writes DIR/moezip.key (mode 0600) and DIR/moezip.pub, then exits
//
// Prints one line to stdout once the socket is bound and the experts are loaded:
//   moezip-worker: serving <endpoint> experts <ranges> of <n_expert> (<n> MoE layers, <x> MiB of
//   expert weights in memory, cpu <variant>, instance <id>, curve <public key>|plain; layers <ranges> from <file>),
//   ready in <s> s (experts loaded in <s> s, <rate> MB/s)
// where a split model lists each file with the layers whose expert tensors it holds:
//   ...; layers 0-3 from 3 files: m-00001-of-00003.gguf (0), m-00002-of-00003.gguf (1-2), ...)
// or, serving an expert slice (moezip-slice):
//   ...; layers 0-1 from s.gguf, a slice of m.gguf (experts 0-3 of 8, tensor table <16 hex>))
// Loading prints progress lines to stderr (model/load_progress.h; MOEZIP_WORKER_PROGRESS_MS) and,
// just before the ready line, "moezip-worker: loaded <x> MiB of expert weights in <s> s (...)".
// Serves until SIGTERM/SIGINT, prints its counters to stderr and exits 0. Exit 2: bad flags or
// config, keys that cannot be read, or a non-loopback bind without a key (and without --insecure);
// exit 1: the engine or the model could not be loaded, or the endpoint could not be bound.
#include "coordinator/config/config.h"
#include "coordinator/config/config_endpoint.h"
#include "coordinator/config/expert_range.h"
#include "coordinator/base/log.h"
#include "coordinator/wire/curve_keys.h"
#include "tools/moezip-worker/worker_engine.h"
#include "tools/moezip-worker/serve/worker_fault.h"
#include "tools/moezip-worker/model/worker_model.h"
#include "tools/moezip-worker/serve/worker_server.h"
#include "tools/moezip-worker/serve/worker_socket.h"

#include <CLI/CLI.hpp>

#include <chrono>
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
    bool repack = false;             ///< served experts in the CPU backend's CPU_REPACK layout, as the engine loads them
    bool keep_unsliced = false;      ///< shard mode: keep the original expert tensors (model/slice_residency.h)
    std::string key;                 ///< key file; "" = plain
    std::vector<std::string> allow;  ///< public-key files of admitted coordinators
    bool insecure = false;
    int handshake_ms = 5000;
    int64_t max_rows = 4096, max_slots = 32768, max_in_mib = 128, max_out_mib = 256, max_scratch_mib = 1024;
    int scratch_hold_ms = moezip::kScratchHoldMs;
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
    if (files.size() == 1 && w.slice().is_slice)
        return text + files[0].path + ", a slice of " + w.slice().source + " (experts " + std::to_string(w.slice().first) + "-" +
               std::to_string(w.slice().last) + " of " + std::to_string(w.slice().n_expert) + ", tensor table " +
               w.slice().source_table + ")";
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

void settings_from_config(const moezip::WorkerServerConfig & ws, WorkerSettings & s) {
    if (!ws.model.empty()) s.model = ws.model;
    if (!ws.bind.empty()) s.bind = ws.bind;
    s.experts = ws.experts;
    s.threads = ws.threads;
    s.use_mmap = ws.mmap;
    s.repack = ws.repack;
    s.keep_unsliced = ws.keep_unsliced;
    s.key = ws.key;
    s.allow = ws.allow;
    s.insecure = ws.insecure;
    s.handshake_ms = ws.handshake_ms;
    s.max_rows = ws.max_rows;
    s.max_slots = ws.max_slots;
    s.max_in_mib = ws.max_in_mib;
    s.max_out_mib = ws.max_out_mib;
    s.max_scratch_mib = ws.max_scratch_mib;
    s.scratch_hold_ms = ws.scratch_hold_ms;
}

int keygen(const std::string & dir) {
    moezip::CurveKeyPair pair;
    std::string key_path, pub_path;
    moezip::Status st = moezip::curve_keygen_write(dir, pair, key_path, pub_path);
    if (!st) return fail(2, "--keygen: " + st.message());
    printf("moezip-worker: wrote %s (key pair, mode 0600: keep it private) and %s (public key %s)\n", key_path.c_str(),
           pub_path.c_str(), pair.public_key.c_str());
    return 0;
}

// The key pair and allow-list, and whether this bind may be plain. Exit status 2 on refusal.
int resolve_security(const WorkerSettings & s, moezip::WorkerServerOptions & opt) {
    if (s.key.empty() && !s.allow.empty()) return fail(2, "--allow needs --key (this worker's key file)");
    if (!s.key.empty()) {
        if (!moezip::curve_available()) return fail(2, "--key: this libzmq has no CURVE support (zmq_has(\"curve\") is false)");
        if (s.allow.empty()) return fail(2, "--key needs --allow FILE (the coordinators' public keys): without it every client key would be accepted");
        moezip::Status st = moezip::curve_keypair_read(s.key, opt.key);
        for (size_t i = 0; st && i < s.allow.size(); ++i) st = moezip::curve_public_keys_read(s.allow[i], opt.allow);
        if (!st) return fail(2, st.message());
        return 0;
    }
    if (moezip::worker_endpoint_is_loopback(s.bind)) return 0;
    if (!s.insecure)
        return fail(2, "--bind " + s.bind + " is not a loopback endpoint: refusing to serve without keys. Give --key and --allow "
                       "(docs/security.md), or --insecure to serve anyone who can reach it");
    fprintf(stderr, "moezip-worker: warning: --insecure: %s is not a loopback endpoint and has no keys: anyone who can reach it "
                    "can use this compute service and read its model's shapes\n", s.bind.c_str());
    return 0;
}

} // namespace

int main(int argc, char ** argv) {
    const auto started = std::chrono::steady_clock::now();  // "ready in" on the ready line counts from here
    CLI::App app{"moezip-worker: computes MoE experts of a GGUF model for moezip coordinators (ZeroMQ ROUTER).\n"
                 "A non-loopback bind needs a CURVE key and an allow-list of coordinators (--key, --allow) or --insecure."};
    std::string model, bind, experts_text, config_path, keygen_dir, key, engine_dir;
    std::vector<std::string> allow;
    int threads = 1, handshake_ms = 5000;
    int64_t max_rows = 0, max_slots = 0, max_in = 0, max_out = 0, max_scratch = 0;
    int scratch_hold_ms = 0;
    bool use_mmap = false, insecure = false, repack = false, keep_unsliced = false;
    app.add_option("--model", model, "GGUF model file (or [worker_server] model)");
    app.add_option("--bind", bind, "endpoint to bind: tcp://127.0.0.1:5601 (default), tcp://127.0.0.1:* (any free port), ipc:///path");
    app.add_option("--experts", experts_text, "experts to serve, e.g. 0-63,96-127 (default: all)");
    app.add_option("--threads", threads, "compute threads (default 1)")->check(CLI::Range(1, 256));
    app.add_flag("--mmap", use_mmap, "map the model file instead of reading the served experts into memory");
    app.add_flag("--repack", repack, "hold the served experts in the CPU backend's repacked layout (CPU_REPACK), as llama.cpp "
                                     "loads Q4_0/Q4_K/IQ4_NL weights by default: for hosts that do not run with --no-repack");
    app.add_flag("--keep-unsliced", keep_unsliced, "shard mode: keep the original expert tensors in memory (by default a layer's "
                                                   "originals are given back once its requests compute from packed copies of their slices)");
    app.add_option("--engine", engine_dir, "the host's llama.cpp: its lib folder, CMake build folder or node-llama-cpp install "
                                           "(default: the engine moezip was built for)");
    app.add_option("--config", config_path, "moezip TOML file: its [worker_server] table gives defaults, flags override it");
    app.add_option("--keygen", keygen_dir, "write a CURVE key pair to DIR/moezip.key (0600) and DIR/moezip.pub, then exit");
    app.add_option("--key", key, "this worker's CURVE key file (from --keygen): serve only authenticated coordinators");
    app.add_option("--allow", allow, "file of coordinator public keys admitted (a moezip.pub; repeatable)");
    app.add_flag("--insecure", insecure, "allow a non-loopback bind without keys (anyone who reaches it may compute)");
    app.add_option("--handshake-ms", handshake_ms, "close connections that do not complete the handshake in this time (default 5000)")
        ->check(CLI::Range(100, 600000));
    app.add_option("--max-rows", max_rows, "per-request budget: rows (default 4096)")->check(CLI::Range(1, 1 << 20));
    app.add_option("--max-slots", max_slots, "per-request budget: rows x n_used (default 32768)")->check(CLI::Range(1, 1 << 28));
    app.add_option("--max-in-mib", max_in, "per-request budget: data received, MiB (default 128)")->check(CLI::Range(1, 65536));
    app.add_option("--max-out-mib", max_out, "per-request budget: result, MiB (default 256)")->check(CLI::Range(1, 65536));
    app.add_option("--max-scratch-mib", max_scratch, "per-request budget: compute buffers, MiB (default 1024)")->check(CLI::Range(1, 1 << 20));
    app.add_option("--scratch-hold-ms", scratch_hold_ms, "keep a large request's buffers this long for the requests that follow, ms "
                   "(default 30000: a prompt, its decode and the next turn reuse them)")->check(CLI::Range(0, 86400000));
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        return app.exit(e) == 0 ? 0 : 2;  // --help: 0; bad flags: CLI11 printed why (docs/worker.md: exit 2)
    }
    if (app.count("--keygen")) return keygen(keygen_dir);

    WorkerSettings s;
    if (!config_path.empty()) {
        moezip::Config cfg;
        moezip::Status st = moezip::config_load_file(config_path, cfg);
        if (!st) return fail(2, st.message());
        moezip::log_set_default(cfg.log);
        settings_from_config(cfg.worker_server, s);
    }
    if (app.count("--model")) s.model = model;
    if (app.count("--bind")) s.bind = bind;
    if (app.count("--threads")) s.threads = threads;
    if (app.count("--mmap")) s.use_mmap = use_mmap;
    if (app.count("--repack")) s.repack = repack;
    if (app.count("--keep-unsliced")) s.keep_unsliced = keep_unsliced;
    if (app.count("--key")) s.key = key;
    if (app.count("--allow")) s.allow = allow;
    if (app.count("--insecure")) s.insecure = insecure;
    if (app.count("--handshake-ms")) s.handshake_ms = handshake_ms;
    if (app.count("--max-rows")) s.max_rows = max_rows;
    if (app.count("--max-slots")) s.max_slots = max_slots;
    if (app.count("--max-in-mib")) s.max_in_mib = max_in;
    if (app.count("--max-out-mib")) s.max_out_mib = max_out;
    if (app.count("--max-scratch-mib")) s.max_scratch_mib = max_scratch;
    if (app.count("--scratch-hold-ms")) s.scratch_hold_ms = scratch_hold_ms;
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
    opt.handshake_ms = s.handshake_ms;
    opt.keep_unsliced = s.keep_unsliced;
    opt.scratch_hold_ms = s.scratch_hold_ms;
    opt.budget = {s.max_rows, s.max_slots, s.max_in_mib << 20, s.max_out_mib << 20, s.max_scratch_mib << 20};
    if (int rc = resolve_security(s, opt)) return rc;
    if (s.repack && s.use_mmap)  // bad flags or config: exit 2, before the engine and the model are loaded
        return fail(2, "repack (--repack or [worker_server] repack) copies the served experts into the CPU backend's layout: "
                       "mmap (--mmap or [worker_server] mmap) does not apply with it");
    moezip::Status st = moezip::worker_faults_parse(getenv(moezip::kWorkerFaultEnv), opt.faults);
    if (!st) return fail(2, st.message());
    int progress_ms = moezip::kWorkerProgressDefaultMs;
    std::string progress_why;
    if (!moezip::load_progress_interval_parse(getenv(moezip::kWorkerProgressEnv), progress_ms, progress_why))
        return fail(2, progress_why);
    const long fd_limit = moezip::worker_raise_fd_limit();

    moezip::WorkerEngine engine;
    st = moezip::worker_engine_load(engine, engine_dir);
    if (!st) return fail(1, st.message());
    const double model_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    moezip::WorkerModel weights;
    st = weights.load({s.model, s.experts, s.use_mmap, s.repack ? &engine.repack : nullptr, stderr, progress_ms}, engine.read_api());
    if (!st) return fail(1, st.message());
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

    moezip::worker_install_signal_handlers();
    moezip::WorkerCounters counters;
    bool served = false;
    auto on_ready = [&](const std::string & endpoint) {
        served = true;
        // the load's own line first (stderr), then the ready line, whose tail says the time from start to ready
        fprintf(stderr, "moezip-worker: %s\n", weights.load_summary().c_str());
        const double ready_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        printf("moezip-worker: serving %s experts %s of %lld (%zu MoE layers, %.1f MiB of expert weights %s, cpu %s, instance %s, "
               "%s%s; %s), ready in %.2f s (experts loaded in %.2f s, %.1f MB/s)\n",
               endpoint.c_str(), moezip::expert_ranges_format(weights.served()).c_str(), (long long) weights.n_expert(),
               weights.layers().size(), (double) weights.served_bytes() / (1024.0 * 1024.0),
               s.use_mmap ? "mapped from the file (resident once read)" : s.repack ? "repacked where the engine repacks" : "read into memory", engine.cpu_variant.c_str(),
               moezip::hex64(opt.instance).c_str(), opt.key.public_key.empty() ? "plain" : "curve ",
               opt.key.public_key.c_str(), files_text(weights).c_str(), ready_s, load_s - model_s,
               load_s - model_s > 0 ? (double) weights.served_bytes() / 1e6 / (load_s - model_s) : 0.0);
        fprintf(stderr, "moezip-worker: per-request budget %s; %zu coordinator key%s admitted; descriptor limit %ld\n",
                moezip::budget_describe(opt.budget).c_str(), opt.allow.size(), opt.allow.size() == 1 ? "" : "s", fd_limit);
        fflush(stdout);
    };
    st = moezip::worker_serve(opt, weights, engine, on_ready, counters);
    if (served) fprintf(stderr, "moezip-worker: %s\n", moezip::worker_counters_text(counters).c_str());
    if (!st) return fail(1, st.message());
    return 0;
}
