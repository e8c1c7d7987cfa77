// moezip-test-host: a small llama.h host for the scenarios that moezip-run does not express — what
// servers and bindings do with the engine — so tests can run them under the preload and compare
// with a run without it. It knows nothing about moezip.
//
//   moezip-test-host swap   -m A.gguf -m B.gguf [-m ...] [--no-mmap] [-n N] [--fixture K] --json OUT
//       load a model, generate, free context and model, load the next (a server swapping models)
//   moezip-test-host two    -m A.gguf -m B.gguf [--no-mmap] [-n N] [--fixture K] --json OUT
//       load both models and a context on each (a server with a draft model), then generate on A,
//       on B and on A again while both stay loaded
//   moezip-test-host warmup -m A.gguf [-n N] [--fixture K] --json OUT
//       llama_set_warmup(ctx, true) + one decode (every expert routed, as llama-cli and llama-server
//       warm up), memory cleared, llama_set_warmup(false), then generate
//   moezip-test-host parallel -m A.gguf --contexts C [-n N] [--fixture K] --json OUT
//       C contexts on one model, each generating on its own thread at the same time
//   moezip-test-host signals -m A.gguf [-n N] [--fixture K] --json OUT
//       generate while another thread sends SIGUSR1 (handled, no SA_RESTART) to the decoding thread
//       every 200 us: every blocking call in the decode path sees EINTR
//   moezip-test-host exit-mid-decode -m A.gguf --after-ms T
//       a thread generates without end; the main thread calls exit(0) after T ms
//   moezip-test-host pause -m A.gguf --pause-file P
//       generate, create P.ready, wait (at most 60 s) until P.go exists, generate again on the same
//       context: a test can change the world (restart a worker) while the host is idle
//   moezip-test-host until-stop -m A.gguf --stop-file S [-n N] [--fixture K] --json OUT
//       generate again and again on one context (memory cleared between runs), every run
//       recorded, until S exists (checked after each run; at least one run, at most 300 s):
//       traffic for as long as a test needs it, each run comparable with a single-node run
//   moezip-test-host deleted -m A.gguf --json OUT
//       copy A next to OUT, open the copy, delete it, load it as /proc/self/fd/N and generate (a
//       model read from a file already gone: a replaced download, O_TMPFILE; its fd's link
//       reads "... (deleted)"). The run is recorded under A's name.
//   moezip-test-host serve -m A.gguf [--contexts C] [-n N] [--fixture K] [--requests R] [--for-ms T]
//                          [--progress F] [--pid-file P] --json OUT
//       a server: C contexts (default 1), each on its own thread, answer request after request (a
//       generation from the fixture prompt, memory cleared after each) until SIGTERM or SIGINT, R
//       requests in all, or T ms. A request that fails is counted and the next one is served, as
//       llama-server answers HTTP 500 and takes the next; the exit status is 0 whatever failed, as a
//       server's main returns. Each request appends one character to F ('o' served, 'f' failed) as
//       it ends. The JSON's runs hold each distinct output once (one run when every request had the
//       same tokens and logits), and "serve": {"served", "failed", "ms"} counts the requests. P gets
//       the process id once the model is loaded (a test signals it).
//
// The JSON: {"runs": [{"model", "context", "tokens": [...], "logits_xxh3": ["16 hex", ...]}]}.
// Exit 0 when every generation finished, 1 when one failed (the error on stderr), 2 on bad flags.
#include "tools/moezip-run/engine.h"
#include "tools/moezip-run/generate.h"
#include "tools/moezip-run/prompt.h"
#include "tools/moezip-run/run_options.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <execinfo.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <vector>

using moezip::Status;
using namespace moezip_run;

