// moezip-upcycle: the numerical core of MoEfication. Splits one layer's dense SwiGLU FFN into
// n_expert experts of n_ff_exp hidden units each and builds the router, in plain f32 arrays.
// No file I/O here; docs/internals/upcycle.md gives the construction and its numerical effect.
//
// Layouts are ggml's (ne[0] is the contiguous dimension), as in the GGUF tensors:
//   dense  ffn_gate.weight / ffn_up.weight  [n_embd, n_ff]            (row i = hidden unit i)
//          ffn_down.weight                  [n_ff, n_embd]            (element i of each row = unit i)
//   MoE    ffn_gate_inp.weight              [n_embd, n_expert]        (row e = expert e's router)
//          ffn_gate_exps / ffn_up_exps      [n_embd, n_ff_exp, n_expert]
//          ffn_down_exps                    [n_ff_exp, n_embd, n_expert]
// (shapes from src/models/llama.cpp, llama_model_llama::load_arch_tensors)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moezip_upcycle {

/// How hidden units are grouped into experts.
enum class split_kind {
    contiguous,  ///< expert e takes a contiguous run of units (sizes differ by at most one)
    interleave,  ///< unit i goes to expert i % n_expert
    cluster,     ///< balanced spherical k-means on the gate rows (units with similar gates together)
};

/// What an expert holds.
enum class expert_kind {
    split,      ///< a group of about n_ff / n_expert dense units (MoEfication: the experts partition the FFN)
    replicate,  ///< all n_ff units, each expert in its own unit order (every expert computes the dense FFN)
    none,       ///< no experts: the dense model itself is written, its matrices converted to --type
};

/// How the router rows (ffn_gate_inp) are made.
enum class router_kind {
    zero,       ///< all zero: softmax gives every expert 1/n_expert (exact mode)
    gate_mean,  ///< weighted mean of the expert's gate rows, weight ||up_i|| * ||down_i|| (sparse mode)
};

/// Parses "split" / "replicate" / "none"; false if unknown.
bool expert_kind_from_name(const std::string & name, expert_kind & out);
/// The flag spelling of an expert kind.
const char * expert_kind_name(expert_kind kind);
/// Parses "contiguous" / "interleave" / "cluster"; false if unknown.
bool split_kind_from_name(const std::string & name, split_kind & out);
/// The flag spelling of a split kind.
const char * split_kind_name(split_kind kind);
/// "zero" or "gate_mean".
const char * router_kind_name(router_kind kind);

/// One layer's dense FFN, dequantized to f32 (layouts above).
struct dense_ffn {
    int64_t n_embd = 0;
    int64_t n_ff   = 0;
    std::vector<float> gate;  ///< [n_embd, n_ff]
    std::vector<float> up;    ///< [n_embd, n_ff]
    std::vector<float> down;  ///< [n_ff, n_embd]
};

/// Which dense unit sits in each expert slot.
struct unit_assignment {
    int64_t n_expert = 0;
    int64_t n_ff_exp = 0;         ///< slots per expert: ceil(n_ff / n_expert)
    std::vector<int64_t> units;   ///< [n_ff_exp, n_expert]: units[e*n_ff_exp + r] = dense unit, or -1 (padding)
};

/// Number of slots per expert for n_ff units over n_expert experts: ceil(n_ff / n_expert).
int64_t expert_n_ff(int64_t n_ff, int64_t n_expert);

/// Groups the n_ff units of `ffn` into n_expert experts (1 <= n_expert <= n_ff). Every unit appears
/// exactly once; expert sizes differ by at most one; units inside an expert are in ascending order;
/// unused slots are -1 at the end of the expert. Deterministic for the same input.
unit_assignment split_units(const dense_ffn & ffn, int64_t n_expert, split_kind kind);

/// Replicated experts: n_ff_exp = n_ff; expert e holds every unit, rotated by e * ceil(n_ff / n_expert)
/// (slot r = unit (r + e * shift) % n_ff), so experts compute the same function but their bytes and
/// float summation orders differ (a swapped expert id changes the result's bits).
unit_assignment replicate_units(int64_t n_ff, int64_t n_expert);

/// Parameters of build_moe_ffn.
struct moe_build_params {
    router_kind router = router_kind::zero;
    float router_scale = 1.0f;  ///< multiplies the gate_mean router rows (ignored for zero)
    float down_scale   = 1.0f;  ///< multiplies every down column: n_expert_used (see docs/internals/upcycle.md)
};

/// One layer's MoE FFN in f32 (layouts above).
struct moe_ffn {
    std::vector<float> gate_inp;   ///< [n_embd, n_expert]
    std::vector<float> gate_exps;  ///< [n_embd, n_ff_exp, n_expert]
    std::vector<float> up_exps;    ///< [n_embd, n_ff_exp, n_expert]
    std::vector<float> down_exps;  ///< [n_ff_exp, n_embd, n_expert]
};

/// Builds the expert tensors (slots from `experts`) and the router for one layer. Router row e is made
/// from the units of group e of `router_groups` (the same assignment as `experts` for split experts;
/// the split_units grouping for replicated ones). Padding slots get zero gate/up rows and a zero
/// down column, so they contribute exactly 0 (silu(0) * 0 = 0).
moe_ffn build_moe_ffn(const dense_ffn & ffn, const unit_assignment & experts, const unit_assignment & router_groups,
                      const moe_build_params & params);

} // namespace moezip_upcycle
