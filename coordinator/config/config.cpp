// moezip: loading and per-key validation of the TOML config (toml++ 3.3.0, exceptions off).
// The table of keys with defaults and units is config.h (struct Config) and docs/config.md.
#include "coordinator/config/config.h"
#include "coordinator/config/config_internal.h"
#include "coordinator/base/z85.h"

#include <atomic>

// toml++ checks its parser's own invariants with TOML_ASSERT: assert() (abort, exit 134) by default;
// with NDEBUG nothing, and TOML_ASSERT_ASSUME becomes __builtin_assume (undefined behaviour when false).
// Here a failed check throws, and load_impl makes it a config error naming the line. config_precheck
// keeps every check known to fail on some input from failing (config_precheck.cpp); this is the
// backstop for one not known yet. NDEBUG is lifted around the include so that the checks stay on.
// This is the only file that includes toml++ (one set of these settings in the program).
namespace moezip {
namespace {
/// A TOML_ASSERT of toml++ failed: `expr` is its text.
struct TomlCheckFailed {
    const char * expr;
};
std::atomic<uint64_t> g_toml_checks_failed{0};
[[noreturn]] void toml_check_failed(const char * expr) {
    ++g_toml_checks_failed;
    throw TomlCheckFailed{expr};
}
} // namespace
} // namespace moezip

#ifdef NDEBUG
#define MOEZIP_NDEBUG_WAS_SET
#undef NDEBUG
#endif
#define TOML_ASSERT(expr) ((expr) ? (void) 0 : ::moezip::toml_check_failed(#expr))
#define TOML_EXCEPTIONS 0
#define TOML_ENABLE_FORMATTERS 0
#include <toml++/toml.h>
#ifdef MOEZIP_NDEBUG_WAS_SET
#define NDEBUG
#undef MOEZIP_NDEBUG_WAS_SET
#endif

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

namespace moezip {

namespace {

// "got ..." text of a value; with_type adds the TOML type ("string \"5000\"", "table").
std::string value_text(const toml::node & n, bool with_type) {
    std::string s;
    switch (n.type()) {
        case toml::node_type::string: {
            std::string v = n.as_string()->get();
            if (v.size() > 80) v = v.substr(0, 77) + "...";
            s = (with_type ? "string " : "") + config_quote(v);
            break;
        }
        case toml::node_type::integer:
            s = (with_type ? "integer " : "") + std::to_string(n.as_integer()->get());
            break;
        case toml::node_type::floating_point: {
            double d = n.as_floating_point()->get();
            std::string t = config_format_double(d);
            if (std::isfinite(d) && t.find_first_of(".e") == std::string::npos) t += ".0";
            s = (with_type ? "float " : "") + t;
            break;
        }
        case toml::node_type::boolean:
            s = (with_type ? "boolean " : "") + std::string(n.as_boolean()->get() ? "true" : "false");
            break;
        case toml::node_type::table: s = "a table"; break;
        case toml::node_type::array: s = "an array"; break;
        default: s = "a date/time"; break;
    }
    return s;
}

// A key as a message shows it: bare when it may be written bare, else quoted ("a\u000ab"), so that
// a quoted key with a line break does not split the message.
std::string shown_key(const std::string & key) {
    bool bare = !key.empty();
    for (char c : key) bare = bare && (isalnum((unsigned char) c) || c == '_' || c == '-');
    return bare ? key : config_quote(key);
}

std::string join_path(const std::string & prefix, const std::string & key) {
    return prefix.empty() ? key : prefix + "." + key;
}

// Walks the parsed document section by section, fills a Config and collects issues.
struct Reader {
    Config & cfg;
    std::vector<ConfigIssue> & issues;

    int line_of(const toml::node & n, const toml::key & k) const {
        int l = (int) n.source().begin.line;
        return l > 0 ? l : (int) k.source().begin.line;
    }

    // Finds `key` in `t`: records its line under `path`, returns the node or nullptr.
    const toml::node * find(const toml::table & t, const std::string & path, const char * key, int & line) {
        auto it = t.find(key);
        if (it == t.end()) return nullptr;
        line = line_of(it->second, it->first);
        cfg.lines[path] = line;
        return &it->second;
    }

    void fail(int line, const std::string & path, const std::string & expected, const toml::node & n, bool with_type) {
        issues.push_back({line, path + ": " + expected + ", got " + value_text(n, with_type)});
    }

