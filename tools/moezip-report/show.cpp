#include "tools/moezip-report/show.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

using nlohmann::json;

namespace moezip_report {

namespace {

// A member as text: strings bare, everything else as compact JSON, "-" when absent.
std::string field(const json & obj, const char * key) {
    if (!obj.is_object()) return "-";
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return "-";
    if (it->is_string()) return it->get<std::string>();
    if (it->is_number_float()) {
        char buf[32];
        snprintf(buf, sizeof buf, "%.3f", it->get<double>());
        return buf;
    }
    return it->dump();
}

std::string pad(const std::string & s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

std::string rstrip(const std::string & s) {
    size_t e = s.find_last_not_of(' ');
    return e == std::string::npos ? "" : s.substr(0, e + 1);
}

// An aligned table of the given members of every object in `rows` (absent members: "-"); each
// column as wide as its widest cell, at least `width`.
std::string table(const char * title, const json & rows, std::initializer_list<const char *> cols, size_t width) {
    std::vector<size_t> w;
    for (const char * c : cols) {
        size_t m = std::max(width, strlen(c) + 1);
        for (const json & l : rows) m = std::max(m, field(l, c).size() + 1);
        w.push_back(m);
    }
    std::string s = std::string(title) + ":\n ";
    size_t i = 0;
    for (const char * c : cols) s += " " + pad(c, w[i++]);
    for (const json & l : rows) {
        s = rstrip(s) + "\n ";
        i = 0;
        for (const char * c : cols) s += " " + pad(field(l, c), w[i++]);
    }
    return rstrip(s) + "\n";
}

std::string mib(const json & obj, const char * key, double unit) {
    if (!obj.is_object() || !obj.contains(key) || !obj[key].is_number() || obj[key].get<double>() < 0) return "-";
    char buf[32];
    snprintf(buf, sizeof buf, "%.0f MiB", obj[key].get<double>() * unit / 1048576.0);
    return buf;
}

// Workers as one table (the partial combine's "shadow" entry is printed on its own line).
std::string workers_section(const json & workers) {
    json rows = json::array();
    std::string shadow;
    for (const json & w : workers) {
        if (!w.is_object()) continue;
        if (w.contains("shadow")) {
            shadow = "shadow checks: " + field(w["shadow"], "calls") + " calls, max abs error " + field(w["shadow"], "max_abs_err") +
                     ", min cosine " + field(w["shadow"], "min_cosine") + "\n";
            continue;
        }
        json r = w;
        if (w.contains("identity") && w["identity"].is_object()) r["experts"] = w["identity"].value("experts", "");
        rows.push_back(r);
    }
    std::string s = table("workers", rows, {"endpoint", "experts", "requests", "rows", "slots", "bytes_out", "bytes_in"}, 11);
    s += table("worker times (ms) and faults", rows,
               {"endpoint", "rtt_ms_p50", "rtt_ms_p99", "service_ms_p50", "rtt_minus_service_ms_p50", "hash_failed", "errors", "timeouts",
                "failures", "fallbacks"}, 11);
    for (const json & w : rows)
        if (!field(w, "last_failure").empty() && field(w, "last_failure") != "-")
            s += "  last failure of " + field(w, "endpoint") + ": " + field(w, "last_failure") + "\n";
    for (const json & w : rows)
        if (!field(w, "refused").empty() && field(w, "refused") != "-") s += "  refused " + field(w, "endpoint") + ": " + field(w, "refused") + "\n";
    for (const json & w : rows)  // docs/security.md: a worker caught returning wrong results
        if (!field(w, "untrusted").empty() && field(w, "untrusted") != "-") s += "  UNTRUSTED " + field(w, "endpoint") + ": " + field(w, "untrusted") + "\n";
    for (const json & w : rows)
        if (w.contains("curve")) s += "  " + field(w, "endpoint") + ": " + (w["curve"] == true ? "CURVE (encrypted, authenticated)" : "plain ZeroMQ") +
                                      (w.contains("verify") && w["verify"].is_object() ? ", results verified here " + field(w["verify"], "checked") +
                                                                                             ", wrong " + field(w["verify"], "mismatches") : "") + "\n";
    return s + shadow;
}

std::string memory_section(const json & m) {
    std::string s = "memory: peak " + mib(m, "hwm_kib", 1024) + ", while serving " + mib(m, "rss_kib_graph_max", 1024);
    if (m.contains("model_skipped_bytes") && m["model_skipped_bytes"].is_number() && m["model_skipped_bytes"].get<double>() > 0)
        s += ", never loaded " + mib(m, "model_skipped_bytes", 1) + " of worker-owned experts";
    if (m.contains("rss_dropped_bytes")) s += ", released " + mib(m, "rss_dropped_bytes", 1) + " after use";
    if (m.contains("not_released")) s += " (not released: " + field(m, "not_released") + ")";
    return s + "\n";
}

std::string show_report(const Document & d) {
    const json & j = d.json;
    std::string s;
    s += "state: " + field(j, "state") + (j.contains("passthrough_reason") ? " (" + field(j, "passthrough_reason") + ")" : "") + "\n";
    s += "mode: " + field(j.value("config", json::object()), "mode") +
         "  config: " + field(j.value("config", json::object()), "path") +
         "  digest: " + field(j.value("config", json::object()), "digest") + "\n";
    if (j.contains("engine")) {
        const json & e = j["engine"];
        s += "engine: ggml " + field(e, "ggml_version") + " (" + field(e, "ggml_commit") + "), cpu " +
             field(e, "cpu_variant") + ", abi " + field(e, "abi") +
             (e.contains("built_for") ? ", moezip built for " + field(e, "built_for") : std::string()) + "\n";
    }
    if (j.contains("graphs")) {
        const json & g = j["graphs"];
        s += "graphs: " + field(g, "cpu_computes") + " cpu computes, " + field(g, "with_moe") + " with MoE, " +
             field(g, "scheduled") + " scheduled\n";
    }
    s += "logits: " + std::to_string(d.count) + " outputs, chain " + hex16(d.chain) + "\n";
    if (j.contains("provider_map") && j["provider_map"].is_array()) {
        int dispatchable = 0;
        for (const json & p : j["provider_map"]) dispatchable += p.is_object() && p.value("dispatchable", false);
        s += "provider map: " + std::to_string(j["provider_map"].size()) + " MoE layers, " +
             std::to_string(dispatchable) + " dispatchable\n";
    }
    if (j.contains("layers") && j["layers"].is_array() && !j["layers"].empty())
        s += table("layers", j["layers"], {"il", "calls", "rows", "local_rows", "remote_rows", "passthrough", "fallbacks", "ms"}, 11);
    if (j.contains("checks")) {
        const json & c = j["checks"];
        s += "checks: identity passed " + field(c, "identity_passed") + ", failed " + field(c, "identity_failed") +
             "; regions handled " + field(c, "regions_handled") + ", passthrough " + field(c, "regions_passthrough") + "\n";
    }
    if (j.contains("other_models") && j["other_models"].is_array())
        for (const json & o : j["other_models"])
            if (o.is_object())
                s += "other model: " + o.value("reason", std::string("?")) + ": " + field(o, "regions") +
                     " MoE regions computed by the engine alone, not counted by require_intercept\n";
    if (j.contains("workers") && j["workers"].is_array() && !j["workers"].empty()) s += workers_section(j["workers"]);
    if (j.contains("memory") && j["memory"].is_object()) s += memory_section(j["memory"]);
    if (j.contains("errors") && j["errors"].is_object()) {
        s += "errors: " + field(j["errors"], "count") + "\n";
        if (j["errors"].contains("first") && j["errors"]["first"].is_array()) {
            for (const json & e : j["errors"]["first"]) s += "  " + (e.is_string() ? e.get<std::string>() : e.dump()) + "\n";
        }
    }
    return s;
}

std::string show_run(const Document & d) {
    const json & j = d.json;
    std::string s = "model: " + field(j, "model") + "\n";
    if (j.contains("engine")) s += "engine: ggml " + field(j["engine"], "ggml_version") + " (" + field(j["engine"], "ggml_commit") + ")\n";
    s += "logits: " + std::to_string(d.count) + " steps, chain " + hex16(d.chain) + "\n";
    for (const char * phase : {"prefill", "decode"}) {
        if (j.contains(phase)) {
            s += std::string(phase) + ": " + field(j[phase], "tokens") + " tokens, " + field(j[phase], "ms") + " ms, " +
                 field(j[phase], "tok_s") + " tok/s\n";
        }
    }
    return s;
}

} // namespace

std::string show_document(const Document & d) {
    std::string head = d.path + ": " + d.schema + (d.complete ? "" : " (not complete: written before the run ended)") + "\n";
    return head + (d.schema == schema_report ? show_report(d) : show_run(d));
}

} // namespace moezip_report
