#include "coordinator/evidence/evidence.h"

#include "coordinator/base/log_limit.h"
#include "provider_map/engine_pin.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <unistd.h>
#include <xxhash.h>

namespace moezip {

void Evidence::add_logits(const float * data, int64_t n_vocab, int64_t rows, const void * sched) {
    LogitsRecord r;
    r.index = logits_total++;
    r.n_vocab = n_vocab;
    r.rows = rows;
    r.xxh3 = XXH3_64bits(data, (size_t) (n_vocab * rows) * sizeof(float));
    logits_chain = XXH3_64bits_withSeed(&r.xxh3, sizeof r.xxh3, logits_chain);
    auto it = stream_of.find(sched);
    if (it == stream_of.end()) it = stream_of.emplace(sched, streams.size() + 1).first;
    LogitsStream & st = streams[it->second];
    st.id = it->second;
    ++st.count;
    st.chain = XXH3_64bits_withSeed(&r.xxh3, sizeof r.xxh3, st.chain);
    r.stream = st.id;
    if (logits.size() < kLogitsFirst) logits.push_back(r);
    else logits_recent.push(r);
}

void Evidence::end_stream(const void * sched) {
    auto it = stream_of.find(sched);
    if (it == stream_of.end()) return;
    streams[it->second].ended = true;
    stream_of.erase(it);
}

void Evidence::add_routing(int il, const ggml_tensor * ids, int64_t n_used, int64_t n_expert, bool decode) {
    RoutingCounts & rc = routing[il];
    const int64_t n_tokens = ids->ne[1];
    std::vector<uint64_t> & counts = decode ? rc.decode : rc.prefill;
    if ((int64_t) counts.size() < n_expert) counts.resize((size_t) n_expert, 0);
    const char * base = static_cast<const char *>(ids->data);
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t s = 0; s < n_used; ++s) {
            const int32_t e = *reinterpret_cast<const int32_t *>(base + s * ids->nb[0] + t * ids->nb[1]);
            if (e >= 0 && e < n_expert) ++counts[(size_t) e];
        }
}

// A message longer than `max` keeps its start and says how long it was (a worker's error text or a
// path can be of any length; the report's size must not be).
static std::string cut_message(const std::string & message, size_t max) {
    if (message.size() <= max) return message;
    return message.substr(0, max) + "... (" + std::to_string(message.size()) + " bytes)";
}

void Evidence::add_error(const std::string & message) {
    ++errors_total;
    if (errors.size() < kErrorsFirst) errors.push_back(cut_message(message, kErrorBytes));
    else errors_recent.push(cut_message(message, kErrorBytes));
}

static nlohmann::json weight_json(const WeightInfo & w) {
    return {{"name", w.name}, {"type", w.type}, {"buffer_type", w.buffer_type},
            {"ne", {w.ne[0], w.ne[1], w.ne[2]}}, {"repacked", w.repacked}, {"canary", hex64(w.canary)}};
}