namespace {

struct Args {
    std::string scenario;
    std::vector<std::string> models;
    bool no_mmap = false;
    int n_predict = 16, n_fixture = 24, contexts = 2, after_ms = 300, pauses = 1;
    std::string json;
    std::string pause_file;
    int64_t requests = 0;  // serve: requests in all (0: until a signal or --for-ms)
    int64_t for_ms = 0;    // serve: start no request after this many ms (0: no limit)
    std::string progress;  // serve: one character per request ends here
    std::string pid_file;  // serve: getpid() written here once serving
    bool contexts_given = false;
    std::string stop_file;
};

std::mutex g_out_mu;
nlohmann::json g_runs = nlohmann::json::array();
nlohmann::json g_serve;  // serve: {"served", "failed", "ms"}

int fail(const std::string & what, const Status & st) {
    fprintf(stderr, "moezip-test-host: error: %s: %s\n", what.c_str(), st.message().c_str());
    return 1;
}

run_options options_for(const Args & a, const std::string & model) {
    run_options o;
    o.model_path = model;
    o.use_mmap = !a.no_mmap;
    o.n_predict = a.n_predict;
    o.n_fixture = a.n_fixture;
    o.n_ubatch = 512;
    return o;
}

// Generates on ctx from the fixture prompt and records the run.
Status generate_into(llama_context * ctx, const Args & a, const std::string & model, int context, bool * stop = nullptr) {
    const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(ctx));
    std::vector<llama_token> prompt;
    Status st = prompt_from_fixture(vocab, a.n_fixture, 1, &prompt);
    if (!st) return st;
    generate_params gp;
    gp.n_predict = a.n_predict;
    generate_result res;
    do {
        st = generate_greedy(ctx, prompt, gp, &res);
        llama_memory_clear(llama_get_memory(ctx), true);
    } while (st && stop != nullptr && !*stop);  // exit-mid-decode: until the process ends
    if (!st) return st;
    nlohmann::json hashes = nlohmann::json::array();
    for (uint64_t h : res.logits_xxh3) {
        char buf[17];
        snprintf(buf, sizeof buf, "%016llx", (unsigned long long) h);
        hashes.push_back(buf);
    }
    const nlohmann::json run = {{"model", model}, {"context", context}, {"tokens", res.tokens}, {"logits_xxh3", hashes}};
    std::lock_guard<std::mutex> lock(g_out_mu);
    if (a.scenario == "serve" && std::find(g_runs.begin(), g_runs.end(), run) != g_runs.end()) return Status::ok();  // seen: kept once
    g_runs.push_back(run);
    return Status::ok();
}

struct Loaded {
    llama_model * model = nullptr;
    llama_context * ctx = nullptr;
    ~Loaded() {
        if (ctx) llama_free(ctx);
        if (model) llama_model_free(model);
    }
};

Status load(const Args & a, const std::string & path, Loaded & l, int n_contexts = 1, std::vector<llama_context *> * more = nullptr) {
    const run_options o = options_for(a, path);
    Status st = engine_load_model(o, &l.model);
    if (!st) return st;
    st = engine_init_context(l.model, o, 512, &l.ctx);
    for (int i = 1; st && i < n_contexts; ++i) {
        llama_context * c = nullptr;
        st = engine_init_context(l.model, o, 512, &c);
        if (st) more->push_back(c);
    }
    return st;
}

int scenario_swap(const Args & a) {
    for (size_t i = 0; i < a.models.size(); ++i) {
        Loaded l;
        Status st = load(a, a.models[i], l);
        if (st) st = generate_into(l.ctx, a, a.models[i], 0);
        if (!st) return fail("model " + std::to_string(i) + " " + a.models[i], st);
    }  // context and model freed here, before the next one is loaded
    return 0;
}

int scenario_two(const Args & a) {
    if (a.models.size() != 2) return fail("two", Status::invalid_argument("needs exactly two -m models"));
    Loaded first, second;
    Status st = load(a, a.models[0], first);
    if (st) st = load(a, a.models[1], second);
    if (!st) return fail("load", st);
    const std::pair<llama_context *, size_t> order[] = {{first.ctx, 0}, {second.ctx, 1}, {first.ctx, 0}};
    for (const auto & o : order) {
        st = generate_into(o.first, a, a.models[o.second], (int) o.second);
        if (!st) return fail("model " + std::to_string(o.second) + " " + a.models[o.second], st);
    }
    return 0;
}

