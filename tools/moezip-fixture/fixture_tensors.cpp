#include "tools/moezip-fixture/fixture_tensors.h"

#include <cmath>

namespace moezip {

namespace {

// Spread of the norm weights around 1: enough that a wrongly applied or skipped norm shows in
// the logits, small enough not to change the scale of the activations.
constexpr float k_norm_std = 0.1f;

fixture_tensor norm_tensor(const std::string & name, int64_t n) {
    fixture_tensor t;
    t.name = name;
    t.ne[0] = n;
    t.n_dims = 1;
    t.type = GGML_TYPE_F32;
    t.center = 1.0f;
    t.std = k_norm_std;
    return t;
}

/// A [ne0, ne1] or [ne0, ne1, ne2] matrix drawn with std `gain / sqrt(ne0)`: a row of it applied
/// to an input of RMS 1 gives an output of RMS about `gain` (fan-in scaling).
fixture_tensor matrix_tensor(const std::string & name, ggml_type type, int64_t ne0, int64_t ne1,
                             int64_t ne2, float gain) {
    fixture_tensor t;
    t.name = name;
    t.ne[0] = ne0;
    t.ne[1] = ne1;
    t.ne[2] = ne2;
    t.n_dims = ne2 > 1 ? 3 : 2;
    t.type = type;
    t.std = gain / std::sqrt((float) ne0);
    return t;
}

std::string blk(int64_t il, const char * what, const char * kind = "weight") {
    return "blk." + std::to_string(il) + "." + what + "." + kind;
}

/// A bias or another small f32 vector added to or dotted with activations: mean 0, `std`.
fixture_tensor vector_tensor(const std::string & name, int64_t ne0, int64_t ne1, float std) {
    fixture_tensor t = matrix_tensor(name, GGML_TYPE_F32, ne0, ne1, 1, 1.0f);
    t.n_dims = ne1 > 1 ? 2 : 1;
    t.std = std;
    return t;
}

// Spread of biases: visible in the output, small beside activations of RMS 1.
constexpr float k_bias_std = 0.1f;

/// Everything the layer builders need.
struct plan_ctx {
    const fixture_hparams & hp;
    const fixture_arch & arch;
    const fixture_dims & d;
    ggml_type wt;
    float branch_gain;
    std::vector<fixture_tensor> & plan;