    void check_known(const toml::table & t, const std::string & prefix, const std::vector<const char *> & known) {
        for (auto && kv : t) {
            std::string k(kv.first.str());
            bool ok = false;
            for (const char * name : known) ok = ok || k == name;
            if (ok) continue;
            std::string list, guess = config_did_you_mean(k, known);
            for (const char * name : known) list += std::string(list.empty() ? "" : ", ") + name;
            std::string where = prefix.empty() ? "at top level"
                              : prefix.compare(0, 7, "worker[") == 0 ? "in [[worker]]" : "in [" + prefix + "]";
            issues.push_back({(int) kv.first.source().begin.line,
                              join_path(prefix, shown_key(k)) + ": unknown key (" + guess + "known " + where + ": " + list + ")"});
        }
    }

    void read_int(const toml::table & t, const std::string & prefix, const char * key,
                  int64_t lo, int64_t hi, int & out, bool * seen = nullptr) {
        std::string path = join_path(prefix, key);
        int line = 0;
        const toml::node * n = find(t, path, key, line);
        if (!n) return;
        const auto * v = n->as_integer();
        if (!v || v->get() < lo || v->get() > hi) {
            fail(line, path, "expected integer " + std::to_string(lo) + ".." + std::to_string(hi), *n, !v);
            return;
        }
        out = (int) v->get();
        if (seen) *seen = true;
    }

    // Numbers: floats and integers (share = 1 means 1.0).
    void read_double(const toml::table & t, const std::string & prefix, const char * key,
                     double lo, double hi, double & out, bool * seen = nullptr) {
        std::string path = join_path(prefix, key);
        int line = 0;
        const toml::node * n = find(t, path, key, line);
        if (!n) return;
        bool is_num = n->is_floating_point() || n->is_integer();
        double d = n->is_floating_point() ? n->as_floating_point()->get()
                 : n->is_integer() ? (double) n->as_integer()->get() : 0.0;
        if (!is_num || !std::isfinite(d) || d < lo || d > hi) {
            std::string range = config_format_double(lo) + ".." + config_format_double(hi);
            fail(line, path, "expected number " + range, *n, !is_num);
            return;
        }
        out = d;
        if (seen) *seen = true;
    }

    void read_bool(const toml::table & t, const std::string & prefix, const char * key, bool & out) {
        std::string path = join_path(prefix, key);
        int line = 0;
        const toml::node * n = find(t, path, key, line);
        if (!n) return;
        if (!n->is_boolean()) { fail(line, path, "expected true or false", *n, true); return; }
        out = n->as_boolean()->get();
    }

    // A string; returns the node's line (0 when absent or not a string; then out is unchanged).
    // A share: a number 0..1, or "auto" (measured while the run goes: coordinator/balance/share_balance.h).
    void read_share(const toml::table & t, const std::string & prefix, const char * key, double & out, bool & is_auto,
                    bool * seen = nullptr) {
        auto it = t.find(key);
        if (it != t.end() && it->second.is_string()) {
            std::string path = join_path(prefix, key);
            int line = 0;
            const toml::node * n = find(t, path, key, line);
            if (n->as_string()->get() != "auto") { fail(line, path, "expected number 0..1 or \"auto\"", *n, false); return; }
            is_auto = true;
            if (seen) *seen = true;
            return;
        }
        read_double(t, prefix, key, 0.0, 1.0, out, seen);
    }

    int read_string(const toml::table & t, const std::string & prefix, const char * key, std::string & out) {
        std::string path = join_path(prefix, key);
        int line = 0;
        const toml::node * n = find(t, path, key, line);
        if (!n) return 0;
        if (!n->is_string()) { fail(line, path, "expected string", *n, true); return 0; }
        out = n->as_string()->get();
        return line;
    }

    // One of `names`; out = its index.
    template <typename E>
    void read_choice(const toml::table & t, const std::string & prefix, const char * key,
                     const std::vector<const char *> & names, E & out) {
        std::string path = join_path(prefix, key);
        int line = 0;
        const toml::node * n = find(t, path, key, line);
        if (!n) return;
        for (size_t i = 0; n->is_string() && i < names.size(); ++i) {
            if (n->as_string()->get() == names[i]) { out = (E) i; return; }
        }
        std::string list;
        for (const char * name : names) list += std::string(list.empty() ? "" : " | ") + "\"" + name + "\"";
        fail(line, path, "expected " + list, *n, !n->is_string());
    }

