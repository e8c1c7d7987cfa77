#include "provider_map/expert_placement.h"

#include "provider_map/moe_region.h"

#include <map>

namespace moezip {

const char * expert_place_name(ExpertPlace p) {
    switch (p) {
        case ExpertPlace::cpu: return "cpu";
        case ExpertPlace::accelerator: return "accelerator";
        case ExpertPlace::offloaded: return "offloaded";
    }
    return "?";
}

std::vector<LayerPlacement> expert_placements(ggml_tensor * const * nodes, int n_nodes, const PlacementProbe & probe) {
    // per layer, the expert matmul that decides: down, else gate, else up (a layer may be cut short)
    std::map<int, std::pair<int, ggml_tensor *>> pick;  // il -> (rank: 0 down, 1 gate, 2 up; node)
    std::string what;
    int il = 0;
    for (int i = 0; i < n_nodes; ++i) {
        ggml_tensor * t = nodes[i];
        if (t->op != GGML_OP_MUL_MAT_ID || t->src[0] == nullptr || !moe_node_name_parse(t->name, what, il)) continue;
        const int rank = what == "down" ? 0 : what == "gate" ? 1 : what == "up" ? 2 : -1;
        if (rank < 0) continue;
        auto it = pick.find(il);
        if (it == pick.end() || rank < it->second.first) pick[il] = {rank, t};
    }
    std::vector<LayerPlacement> out;
    for (const auto & kv : pick) {
        ggml_tensor * mm = kv.second.second;
        LayerPlacement p;
        p.il = kv.first;
        p.n_tokens = mm->src[2] != nullptr ? mm->src[2]->ne[1] : 0;
        p.backend = probe.backend_of ? probe.backend_of(mm) : std::string();
        const bool host = probe.weights_in_host ? probe.weights_in_host(mm->src[0]) : true;
        p.place = !host ? ExpertPlace::accelerator : p.backend.empty() ? ExpertPlace::cpu : ExpertPlace::offloaded;
        if (p.backend.empty()) p.backend = "CPU";
        out.push_back(p);
    }
    return out;
}

} // namespace moezip
