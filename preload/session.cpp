#include "preload/session.h"

#include "coordinator/config/config.h"
#include "coordinator/evidence/evidence.h"
#include "coordinator/evidence/report_flush.h"
#include "coordinator/evidence/trace.h"
#include "coordinator/compute/graph_runner.h"
#include "coordinator/modes/handler_factory.h"
#include "coordinator/base/log.h"
#include "coordinator/modes/split.h"
#include "coordinator/memory/model_files.h"
#include "coordinator/memory/weight_release.h"
#include "preload/abi_guard.h"
#include "provider_map/engine_api.h"
#include "preload/engine_locate.h"
#include "preload/hook_bindings.h"
#include "preload/hybrid_watch.h"
#include "preload/model_map_populate.h"
#include "coordinator/wire/transport.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <memory>
#include <mutex>
#include <unistd.h>
#include <utility>
#include <vector>

namespace moezip {

namespace {

enum class State { uninit, inert, passthrough, active };

using ComputeFn = ggml_status (*)(ggml_cgraph *, ggml_cplan *);

// The whole per-process state. Allocated once and never destroyed: statics with destructors in a
// preloaded library run at exit in an order we do not control (see the engine notes).
struct Session {
    std::mutex init_mu;
    std::atomic<bool> config_read{false};  // read without the lock on the hot path (sched hook)
    bool have_config = false;
    bool config_ok = false;
    Config cfg;
    std::atomic<State> state{State::uninit};
    std::atomic<bool> exiting{false};  // at_exit began: no new region is handled, waits end
    std::atomic<bool> exit_done{false};
    bool atexit_registered = false, atexit_late_registered = false;
    std::string why_passthrough;
    int pid = 0;
    // The GGUF files mapped in the process, and the identity of the config's `model` ("" = the
    // oldest mapped): which model's MoE layers are distributed (coordinator/memory/model_files.h).
    ModelFiles model_files;
    std::string model_identity;
    // The ABI guard, run once before any hook changes what the engine does (no_repack, lazy model
    // mapping): a refused engine must run exactly as without the preload.
    bool engine_checked = false, engine_ok = false;

    GgmlApi api;
    Evidence ev;
    std::mutex ev_mu;
    std::unique_ptr<RegionHandler> handler;
    std::unique_ptr<GraphRunner> runner;
    std::string report_path;
    std::string trace_path;  // "" = no trace (config `trace`)
    // Periodic report writes: at most every report_flush_ms, only when the content changed. Taken
    // with try_lock: a compute on another thread never waits for a write in progress.
    std::mutex flush_mu;
    ReportFlushGate flush_gate;

    std::mutex real_mu;
    std::vector<std::pair<std::string, ComputeFn>> real_compute;  // caller object path -> its real function
    std::atomic<uint64_t> sched_graphs{0};