    void read_experts(const toml::table & t, const std::string & prefix, const char * key,
                      std::vector<ExpertRange> & out) {
        std::string text;
        int line = read_string(t, prefix, key, text);
        if (line == 0) return;
        Status st = expert_ranges_parse(text, out);
        if (!st) {
            issues.push_back({line, join_path(prefix, key) + ": expected expert ranges like \"0-3,8\", got " +
                                    config_quote(text) + " (" + st.message() + ")"});
        }
    }

    void read_endpoint(const toml::table & t, const std::string & prefix, const char * key,
                       bool for_bind, std::string & out) {
        std::string text;
        int line = read_string(t, prefix, key, text);
        if (line == 0) return;
        std::string why;
        if (!config_endpoint_valid(text, for_bind, why)) {
            issues.push_back({line, join_path(prefix, key) + ": expected \"tcp://host:port\" or \"ipc:///path\", got " +
                                    config_quote(text) + " (" + why + ")"});
            return;
        }
        out = text;
    }

    const toml::table * section(const toml::table & root, const char * key) {
        int line = 0;
        const toml::node * n = find(root, key, key, line);
        if (!n) return nullptr;
        if (!n->is_table()) {
            fail(line, key, std::string("expected table [") + key + "]", *n, true);
            return nullptr;
        }
        return n->as_table();
    }

    void read_top(const toml::table & root) {
        check_known(root, "", {"mode", "report", "report_flush_ms", "trace", "trace_max_events", "require_intercept", "on_mismatch", "strict",
                               "no_repack", "threads", "log", "rows", "experts", "shard", "dispatch", "worker",
                               "worker_server", "verify_every", "numerics", "model"});
        read_choice(root, "", "mode", {"observe", "local", "rows", "experts", "shard"}, cfg.mode);
        std::string report;
        int line = read_string(root, "", "report", report);
        if (line > 0 && report.empty()) issues.push_back({line, "report: expected a non-empty path, got \"\""});
        else if (line > 0) cfg.report = report;
        read_int(root, "", "report_flush_ms", 0, 3600000, cfg.report_flush_ms);
        std::string trace;
        line = read_string(root, "", "trace", trace);
        if (line > 0 && trace.empty()) issues.push_back({line, "trace: expected a non-empty path, got \"\""});
        else if (line > 0) cfg.trace = trace;
        read_int(root, "", "trace_max_events", 1, 10000000, cfg.trace_max_events);
        read_bool(root, "", "require_intercept", cfg.require_intercept);
        read_choice(root, "", "on_mismatch", {"passthrough", "abort"}, cfg.on_mismatch);
        read_bool(root, "", "strict", cfg.strict);
        read_bool(root, "", "no_repack", cfg.no_repack);
        read_int(root, "", "threads", 0, 256, cfg.threads);
        read_choice(root, "", "log", {"error", "warn", "info", "debug"}, cfg.log);
        read_choice(root, "", "numerics", {"exact", "approximate"}, cfg.numerics);
        std::string model;
        line = read_string(root, "", "model", model);
        if (line > 0 && model.empty()) issues.push_back({line, "model: expected a non-empty path to a GGUF file, got \"\""});
        else if (line > 0) cfg.model = model;
        read_top_security(root);
    }

