#include "tools/moezip-worker/serve/worker_hello.h"

#include "coordinator/evidence/evidence.h"
#include "coordinator/wire/protocol.h"

#include <nlohmann/json.hpp>

namespace moezip {

namespace {

nlohmann::json tensor_json(const GgmlApi & api, const ggml_tensor * t) {
    return {{"name", t->name}, {"type", api.ggml_type_name(t->type)}, {"ne", {t->ne[0], t->ne[1], t->ne[2]}}};
}

} // namespace

std::string worker_hello_json(const WorkerModel & model, const WorkerEngine & engine, uint64_t instance, const std::string & budget,
                              const CpuCapacity & cpu, int threads) {
    nlohmann::json layers = nlohmann::json::array();
    for (const WorkerLayer & l : model.layers()) {
        nlohmann::json digests = nlohmann::json::object();
        for (const auto & kv : l.digests) digests[std::to_string(kv.first)] = hex64(kv.second);
        nlohmann::json biases = nlohmann::json::array();  // the digests cover their columns too
        for (const ggml_tensor * b : {l.gate_b, l.up_b, l.down_b})
            if (b) biases.push_back(b->name);
        layers.push_back({{"il", l.il},
                          {"n_embd", l.n_embd},
                          {"n_ff", l.n_ff},
                          {"n_expert", l.n_expert},
                          {"layout", l.repacked ? "repacked" : "gguf"},
                          {"tensors", {tensor_json(engine.api, l.gate_exps), tensor_json(engine.api, l.up_exps),
                                      tensor_json(engine.api, l.down_exps)}},
                          {"biases", biases},
                          {"digests", digests}});
    }
    nlohmann::json j = {{"protocol", kProtocolVersion},
                        {"instance", hex64(instance)},
                        {"ggml_version", engine.ggml_version},
                        {"ggml_commit", engine.ggml_commit},
                        {"cpu_variant", engine.cpu_variant},
                        {"cpu_build_id", engine.cpu_build_id},
                        {"experts", expert_ranges_format(model.served())},
                        {"n_expert", model.n_expert()},
                        {"budget", budget},
                        {"cpu", {{"threads", threads},
                                 {"affinity_cpus", cpu.affinity_cpus},
                                 {"quota_cores", cpu.quota_cores > 0 ? nlohmann::json(cpu.quota_cores) : nlohmann::json()},
                                 {"cores", cpu.cores_for(threads)}}},
                        {"layers", layers}};
    if (model.slice().is_slice) {  // named in the coordinator's refusals: which file and which source
        const SliceInfo & sl = model.slice();
        j["slice"] = {{"file", model.path()}, {"source", sl.source}, {"source_table", sl.source_table},
                      {"experts", std::to_string(sl.first) + "-" + std::to_string(sl.last)}};
    }
    return j.dump();
}

} // namespace moezip