// llama_set_warmup is deprecated at the pinned commit ("user code should do warmup runs manually"),
// still exported and used by older llama.cpp programs and bindings: a warmup graph must be handled.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
int scenario_warmup(const Args & a) {
    Loaded l;
    Status st = load(a, a.models[0], l);
    if (!st) return fail("load", st);
    const llama_vocab * vocab = llama_model_get_vocab(l.model);
    // as common_init_from_params (llama.cpp common/common.cpp) warms up: BOS and EOS, every expert
    std::vector<llama_token> tmp = {llama_vocab_bos(vocab), llama_vocab_eos(vocab)};
    llama_set_warmup(l.ctx, true);
    const int32_t rc = llama_decode(l.ctx, llama_batch_get_one(tmp.data(), (int32_t) tmp.size()));
    llama_memory_clear(llama_get_memory(l.ctx), true);
    llama_synchronize(l.ctx);
    llama_set_warmup(l.ctx, false);
    if (rc != 0) return fail("warmup decode", Status::io_error("return code " + std::to_string(rc)));
    st = generate_into(l.ctx, a, a.models[0], 0);
    return st ? 0 : fail("generate", st);
}
#pragma GCC diagnostic pop

int scenario_parallel(const Args & a) {
    Loaded l;
    std::vector<llama_context *> more;
    Status st = load(a, a.models[0], l, a.contexts, &more);
    if (!st) return fail("load", st);
    std::vector<llama_context *> ctxs = {l.ctx};
    ctxs.insert(ctxs.end(), more.begin(), more.end());
    std::vector<Status> results(ctxs.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < ctxs.size(); ++i)
        threads.emplace_back([&, i]() { results[i] = generate_into(ctxs[i], a, a.models[0], (int) i); });
    for (auto & t : threads) t.join();
    for (llama_context * c : more) llama_free(c);
    for (size_t i = 0; i < results.size(); ++i)
        if (!results[i]) return fail("context " + std::to_string(i), results[i]);
    return 0;
}

void on_usr1(int) {}