    void read_sections(const toml::table & root) {
        // mode "local" computes from the engine's mapping unless asked: its job is to show what the
        // interception costs; experts mode copies by default (docs/config.md, copy_local)
        cfg.experts.copy_local = cfg.mode != ConfigMode::local;
        if (const toml::table * t = section(root, "rows")) {
            check_known(*t, "rows", {"local_share", "min_rows"});
            read_share(*t, "rows", "local_share", cfg.rows.local_share, cfg.rows.auto_share);
            read_int(*t, "rows", "min_rows", 1, 1000000, cfg.rows.min_rows);
        }
        if (const toml::table * t = section(root, "experts")) {
            check_known(*t, "experts", {"local", "combine", "shadow_every", "release_unowned", "copy_local", "replicas"});
            read_experts(*t, "experts", "local", cfg.experts.local);
            read_choice(*t, "experts", "combine", {"exact", "partial"}, cfg.experts.combine);
            read_int(*t, "experts", "shadow_every", 0, 1000000000, cfg.experts.shadow_every);
            read_bool(*t, "experts", "release_unowned", cfg.experts.release_unowned);
            read_bool(*t, "experts", "copy_local", cfg.experts.copy_local);
            read_bool(*t, "experts", "replicas", cfg.experts.replicas);
        }
        if (const toml::table * t = section(root, "shard")) {
            check_known(*t, "shard", {"local_share", "shadow_every", "release_unowned"});
            read_share(*t, "shard", "local_share", cfg.shard.local_share, cfg.shard.auto_share);
            read_int(*t, "shard", "shadow_every", 0, 1000000000, cfg.shard.shadow_every);
            read_bool(*t, "shard", "release_unowned", cfg.shard.release_unowned);
        }
        if (const toml::table * t = section(root, "dispatch")) {
            check_known(*t, "dispatch", {"timeout_ms", "on_worker_error", "connect_timeout_ms", "verify_every", "verify_max_abs",
                                         "verify_min_cosine", "client_key"});
            read_dispatch_security(*t);
            read_int(*t, "dispatch", "timeout_ms", 1, 600000, cfg.dispatch.timeout_ms);
            read_choice(*t, "dispatch", "on_worker_error", {"local", "abort"}, cfg.dispatch.on_worker_error);
            read_int(*t, "dispatch", "connect_timeout_ms", 1, 600000, cfg.dispatch.connect_timeout_ms);
        }
        if (const toml::table * t = section(root, "worker_server")) {
            WorkerServerConfig & ws = cfg.worker_server;
            ws.present = true;
            check_known(*t, "worker_server", {"bind", "model", "experts", "threads", "mmap", "repack", "keep_unsliced", "key", "allow", "insecure", "handshake_ms",
                                              "max_rows", "max_slots", "max_in_mib", "max_out_mib", "max_scratch_mib", "scratch_hold_ms"});
            read_server_security(*t, ws);
            read_endpoint(*t, "worker_server", "bind", true, ws.bind);
            read_string(*t, "worker_server", "model", ws.model);
            read_experts(*t, "worker_server", "experts", ws.experts);
            read_int(*t, "worker_server", "threads", 1, 256, ws.threads);
            read_bool(*t, "worker_server", "mmap", ws.mmap);
            read_bool(*t, "worker_server", "repack", ws.repack);
            read_bool(*t, "worker_server", "keep_unsliced", ws.keep_unsliced);
        }
    }

    void read_worker(const toml::table & t, size_t index) {
        std::string prefix = "worker[" + std::to_string(index) + "]";
        WorkerConfig w;
        w.line = (int) t.source().begin.line;
        w.timeout_ms = cfg.dispatch.timeout_ms;
        cfg.lines[prefix] = w.line;
        check_known(t, prefix, {"endpoint", "share", "experts", "timeout_ms", "public_key", "client_key"});
        if (!t.contains("endpoint")) issues.push_back({w.line, prefix + ".endpoint: required key is missing"});
        read_endpoint(t, prefix, "endpoint", false, w.endpoint);
        read_share(t, prefix, "share", w.share, w.share_auto, &w.has_share);
        read_experts(t, prefix, "experts", w.experts);
        read_int(t, prefix, "timeout_ms", 1, 600000, w.timeout_ms, &w.has_timeout);
        read_worker_security(t, prefix, w);
        cfg.workers.push_back(std::move(w));
    }

    void read_workers(const toml::table & root) {
        int line = 0;
        const toml::node * n = find(root, "worker", "worker", line);
        if (!n) return;
        const toml::array * arr = n->as_array();
        bool all_tables = arr != nullptr;
        for (size_t i = 0; arr && i < arr->size(); ++i) all_tables = all_tables && (*arr)[i].is_table();
        if (!all_tables) {
            fail(line, "worker", "expected an array of tables [[worker]]", *n, n->is_table() ? false : true);
            return;
        }
        for (size_t i = 0; i < arr->size(); ++i) read_worker(*(*arr)[i].as_table(), i);
    }

    // ---- security keys (docs/security.md): CURVE keys, verification, the worker's budget ----

    void read_top_security(const toml::table & root) {
        read_int(root, "", "verify_every", 0, 1000000000, cfg.dispatch.verify_every);
    }

    void read_dispatch_security(const toml::table & t) {
        if (cfg.lines.count("verify_every") && t.contains("verify_every")) {
            issues.push_back({config_line_of(cfg, "verify_every"), "verify_every: written both at top level and in [dispatch] (line " +
                                                                       std::to_string((int) t.get("verify_every")->source().begin.line) +
                                                                       "): set it once"});
        }
        read_int(t, "dispatch", "verify_every", 0, 1000000000, cfg.dispatch.verify_every);
        read_double(t, "dispatch", "verify_max_abs", 0.0, 1.0, cfg.dispatch.verify_max_abs);
        read_double(t, "dispatch", "verify_min_cosine", -1.0, 1.0, cfg.dispatch.verify_min_cosine);
        read_key_file(t, "dispatch", "client_key", cfg.dispatch.client_key);
    }

