// moezip: where a hybrid run's scheduler put each MoE layer's expert matmuls.
//
// With an accelerator and CPU-resident experts (llama.cpp --cpu-moe, --n-cpu-moe N, -ot exps=CPU),
// ggml's scheduler assigns every node of the engine's whole graph to a backend
// (ggml/src/ggml-backend.cpp, ggml_backend_sched_split_graph): an op goes where its weights are, except
// that a backend with op offload (CUDA, Vulkan: `offload_op`, batches of at least
// GGML_OP_OFFLOAD_MIN_BATCH rows, default 32) takes ops whose weights are in host memory, copying
// the experts the batch uses over PCIe (ggml/src/ggml-cuda/ggml-cuda.cu). So each layer's experts are:
//   cpu          in host memory and computed by the CPU backend: the split moezip sees and handles;
//   accelerator  in the accelerator's memory (--n-cpu-moe N leaves the other layers there): never
//                on this host's CPU, left to the engine;
//   offloaded    in host memory but computed by the accelerator for this batch: moezip never sees
//                them, and an experts-mode host that does not hold the workers' experts would have
//                them read from the model file.
#pragma once

#include "ggml.h"

#include <functional>
#include <string>
#include <vector>

namespace moezip {

enum class ExpertPlace { cpu, accelerator, offloaded };

/// "cpu", "accelerator", "offloaded".
const char * expert_place_name(ExpertPlace p);

/// One MoE layer of a scheduled graph: where its down matmul (ffn_moe_down-<il>, MUL_MAT_ID; the
/// gate or up matmul when the graph has no down) runs and where its expert weights lie.
struct LayerPlacement {
    int il = -1;
    ExpertPlace place = ExpertPlace::cpu;
    std::string backend;  ///< the backend that computes it ("CPU", "RPC0[127.0.0.1:50052]", "CUDA0")
    int64_t n_tokens = 0; ///< rows of this graph's batch (the ids' ne[1])
};

/// What the scheduler says about a node, asked through ggml's API by the caller (injected so that
/// tests need no backend): whether a weight tensor lies in host memory (ggml_backend_buffer_is_host),
/// and the name of the backend a node was assigned to, "" when it is a CPU backend
/// (ggml_backend_sched_get_tensor_backend, ggml_backend_dev_type).
struct PlacementProbe {
    std::function<bool(const ggml_tensor *)> weights_in_host;
    std::function<std::string(const ggml_tensor *)> backend_of;
};

/// The placement of every MoE layer of a scheduled graph [n_nodes], by layer. Never throws.
std::vector<LayerPlacement> expert_placements(ggml_tensor * const * nodes, int n_nodes, const PlacementProbe & probe);

} // namespace moezip