static nlohmann::json provider_entry_json(const ProviderEntry & e) {
    nlohmann::json x = {{"il", e.il}, {"plan", e.plan_id}, {"dispatchable", e.dispatchable}, {"pattern", e.pattern},
                        {"patterns", e.patterns}, {"n_embd", e.n_embd}, {"n_ff", e.n_ff}, {"n_expert", e.n_expert},
                        {"n_used", e.n_used}, {"identity", hex64(e.identity)},
                        {"weights", {weight_json(e.gate), weight_json(e.up), weight_json(e.down)}}};
    if (!e.dispatchable) x["reason"] = e.reason;
    if (!e.retired.empty()) x["retired"] = e.retired;
    return x;
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
    // every plan of the run in the order made: retired ones (the first kRetiredKept) with why they ended
    json pm = json::array();
    for (const ProviderEntry & e : ev.retired_plans) pm.push_back(provider_entry_json(e));
    for (const auto & kv : ev.provider_map) pm.push_back(provider_entry_json(kv.second));
    std::stable_sort(pm.begin(), pm.end(), [](const json & a, const json & b) { return a["plan"].get<uint64_t>() < b["plan"].get<uint64_t>(); });
    j["provider_map"] = pm;
    json epochs = json::array();
    for (const EpochEvent & e : ev.epochs) epochs.push_back({{"graph", e.graph}, {"why", e.why}, {"plans", e.plans}});
    j["plans"] = {{"made", ev.plans_made}, {"current", ev.provider_map.size()}, {"retired", ev.plans_retired},
                  {"model_epochs", ev.epochs_total}, {"epoch_events", epochs}};
    json layers = json::array();
    for (const auto & kv : ev.layers) {
        const LayerCounters & c = kv.second;
        layers.push_back({{"il", kv.first}, {"calls", c.calls}, {"rows", c.rows}, {"slots", c.slots},
                          {"local_rows", c.local_rows}, {"remote_rows", c.remote_rows},
                          {"local_slots", c.local_slots}, {"remote_slots", c.remote_slots},
                          {"passthrough", c.passthrough}, {"fallbacks", c.fallbacks},
                          {"ms", c.ms}, {"ms_local", c.ms_local}, {"ms_wait", c.ms_wait}, {"ms_setup", c.ms_setup},
                          {"first_call", c.first.set ? json{{"ms", c.first.ms}, {"ms_local", c.first.ms_local},
                                                            {"ms_wait", c.first.ms_wait}, {"ms_setup", c.first.ms_setup}}
                                                      : json(nullptr)}});
    }
    j["layers"] = layers;
    json others = json::array();
    for (const auto & kv : ev.other_models)
        others.push_back({{"path", kv.first}, {"reason", kv.second.reason}, {"regions", kv.second.regions}, {"layers", kv.second.layers}});
    j["other_models"] = others;
    json routing = json::array();
    for (const auto & kv : ev.routing)
        routing.push_back({{"il", kv.first}, {"prefill", kv.second.prefill}, {"decode", kv.second.decode}});  // [n_expert] each
    j["routing"] = routing;
    j["checks"] = {{"identity_passed", ev.identity_passed}, {"identity_failed", ev.identity_failed},
                   {"regions_handled", ev.regions_handled}, {"regions_passthrough", ev.regions_passthrough},
                   {"regions_other_model", ev.regions_other_model}};
    j["graphs"] = {{"cpu_computes", ev.graphs}, {"with_moe", ev.moe_graphs}, {"scheduled", ev.sched_graphs}};
    json lg = json::array();
    auto list = [&lg](const LogitsRecord & r) {
        lg.push_back({{"index", r.index}, {"stream", r.stream}, {"n_vocab", r.n_vocab}, {"rows", r.rows}, {"xxh3", hex64(r.xxh3)}});
    };
    for (const LogitsRecord & r : ev.logits) list(r);
    const std::vector<LogitsRecord> recent = ev.logits_recent.in_order();
    for (const LogitsRecord & r : recent) list(r);  // indices follow the first ones': the listing stays increasing
    json streams = json::array();
    for (const auto & kv : ev.streams)
        streams.push_back({{"id", kv.second.id}, {"count", kv.second.count}, {"chain_xxh3", hex64(kv.second.chain)}, {"ended", kv.second.ended}});
    j["logits"] = {{"count", ev.logits_total}, {"listed", lg.size()}, {"listed_first", ev.logits.size()},
                   {"listed_recent", recent.size()}, {"chain_xxh3", hex64(ev.logits_chain)}, {"streams", streams}, {"graphs", lg}};
    j["workers"] = ev.workers;
    j["hook_bindings"] = ev.hook_bindings;
    j["errors"] = {{"count", ev.errors_total}, {"first", ev.errors}, {"recent", ev.errors_recent.in_order()}};
    j["log"] = {{"lines_suppressed", log_suppressed_total()}};  // stderr lines held back by LOG_CAPPED's rate limit
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