    void read_worker_security(const toml::table & t, const std::string & prefix, WorkerConfig & w) {
        std::string key;
        int line = read_string(t, prefix, "public_key", key);
        if (line > 0 && !z85_key_text_valid(key)) {
            issues.push_back({line, prefix + ".public_key: expected the worker's CURVE public key (40 Z85 characters, from its "
                                             "moezip.pub), got " + config_quote(key)});
        } else if (line > 0) {
            w.public_key = key;
        }
        w.client_key = cfg.dispatch.client_key;
        w.has_client_key = read_key_file(t, prefix, "client_key", w.client_key);
    }

    void read_server_security(const toml::table & t, WorkerServerConfig & ws) {
        read_key_file(t, "worker_server", "key", ws.key);
        read_string_list(t, "worker_server", "allow", ws.allow);
        read_bool(t, "worker_server", "insecure", ws.insecure);
        read_int(t, "worker_server", "handshake_ms", 100, 600000, ws.handshake_ms);
        read_int(t, "worker_server", "max_rows", 1, 1 << 20, ws.max_rows);
        read_int(t, "worker_server", "max_slots", 1, 1 << 28, ws.max_slots);
        read_int(t, "worker_server", "max_in_mib", 1, 65536, ws.max_in_mib);
        read_int(t, "worker_server", "max_out_mib", 1, 65536, ws.max_out_mib);
        read_int(t, "worker_server", "max_scratch_mib", 1, 1 << 20, ws.max_scratch_mib);
        read_int(t, "worker_server", "scratch_hold_ms", 0, 86400000, ws.scratch_hold_ms);
    }

    // A path to a key file: a non-empty string (read when used). True when written and valid.
    bool read_key_file(const toml::table & t, const std::string & prefix, const char * key, std::string & out) {
        std::string text;
        int line = read_string(t, prefix, key, text);
        if (line == 0) return false;
        if (text.empty()) {
            issues.push_back({line, join_path(prefix, key) + ": expected the path of a key file, got \"\""});
            return false;
        }
        out = text;
        return true;
    }

