// moezip-fixture: the list of tensors of a model, their shapes, types and how their random values
// are drawn. Names and shapes are those the arch's load_arch_tensors asks for
// (src/models/<arch>.cpp, names from src/llama-arch.cpp LLM_TENSOR_NAMES), per the row of
// fixture_arch.h.
#pragma once

#include "provider_map/status.h"
#include "tools/moezip-fixture/fixture_arch.h"
#include "tools/moezip-fixture/fixture_config.h"

#include "ggml.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moezip {

/// One tensor to write. Values are `center + uniform(-a, a)` with a = sqrt(3) * std, so their
/// mean is `center` and their standard deviation `std`.
struct fixture_tensor {
    std::string name;              ///< GGUF name, e.g. "blk.0.ffn_gate_exps.weight"
    int64_t     ne[3] = {1, 1, 1}; ///< ggml shape, ne[0] = row length
    int         n_dims = 1;        ///< 1, 2 or 3
    ggml_type   type = GGML_TYPE_F32;
    float       center = 0.0f;     ///< 1 for norm weights, 0 for matrices
    float       std = 0.0f;        ///< standard deviation of the values

    int64_t n_rows() const { return ne[1] * ne[2]; }
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2]; }
};

/// All tensors of the model, in file order: token_embd, blk.0 ... blk.{n_layer-1}, output_norm,
/// output. The qwen3moe row gives (ggml order):
///   token_embd, output            [n_embd, n_vocab]                 weight_type
///   blk.N.attn_norm, ffn_norm     [n_embd]                          f32
///   blk.N.attn_q                  [n_embd, n_head*head_dim]         weight_type
///   blk.N.attn_k, attn_v          [n_embd, n_head_kv*head_dim]      weight_type
///   blk.N.attn_output             [n_head*head_dim, n_embd]         weight_type
///   blk.N.attn_q_norm, attn_k_norm [head_dim]                       f32
///   blk.N.ffn_gate_inp            [n_embd, n_expert]                f32 (the router)
///   blk.N.ffn_gate_exps, up_exps  [n_embd, n_ff_exp, n_expert]      weight_type
///   blk.N.ffn_down_exps           [n_ff_exp, n_embd, n_expert]      weight_type
///   output_norm                   [n_embd]                          f32
/// Other rows add or replace parts (docs/internals/fixtures.md "Architectures"): MLA attention, biases, shared
/// experts, dense layers. Matrices take weight_type; vectors (norms, biases, sinks, routers) stay
/// f32. `n_vocab` is the final vocab size. See docs/internals/fixtures.md for the choice of each std.
std::vector<fixture_tensor> fixture_tensor_plan(const fixture_config & cfg, const fixture_arch & arch,
                                                const fixture_dims & d, int64_t n_vocab);

/// Checks that every tensor's row length is a multiple of its type's block size (q8_0: 32,
/// K-quants: 256). Errors: invalid_argument naming the first tensor that is not, its ne0 and
/// the type; the type is never changed silently.
Status fixture_tensor_plan_validate(const std::vector<fixture_tensor> & plan);

} // namespace moezip
