// moezip-fixture: the architectures a fixture can be written in, one row each.
//
// A row says what the engine's loader asks for (llama.cpp's src/models/<arch>.cpp
// load_arch_hparams / load_arch_tensors, tensor names from src/llama-arch.cpp): the attention
// layout, which norms, biases and shared experts a layer has, which layers are dense, and the
// arch's own metadata keys. The loader refuses a file with a tensor it did not ask for ("wrong
// number of tensors"), so a row lists exactly what that arch loads. The tensor plan
// (fixture_tensors.h) and the header (fixture_meta.h) are built from the row; nothing else in the
// tool knows an arch by name.
#pragma once

#include "provider_map/status.h"
#include "tools/moezip-fixture/fixture_config.h"

#include "gguf.h"

#include <string>
#include <vector>

namespace moezip {

/// The attention of a layer.
enum class fixture_attn_kind {
    gqa,  ///< attn_q/k/v/output (src/llama-model.cpp create_tensor_qkv)
    mla,  ///< DeepSeek-V2 multi-head latent attention: attn_q_a/q_b, kv_a_mqa, k_b, v_b (src/models/deepseek2.cpp)
};

/// Q/K norms of a gqa layer.
enum class fixture_qk_norm {
    none,
    per_head,  ///< attn_q_norm/attn_k_norm [head_dim] (qwen3moe)
    whole,     ///< attn_q_norm/attn_k_norm [n_embd] (olmoe; needs n_head_kv == n_head)
};

/// The shared expert of a MoE layer, computed beside the routed experts.
enum class fixture_shexp_kind {
    none,
    gated,   ///< qwen2moe: ffn_*_shexp [n_embd, n_ff_shexp] and a sigmoid gate ffn_gate_inp_shexp [n_embd]
    counted, ///< deepseek2, glm4moe, llama4: ffn_*_shexp of width n_expert_shared * n_ff_exp, no gate
};

/// Widths and counts that an arch derives from the shape (documented in docs/internals/fixtures.md).
struct fixture_dims {
    int64_t n_ff = 0;               ///< feed_forward_length of the dense layers (0: the arch has none)
    int64_t n_ff_shexp = 0;         ///< width of the shared expert (0: none)
    int64_t n_expert_shared = 0;    ///< expert_shared_count (deepseek2, glm4moe)
    int64_t n_layer_dense_lead = 0; ///< leading_dense_block_count: layers 0..n-1 are dense
    int64_t moe_layer_step = 0;     ///< interleave_moe_layer_step (llama4): layer il is MoE when (il+1) % step == 0
    int64_t n_rot = 0;              ///< rope.dimension_count
    int64_t n_head_kv = 0;          ///< attention.head_count_kv as written (1 for MLA)
    int64_t n_embd_head_k = 0;      ///< attention.key_length as written
    int64_t n_embd_head_v = 0;      ///< attention.value_length as written
    int64_t n_swa = 0;              ///< attention.sliding_window (gpt-oss), 0: not written
    int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope = 0, v_head_dim = 0;  ///< MLA widths (deepseek2)
};

/// One architecture.
struct fixture_arch {
    const char * name;             ///< general.architecture (src/llama-arch.cpp LLM_ARCH_NAMES)
    const char * summary;          ///< one line for --help and errors
    fixture_attn_kind attn;
    fixture_qk_norm qk_norm;
    bool qkv_bias;                 ///< attn_q/k/v.bias
    bool oai_attn;                 ///< gpt-oss: attn_output.bias [n_embd] and attn_sinks [n_head]
    const char * ffn_norm;         ///< the norm before the FFN: "ffn_norm" or "post_attention_norm"
    bool expert_biases;            ///< gpt-oss: ffn_gate_inp.bias and ffn_{gate,up,down}_exps.bias
    bool probs_bias;               ///< deepseek2, glm4moe: exp_probs_b.bias [n_expert], the selection bias
    fixture_shexp_kind shexp;
    const char * ff_exp_key;       ///< the key that carries n_ff_exp: expert_feed_forward_length or feed_forward_length
    float rope_freq_base;          ///< rope.freq_base (the real models' value)
    /// Fewest layers the engine runs with a MoE layer: after the leading dense layer (deepseek2,
    /// glm4moe: 3, so that two MoE layers differ); llama4: 4, since its attention is chunked in 3 of
    /// every 4 layers and with no full-attention layer the engine aborts ("tensor buffer not set").
    int64_t min_layers;
    bool mha;                      ///< K/V heads default to the query heads (olmoe)
    int64_t top_k;                 ///< the arch's expert_used_count instead of the preset's (llama4: 1), 0: the preset's
    /// The derived widths for a validated shape.
    void (*derive)(const fixture_hparams & hp, fixture_dims & d);
    /// Shape rules of this arch beyond the common ones; "" when the shape fits, else why not.
    std::string (*check)(const fixture_hparams & hp);
    /// Writes the arch's own keys (after the common ones); may be nullptr.
    void (*keys)(gguf_context * g, const char * arch, const fixture_dims & d);
};

/// The row of `name` (general.architecture spelling), or nullptr.
const fixture_arch * fixture_arch_find(const std::string & name);

/// The names --arch accepts, in table order (qwen3moe first: the default).
std::vector<std::string> fixture_arch_names();

/// True when layer il is a MoE layer (not one of the leading dense layers, and on the interleave).
bool fixture_layer_is_moe(const fixture_dims & d, int64_t il);

/// Derives the widths of `arch` for `hp` and checks the arch's shape rules (layer count, head
/// layout, per-layer expert counts). Errors: invalid_argument naming the arch and the flag.
Status fixture_arch_resolve(const fixture_arch & arch, const fixture_hparams & hp, fixture_dims & d);

/// Adapts a preset's shape to `arch` before the command line's overrides: n_layer raised to
/// min_layers; n_head_kv = n_head for an MHA arch; the arch's top-k when it has one.
void fixture_arch_adapt_preset(const fixture_arch & arch, fixture_hparams & hp);

} // namespace moezip
