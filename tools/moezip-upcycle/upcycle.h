// moezip-upcycle: turns a dense llama GGUF into a MoE llama GGUF (MoEfication from the trained
// weights). Construction and numerical effect: docs/internals/upcycle.md.
#pragma once

#include "provider_map/status.h"
#include "tools/moezip-upcycle/expert_split.h"
#include "tools/moezip-upcycle/tensor_types.h"

#include "ggml.h"

#include <cstdint>
#include <string>

namespace moezip_upcycle {

/// What to build. With split experts, n_expert_used == n_expert is the exact mode (zero router,
/// output equal to the dense model up to float summation order) and n_expert_used < n_expert a
/// sparse top-k MoE (MoEfication). Replicated experts compute the dense FFN for any n_expert_used.
struct upcycle_params {
    std::string input;                  ///< dense llama GGUF
    std::string output;                 ///< MoE GGUF to write (written to output + ".tmp", then renamed)
    int64_t n_expert = 8;               ///< experts per layer, 1..min(n_ff, 1024)
    int64_t n_expert_used = 8;          ///< experts per token, 1..n_expert
    /// Type of the *_exps tensors (the router is always F32): by default each the type of its dense
    /// source (ffn_gate, ffn_up, ffn_down); with experts none, the type of the dense matrices.
    type_choice type;
    expert_kind experts = expert_kind::split;
    split_kind split = split_kind::contiguous;  ///< unit grouping (of the experts, or of the router for replicate)
    float router_scale = 0.1f;          ///< gate_mean router: multiplies the router rows (softmax temperature)
};

/// What was written, for the tool's one-line report.
struct upcycle_summary {
    int64_t n_layer = 0;
    int64_t n_embd = 0;
    int64_t n_ff = 0;           ///< dense hidden units per layer
    int64_t n_ff_exp = 0;       ///< hidden units per expert (slots, padding included)
    int64_t n_padding = 0;      ///< padding slots per layer: n_ff_exp * n_expert - n_ff
    float down_scale = 1.0f;    ///< factor applied to the down matrices (split: n_expert_used; replicate: 1)
    router_kind router = router_kind::zero;
    ggml_type exps_type[3] = {GGML_TYPE_F32, GGML_TYPE_F32, GGML_TYPE_F32};  ///< layer 0's gate, up, down experts as written
    int64_t n_converted = 0;    ///< experts none: dense tensors written in another type
    int64_t n_tensors = 0;      ///< tensors in the output file
    uint64_t n_bytes = 0;       ///< size of the output file
    /// Rough count of graph nodes llama.cpp builds per forward pass (n_layer * (2 * n_expert_used + 40):
    /// one view and one add per used expert in build_moe_ffn, about 40 other nodes per layer) and the
    /// budget it allocates, max(1024, 8 * n_tensors) (src/llama-context.cpp, graph_max_nodes).
    /// Above the budget the engine aborts at load (seen: stories260K with n_expert_used 86).
    int64_t graph_nodes_estimate = 0;
    int64_t graph_nodes_budget = 0;
};

/// Checks the parameters alone (before any file is opened). Errors: invalid_argument naming the flag
/// (--n-expert, --n-expert-used, --router-scale, -o/--output). Types are checked per tensor.
moezip::Status upcycle_check_params(const upcycle_params & params);

/// Reads params.input, writes params.output. Every non-FFN tensor and every metadata key is copied
/// unchanged; llama.expert_count, llama.expert_used_count, llama.feed_forward_length (= n_ff_exp, the
/// per-expert width the llama arch reads) and moezip.upcycle.* are set. With experts none the dense
/// model is written with its matrices converted (type_for_dense_tensor) and no MoE key.
/// Deterministic: the same input and params give the same bytes. Errors: those of
/// upcycle_check_params and dense_gguf::open; invalid_argument when n_expert > n_ff or a tensor's
/// type cannot be written or does not fit its row length (naming the tensor); io_error when
/// writing fails (no partial output file is left behind); invalid_argument when the output is the
/// input file.
moezip::Status upcycle_run(const upcycle_params & params, upcycle_summary & summary);

} // namespace moezip_upcycle
