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

std::string blk(int64_t il, const char * what) { return "blk." + std::to_string(il) + "." + what + ".weight"; }

} // namespace

std::vector<fixture_tensor> fixture_tensor_plan(const fixture_config & cfg, int64_t n_vocab) {
    const fixture_hparams & hp = cfg.hp;
    const ggml_type wt = cfg.weight_type;
    const int64_t n_embd_q  = hp.n_head * hp.head_dim;
    const int64_t n_embd_kv = hp.n_head_kv * hp.head_dim;
    // The two residual branches of each layer (attention output, expert down projection) have
    // gain 2/sqrt(n_layer). Their inputs have RMS of only about 0.4-0.5 (attention averages V over
    // positions; silu(gate) * up of unit inputs is small), so each branch adds variance of roughly
    // 1/n_layer: over all layers about the embedding's own variance. The residual stream stays near
    // RMS 1.5 at any depth, and the experts move the logits as much as the embedding does.
    const float branch_gain = 2.0f / std::sqrt((float) hp.n_layer);
    std::vector<fixture_tensor> plan;
    fixture_tensor embd = matrix_tensor("token_embd.weight", wt, hp.n_embd, n_vocab, 1, 1.0f);
    embd.std = 1.0f; // embeddings are looked up, not multiplied: RMS 1 per token
    plan.push_back(embd);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        plan.push_back(norm_tensor(blk(il, "attn_norm"), hp.n_embd));
        plan.push_back(matrix_tensor(blk(il, "attn_q"), wt, hp.n_embd, n_embd_q, 1, 1.0f));
        plan.push_back(matrix_tensor(blk(il, "attn_k"), wt, hp.n_embd, n_embd_kv, 1, 1.0f));
        plan.push_back(matrix_tensor(blk(il, "attn_v"), wt, hp.n_embd, n_embd_kv, 1, 1.0f));
        plan.push_back(matrix_tensor(blk(il, "attn_output"), wt, n_embd_q, hp.n_embd, 1, branch_gain));
        plan.push_back(norm_tensor(blk(il, "attn_q_norm"), hp.head_dim));
        plan.push_back(norm_tensor(blk(il, "attn_k_norm"), hp.head_dim));
        plan.push_back(norm_tensor(blk(il, "ffn_norm"), hp.n_embd));
        // Router logits of RMS ~1.5 per expert: softmax weights clearly differ, and which experts
        // win changes from token to token because every token's normalized input differs.
        plan.push_back(matrix_tensor(blk(il, "ffn_gate_inp"), GGML_TYPE_F32, hp.n_embd, hp.n_expert, 1, 1.5f));
        plan.push_back(matrix_tensor(blk(il, "ffn_gate_exps"), wt, hp.n_embd, hp.n_ff_exp, hp.n_expert, 1.0f));
        plan.push_back(matrix_tensor(blk(il, "ffn_up_exps"), wt, hp.n_embd, hp.n_ff_exp, hp.n_expert, 1.0f));
        plan.push_back(matrix_tensor(blk(il, "ffn_down_exps"), wt, hp.n_ff_exp, hp.n_embd, hp.n_expert, branch_gain));
    }
    plan.push_back(norm_tensor("output_norm.weight", hp.n_embd));
    plan.push_back(matrix_tensor("output.weight", wt, hp.n_embd, n_vocab, 1, 1.0f));
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