    void matrix(int64_t il, const char * what, int64_t ne0, int64_t ne1, int64_t ne2, float gain) {
        plan.push_back(matrix_tensor(blk(il, what), wt, ne0, ne1, ne2, gain));
    }
    void norm(int64_t il, const char * what, int64_t n) { plan.push_back(norm_tensor(blk(il, what), n)); }
    void bias(int64_t il, const char * what, int64_t ne0, int64_t ne1 = 1) {
        plan.push_back(vector_tensor(blk(il, what, "bias"), ne0, ne1, k_bias_std));
    }
};

/// attn_q/k/v/output with the row's biases, Q/K norms and sinks (create_tensor_qkv,
/// src/llama-model.cpp; src/models/{qwen3moe,olmoe,openai-moe}.cpp).
void plan_gqa(plan_ctx & c, int64_t il) {
    const fixture_hparams & hp = c.hp;
    const int64_t n_q = hp.n_head * hp.head_dim, n_kv = hp.n_head_kv * hp.head_dim;
    const char * names[3] = {"attn_q", "attn_k", "attn_v"};
    for (int i = 0; i < 3; ++i) {
        c.matrix(il, names[i], hp.n_embd, i == 0 ? n_q : n_kv, 1, 1.0f);
        if (c.arch.qkv_bias) c.bias(il, names[i], i == 0 ? n_q : n_kv);
    }
    c.matrix(il, "attn_output", n_q, hp.n_embd, 1, c.branch_gain);
    if (c.arch.oai_attn) c.bias(il, "attn_output", hp.n_embd);
    if (c.arch.qk_norm != fixture_qk_norm::none) {
        const int64_t n = c.arch.qk_norm == fixture_qk_norm::per_head ? hp.head_dim : hp.n_embd;
        c.norm(il, "attn_q_norm", n);
        c.norm(il, "attn_k_norm", n);
    }
    if (c.arch.oai_attn) c.plan.push_back(vector_tensor(blk(il, "attn_sinks"), hp.n_head, 1, 1.0f));
}

/// DeepSeek-V2 MLA with the split k_b/v_b the converter writes (src/models/deepseek2.cpp).
void plan_mla(plan_ctx & c, int64_t il) {
    const fixture_hparams & hp = c.hp;
    const fixture_dims & d = c.d;
    c.matrix(il, "attn_q_a", hp.n_embd, d.q_lora_rank, 1, 1.0f);
    c.norm(il, "attn_q_a_norm", d.q_lora_rank);
    c.matrix(il, "attn_q_b", d.q_lora_rank, hp.n_head * (d.qk_nope + d.n_rot), 1, 1.0f);
    c.matrix(il, "attn_kv_a_mqa", hp.n_embd, d.kv_lora_rank + d.n_rot, 1, 1.0f);
    c.norm(il, "attn_kv_a_norm", d.kv_lora_rank);
    c.matrix(il, "attn_k_b", d.qk_nope, d.kv_lora_rank, hp.n_head, 1.0f);
    c.matrix(il, "attn_v_b", d.kv_lora_rank, d.v_head_dim, hp.n_head, 1.0f);
    c.matrix(il, "attn_output", hp.n_head * d.v_head_dim, hp.n_embd, 1, c.branch_gain);
}

/// A dense SwiGLU FFN of width n (ffn_gate/up/down, or the shared expert's *_shexp).
void plan_ffn(plan_ctx & c, int64_t il, const char * gate, const char * up, const char * down, int64_t n) {
    c.matrix(il, gate, c.hp.n_embd, n, 1, 1.0f);
    c.matrix(il, up, c.hp.n_embd, n, 1, 1.0f);
    c.matrix(il, down, n, c.hp.n_embd, 1, c.branch_gain);
}

/// Router, routed experts, their biases and the shared expert.
void plan_moe(plan_ctx & c, int64_t il) {
    const fixture_hparams & hp = c.hp;
    // Router logits of RMS ~1.5 per expert: softmax weights clearly differ, and which experts win
    // changes from token to token because every token's normalized input differs.
    c.plan.push_back(matrix_tensor(blk(il, "ffn_gate_inp"), GGML_TYPE_F32, hp.n_embd, hp.n_expert, 1, 1.5f));
    if (c.arch.expert_biases) c.bias(il, "ffn_gate_inp", hp.n_expert);
    if (c.arch.probs_bias) c.bias(il, "exp_probs_b", hp.n_expert);
    c.matrix(il, "ffn_gate_exps", hp.n_embd, hp.n_ff_exp, hp.n_expert, 1.0f);
    c.matrix(il, "ffn_up_exps", hp.n_embd, hp.n_ff_exp, hp.n_expert, 1.0f);
    c.matrix(il, "ffn_down_exps", hp.n_ff_exp, hp.n_embd, hp.n_expert, c.branch_gain);
    if (c.arch.expert_biases) {
        c.bias(il, "ffn_gate_exps", hp.n_ff_exp, hp.n_expert);
        c.bias(il, "ffn_up_exps", hp.n_ff_exp, hp.n_expert);
        c.bias(il, "ffn_down_exps", hp.n_embd, hp.n_expert);
    }
    if (c.arch.shexp == fixture_shexp_kind::none) return;
    if (c.arch.shexp == fixture_shexp_kind::gated)  // a logit of RMS ~1: the sigmoid gate varies per token
        c.plan.push_back(vector_tensor(blk(il, "ffn_gate_inp_shexp"), hp.n_embd, 1, 1.0f / std::sqrt((float) hp.n_embd)));
    plan_ffn(c, il, "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", c.d.n_ff_shexp);
}

} // namespace

std::vector<fixture_tensor> fixture_tensor_plan(const fixture_config & cfg, const fixture_arch & arch,
                                                const fixture_dims & d, int64_t n_vocab) {
    const fixture_hparams & hp = cfg.hp;
    // The two residual branches of each layer (attention output, expert down projection) have
    // gain 2/sqrt(n_layer). Their inputs have RMS of only about 0.4-0.5 (attention averages V over
    // positions; silu(gate) * up of unit inputs is small), so each branch adds variance of roughly
    // 1/n_layer: over all layers about the embedding's own variance. The residual stream stays near
    // RMS 1.5 at any depth, and the experts move the logits as much as the embedding does.
    std::vector<fixture_tensor> plan;
    plan_ctx c{hp, arch, d, cfg.weight_type, 2.0f / std::sqrt((float) hp.n_layer), plan};
    fixture_tensor embd = matrix_tensor("token_embd.weight", cfg.weight_type, hp.n_embd, n_vocab, 1, 1.0f);
    embd.std = 1.0f; // embeddings are looked up, not multiplied: RMS 1 per token
    plan.push_back(embd);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        c.norm(il, "attn_norm", hp.n_embd);
        if (arch.attn == fixture_attn_kind::mla) plan_mla(c, il);
        else plan_gqa(c, il);
        c.norm(il, arch.ffn_norm, hp.n_embd);
        if (fixture_layer_is_moe(d, il)) plan_moe(c, il);
        else plan_ffn(c, il, "ffn_gate", "ffn_up", "ffn_down", d.n_ff);
    }
    plan.push_back(norm_tensor("output_norm.weight", hp.n_embd));
    plan.push_back(matrix_tensor("output.weight", cfg.weight_type, hp.n_embd, n_vocab, 1, 1.0f));
    return plan;
}

Status fixture_tensor_plan_validate(const std::vector<fixture_tensor> & plan) {
    for (const auto & t : plan) {
        const int64_t blck = ggml_blck_size(t.type);
        if (t.ne[0] % blck != 0) {
            return Status::invalid_argument("tensor " + t.name + ": row length ne0=" + std::to_string(t.ne[0]) +
                                            " is not a multiple of " + std::to_string(blck) + ", the block size of " +
                                            ggml_type_name(t.type) + " (choose another --type or a wider shape)");
        }
    }
    return Status::ok();
}

} // namespace moezip
