#include "coordinator/evidence/evidence.h"

#include "preload/engine_pin.h"

#include <cstdio>
#include <fstream>
#include <unistd.h>
#include <xxhash.h>

namespace moezip {

std::string hex64(uint64_t v) {
    char buf[17];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long) v);
    return buf;
}

void Evidence::add_logits(const float * data, int64_t n_vocab, int64_t rows) {
    LogitsRecord r;
    r.index = logits.size();
    r.n_vocab = n_vocab;
    r.rows = rows;
    r.xxh3 = XXH3_64bits(data, (size_t) (n_vocab * rows) * sizeof(float));
    logits_chain = XXH3_64bits_withSeed(&r.xxh3, sizeof r.xxh3, logits_chain);
    logits.push_back(r);
}

void Evidence::add_error(const std::string & message) {
    ++errors_total;
    if (errors.size() < 50) errors.push_back(message);
}

static nlohmann::json weight_json(const WeightInfo & w) {
    return {{"name", w.name}, {"type", w.type}, {"buffer_type", w.buffer_type},
            {"ne", {w.ne[0], w.ne[1], w.ne[2]}}, {"repacked", w.repacked}};
}

nlohmann::json evidence_to_json(const Evidence & ev, bool complete) {
    using nlohmann::json;
    json j;
    j["schema"] = "moezip-report/1";
    j["complete"] = complete;
    j["pid"] = (int) getpid();
    j["engine"] = {{"ggml_version", ev.ggml_version}, {"ggml_commit", ev.ggml_commit}, {"abi", ev.abi_status},
                   {"built_for", engine_pin().name}, {"source_commit", engine_pin().source_commit},
                   {"cpu_variant", ev.variant.name}, {"cpu_variant_path", ev.variant.path},
                   {"cpu_build_id", ev.variant.build_id}};
    j["config"] = {{"path", ev.config_path}, {"mode", ev.mode}, {"digest", hex64(ev.config_digest)}};
    json pm = json::array();
    for (const auto & kv : ev.provider_map) {
        const ProviderEntry & e = kv.second;
        json x = {{"il", e.il}, {"dispatchable", e.dispatchable}, {"pattern", e.pattern},
                  {"n_embd", e.n_embd}, {"n_ff", e.n_ff}, {"n_expert", e.n_expert}, {"n_used", e.n_used},
                  {"identity", hex64(e.identity)},
                  {"weights", {weight_json(e.gate), weight_json(e.up), weight_json(e.down)}}};
        if (!e.dispatchable) x["reason"] = e.reason;
        pm.push_back(x);
    }
    j["provider_map"] = pm;
    json layers = json::array();
    for (const auto & kv : ev.layers) {
        const LayerCounters & c = kv.second;
        layers.push_back({{"il", kv.first}, {"calls", c.calls}, {"rows", c.rows}, {"slots", c.slots},
                          {"local_rows", c.local_rows}, {"remote_rows", c.remote_rows},
                          {"local_slots", c.local_slots}, {"remote_slots", c.remote_slots},
                          {"passthrough", c.passthrough}, {"fallbacks", c.fallbacks},
                          {"ms", c.ms}, {"ms_local", c.ms_local}, {"ms_wait", c.ms_wait}});
    }
    j["layers"] = layers;
    j["checks"] = {{"identity_passed", ev.identity_passed}, {"identity_failed", ev.identity_failed},
                   {"regions_handled", ev.regions_handled}, {"regions_passthrough", ev.regions_passthrough}};
    j["graphs"] = {{"cpu_computes", ev.graphs}, {"with_moe", ev.moe_graphs}, {"scheduled", ev.sched_graphs}};
    json lg = json::array();
    for (const LogitsRecord & r : ev.logits)
        lg.push_back({{"index", r.index}, {"n_vocab", r.n_vocab}, {"rows", r.rows}, {"xxh3", hex64(r.xxh3)}});
    j["logits"] = {{"count", ev.logits.size()}, {"chain_xxh3", hex64(ev.logits_chain)}, {"graphs", lg}};
    j["workers"] = ev.workers;
    j["errors"] = {{"count", ev.errors_total}, {"first", ev.errors}};
    return j;
}

Status report_write_atomic(const std::string & path, const nlohmann::json & j) {
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    {
        std::ofstream f(tmp, std::ios::trunc);
        if (!f) return Status::io_error("cannot write report " + tmp);
        f << j.dump(1) << '\n';
        if (!f.flush()) return Status::io_error("cannot write report " + tmp);
    }
    if (rename(tmp.c_str(), path.c_str()) != 0) {
        unlink(tmp.c_str());
        return Status::io_error("cannot rename report to " + path);
    }
    return Status::ok();
}

} // namespace moezip
