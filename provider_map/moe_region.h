// moezip: recognise the routed-expert part ("MoE region") of one layer in an engine graph.
//
// llama.cpp builds each MoE layer in build_moe_ffn (src/llama-graph.cpp). After the router
// (ffn_moe_logits -> probs -> argsort/topk -> weights [-> norm/scale]) the graph holds, per layer il,
// nodes named with the suffix "-<il>":
//   ffn_moe_up   = MUL_MAT_ID(up_exps,   hidden, ids)     [n_ff, n_used, n_tokens]
//                  [ffn_moe_up_biased = ADD_ID(up, up_b, ids): gpt-oss's per-expert biases]
//   ffn_moe_gate = MUL_MAT_ID(gate_exps, hidden, ids)     [n_ff, n_used, n_tokens]  [+ gate_biased]
//   ffn_moe_<act>= GLU(gate, up) (swiglu, geglu, reglu, swiglu_oai with alpha and limit; split, not swapped)
//   ffn_moe_down = MUL_MAT_ID(down_exps, act, ids)        [n_embd, n_used, n_tokens] [+ down_biased]
//   ffn_moe_weighted = MUL(down, weights[1, n_used, n_tokens])
//                  (llama4, weight_before_ffn: ffn_moe_weighted = MUL(REPEAT(hidden), weights) is the
//                  input of up and gate, and the slots of down are summed unweighted)
//   VIEW(weighted, slot s) for s = 0..n_sum-1, then ADD in slot order 0,1,2,... (CONT when n_sum = 1)
//   -> ffn_moe_out [n_embd, n_tokens]
// n_sum is the layer's n_expert_used. It equals ids->ne[0] except in a warmup graph
// (llama_set_warmup: build_moe_ffn routes every expert, n_expert_used = n_expert, but sums only the
// per-layer hparams.n_expert_used(il) slots): there only slots 0..n_sum-1 reach ffn_moe_out, and
// those are all moezip computes.
// hidden is [n_embd, 1, n_tokens] f32, ids [n_used, n_tokens] i32. The router's weights are
// expanded into the graph before the up/gate matmuls ("call early so that topk-moe can be used"), so
// the region is one contiguous run of nodes [first_node, last_node]; the router has always run
// before first_node.
//
// A region is "dispatchable" only when every node and edge matches this pattern exactly; any
// variant (fused gate_up, biases, weighting before the FFN as in llama4, swiglu_oai, nodes outside
// the region reading its intermediates ...) is reported with the reason and left to the engine.
// Expert weights may be in GGUF layout or repacked by the CPU backend (CPU_REPACK): moezip computes
// with the engine's tensors, buffer and kernel traits included, so the repack kernels run.
//
// The split form (a hybrid run: --cpu-moe, --n-cpu-moe N, -ot exps=CPU). When the routed experts'
// weights live in CPU memory and the rest of the layer on an accelerator, ggml's scheduler
// (ggml/src/ggml-backend.cpp, ggml_backend_sched_split_graph) gives the CPU backend a graph of its
// own per layer: its inputs are copies of the FFN input (ffn_norm-<il>, reshaped) and of the ids
// (ffn_moe_topk-<il>), and its nodes end at the per-slot output
//   ffn_moe_down [n_embd, n_used, n_tokens]    (after ffn_moe_down_biased for gpt-oss)
// which the next split (on the accelerator) weights and sums. Where the weighting also landed on the
// CPU, the output is ffn_moe_weighted [n_embd, n_used, n_tokens] and only the sum is elsewhere; llama4
// (weights before the FFN) then has REPEAT + ffn_moe_weighted as the input side. Such a region has no
// ffn_moe_out: MoeRegion::slot_out is set, `out` is the per-slot tensor, and every routed slot is
// computed (n_used = n_used_ids: the sum that would pick fewer, in a warmup graph, is not here).
#pragma once

#include "ggml.h"

#include <functional>
#include <string>
#include <vector>

