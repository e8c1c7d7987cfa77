#include "tools/moezip-report/show.h"

#include <cstdio>

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

std::string oneline(const json & j, size_t max) {
    std::string s = j.dump();
    return s.size() > max ? s.substr(0, max - 3) + "..." : s;
}

std::string pad(const std::string & s, size_t w) { return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' '); }

std::string rstrip(const std::string & s) {
    size_t e = s.find_last_not_of(' ');
    return e == std::string::npos ? "" : s.substr(0, e + 1);
}

std::string layers_table(const json & layers) {
    static const char * const cols[] = {"il", "calls", "rows", "local_rows", "remote_rows", "passthrough", "fallbacks", "ms"};
    std::string s = "layers:\n ";
    for (const char * c : cols) s += " " + pad(c, 11);
    for (const json & l : layers) {
        s = rstrip(s) + "\n ";
        for (const char * c : cols) s += " " + pad(field(l, c), 11);
    }
    return rstrip(s) + "\n";
}

std::string show_report(const Document & d) {
    const json & j = d.json;
    std::string s;
    s += "mode: " + field(j.value("config", json::object()), "mode") +
         "  config: " + field(j.value("config", json::object()), "path") +
         "  digest: " + field(j.value("config", json::object()), "digest") + "\n";
    if (j.contains("engine")) {
        const json & e = j["engine"];
        s += "engine: ggml " + field(e, "ggml_version") + " (" + field(e, "ggml_commit") + "), cpu " +
             field(e, "cpu_variant") + ", abi " + field(e, "abi") + "\n";
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
    if (j.contains("layers") && j["layers"].is_array() && !j["layers"].empty()) s += layers_table(j["layers"]);
    if (j.contains("checks")) {
        const json & c = j["checks"];
        s += "checks: identity passed " + field(c, "identity_passed") + ", failed " + field(c, "identity_failed") +
             "; regions handled " + field(c, "regions_handled") + ", passthrough " + field(c, "regions_passthrough") + "\n";
    }
    if (j.contains("workers") && j["workers"].is_array() && !j["workers"].empty()) {
        s += "workers:\n";
        for (const json & w : j["workers"]) s += "  " + oneline(w, 160) + "\n";
    }
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
