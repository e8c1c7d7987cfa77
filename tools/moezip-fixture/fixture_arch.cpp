#include "tools/moezip-fixture/fixture_arch.h"

#include <algorithm>

namespace moezip {

namespace {

std::string key(const char * arch, const char * suffix) { return std::string(arch) + "." + suffix; }

void set_u32(gguf_context * g, const char * arch, const char * suffix, int64_t v) {
    gguf_set_val_u32(g, key(arch, suffix).c_str(), (uint32_t) v);
}

// ---- derived widths -------------------------------------------------------------------------

/// Plain GQA: heads of head_dim, rope over the whole head.
void derive_gqa(const fixture_hparams & hp, fixture_dims & d) {
    d.n_rot = hp.head_dim;
    d.n_head_kv = hp.n_head_kv;
    d.n_embd_head_k = d.n_embd_head_v = hp.head_dim;
}

void derive_qwen2moe(const fixture_hparams & hp, fixture_dims & d) {
    derive_gqa(hp, d);
    d.n_ff_shexp = 2 * hp.n_ff_exp;  // Qwen1.5-MoE-A2.7B: 5632 shared vs 1408 per expert; here 2x, != n_ff_exp
}

/// DeepSeek-V2 MLA as the converter writes it (conversion/deepseek.py): MQA over the compressed
/// KV (head_count_kv 1, key_length kv_lora + rope, value_length kv_lora), decompressed heads of
/// key_length_mla = qk_nope + rope and value_length_mla = v_head_dim.
void derive_deepseek2(const fixture_hparams & hp, fixture_dims & d) {
    d.n_rot = hp.head_dim;
    d.q_lora_rank = hp.n_embd / 2;
    d.kv_lora_rank = hp.n_embd / 2;
    d.qk_nope = 2 * hp.head_dim;
    d.v_head_dim = hp.head_dim;
    d.n_head_kv = 1;
    d.n_embd_head_k = d.kv_lora_rank + d.n_rot;
    d.n_embd_head_v = d.kv_lora_rank;
    d.n_layer_dense_lead = 1;
    d.n_ff = 2 * hp.n_ff_exp;
    d.n_expert_shared = 2;  // DeepSeek-V2-Lite: 2 shared experts
    d.n_ff_shexp = d.n_expert_shared * hp.n_ff_exp;
}

void derive_glm4moe(const fixture_hparams & hp, fixture_dims & d) {
    derive_gqa(hp, d);
    d.n_rot = hp.head_dim / 2;  // GLM-4.5: partial_rotary_factor 0.5
    d.n_layer_dense_lead = 1;
    d.n_ff = 2 * hp.n_ff_exp;
    d.n_expert_shared = 1;
    d.n_ff_shexp = hp.n_ff_exp;
}

void derive_gpt_oss(const fixture_hparams & hp, fixture_dims & d) {
    derive_gqa(hp, d);
    d.n_swa = 128;  // gpt-oss: sliding window 128 on every other layer
}

void derive_llama4(const fixture_hparams & hp, fixture_dims & d) {
    derive_gqa(hp, d);
    d.moe_layer_step = 2;  // Llama-4-Maverick: every second layer is MoE
    d.n_ff = 2 * hp.n_ff_exp;
    d.n_ff_shexp = hp.n_ff_exp;  // src/models/llama4.cpp: n_ff_shexp = n_ff_exp
}

// ---- shape rules ----------------------------------------------------------------------------

std::string no_rule(const fixture_hparams &) { return ""; }

/// attn_output is [n_embd, n_embd] (src/models/qwen2moe.cpp, olmoe.cpp).
std::string heads_fill_embd(const fixture_hparams & hp) {
    if (hp.n_head * hp.head_dim == hp.n_embd) return "";
    return "needs --n-head x --head-dim = --n-embd (attn_output is [n_embd, n_embd]), got " + std::to_string(hp.n_head) +
           " x " + std::to_string(hp.head_dim) + " != " + std::to_string(hp.n_embd);
}

/// attn_k_norm is [n_embd], so K must be as wide as Q (src/models/olmoe.cpp).
std::string olmoe_rule(const fixture_hparams & hp) {
    if (hp.n_head_kv != hp.n_head)
        return "needs --n-head-kv = --n-head (attn_k_norm is [n_embd]), got " + std::to_string(hp.n_head_kv) + " and " +
               std::to_string(hp.n_head);
    return heads_fill_embd(hp);
}

std::string glm4moe_rule(const fixture_hparams & hp) {
    if (hp.head_dim % 4 == 0) return "";
    return "needs --head-dim a multiple of 4 (RoPE rotates pairs of half the head), got " + std::to_string(hp.head_dim);
}

std::string deepseek2_rule(const fixture_hparams & hp) {
    if (hp.n_embd % 2 == 0) return "";
    return "needs an even --n-embd (q_lora_rank and kv_lora_rank are n_embd/2), got " + std::to_string(hp.n_embd);
}

// ---- the arch's own keys (src/llama-arch.cpp LLM_KV_NAMES) -----------------------------------

void qwen2moe_keys(gguf_context * g, const char * arch, const fixture_dims & d) {
    set_u32(g, arch, "expert_shared_feed_forward_length", d.n_ff_shexp);
}

/// Sigmoid gating with a selection bias, normalised and scaled weights (DeepSeek-V3-style; the
/// bias tensor is exp_probs_b).
void sigmoid_moe_keys(gguf_context * g, const char * arch, const fixture_dims & d, float scale) {
    set_u32(g, arch, "leading_dense_block_count", d.n_layer_dense_lead);
    set_u32(g, arch, "expert_shared_count", d.n_expert_shared);
    gguf_set_val_f32(g, key(arch, "expert_weights_scale").c_str(), scale);
    gguf_set_val_bool(g, key(arch, "expert_weights_norm").c_str(), true);
    set_u32(g, arch, "expert_gating_func", 2);  // LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID (src/llama-hparams.h)
}

void deepseek2_keys(gguf_context * g, const char * arch, const fixture_dims & d) {
    set_u32(g, arch, "attention.q_lora_rank", d.q_lora_rank);
    set_u32(g, arch, "attention.kv_lora_rank", d.kv_lora_rank);
    set_u32(g, arch, "attention.key_length_mla", d.qk_nope + d.n_rot);
    set_u32(g, arch, "attention.value_length_mla", d.v_head_dim);
    sigmoid_moe_keys(g, arch, d, 2.5f);  // DeepSeek-V3: routed_scaling_factor 2.5
}

void glm4moe_keys(gguf_context * g, const char * arch, const fixture_dims & d) {
    sigmoid_moe_keys(g, arch, d, 2.5f);  // GLM-4.5: routed_scaling_factor 2.5
}

void gpt_oss_keys(gguf_context * g, const char * arch, const fixture_dims & d) {
    set_u32(g, arch, "attention.sliding_window", d.n_swa);
}

/// No attention.sliding_window: a value 0 makes the engine's llama4 graph abort; absent, it uses
/// its chunked attention (src/models/llama4.cpp load_arch_hparams).
void llama4_keys(gguf_context * g, const char * arch, const fixture_dims & d) {
    set_u32(g, arch, "interleave_moe_layer_step", d.moe_layer_step);
}

using A = fixture_attn_kind;
using N = fixture_qk_norm;
using S = fixture_shexp_kind;
const char * const k_exp_ff = "expert_feed_forward_length";
const char * const k_ff = "feed_forward_length";
const char * const k_ffn_norm = "ffn_norm";
const char * const k_post_norm = "post_attention_norm";

// Columns: name, summary,
//   attn, qk_norm, qkv_bias, oai_attn, ffn_norm,
//   expert_biases, probs_bias, shexp, ff_exp_key,
//   rope_freq_base, min_layers, mha, top_k,
//   derive, check, keys
const fixture_arch k_archs[] = {
    {"qwen3moe", "Qwen3-MoE: softmax top-k, per-head Q/K norms",
     A::gqa, N::per_head, false, false, k_ffn_norm,
     false, false, S::none, k_exp_ff,
     1000000.0f, 1, false, 0,
     derive_gqa, no_rule, nullptr},
    {"qwen2moe", "Qwen1.5/2-MoE: shared expert of its own width behind a sigmoid gate, QKV biases",
     A::gqa, N::none, true, false, k_ffn_norm,
     false, false, S::gated, k_exp_ff,
     1000000.0f, 1, false, 0,
     derive_qwen2moe, heads_fill_embd, qwen2moe_keys},
    {"deepseek2", "DeepSeek-V2/V3: MLA, sigmoid gating with a selection bias, weight norm, scale 2.5, "
                  "2 shared experts, a leading dense layer",
     A::mla, N::none, false, false, k_ffn_norm,
     false, true, S::counted, k_exp_ff,
     10000.0f, 3, false, 0,
     derive_deepseek2, deepseek2_rule, deepseek2_keys},
    {"gpt-oss", "gpt-oss: expert and router biases, SWIGLU_OAI, attention sinks, sliding window",
     A::gqa, N::none, true, true, k_post_norm,
     true, false, S::none, k_exp_ff,
     150000.0f, 1, false, 0,
     derive_gpt_oss, no_rule, gpt_oss_keys},
    {"llama4", "Llama 4: top-1 sigmoid router weighting the FFN input, shared expert, MoE every 2nd layer",
     A::gqa, N::none, false, false, k_ffn_norm,
     false, false, S::counted, k_exp_ff,
     500000.0f, 4, false, 1,
     derive_llama4, no_rule, llama4_keys},
    {"olmoe", "OLMoE: softmax top-k, whole-width Q/K norms",
     A::gqa, N::whole, false, false, k_ffn_norm,
     false, false, S::none, k_ff,
     10000.0f, 1, true, 0,
     derive_gqa, olmoe_rule, nullptr},
    {"glm4moe", "GLM-4.5: sigmoid gating with a selection bias, shared expert, a leading dense layer, partial RoPE",
     A::gqa, N::none, true, false, k_post_norm,
     false, true, S::counted, k_exp_ff,
     1000000.0f, 3, false, 0,
     derive_glm4moe, glm4moe_rule, glm4moe_keys},
    {"llama", "Mixtral layout: arch llama with expert_count, softmax top-k",
     A::gqa, N::none, false, false, k_ffn_norm,
     false, false, S::none, k_ff,
     1000000.0f, 1, false, 0,
     derive_gqa, no_rule, nullptr},
};

std::string range_text(int64_t lo, int64_t hi) { return std::to_string(lo) + ".." + std::to_string(hi); }

} // namespace

const fixture_arch * fixture_arch_find(const std::string & name) {
    for (const auto & a : k_archs)
        if (name == a.name) return &a;
    return nullptr;
}

std::vector<std::string> fixture_arch_names() {
    std::vector<std::string> names;
    for (const auto & a : k_archs) names.push_back(a.name);
    return names;
}

bool fixture_layer_is_moe(const fixture_dims & d, int64_t il) {
    if (il < d.n_layer_dense_lead) return false;
    return d.moe_layer_step <= 0 || (il + 1) % d.moe_layer_step == 0;
}

void fixture_arch_adapt_preset(const fixture_arch & arch, fixture_hparams & hp) {
    hp.n_layer = std::max(hp.n_layer, arch.min_layers);
    if (arch.mha) hp.n_head_kv = hp.n_head;
    if (arch.top_k > 0) hp.n_expert_used = std::min(arch.top_k, hp.n_expert);
}

Status fixture_arch_resolve(const fixture_arch & arch, const fixture_hparams & hp, fixture_dims & d) {
    const std::string where = std::string("--arch ") + arch.name + " ";
    if (hp.n_layer < arch.min_layers)
        return Status::invalid_argument(where + "needs --n-layer at least " + std::to_string(arch.min_layers) + ", got " +
                                        std::to_string(hp.n_layer));
    std::string why = arch.check(hp);
    if (!why.empty()) return Status::invalid_argument(where + why);
    d = fixture_dims();
    arch.derive(hp, d);
    const auto & used = hp.n_expert_used_layers;
    if (!used.empty() && (int64_t) used.size() != hp.n_layer)
        return Status::invalid_argument("--n-expert-used lists " + std::to_string(used.size()) + " counts for " +
                                        std::to_string(hp.n_layer) + " layers (one per layer, or a single count)");
    // The engine routes layer 0's count in every layer's graph (llm_graph_context::n_expert_used =
    // hparams.n_expert_used()) and sums each layer's own count of those slots (build_moe_ffn,
    // src/llama-graph.cpp): a later layer asking for more aborts the engine (a view past the end).
    for (size_t il = 0; il < used.size(); ++il) {
        if (used[il] < 1 || used[il] > used[0])
            return Status::invalid_argument("--n-expert-used: layer " + std::to_string(il) + " count must be in " +
                                            range_text(1, used[0]) + ", got " + std::to_string(used[il]) +
                                            " (the engine routes layer 0's count in every layer and sums each layer's "
                                            "own count of those experts)");
    }
    return Status::ok();
}

} // namespace moezip