    // Resident size at the end of graph computes (at most every 100 ms): the memory the host needs
    // while it serves, after any weights were released (VmHWM still counts the engine's load).
    std::mutex rss_mu;
    std::chrono::steady_clock::time_point last_rss_sample{};
    int64_t rss_graph_last_kib = -1, rss_graph_max_kib = -1;
    uint64_t lazy_map_bytes = 0;  // bytes of model mappings made without MAP_POPULATE (under rss_mu)
    uint64_t model_populated_bytes = 0, model_skipped_bytes = 0;  // of which made resident / left to the workers
    uint64_t model_populated_pmd_bytes = 0;  // of the populated bytes, mapped by 2 MiB entries right after
    std::string model_populate_error;        // the last lazy map's reason for populating nothing or not all
    bool model_hugepage_advised = false;     // MADV_HUGEPAGE taken on a lazily mapped model
};

Session & S() {
    static Session * s = new Session();
    return *s;
}

thread_local bool t_in_hook = false;
thread_local const void * t_sched = nullptr;  // the scheduler whose graph this thread computes

// Sets a thread-local flag for a scope and restores it on every way out (an exception included),
// so a failure inside a hook never leaves the thread marked as inside it.
class FlagScope {
public:
    explicit FlagScope(bool & flag) : flag_(flag), prev_(flag) { flag_ = true; }
    ~FlagScope() { flag_ = prev_; }
    FlagScope(const FlagScope &) = delete;
    FlagScope & operator=(const FlagScope &) = delete;

private:
    bool & flag_;
    bool prev_;
};

void at_exit();

// Exit handlers run last-registered first. at_exit is registered twice: when the preload loads
// (so a process whose engine never reached the hooks is still told about at exit), and again when
// moezip becomes active, after the engine's CPU backend was loaded, so that it runs before the
// backend's static destructors: a thread still decoding is stopped from entering the engine's
// kernels while they are torn down. It acts once.
void register_at_exit_locked(Session & s) {
    if (s.atexit_registered) return;
    s.atexit_registered = true;
    atexit(at_exit);
}

void register_late_at_exit_locked(Session & s) {
    if (s.atexit_late_registered) return;
    s.atexit_late_registered = true;
    atexit(at_exit);
}

// Reads MOEZIP_CONFIG once (cheap, creates nothing). Caller holds init_mu.
void read_config_locked(Session & s) {
    if (s.config_read) return;
    s.config_read = true;
    s.pid = getpid();
    const char * path = getenv("MOEZIP_CONFIG");
    if (path == nullptr || *path == 0) return;
    s.have_config = true;
    Status st = config_load_file(path, s.cfg);
    if (st) st = config_check_model_file(s.cfg);
    log_set_default(s.cfg.log);
    if (!st) {
        // one log line per problem, each with the moezip[pid] prefix (messages may hold several)
        size_t at = 0;
        const std::string & m = st.message();
        while (at <= m.size()) {
            size_t nl = m.find('\n', at);
            std::string line = m.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
            if (!line.empty()) LOG_ERROR("bad config %s", line.c_str());
            if (nl == std::string::npos) break;
            at = nl + 1;
        }
        if (s.cfg.strict) {
            LOG_ERROR("strict = true: exiting (status 3)");
            fflush(nullptr);
            _exit(3);
        }
        LOG_ERROR("running passthrough: the engine computes everything, nothing is distributed");
        s.why_passthrough = "bad config: " + st.message();
    } else {
        s.config_ok = true;
        if (!s.cfg.model.empty()) s.model_identity = model_file_identity(s.cfg.model);
    }
    register_at_exit_locked(s);
}

// Binds libggml-base and runs the ABI guard once (caller holds init_mu). Until it passed, no hook
// may change what the engine does.
bool engine_accepted_locked(Session & s) {
    if (s.engine_checked) return s.engine_ok;
    const std::string base_path = loaded_object_path("libggml-base");
    void * base = loaded_object_handle(base_path);
    if (base == nullptr) return false;  // not loaded yet: ask again later
    s.engine_checked = true;
    GgmlApi api;
    Status st = ggml_api_bind_base(api, base);
    if (st) st = abi_guard_check(api, base_path);
    s.engine_ok = (bool) st;
    if (!st) LOG_ERROR("%s: running passthrough (the engine runs exactly as without moezip)", st.message().c_str());
    return s.engine_ok;
}

// The real ggml_graph_compute of the object that called the hook.
ComputeFn real_compute_for(const void * caller, const void * self_fn) {
    Session & s = S();
    std::string path = object_path_of(caller);
    std::lock_guard<std::mutex> lock(s.real_mu);
    for (auto & pf : s.real_compute)
        if (pf.first == path) return pf.second;
    void * fn = nullptr;
    if (void * h = loaded_object_handle(path)) fn = dlsym(h, "ggml_graph_compute");
    // dlsym on the main program's handle searches the global scope, where we come first.
    if (fn == nullptr || fn == self_fn) fn = dlsym(RTLD_NEXT, "ggml_graph_compute");
    if (fn == self_fn) fn = nullptr;
    ComputeFn f = reinterpret_cast<ComputeFn>(fn);
    if (f != nullptr) s.real_compute.emplace_back(path, f);
    return f;
}

Status bind_engine(Session & s, const void * caller, ComputeFn real) {
    std::string base = loaded_object_path("libggml-base");
    Status st = ggml_api_bind_base(s.api, loaded_object_handle(base));
    if (!st) return st;
    s.ev.ggml_version = s.api.ggml_version();
    s.ev.ggml_commit = s.api.ggml_commit();
    st = abi_guard_check(s.api, base);
    s.ev.abi_status = st ? "ok" : st.message();
    if (!st) return st;
    std::string cpu = object_path_of(caller);
    st = ggml_api_bind_cpu(s.api, loaded_object_handle(cpu));
    if (!st) return st;
    s.api.ggml_graph_compute = real;  // never our own hook, whatever dlsym said
    BackendVariant & v = s.ev.variant;
    v.path = cpu;
    v.name = cpu_library_name(cpu);
    v.build_id = loaded_object_build_id(cpu);
    v.compute_fn = reinterpret_cast<const void *>(real);
    return Status::ok();
}

void init_locked(Session & s, const void * caller, ComputeFn real) {
    read_config_locked(s);
    if (!s.have_config) {
        s.state = State::inert;
        LOG_INFO("MOEZIP_CONFIG is not set: inactive, the engine runs unchanged");
        return;
    }
    s.ev.config_path = getenv("MOEZIP_CONFIG");
    s.ev.mode = config_mode_name(s.cfg.mode);
    s.ev.config_digest = config_digest(s.cfg);
    s.report_path = config_report_path(s.cfg, s.pid);
    s.flush_gate.start(std::chrono::steady_clock::now());  // the first periodic write one interval from now
    s.state = State::passthrough;
    if (!s.config_ok) return;
    const bool logged = s.engine_checked && !s.engine_ok;  // the guard refused it already and said so
    Status st = bind_engine(s, caller, real);
    s.engine_checked = true;
    s.engine_ok = (bool) st;
    if (!st) {
        s.why_passthrough = st.message();
        if (!logged) LOG_ERROR("%s: running passthrough (the engine computes everything)", st.message().c_str());
        return;
    }
    if (log_level() >= LogLevel::debug) LOG_DEBUG("resolved config:\n%s", config_describe(s.cfg).c_str());
    st = handler_make(s.cfg, s.api, EngineIdentity{s.ev.ggml_commit, s.ev.variant}, s.handler);
    if (!st) {
        s.why_passthrough = st.message();
        LOG_ERROR("%s: running passthrough", st.message().c_str());
        return;
    }
    RunnerOptions opt;
    opt.handle_regions = s.cfg.mode != ConfigMode::observe;
    opt.abort_on_mismatch = s.cfg.on_mismatch == MismatchPolicy::abort;
    opt.abort_on_handler_error = s.cfg.dispatch.on_worker_error == WorkerErrorPolicy::abort;
    opt.require_intercept = s.cfg.require_intercept;
    opt.model_files = &s.model_files;
    opt.model_identity = s.model_identity;
    s.runner.reset(new GraphRunner(s.api, s.ev.variant, s.ev, s.ev_mu, s.handler.get(), opt));
    s.state = State::active;
    if (!s.cfg.trace.empty()) {
        s.trace_path = config_trace_path(s.cfg, s.pid);
        trace_start((size_t) s.cfg.trace_max_events);
    }
    register_late_at_exit_locked(s);
    LOG_INFO("active: mode %s, CPU variant %s, report %s", s.ev.mode.c_str(), s.ev.variant.name.c_str(), s.report_path.c_str());
    hybrid_log_op_offload(s.cfg);
}

// The CPU variant whose graphs reached the hooks ("" when none did).
std::string variant_in_use(Session & s) {
    if (s.state != State::active) return "";
    std::lock_guard<std::mutex> lock(s.ev_mu);
    return s.ev.variant.path;
}

void write_report(Session & s, bool complete) {
    if (s.report_path.empty() || getpid() != s.pid) return;  // never write another process's report
    // A periodic report may be the last one (a host killed by a signal it does not handle runs no
    // exit handler): it carries the bindings as they are now; at exit at_exit reads them once more.
    std::vector<std::string> bypassed_now;
    const nlohmann::json bindings_now = complete ? nlohmann::json() : hook_bindings(bypassed_now, variant_in_use(s));
    nlohmann::json j;
    {
        std::lock_guard<std::mutex> lock(s.ev_mu);
        if (!complete) s.ev.hook_bindings = bindings_now;
        s.ev.sched_graphs = s.sched_graphs.load();
        j = evidence_to_json(s.ev, complete);
    }
    if (s.runner) {
        j["workers"] = s.runner->workers_json();
        j["checks"]["computes_failed"] = s.runner->failed_computes();  // by on_worker_error = "abort" or require_intercept
    }
    if (s.runner) {
        nlohmann::json balance = s.runner->balance_json();
        if (!balance.is_null()) j["balance"] = balance;
    }
    nlohmann::json mem = s.runner ? s.runner->memory_json() : nlohmann::json::object();
    mem["rss_kib"] = proc_status_kib("VmRSS");  // now (at exit the host may have freed its model)
    mem["hwm_kib"] = proc_status_kib("VmHWM");  // peak, includes the engine's MAP_POPULATE at load
    {
        std::lock_guard<std::mutex> lock(s.rss_mu);
        mem["rss_kib_graph_last"] = s.rss_graph_last_kib;
        mem["rss_kib_graph_max"] = s.rss_graph_max_kib;
        mem["model_mapped_lazily_bytes"] = s.lazy_map_bytes;
        mem["model_populated_bytes"] = s.model_populated_bytes;
        mem["model_skipped_bytes"] = s.model_skipped_bytes;
        mem["model_populated_pmd_mapped_bytes"] = s.model_populated_pmd_bytes;
        mem["model_hugepage_advised"] = s.model_hugepage_advised;
        if (!s.model_populate_error.empty()) mem["model_populate_error"] = s.model_populate_error;
    }
    j["memory"] = mem;
    nlohmann::json hybrid = hybrid_json();
    if (!hybrid.is_null()) j["hybrid"] = hybrid;
    j["state"] = s.state == State::active ? "active" : "passthrough";
    if (!s.why_passthrough.empty()) j["passthrough_reason"] = s.why_passthrough;
    if (!complete && !s.flush_gate.changed(j)) return;  // the same report again: not rewritten (callers hold flush_mu)
    Status st = report_write_atomic(s.report_path, j);
    if (!st) LOG_CAPPED(LogLevel::error, "%s", st.message().c_str());
}

// The timeline is written once, at exit: rewriting a file of up to trace_max_events events every
// report_flush_ms would cost the run more than the trace is worth.
void write_trace(Session & s) {
    Trace * t = trace_active();
    if (t == nullptr || s.trace_path.empty() || getpid() != s.pid) return;
    Status st = t->write(s.trace_path);
    if (!st) LOG_CAPPED(LogLevel::error, "%s", st.message().c_str());
    else LOG_INFO("trace %s: %zu events, %llu dropped", s.trace_path.c_str(), t->size(), (unsigned long long) t->dropped());
}

// require_intercept: a distributed run that quietly bypassed moezip must not look like a success.
std::string intercept_failure(Session & s) {
    if (s.have_config && !s.config_ok && s.cfg.require_intercept) return "the config is invalid (" + s.why_passthrough + ")";
    if (!s.cfg.require_intercept || s.cfg.mode == ConfigMode::observe) return "";
    std::lock_guard<std::mutex> lock(s.ev_mu);
    if (s.state != State::active)
        return "moezip was not active (" + (s.why_passthrough.empty() ? std::string("no graph was intercepted") : s.why_passthrough) + ")";
    std::string layers;
    for (const auto & kv : s.ev.layers)
        if (kv.second.passthrough > 0) layers += (layers.empty() ? "" : ", ") + std::to_string(kv.first);
    if (!layers.empty())
        return std::to_string(s.ev.regions_passthrough) + " MoE regions were not handled as configured (layers " + layers + ")";
    uint64_t fallbacks = 0;
    for (const auto & kv : s.ev.layers) {
        fallbacks += kv.second.fallbacks;
        if (kv.second.fallbacks > 0) layers += (layers.empty() ? "" : ", ") + std::to_string(kv.first);
    }
    if (fallbacks > 0)
        return std::to_string(fallbacks) + " worker parts were computed on this host after worker errors (layers " + layers +
               "): the run was not distributed as configured";
    const std::string offloaded = hybrid_failure(s.cfg);
    if (!offloaded.empty()) return offloaded;
    if (s.ev.plans_made == 0 && s.ev.regions_other_model > 0)
        return "no MoE layer of the distributed model was seen, only " + std::to_string(s.ev.regions_other_model) +
               " regions of other models (" + s.ev.other_models.begin()->second.reason + "; config `model` names the distributed one)";
    if (s.ev.plans_made == 0)
        return "no MoE layer was found in any graph (is this a MoE model? moezip recognises build_moe_ffn's ffn_moe_* nodes)";
    if (s.ev.regions_handled == 0) return "no MoE region was handled";
    return "";
}

// on_worker_error = "abort" and require_intercept fail the computes they cannot let pass, and a host
// that serves requests goes on after each (llama-server answers HTTP 500 and takes the next one, then
// exits 0 from main): the process still must not end as a success. "" when no compute failed so.
std::string failed_computes_failure(Session & s) {
    if (!s.runner) return "";
    const uint64_t n = s.runner->failed_computes();
    if (n == 0) return "";
    const std::string first = s.runner->first_failed_compute();
    if (n == 1) return "1 graph compute failed, and with it the host's request that needed it (" + first + ")";
    return std::to_string(n) + " graph computes failed, and with them the host's requests that needed them (the first: " + first + ")";
}

// Reading /proc costs tens of microseconds: sample at most every 100 ms, never per small graph.
void sample_rss(Session & s) {
    auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(s.rss_mu);
    if (s.rss_graph_last_kib >= 0 && now - s.last_rss_sample < std::chrono::milliseconds(100)) return;
    s.last_rss_sample = now;
    s.rss_graph_last_kib = proc_status_kib("VmRSS");
    s.rss_graph_max_kib = std::max(s.rss_graph_max_kib, s.rss_graph_last_kib);
}

void at_exit() {
    Session & s = S();
    if (getpid() != s.pid && s.pid != 0) return;
    if (s.exit_done.exchange(true)) return;
    s.exiting = true;
    transport_stop_waiting();  // a thread waiting for a worker gives up now, not after timeout_ms
    std::vector<std::string> bypassed;
    nlohmann::json bindings = hook_bindings(bypassed, variant_in_use(s));
    if (s.state == State::uninit) {
        // Not one graph reached the hooks. Quiet unless the engine's calls are bound past them.
        if (bypassed.empty()) return;
        const std::string why = bypassed[0] + ": nothing could be intercepted";
        {
            std::lock_guard<std::mutex> lock(s.init_mu);
            read_config_locked(s);
        }
        if (!s.have_config || s.cfg.mode == ConfigMode::observe) return;
        s.state = State::passthrough;
        s.why_passthrough = why;
        s.ev.config_path = getenv("MOEZIP_CONFIG") ? getenv("MOEZIP_CONFIG") : "";
        s.ev.mode = config_mode_name(s.cfg.mode);
        s.report_path = config_report_path(s.cfg, s.pid);
        s.ev.add_error("not intercepted: " + why);
        LOG_ERROR("moezip was configured (mode %s) but intercepted nothing: %s", s.ev.mode.c_str(), why.c_str());
    }
    if (s.runner) s.runner->quiesce(2000);  // other threads leave the engine's kernels before its statics go
    std::string failure = intercept_failure(s);
    if (!failure.empty()) failure = "require_intercept: " + failure;
    const std::string computes = failed_computes_failure(s);
    if (!computes.empty()) failure += (failure.empty() ? "" : "; ") + computes;
    {
        std::lock_guard<std::mutex> lock(s.ev_mu);
        if (!failure.empty()) s.ev.add_error(failure);
        s.ev.hook_bindings = bindings;
        for (const std::string & b : bypassed)
            if (s.state == State::active) LOG_WARN("%s", b.c_str());
    }
    log_report_suppressed();  // rate-limited lines not yet told: their counts, before the final report
    if (s.state != State::inert) write_report(s, true);
    write_trace(s);
    if (s.runner) s.runner->shutdown();
    if (!failure.empty()) {
        LOG_ERROR("%s; see %s. The run FAILED (exit status 4).", failure.c_str(),
                  s.report_path.empty() ? "(no report)" : s.report_path.c_str());
        fflush(nullptr);
        _exit(4);
    }
}

// True when the graph holds any node of a MoE region (ffn_moe_*-<il>).
bool graph_has_moe(const ggml_cgraph * gf) {
    std::string what;
    int il = 0;
    for (int i = 0; i < gf->n_nodes; ++i)
        if (moe_node_name_parse(gf->nodes[i]->name, what, il)) return true;
    return false;
}

// The path /proc/self/fd/<fd> links to ("... (deleted)" for a removed file; "" when unreadable).
std::string fd_link_path(int fd) {
    char link[64], buf[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, (size_t) n) : std::string();
}

} // namespace

ggml_status session_graph_compute(ggml_cgraph * gf, ggml_cplan * cplan, const void * caller, const void * self_fn) {
    ComputeFn real = real_compute_for(caller, self_fn);
    if (real == nullptr) {
        LOG_CAPPED(LogLevel::error, "cannot find the engine's ggml_graph_compute; failing this compute");
        return GGML_STATUS_FAILED;
    }
    Session & s = S();
    if (t_in_hook) return real(gf, cplan);
    {
        std::lock_guard<std::mutex> lock(s.init_mu);
        if (s.state == State::uninit) init_locked(s, caller, real);
    }
    if (getpid() != s.pid) return real(gf, cplan);  // a forked child
    if (s.exiting && s.state == State::active) {
        // exit() runs on another thread: the engine's statics are being torn down. This compute
        // fails (llama_decode reports it) instead of running kernels over freed state.
        LOG_CAPPED(LogLevel::info, "the host is exiting: failing a graph compute that started after exit()");
        return GGML_STATUS_ABORTED;
    }
    if (s.state != State::active) {
        // require_intercept: a request whose MoE layers cannot be distributed fails here, visibly,
        // instead of being answered by the engine alone (the exit status alone comes too late).
        if (s.state == State::passthrough && s.cfg.require_intercept && s.cfg.mode != ConfigMode::observe && graph_has_moe(gf)) {
            LOG_CAPPED(LogLevel::error, "require_intercept: moezip is not active (%s); failing this compute", s.why_passthrough.c_str());
            return GGML_STATUS_FAILED;
        }
        return real(gf, cplan);
    }
    if (real != s.api.ggml_graph_compute) {
        // another backend object than the one planned: its regions are not ours to compute
        {
            std::lock_guard<std::mutex> lock(s.ev_mu);
            ++s.ev.identity_failed;
            s.ev.add_error("a graph was computed by " + object_path_of(caller) + ", not the planned CPU variant");
        }
        if ((s.cfg.require_intercept || s.cfg.on_mismatch == MismatchPolicy::abort) && graph_has_moe(gf)) {
            LOG_CAPPED(LogLevel::error, "a MoE graph was computed by %s, not the planned CPU variant; failing this compute",
                       object_path_of(caller).c_str());
            return GGML_STATUS_FAILED;
        }
        return real(gf, cplan);
    }
    ggml_status st;
    {
        FlagScope in_hook(t_in_hook);
        if (s.cfg.threads == 0 && s.handler) s.handler->set_threads(cplan->n_threads);
        st = s.runner->compute(gf, cplan, t_sched);
    }
    sample_rss(s);
    if (s.cfg.report_flush_ms > 0) {
        std::unique_lock<std::mutex> flush(s.flush_mu, std::try_to_lock);
        if (flush.owns_lock()) {
            s.flush_gate.set_interval_ms(s.cfg.report_flush_ms);
            if (s.flush_gate.due(std::chrono::steady_clock::now())) write_report(s, false);
        }
    }
    return st;
}

const void * session_sched_enter(const void * sched) {
    const void * prev = t_sched;
    t_sched = sched;
    return prev;
}

void session_sched_leave(const void * prev) { t_sched = prev; }

ggml_status session_sched_computed(ggml_backend_sched_t sched, ggml_cgraph * graph, ggml_status st) {
    Session & s = S();
    if (s.state != State::active || getpid() != s.pid || t_in_hook) return st;
    const std::string why = hybrid_after_sched(sched, graph, s.cfg);
    if (why.empty()) return st;
    {
        std::lock_guard<std::mutex> lock(s.ev_mu);
        s.ev.add_error(why);
    }
    LOG_CAPPED(LogLevel::error, "%s", why.c_str());
    if (!s.cfg.require_intercept || st != GGML_STATUS_SUCCESS) return st;
    LOG_CAPPED(LogLevel::error, "require_intercept: failing this compute (experts computed on an accelerator, not distributed)");
    return GGML_STATUS_FAILED;
}

void session_sched_freed(const void * sched) {
    Session & s = S();
    if (s.state != State::active) return;
    std::lock_guard<std::mutex> lock(s.ev_mu);
    s.ev.end_stream(sched);
}

thread_local bool t_in_release = false;

void session_memory_released(const void * base, size_t size, const char * why) {
    Session & s = S();
    s.model_files.released(base, size);  // a model's weight buffer: its file mapping goes next
    if (t_in_release || s.state != State::active || !s.runner || getpid() != s.pid) return;
    FlagScope guard(t_in_release);
    s.runner->weights_released(base, size, why);
}

bool session_hide_extra_bufts() {
    Session & s = S();
    std::lock_guard<std::mutex> lock(s.init_mu);
    read_config_locked(s);
    return s.config_ok && s.cfg.no_repack && engine_accepted_locked(s);
}

void session_count_sched_graph() {
    Session & s = S();
    s.sched_graphs.fetch_add(1, std::memory_order_relaxed);
    if (!s.config_read) {
        std::lock_guard<std::mutex> lock(s.init_mu);
        read_config_locked(s);
    }
}

thread_local bool t_in_map_check = false;

bool session_map_model_lazily(int fd) {
    if (t_in_map_check || fd < 0) return false;
    t_in_map_check = true;
    bool lazy = false;
    try {
        Session & s = S();
        bool accepted = false;
        {
            std::lock_guard<std::mutex> lock(s.init_mu);
            read_config_locked(s);
            accepted = s.config_ok && config_why_experts_resident(s.cfg).empty() && engine_accepted_locked(s);
        }
        // another model than the distributed one (a draft model) is computed whole here: all of it resident
        if (accepted) accepted = s.model_files.would_distribute(fd_link_path(fd), s.model_identity);
        if (accepted) {
            char magic[4] = {0, 0, 0, 0};
            lazy = pread(fd, magic, sizeof magic, 0) == (ssize_t) sizeof magic && memcmp(magic, "GGUF", 4) == 0;
        }
    } catch (...) {
        lazy = false;
    }
    t_in_map_check = false;
    return lazy;
}

void session_note_file_map(const void * addr, size_t len, int fd, uint64_t offset) {
    if (t_in_map_check || fd < 0) return;
    FlagScope guard(t_in_map_check);
    try {
        // recorded whenever a config is named, without reading it here: a mapping made before the
        // config is read (or in a program whose config turns out bad) still names its file
        const char * config = getenv("MOEZIP_CONFIG");
        if (config == nullptr || *config == 0) return;
        Session & s = S();
        char magic[4] = {0, 0, 0, 0};
        if (pread(fd, magic, sizeof magic, 0) != (ssize_t) sizeof magic || memcmp(magic, "GGUF", 4) != 0) return;
        const std::string path = fd_link_path(fd);
        s.model_files.mapped(addr, len, path, offset);
        LOG_DEBUG("model file %s mapped (%.1f MiB)", path.c_str(), len / 1048576.0);
    } catch (...) {
    }
}

void session_note_lazy_map(void * addr, size_t len, int fd, long offset) {
    Session & s = S();
    const ModelMapPopulation m = populate_model_map(s.cfg, static_cast<char *>(addr), len, fd, offset);
    {
        std::lock_guard<std::mutex> lock(s.rss_mu);
        s.lazy_map_bytes += len;
        s.model_populated_bytes += m.populated_bytes;
        s.model_skipped_bytes += m.skipped_bytes;
        s.model_populated_pmd_bytes += m.populated_pmd_bytes;
        s.model_hugepage_advised = s.model_hugepage_advised || m.hugepage_advised;
        if (!m.why_not.empty()) s.model_populate_error = m.why_not;
    }
    if (m.why_not.empty())
        LOG_INFO("experts mode: mapped the model (%.1f MiB) without the workers' experts: %.1f MiB made resident (%.1f MiB of "
                 "it in 2 MiB pages), %.1f MiB of worker-owned experts left out", len / 1048576.0, m.populated_bytes / 1048576.0,
                 m.populated_pmd_bytes / 1048576.0, m.skipped_bytes / 1048576.0);
    else
        LOG_INFO("experts mode: mapped the model (%.1f MiB) without MAP_POPULATE; pages come in on first use (%s)",
                 len / 1048576.0, m.why_not.c_str());
}

void session_preload_loaded() {
    const char * path = getenv("MOEZIP_CONFIG");
    if (path == nullptr || *path == 0) return;
    hybrid_op_offload_default(path);  // before any accelerator backend reads it
    Session & s = S();
    std::lock_guard<std::mutex> lock(s.init_mu);
    if (s.pid == 0) s.pid = getpid();
    register_at_exit_locked(s);
}

void * session_base_symbol(const char * name) {
    static void * base = nullptr;
    if (base == nullptr) base = loaded_object_handle(loaded_object_path("libggml-base"));
    void * fn = base ? dlsym(base, name) : nullptr;
    // ggml linked another way (no libggml-base): the next definition after ours, never our own
    return fn != nullptr ? fn : dlsym(RTLD_NEXT, name);
}

} // namespace moezip
