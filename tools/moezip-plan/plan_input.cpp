#include "tools/moezip-plan/plan_input.h"

#include <ggml.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <set>
#include <sstream>

namespace moezip_plan {

using nlohmann::json;

namespace {

// Bytes of one expert's slice of a tensor [ne0, ne1, n_expert] of ggml type `type_name`; 0 when
// the type is unknown to this ggml.
uint64_t slice_bytes(const std::string & type_name, int64_t ne0, int64_t ne1) {
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char * name = ggml_type_name((ggml_type) t);
        if (name == nullptr || type_name != name || ggml_blck_size((ggml_type) t) <= 0) continue;
        return (uint64_t) ggml_row_size((ggml_type) t, ne0) * (uint64_t) ne1;
    }
    return 0;
}

// n_expert and one expert id's bytes over the layers, from the report's provider_map.
moezip::Status read_provider_map(const json & pm, const std::string & path, int & n_expert, uint64_t & bytes) {
    std::set<int> seen;
    n_expert = 0;
    bytes = 0;
    for (const json & p : pm) {
        if (!p.is_object() || !p.contains("il") || !p["il"].is_number_integer()) continue;
        const int il = p["il"].get<int>();
        if (seen.count(il) || !p.contains("weights") || !p["weights"].is_array() || p["weights"].size() != 3) continue;
        if (!p.contains("n_expert") || !p["n_expert"].is_number_integer()) continue;
        const int n = p["n_expert"].get<int>();
        if (n_expert != 0 && n != n_expert)
            return moezip::Status::invalid_argument(path + ": layers with " + std::to_string(n_expert) + " and " + std::to_string(n) +
                                                    " experts: one ownership cannot place both");
        n_expert = n;
        uint64_t layer = 0;
        for (const json & w : p["weights"]) {
            if (!w.is_object() || !w.contains("type") || !w["type"].is_string() || !w.contains("ne") || !w["ne"].is_array() ||
                w["ne"].size() != 3)
                return moezip::Status::invalid_argument(path + ": provider_map layer " + std::to_string(il) + ": malformed weights");
            const uint64_t b = slice_bytes(w["type"].get<std::string>(), w["ne"][0].get<int64_t>(), w["ne"][1].get<int64_t>());
            if (b == 0)
                return moezip::Status::invalid_argument(path + ": provider_map layer " + std::to_string(il) + ": unknown weight type " +
                                                        w["type"].get<std::string>());
            layer += b;
        }
        bytes += layer;
        seen.insert(il);
    }
    return moezip::Status::ok();
}

double number_or(const json & j, const char * key, double fallback) {
    return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

// Decode ms per slot by host: the balancer's estimates when the run had replicas, else workers'
// service time per slot and this host's local time per local slot (averages over the whole run).
void read_speeds(const json & rep, std::map<std::string, std::vector<double>> & ms) {
    // experts mode's balance section (replicas) has per-slot estimates; rows/shard's ("mode") has per-row or block ones
    if (rep.contains("balance") && rep["balance"].is_object() && !rep["balance"].contains("mode") && rep["balance"].contains("hosts")) {
        for (const json & h : rep["balance"]["hosts"])
            if (number_or(h, "samples_small", 0) > 0 && h.contains("host") && h["host"].is_string())
                ms[h["host"].get<std::string>()].push_back(number_or(h, "ms_per_slot_small", 0));
        return;
    }
    if (rep.contains("workers") && rep["workers"].is_array())
        for (const json & w : rep["workers"]) {
            const double slots = number_or(w, "slots", 0), service = number_or(w, "service_ms_total", 0);
            if (slots > 0 && service > 0 && w.contains("endpoint") && w["endpoint"].is_string())
                ms[w["endpoint"].get<std::string>()].push_back(service / slots);
        }
    double local_ms = 0, local_slots = 0;
    if (rep.contains("layers") && rep["layers"].is_array())
        for (const json & l : rep["layers"]) {
            local_ms += number_or(l, "ms_local", 0);
            local_slots += number_or(l, "local_slots", 0);
        }
    if (local_slots > 0 && local_ms > 0) ms["here"].push_back(local_ms / local_slots);
}

} // namespace

moezip::Status plan_input_add_report(const std::string & path, RoutingLoad & in) {
    std::ifstream f(path);
    if (!f) return moezip::Status::io_error(path + ": cannot read");
    std::stringstream ss;
    ss << f.rdbuf();
    const json rep = json::parse(ss.str(), nullptr, false);
    if (rep.is_discarded() || !rep.is_object()) return moezip::Status::invalid_argument(path + ": not JSON");
    if (!rep.contains("schema") || rep["schema"] != "moezip-report/1")
        return moezip::Status::invalid_argument(path + ": not a moezip report (schema moezip-report/1)");
    if (!rep.contains("routing") || !rep["routing"].is_array() || rep["routing"].empty())
        return moezip::Status::invalid_argument(path + ": no routing statistics (the run must compute the MoE layers: mode local, "
                                                "rows, experts or shard)");
    int n_expert = 0;
    uint64_t bytes = 0;
    moezip::Status st = read_provider_map(rep.contains("provider_map") ? rep["provider_map"] : json::array(), path, n_expert, bytes);
    if (!st) return st;
    if (n_expert <= 0) return moezip::Status::invalid_argument(path + ": the provider map names no MoE layer");
    if (in.n_expert != 0 && in.n_expert != n_expert)
        return moezip::Status::invalid_argument(path + ": the model has " + std::to_string(n_expert) + " experts, the reports before " +
                                                std::to_string(in.n_expert) + " (another model?)");
    in.n_expert = n_expert;
    if (in.expert_bytes == 0) in.expert_bytes = bytes;
    for (const json & r : rep["routing"]) {
        if (!r.is_object() || !r.contains("il") || !r["il"].is_number_integer())
            return moezip::Status::invalid_argument(path + ": routing: malformed entry");
        const int il = r["il"].get<int>();
        size_t row = 0;
        while (row < in.layers.size() && in.layers[row] < il) ++row;
        if (row == in.layers.size() || in.layers[row] != il) {
            in.layers.insert(in.layers.begin() + (long) row, il);
            in.decode.insert(in.decode.begin() + (long) row, std::vector<double>((size_t) n_expert, 0));
            in.prefill.insert(in.prefill.begin() + (long) row, std::vector<double>((size_t) n_expert, 0));
        }
        for (const char * kind : {"decode", "prefill"}) {
            const json & counts = r.contains(kind) ? r[kind] : json::array();
            if (!counts.is_array() || counts.size() > (size_t) n_expert)
                return moezip::Status::invalid_argument(path + ": routing layer " + std::to_string(il) + ": " + kind + " is not " +
                                                        "an array of at most " + std::to_string(n_expert) + " counts");
            std::vector<double> & dst = std::string(kind) == "decode" ? in.decode[row] : in.prefill[row];
            for (size_t e = 0; e < counts.size(); ++e) dst[e] += counts[e].is_number() ? counts[e].get<double>() : 0;
        }
    }
    std::map<std::string, std::vector<double>> ms;
    read_speeds(rep, ms);
    for (auto & kv : ms) {
        // the mean of the reports' measurements (each report's value joins the one kept so far)
        double sum = 0;
        for (double v : kv.second) sum += v;
        const double mean = sum / (double) kv.second.size();
        auto it = in.ms_per_slot.find(kv.first);
        in.ms_per_slot[kv.first] = it == in.ms_per_slot.end() ? mean : (it->second + mean) / 2;
    }
    in.sources.push_back(path);
    return moezip::Status::ok();
}

std::vector<std::vector<double>> plan_input_load(const RoutingLoad & in, double prefill_weight) {
    std::vector<std::vector<double>> load = in.decode;
    for (size_t l = 0; l < load.size(); ++l)
        for (size_t e = 0; e < load[l].size(); ++e) load[l][e] += prefill_weight * in.prefill[l][e];
    return load;
}

} // namespace moezip_plan