int scenario_signals(const Args & a) {
    struct sigaction sa = {};
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: interrupted system calls return EINTR
    sigaction(SIGUSR1, &sa, nullptr);
    Loaded l;
    Status st = load(a, a.models[0], l);
    if (!st) return fail("load", st);
    std::atomic<bool> done{false};
    const pthread_t decoder = pthread_self();
    std::thread pest([&]() {
        while (!done) {
            pthread_kill(decoder, SIGUSR1);
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    });
    st = generate_into(l.ctx, a, a.models[0], 0);
    done = true;
    pest.join();
    return st ? 0 : fail("generate", st);
}

int scenario_exit_mid_decode(const Args & a) {
    Loaded * l = new Loaded();  // never freed: exit() comes while the thread uses it
    Status st = load(a, a.models[0], *l);
    if (!st) return fail("load", st);
    static bool never = false;
    std::thread([&a, l]() { (void) generate_into(l->ctx, a, a.models[0], 0, &never); }).detach();
    std::this_thread::sleep_for(std::chrono::milliseconds(a.after_ms));
    fflush(nullptr);
    exit(0);  // static destructors and atexit handlers run while the decoding thread is inside llama_decode
}

std::atomic<bool> g_stop_serving{false};

void on_stop_serving(int) { g_stop_serving = true; }

int scenario_serve(const Args & a) {
    struct sigaction sa = {};
    sa.sa_handler = on_stop_serving;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    Loaded l;
    std::vector<llama_context *> more;
    Status st = load(a, a.models[0], l, a.contexts_given ? a.contexts : 1, &more);
    if (!st) return fail("load", st);
    std::vector<llama_context *> ctxs = {l.ctx};
    ctxs.insert(ctxs.end(), more.begin(), more.end());
    if (!a.pid_file.empty()) std::ofstream(a.pid_file) << getpid() << "\n";
    const auto t0 = std::chrono::steady_clock::now();
    const auto deadline = t0 + std::chrono::milliseconds(a.for_ms);
    std::atomic<int64_t> started{0}, served{0}, failed{0};
    std::mutex progress_mu;
    std::vector<std::thread> threads;
    for (size_t i = 0; i < ctxs.size(); ++i)
        threads.emplace_back([&, i]() {
            while (!g_stop_serving && (a.requests == 0 || started.fetch_add(1) < a.requests)) {
                if (a.for_ms > 0 && std::chrono::steady_clock::now() >= deadline) break;
                const Status g = generate_into(ctxs[i], a, a.models[0], (int) i);
                (g ? served : failed).fetch_add(1);
                if (!a.progress.empty()) {
                    std::lock_guard<std::mutex> lock(progress_mu);
                    std::ofstream(a.progress, std::ios::app) << (g ? 'o' : 'f');
                }
            }
        });
    for (auto & t : threads) t.join();
    for (llama_context * c : more) llama_free(c);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    fprintf(stderr, "moezip-test-host: serve: %lld requests served, %lld failed\n", (long long) served.load(), (long long) failed.load());
    std::lock_guard<std::mutex> lock(g_out_mu);
    g_serve = {{"served", served.load()}, {"failed", failed.load()}, {"ms", ms}};
    return 0;  // a server's status after it was told to stop, whatever its requests did
}

int scenario_deleted(const Args & a) {
    if (a.json.empty()) return fail("deleted", Status::invalid_argument("needs --json (the copy is made beside it)"));
    const std::string copy = a.json + ".model-copy";
    {
        std::ifstream in(a.models[0], std::ios::binary);
        std::ofstream out(copy, std::ios::binary | std::ios::trunc);
        out << in.rdbuf();
        if (!in || !out) return fail("deleted", Status::io_error("cannot copy " + a.models[0] + " to " + copy));
    }
    const int fd = open(copy.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || unlink(copy.c_str()) != 0) return fail("deleted", Status::io_error(copy + ": " + strerror(errno)));
    Loaded l;
    Status st = load(a, "/proc/self/fd/" + std::to_string(fd), l);
    if (st) st = generate_into(l.ctx, a, a.models[0], 0);
    if (!st) return fail("deleted", st);
    return 0;  // fd closed at exit, after the model
}

// Pause k (from 1) writes P.ready and waits for P.go; pauses after the first use P-k.ready, P-k.go.
int scenario_pause(const Args & a) {
    Loaded l;
    Status st = load(a, a.models[0], l);
    if (st) st = generate_into(l.ctx, a, a.models[0], 0);
    if (!st) return fail("first run", st);
    for (int k = 1; k <= a.pauses; ++k) {
        const std::string p = k == 1 ? a.pause_file : a.pause_file + "-" + std::to_string(k);
        std::ofstream(p + ".ready") << "ready\n";
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!std::ifstream(p + ".go")) {
            if (std::chrono::steady_clock::now() > deadline) return fail("pause", Status::timeout("no " + p + ".go within 60 s"));
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        st = generate_into(l.ctx, a, a.models[0], 0);
        if (!st) return fail("run " + std::to_string(k + 1), st);
    }
    return 0;
}

// Runs until the stop file exists; the bound keeps a test whose stop never comes from hanging.
int scenario_until_stop(const Args & a) {
    if (a.stop_file.empty()) return fail("until-stop", Status::invalid_argument("needs --stop-file"));
    Loaded l;
    Status st = load(a, a.models[0], l);
    if (!st) return fail("load", st);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    int run = 0;
    do {
        st = generate_into(l.ctx, a, a.models[0], 0);
        if (!st) return fail("run " + std::to_string(run + 1), st);
        ++run;
        if (std::chrono::steady_clock::now() > deadline) return fail("until-stop", Status::timeout("no " + a.stop_file + " within 300 s"));
    } while (!std::ifstream(a.stop_file));
    return 0;
}

} // namespace