namespace moezip {

/// One layer's MoE region in a graph. Tensor pointers are the engine's, valid for that compute call.
struct MoeRegion {
    int il = -1;                         ///< layer index (the "-<il>" suffix)
    int first_node = -1;                 ///< index of the first region node in the graph
    int last_node = -1;                  ///< index of ffn_moe_out
    ggml_tensor * hidden = nullptr;      ///< [n_embd, 1, n_tokens] f32: input of the expert FFN
    ggml_tensor * ids = nullptr;         ///< [n_used_ids, n_tokens] i32: selected experts (ffn_moe_topk)
    /// [1, n_used_ids, n_tokens] f32: routing weights per slot; null in the split form that ends at
    /// ffn_moe_down (the weighting is not in this graph: the slots are computed unweighted).
    ggml_tensor * weights = nullptr;
    /// [n_embd, n_tokens] f32: ffn_moe_out; with slot_out the per-slot output [n_embd, n_used_ids,
    /// n_tokens] f32 (ffn_moe_down, its biased node, or ffn_moe_weighted) that another split sums.
    ggml_tensor * out = nullptr;
    ggml_tensor * gate_exps = nullptr;   ///< [n_embd, n_ff, n_expert]
    ggml_tensor * up_exps = nullptr;     ///< [n_embd, n_ff, n_expert]
    ggml_tensor * down_exps = nullptr;   ///< [n_ff, n_embd, n_expert]
    /// The region's own intermediate nodes f32 [n_ff or n_embd, n_used_ids, n_tokens]: up, gate and
    /// down after their biases, the activation, and `weighted` = what the slot views sum (down itself
    /// when the weights were applied before the FFN); with the memory the engine's graph allocator gave them
    /// for this node order (ggml/src/ggml-alloc.c: a node may reuse a dead parent's memory in place).
    ggml_tensor * up = nullptr, * gate = nullptr, * act = nullptr, * down = nullptr, * weighted = nullptr;
    ggml_glu_op glu_op = GGML_GLU_OP_SWIGLU;
    float glu_alpha = 0, glu_limit = 0;  ///< SWIGLU_OAI's parameters (ggml_swiglu_oai), else 0
    /// Per-expert biases added to up, gate and down by ADD_ID (gpt-oss): f32 [n_ff or n_embd, n_expert], or null.
    ggml_tensor * up_b = nullptr, * gate_b = nullptr, * down_b = nullptr;
    /// llama4: each slot's input is hidden * its routing weight and the slots are summed unweighted.
    bool weight_before = false;
    /// The split form (see above): `out` holds one output per routed slot, no slot sum in this graph.
    bool slot_out = false;
    int64_t n_embd = 0, n_ff = 0, n_expert = 0, n_tokens = 0;
    /// Slots per row that reach ffn_moe_out (the ADD chain's length): the slots moezip computes,
    /// the first n_used of each row's ids. Equal to n_used_ids except in a warmup graph.
    int64_t n_used = 0;
    int64_t n_used_ids = 0;              ///< slots per row the engine routed (ids->ne[0])
    bool dispatchable = false;
    std::string reason;                  ///< why not dispatchable ("" when dispatchable)
    std::string pattern;                 ///< e.g. "up,gate,swiglu,down,weighted,sum8" ("sum2of8" in a warmup graph)
    uint64_t plan_id = 0;                ///< the provider plan this region was checked against (GraphRunner)
    bool repacked = false;               ///< expert weights in a CPU extra buffer type (CPU_REPACK), not GGUF layout
};

/// Callback used to ask for a weight tensor's buffer type name (e.g. "CPU", "CPU_REPACK");
/// returns "" when the tensor has no buffer. Injected so that tests can run without a backend.
using BufferTypeNameFn = std::function<std::string(const ggml_tensor * t)>;

/// Finds every MoE region of a graph given as its node array [n_nodes]. Layers whose nodes are
/// present but do not match the pattern are returned with dispatchable = false and a reason.
/// Never throws; never modifies the graph.
std::vector<MoeRegion> moe_regions_find(ggml_tensor * const * nodes, int n_nodes, const BufferTypeNameFn & buft_name);

/// Parses "ffn_moe_<what>-<il>" into what/il; false for other names.
bool moe_node_name_parse(const char * name, std::string & what, int & il);

} // namespace moezip
