// A hybrid run seen from the engine's scheduler (hybrid_watch.h).
#include "preload/hybrid_watch.h"

#include "coordinator/base/log.h"
#include "preload/session.h"
#include "provider_map/expert_placement.h"

#include "ggml-impl.h"  // struct ggml_cgraph

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

namespace moezip {

namespace {

struct HybridState {
    std::mutex mu;
    std::string op_offload_value;   // GGML_OP_OFFLOAD_MIN_BATCH as the engine reads it ("" = unset: 32)
    std::string op_offload_set_by;  // "moezip", "user" or "" (unset)
    std::map<int, LayerPlacement> layers;  // the last placement seen per layer
    std::set<int> offloaded;               // layers offloaded at least once
    std::set<std::string> backends;        // every backend that computed experts
    uint64_t offloaded_graphs = 0;
    bool seen = false;
    bool accelerator_logged = false;
};

HybridState & H() {
    static HybridState * h = new HybridState();  // never destroyed: exit order is not ours
    return *h;
}

// The scheduler's view of a node through ggml's API, bound from libggml-base by name.
struct SchedApi {
    using TensorBackendFn = ggml_backend_t (*)(ggml_backend_sched_t, ggml_tensor *);
    using DeviceFn = ggml_backend_dev_t (*)(ggml_backend_t);
    using DevTypeFn = enum ggml_backend_dev_type (*)(ggml_backend_dev_t);
    using NameFn = const char * (*)(ggml_backend_t);
    using IsHostFn = bool (*)(ggml_backend_buffer_t);
    TensorBackendFn tensor_backend = nullptr;
    DeviceFn get_device = nullptr;
    DevTypeFn dev_type = nullptr;
    NameFn name = nullptr;
    IsHostFn is_host = nullptr;
    bool ok() const { return tensor_backend && get_device && dev_type && name && is_host; }
};

const SchedApi & sched_api() {
    static const SchedApi api = [] {
        SchedApi a;
        a.tensor_backend = reinterpret_cast<SchedApi::TensorBackendFn>(session_base_symbol("ggml_backend_sched_get_tensor_backend"));
        a.get_device = reinterpret_cast<SchedApi::DeviceFn>(session_base_symbol("ggml_backend_get_device"));
        a.dev_type = reinterpret_cast<SchedApi::DevTypeFn>(session_base_symbol("ggml_backend_dev_type"));
        a.name = reinterpret_cast<SchedApi::NameFn>(session_base_symbol("ggml_backend_name"));
        a.is_host = reinterpret_cast<SchedApi::IsHostFn>(session_base_symbol("ggml_backend_buffer_is_host"));
        return a;
    }();
    return api;
}

std::string join_layers(const std::set<int> & s) {
    std::string out;
    for (int il : s) out += (out.empty() ? "" : ", ") + std::to_string(il);
    return out;
}

} // namespace

void hybrid_op_offload_default(const char * config_path) {
    HybridState & h = H();
    std::lock_guard<std::mutex> lock(h.mu);
    if (const char * v = getenv("GGML_OP_OFFLOAD_MIN_BATCH")) {
        const char * ours = getenv(kOpOffloadMarkerEnv);  // inherited from a parent under the preload
        h.op_offload_value = v;
        h.op_offload_set_by = ours != nullptr && strcmp(ours, v) == 0 ? "moezip" : "user";
        return;
    }
    Config cfg;
    if (config_path == nullptr || !config_load_file(config_path, cfg) || cfg.mode != ConfigMode::experts) return;
    // before any backend registers its devices (that is when ggml reads it)
    if (setenv("GGML_OP_OFFLOAD_MIN_BATCH", kOpOffloadOff, 0) == 0 && setenv(kOpOffloadMarkerEnv, kOpOffloadOff, 1) == 0) {
        h.op_offload_value = kOpOffloadOff;
        h.op_offload_set_by = "moezip";
    }
}

void hybrid_log_op_offload(const Config & cfg) {
    HybridState & h = H();
    std::lock_guard<std::mutex> lock(h.mu);
    if (h.op_offload_set_by == "moezip")
        LOG_INFO("experts mode: GGML_OP_OFFLOAD_MIN_BATCH=%s set by moezip: an accelerator's op offload never takes the "
                 "CPU-resident experts' batches (prefill stays on the CPU split and is distributed; the workers' experts "
                 "are never read here)", h.op_offload_value.c_str());
    else if (h.op_offload_set_by == "user" && cfg.mode == ConfigMode::experts)
        LOG_WARN("experts mode: GGML_OP_OFFLOAD_MIN_BATCH=%s set by the user: an accelerator with op offload (CUDA, Vulkan) "
                 "computes batches of that many rows from this host's memory, the workers' experts read from the model "
                 "file, and such layers are reported as offloaded (require_intercept fails them)", h.op_offload_value.c_str());
}

std::string hybrid_after_sched(ggml_backend_sched_t sched, ggml_cgraph * graph, const Config & cfg) {
    const SchedApi & a = sched_api();
    if (!a.ok() || sched == nullptr || graph == nullptr) return "";
    PlacementProbe probe;
    probe.weights_in_host = [&a](const ggml_tensor * w) { return w->buffer != nullptr && a.is_host(w->buffer); };
    probe.backend_of = [&a, sched](const ggml_tensor * node) -> std::string {
        ggml_backend_t b = a.tensor_backend(sched, const_cast<ggml_tensor *>(node));
        if (b == nullptr) return "";
        ggml_backend_dev_t d = a.get_device(b);
        if (d != nullptr && a.dev_type(d) == GGML_BACKEND_DEVICE_TYPE_CPU) return "";
        const char * n = a.name(b);
        return n != nullptr ? n : "?";
    };
    const std::vector<LayerPlacement> placed = expert_placements(graph->nodes, graph->n_nodes, probe);
    if (placed.empty()) return "";
    HybridState & h = H();
    std::lock_guard<std::mutex> lock(h.mu);
    h.seen = true;
    std::set<int> offloaded_now, accelerator;
    for (const LayerPlacement & p : placed) {
        h.layers[p.il] = p;
        h.backends.insert(p.backend);
        if (p.place == ExpertPlace::offloaded) offloaded_now.insert(p.il);
        if (p.place == ExpertPlace::accelerator) accelerator.insert(p.il);
    }
    if (!accelerator.empty() && !h.accelerator_logged) {
        h.accelerator_logged = true;
        LOG_INFO("layers %s: experts in the accelerator's memory (%s), not on this host's CPU: left to the engine",
                 join_layers(accelerator).c_str(), h.layers[*accelerator.begin()].backend.c_str());
    }
    if (offloaded_now.empty()) return "";
    ++h.offloaded_graphs;
    h.offloaded.insert(offloaded_now.begin(), offloaded_now.end());
    if (cfg.mode != ConfigMode::experts) return "";  // this host holds every expert: the accelerator may take the batch
    const LayerPlacement & p = h.layers[*offloaded_now.begin()];
    return "layers " + join_layers(offloaded_now) + ": a batch of " + std::to_string(p.n_tokens) + " rows was computed on " + p.backend +
           " from this host's memory (op offload, GGML_OP_OFFLOAD_MIN_BATCH=" +
           (h.op_offload_value.empty() ? std::string("32, the default") : h.op_offload_value + " set by the " + h.op_offload_set_by) +
           "): not distributed, and the experts the workers own were read from the model file; unset GGML_OP_OFFLOAD_MIN_BATCH "
           "or pass --no-op-offload";
}

nlohmann::json hybrid_json() {
    HybridState & h = H();
    std::lock_guard<std::mutex> lock(h.mu);
    nlohmann::json offload = {{"value", h.op_offload_value.empty() ? nlohmann::json(nullptr) : nlohmann::json(h.op_offload_value)},
                              {"set_by", h.op_offload_set_by.empty() ? "nobody (the engine's default, 32)" : h.op_offload_set_by}};
    if (!h.seen) return h.op_offload_set_by.empty() ? nlohmann::json(nullptr) : nlohmann::json{{"op_offload_min_batch", offload}};
    nlohmann::json cpu = nlohmann::json::array(), acc = nlohmann::json::array();
    for (const auto & kv : h.layers) {
        if (kv.second.place == ExpertPlace::cpu) cpu.push_back(kv.first);
        if (kv.second.place == ExpertPlace::accelerator) acc.push_back(kv.first);
    }
    return {{"op_offload_min_batch", offload}, {"layers_cpu", cpu}, {"layers_accelerator", acc},
            {"layers_offloaded", std::vector<int>(h.offloaded.begin(), h.offloaded.end())},
            {"offloaded_graphs", h.offloaded_graphs},
            {"backends", std::vector<std::string>(h.backends.begin(), h.backends.end())}};
}

std::string hybrid_failure(const Config & cfg) {
    if (cfg.mode != ConfigMode::experts) return "";
    HybridState & h = H();
    std::lock_guard<std::mutex> lock(h.mu);
    if (h.offloaded.empty()) return "";
    return std::to_string(h.offloaded_graphs) + " graphs computed the experts of layers " + join_layers(h.offloaded) +
           " on an accelerator (op offload), not distributed";
}

} // namespace moezip