namespace {

// A crash under the preload is a defect to be found, not a flake: CI saw one SIGSEGV in
// exit-mid-decode (shard mode) that over a thousand runs here did not repeat. The stack goes to
// stderr, which the tests print with a crashed run's exit code; then the default action (the same
// exit status, a core where enabled). backtrace() is called once at start so that the handler does
// not load libgcc (malloc) inside the signal.
void on_fatal_signal(int sig) {
    static const char head[] = "moezip-test-host: fatal signal, backtrace (library+offset; addr2line -e on the same build):\n";
    ssize_t ignored = write(2, head, sizeof head - 1);
    (void) ignored;
    void * frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

void report_fatal_signals() {
    void * warm[1];
    backtrace(warm, 1);
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) {
        struct sigaction sa = {};
        sa.sa_handler = on_fatal_signal;
        sa.sa_flags = SA_RESETHAND;
        sigemptyset(&sa.sa_mask);
        sigaction(sig, &sa, nullptr);
    }
}

} // namespace

int main(int argc, char ** argv) {
    report_fatal_signals();
    Args a;
    CLI::App app{"moezip-test-host: engine scenarios of servers and bindings, for moezip's tests"};
    app.add_option("scenario", a.scenario, "swap, two, warmup, parallel, signals, exit-mid-decode, pause, serve, deleted or until-stop")
        ->required()
        ->check(CLI::IsMember({"swap", "two", "warmup", "parallel", "signals", "exit-mid-decode", "pause", "serve", "deleted", "until-stop"}));
    app.add_option("-m,--model", a.models, "GGUF model (swap: several, in order; two: two)")->required();
    app.add_flag("--no-mmap", a.no_mmap, "read models into memory instead of mapping them");
    app.add_option("-n", a.n_predict, "tokens to generate per run")->check(CLI::Range(1, 100000));
    app.add_option("--fixture", a.n_fixture, "prompt: this many fixture token ids (seed 1)")->check(CLI::Range(1, 4096));
    app.add_option("--contexts", a.contexts, "parallel: contexts (default 2); serve: contexts (default 1)")->check(CLI::Range(1, 16));
    app.add_option("--after-ms", a.after_ms, "exit-mid-decode: exit after this many ms")->check(CLI::Range(0, 600000));
    app.add_option("--for-ms", a.for_ms, "serve: start no request after this many ms (0: after --requests)")
        ->check(CLI::Range((int64_t) 0, (int64_t) 86400000));
    app.add_option("--json", a.json, "write the runs here");
    app.add_option("--pause-file", a.pause_file, "pause: the files P.ready (written) and P.go (waited for)");
    app.add_option("--pauses", a.pauses, "pause: pauses, each followed by a run (P-2.ready, P-2.go, ... after the first)")
        ->check(CLI::Range(1, 100));
    app.add_option("--requests", a.requests, "serve: stop after this many requests in all (0: at SIGTERM, SIGINT or --for-ms)")
        ->check(CLI::Range((int64_t) 0, (int64_t) 1000000000));
    app.add_option("--progress", a.progress, "serve: append 'o' (served) or 'f' (failed) here as each request ends");
    app.add_option("--pid-file", a.pid_file, "serve: write the process id here once the model is loaded");
    app.add_option("--stop-file", a.stop_file, "until-stop: generate again until this file exists");
    try {
        app.parse(argc, argv);
        a.contexts_given = app.get_option("--contexts")->count() > 0;
    } catch (const CLI::ParseError & e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    engine_log_init(false);
    Status st = engine_load_backends(nullptr);
    if (!st) return fail("backends", st);
    int rc = 2;
    if (a.scenario == "swap") rc = scenario_swap(a);
    else if (a.scenario == "two") rc = scenario_two(a);
    else if (a.scenario == "warmup") rc = scenario_warmup(a);
    else if (a.scenario == "parallel") rc = scenario_parallel(a);
    else if (a.scenario == "signals") rc = scenario_signals(a);
    else if (a.scenario == "exit-mid-decode") rc = scenario_exit_mid_decode(a);
    else if (a.scenario == "pause") rc = scenario_pause(a);
    else if (a.scenario == "serve") rc = scenario_serve(a);
    else if (a.scenario == "deleted") rc = scenario_deleted(a);
    else if (a.scenario == "until-stop") rc = scenario_until_stop(a);
    nlohmann::json out = {{"runs", g_runs}};
    if (!g_serve.is_null()) out["serve"] = g_serve;
    if (!a.json.empty()) std::ofstream(a.json) << out.dump(1) << "\n";
    llama_backend_free();
    return rc;
}
