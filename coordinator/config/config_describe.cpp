// moezip: what a resolved config says: its text (verbose mode), its digest (the report's config section),
// the report path and why experts mode keeps the workers' experts resident.
#include "coordinator/config/config_internal.h"

#include <xxhash.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace moezip {

const char * config_mode_name(ConfigMode m) {
    switch (m) {
        case ConfigMode::observe: return "observe";
        case ConfigMode::local:   return "local";
        case ConfigMode::rows:    return "rows";
        case ConfigMode::experts: return "experts";
        case ConfigMode::shard:   return "shard";
    }
    return "?";
}

const char * config_mismatch_name(MismatchPolicy p) { return p == MismatchPolicy::abort ? "abort" : "passthrough"; }
const char * config_worker_error_name(WorkerErrorPolicy p) { return p == WorkerErrorPolicy::abort ? "abort" : "local"; }
const char * config_combine_name(ExpertCombine c) { return c == ExpertCombine::partial ? "partial" : "exact"; }

const char * config_log_name(LogLevel l) {
    switch (l) {
        case LogLevel::error: return "error";
        case LogLevel::warn:  return "warn";
        case LogLevel::info:  return "info";
        case LogLevel::debug: return "debug";
    }
    return "?";
}

std::string config_format_double(double v) {
    char buf[40];
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
        snprintf(buf, sizeof buf, "%.0f", v);   // integral: "5000", not "5e+03"
        return buf;
    }
    for (int prec = 1; prec <= 17; ++prec) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, nullptr) == v) break;
    }
    return buf;
}

std::string config_quote(const std::string & s) { return quote_text(s); }

namespace {

struct Lines {
    std::string text;
    void add(const std::string & key, const std::string & value) { text += key + " = " + value + "\n"; }
    void add(const std::string & key, int v) { add(key, std::to_string(v)); }
    void add(const std::string & key, bool v) { add(key, std::string(v ? "true" : "false")); }
    void add_num(const std::string & key, double v) { add(key, config_format_double(v)); }
    void add_str(const std::string & key, const std::string & v) { add(key, config_quote(v)); }
};

// security keys (docs/security.md): key file paths and public keys, never a secret
void describe_dispatch_security(const Config & c, Lines & l) {
    l.add("dispatch.verify_every", c.dispatch.verify_every);
    l.add_num("dispatch.verify_max_abs", c.dispatch.verify_max_abs);
    l.add_num("dispatch.verify_min_cosine", c.dispatch.verify_min_cosine);
    l.add_str("dispatch.client_key", c.dispatch.client_key);
}

void describe_worker_security(const WorkerConfig & w, const std::string & p, Lines & l) {
    l.add_str(p + "public_key", w.public_key);
    l.add_str(p + "client_key", w.client_key);
}

void describe_server_security(const WorkerServerConfig & s, Lines & l) {
    l.add_str("worker_server.key", s.key);
    std::string allow;
    for (const std::string & a : s.allow) allow += (allow.empty() ? "" : ", ") + config_quote(a);
    l.add("worker_server.allow", "[" + allow + "]");
    l.add("worker_server.insecure", s.insecure);
    l.add("worker_server.handshake_ms", s.handshake_ms);
    l.add("worker_server.max_rows", s.max_rows);
    l.add("worker_server.max_slots", s.max_slots);
    l.add("worker_server.max_in_mib", s.max_in_mib);
    l.add("worker_server.max_out_mib", s.max_out_mib);
    l.add("worker_server.max_scratch_mib", s.max_scratch_mib);
    l.add("worker_server.scratch_hold_ms", s.scratch_hold_ms);
}

void describe_sections(const Config & c, Lines & l) {
    if (c.rows.auto_share) l.add_str("rows.local_share", "auto");
    else l.add_num("rows.local_share", c.rows.local_share);
    l.add("rows.min_rows", c.rows.min_rows);
    l.add_str("experts.local", expert_ranges_format(c.experts.local));
    l.add_str("experts.combine", config_combine_name(c.experts.combine));
    l.add("experts.shadow_every", c.experts.shadow_every);
    l.add("experts.release_unowned", c.experts.release_unowned);
    l.add("experts.copy_local", c.experts.copy_local);
    l.add("experts.replicas", c.experts.replicas);
    if (c.shard.auto_share) l.add_str("shard.local_share", "auto");
    else l.add_num("shard.local_share", c.shard.local_share);
    l.add("shard.shadow_every", c.shard.shadow_every);
    l.add("shard.release_unowned", c.shard.release_unowned);
    l.add("dispatch.timeout_ms", c.dispatch.timeout_ms);
    l.add_str("dispatch.on_worker_error", config_worker_error_name(c.dispatch.on_worker_error));
    l.add("dispatch.connect_timeout_ms", c.dispatch.connect_timeout_ms);
    describe_dispatch_security(c, l);
}

void describe_workers(const Config & c, Lines & l) {
    for (size_t i = 0; i < c.workers.size(); ++i) {
        const WorkerConfig & w = c.workers[i];
        std::string p = "worker[" + std::to_string(i) + "].";
        l.add_str(p + "endpoint", w.endpoint);
        if (w.share_auto) l.add_str(p + "share", "auto");
        else l.add_num(p + "share", w.share);
        l.add_str(p + "experts", expert_ranges_format(w.experts));
        l.add(p + "timeout_ms", w.timeout_ms);
        describe_worker_security(w, p, l);
    }
    if (!c.worker_server.present) return;
    const WorkerServerConfig & s = c.worker_server;
    l.add_str("worker_server.bind", s.bind);
    l.add_str("worker_server.model", s.model);
    l.add_str("worker_server.experts", expert_ranges_format(s.experts));
    l.add("worker_server.threads", s.threads);
    l.add("worker_server.mmap", s.mmap);
    l.add("worker_server.repack", s.repack);
    l.add("worker_server.keep_unsliced", s.keep_unsliced);
    describe_server_security(s, l);
}

} // namespace