    // A string or an array of non-empty strings (paths).
    void read_string_list(const toml::table & t, const std::string & prefix, const char * key, std::vector<std::string> & out) {
        std::string path = join_path(prefix, key);
        int line = 0;
        const toml::node * n = find(t, path, key, line);
        if (!n) return;
        std::vector<std::string> items;
        bool ok = n->is_string() || n->is_array();
        if (n->is_string()) items.push_back(n->as_string()->get());
        for (size_t i = 0; ok && n->is_array() && i < n->as_array()->size(); ++i) {
            const toml::node & e = *n->as_array()->get(i);
            ok = e.is_string();
            if (ok) items.push_back(e.as_string()->get());
        }
        for (const std::string & i : items) ok = ok && !i.empty();
        if (!ok || items.empty()) {
            fail(line, path, "expected a path or an array of paths (files of public keys)", *n, true);
            return;
        }
        out = items;
    }
};

// A syntax error: position (col 0 = unknown) and toml++'s description.
struct SyntaxError {
    int line = 0, col = 0;
    std::string description;
};

// Whether toml++ fails one of its internal checks on `text`.
bool toml_check_fails(std::string_view text, const std::string & name) {
    try {
        toml::parse_result r = toml::parse(text, std::string_view(name));
        return false;
    } catch (const TomlCheckFailed &) {
        return true;
    }
}

// The first line of `text` whose end makes toml++ fail a check (the parser reads forward, so every
// longer prefix fails too).
int check_failure_line(std::string_view text, const std::string & name) {
    std::vector<size_t> ends;
    for (size_t pos = 0; pos < text.size();) {
        size_t nl = text.find('\n', pos);
        pos = nl == std::string_view::npos ? text.size() : nl + 1;
        ends.push_back(pos);
    }
    size_t lo = 0, hi = ends.empty() ? 0 : ends.size() - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (toml_check_fails(text.substr(0, ends[mid]), name)) hi = mid; else lo = mid + 1;
    }
    return (int) lo + 1;
}

// toml++ on `text`: true with the document in `root`, or false with the error. A failed TOML_ASSERT
// is an error too, on the line that makes it fail.
bool toml_parse(std::string_view text, const std::string & name, toml::table & root, SyntaxError & err) {
    try {
        toml::parse_result r = toml::parse(text, std::string_view(name));
        if (r) {
            root = std::move(r.table());
            return true;
        }
        const toml::parse_error & e = r.error();
        err = {(int) e.source().begin.line, (int) e.source().begin.column, std::string(e.description())};
        return false;
    } catch (const TomlCheckFailed & f) {
        err = {check_failure_line(text, name), 0, std::string("toml++ 3.3.0 stopped on an internal check: ") + f.expr};
        return false;
    }
}

// The keys that decide what a caller does with a bad file (strict, log, require_intercept, report),
// as written at top level in the lines before `line`, when those lines alone are valid TOML.
Config policy_before_line(const std::string & text, const std::string & name, int line) {
    Config policy;
    policy.source = name;
    size_t end = 0;
    for (int l = 1; l < line && end != std::string::npos; ++l) {
        end = text.find('\n', end);
        if (end != std::string::npos) ++end;
    }
    const std::string prefix = text.substr(0, end == std::string::npos ? text.size() : end);
    ConfigPrecheckIssue unused;
    toml::table root;
    SyntaxError err;
    if (line <= 1 || !config_precheck(prefix, unused) || !toml_parse(prefix, name, root, err)) return policy;
    Config cfg;
    std::vector<ConfigIssue> ignored;
    Reader{cfg, ignored}.read_top(root);
    policy.strict = cfg.strict;
    policy.log = cfg.log;
    policy.require_intercept = cfg.require_intercept;
    policy.report = cfg.report;
    return policy;
}

// A message for the first syntax problem of `text` (precheck or toml++), "" when there is none;
// `root` gets the document.
std::string syntax_problem(const std::string & text, const std::string & name, toml::table & root, int & line) {
    ConfigPrecheckIssue pre;
    const bool pre_ok = config_precheck(text, pre);
    // toml++ never sees the text from the first character the precheck rejects; an error toml++ finds
    // on an earlier line comes first
    std::string_view seen = pre_ok ? std::string_view(text) : std::string_view(text).substr(0, pre.offset);
    SyntaxError err;
    const bool parsed = toml_parse(seen, name, root, err);
    const bool at_cut = err.description.find("end-of-file") != std::string::npos ||
                        err.description.find("EOF") != std::string::npos;  // toml++ ran into the cut
    if (!parsed && (pre_ok || (err.line < pre.line && !at_cut))) {
        line = err.line;
        return config_syntax_message(text, name, err.line, err.col, err.description);
    }
    if (!pre_ok) {
        line = pre.line;
        return config_precheck_message(text, name, pre);
    }
    return "";
}

} // namespace

uint64_t config_toml_checks_failed() { return g_toml_checks_failed.load(); }

std::string config_toml_only(const std::string & text, const std::string & name) {
    toml::table root;
    SyntaxError err;
    if (toml_parse(text, name, root, err)) return "";
    return config_syntax_message(text, name, err.line, err.col, err.description);
}

namespace {

Status load_impl(const std::string & text, const std::string & name, Config & out) {
    Config cfg;
    cfg.source = name;
    toml::table root;
    int bad_line = 0;
    std::string syntax = syntax_problem(text, name, root, bad_line);
    if (!syntax.empty()) {
        // strict, log, require_intercept and report still apply when written above the bad line
        out = policy_before_line(text, name, bad_line);
        return Status::invalid_argument(syntax);
    }
    std::vector<ConfigIssue> issues;
    Reader rd{cfg, issues};
    rd.read_top(root);
    rd.read_sections(root);   // before workers: they inherit dispatch.timeout_ms
    rd.read_workers(root);
    if (issues.empty()) config_check_cross(cfg, issues);
    if (!issues.empty()) {
        out = Config();
        out.source = name;
        out.strict = cfg.strict;
        out.log = cfg.log;
        // kept so that a bad file with require_intercept = true still fails the run loudly, and its
        // report lands where the user looks for it
        out.require_intercept = cfg.require_intercept;
        out.report = cfg.report;
        return Status::invalid_argument(config_issues_join(name, std::move(issues)));
    }
    out = std::move(cfg);
    return Status::ok();
}

} // namespace

Status config_load_string(const std::string & text, const std::string & name_for_messages, Config & out) {
    try {
        return load_impl(text, name_for_messages, out);
    } catch (const std::bad_alloc &) {
        out = Config();
        return Status::invalid_argument(name_for_messages + ": out of memory while reading the config");
    } catch (const std::exception & e) {
        out = Config();
        return Status::invalid_argument(name_for_messages + ": internal error while reading the config: " + e.what());
    }
}

} // namespace moezip