std::string config_describe(const Config & c) {
    Lines l;
    l.add_str("mode", config_mode_name(c.mode));
    l.add_str("report", c.report);
    l.add("report_flush_ms", c.report_flush_ms);
    l.add_str("trace", c.trace);
    l.add("trace_max_events", c.trace_max_events);
    l.add("require_intercept", c.require_intercept);
    l.add_str("on_mismatch", config_mismatch_name(c.on_mismatch));
    l.add("strict", c.strict);
    l.add("no_repack", c.no_repack);
    l.add("threads", c.threads);
    l.add_str("log", config_log_name(c.log));
    l.add_str("numerics", c.numerics == NumericsPolicy::approximate ? "approximate" : "exact");
    l.add_str("model", c.model);
    describe_sections(c, l);
    describe_workers(c, l);
    return l.text;
}

uint64_t config_digest(const Config & c) {
    std::string text = config_describe(c);
    return XXH3_64bits(text.data(), text.size());
}

namespace {

std::string with_pid(std::string s, int pid) {
    const std::string p = std::to_string(pid);
    for (size_t pos = s.find("%p"); pos != std::string::npos; pos = s.find("%p", pos + p.size())) s.replace(pos, 2, p);
    return s;
}

} // namespace

std::string config_report_path(const Config & cfg, int pid) { return with_pid(cfg.report, pid); }

std::string config_trace_path(const Config & cfg, int pid) { return with_pid(cfg.trace, pid); }

std::string config_why_experts_resident(const Config & cfg) {
    if (cfg.mode != ConfigMode::experts) return "mode is not \"experts\"";
    if (cfg.workers.empty()) return "no [[worker]]";
    if (!cfg.experts.release_unowned) return "experts.release_unowned = false";
    if (cfg.experts.shadow_every > 0) return "experts.shadow_every > 0: shadow checks compute every expert here";
    return "";
}

std::string config_why_shard_resident(const Config & cfg) {
    if (cfg.mode != ConfigMode::shard) return "mode is not \"shard\"";
    if (cfg.workers.empty()) return "no [[worker]]";
    if (!cfg.shard.release_unowned) return "shard.release_unowned = false";
    if (cfg.shard.shadow_every > 0) return "shard.shadow_every > 0: shadow checks compute every slice here";
    return "";
}

} // namespace moezip
