// moezip: execute the routed-expert FFN of a MoE layer with the engine's own ggml CPU kernels.
//
// For rows r and slots s (the k experts selected for a row) it computes, like build_moe_ffn in
// src/llama-graph.cpp:
//   slot[r, s] = weights[s, r] * down_e( act( gate_e(x_r), up_e(x_r) ) ),  e = ids[s, r]
// with the variants build_moe_ffn has: per-expert biases after each matmul (ggml_add_id), the
// clamped swiglu_oai activation, and the routing weight applied to the input instead of the output
// (llama4: slot[r, s] = down_e(act(gate_e(w x_r), up_e(w x_r))), w = weights[s, r]).
// with ggml_mul_mat_id / ggml_glu_split / ggml_mul on a small ggml graph computed by the CPU
// variant the engine selected (ggml_graph_plan + ggml_graph_compute). Each (row, slot) result
// depends only on that row's data and that expert's weights: activations are converted to the
// weights' vec_dot_type per row and each output element is one vec_dot over a full weight row
// (ggml_compute_forward_mul_mat_id, ggml/src/ggml-cpu/ggml-cpu.c). So computing any subset of
// rows or slots here, or on a worker with the same variant, gives the same bits as the engine.
// The slot sum is done separately (moe_sum_slots) in slot order, as the engine's ADD chain does.
#pragma once

#include "provider_map/status.h"
#include "provider_map/engine_api.h"

#include <cstdint>
#include <vector>

namespace moezip {

/// The expert weights of one layer, in GGUF layout (not repacked). Tensors are the engine's (or a
/// worker's own copy); only type, ne, nb and data are read.
struct ExpertWeights {
    const ggml_tensor * gate_exps = nullptr;  ///< [n_embd, n_ff, n_expert]
    const ggml_tensor * up_exps = nullptr;    ///< [n_embd, n_ff, n_expert]
    const ggml_tensor * down_exps = nullptr;  ///< [n_ff, n_embd, n_expert]
    ggml_glu_op glu_op = GGML_GLU_OP_SWIGLU;  ///< activation between gate and up
    float glu_alpha = 0, glu_limit = 0;       ///< GGML_GLU_OP_SWIGLU_OAI's parameters (ggml_swiglu_oai)
    /// Per-expert biases (gpt-oss), f32 [n_ff, n_expert] for gate/up and [n_embd, n_expert] for down,
    /// added after each matmul as ggml_add_id does (build_moe_ffn); null when the layer has none.
    const ggml_tensor * gate_b = nullptr, * up_b = nullptr, * down_b = nullptr;
    /// llama4 (build_moe_ffn's weight_before_ffn): each slot's input is the row times its routing
    /// weight, and the slot output is not weighted again.
    bool weight_before = false;
    /// Shard mode: only units [ff_first, ff_first + ff_count) of every expert's n_ff: rows of
    /// gate/up (ne[1]) and the same columns of down (ne[0]), read in place through strided views.
    /// The output is then a partial sum over n_ff. ff_count = 0: all of n_ff. Both must be
    /// multiples of down's block size (ggml_blck_size: 32 for q8_0, 256 for K-quants).
    int64_t ff_first = 0, ff_count = 0;
    /// Shard mode, optional: down's units [F, F + C) packed [C, n_embd, n_expert] (op_params[0..1] =
    /// F, C; DownSliceCopies, coordinator/compute/down_slice.h), a range that holds [ff_first,
    /// ff_first + ff_count): read instead of a strided view of down_exps, the same blocks, so the
    /// same bits, with reads proportional to the slice (a view of it when it holds more).
    const ggml_tensor * down_slice = nullptr;
    /// Shard mode, optional (set both or neither, holding the same range): gate's and up's rows [F,
    /// F + C) packed [n_embd, C, n_expert] (op_params[0..1] = F, C; a worker's own copies,
    /// tools/moezip-worker/model/worker_slices.h), a range that holds the slice: read instead of row
    /// views of gate_exps and up_exps, the same rows, so the same bits, and the originals need not
    /// stay in memory.
    const ggml_tensor * gate_slice = nullptr, * up_slice = nullptr;
};

/// A batch of rows, each with k selected experts (slots).
struct SlotBatch {
    int64_t n_rows = 0;               ///< rows (tokens) in the batch
    int64_t k = 0;                    ///< slots per row (n_expert_used, or 1 for per-slot pairs)
    const float * hidden = nullptr;   ///< [n_embd, n_rows] f32 rows, row r at hidden + r*hidden_stride bytes
    size_t hidden_stride = 0;         ///< bytes between rows (>= n_embd*4)
    const int32_t * ids = nullptr;    ///< [k, n_rows] i32 expert ids, ids[r*k + s]
    const float * weights = nullptr;  ///< [k, n_rows] f32 routing weights, weights[r*k + s]
};

/// Memory for the executor's intermediates instead of its own scratch: up and gate [n_ff, k, n_rows],
/// act [n_ff, k, n_rows], down [n_embd, k, n_rows], all f32. Used to compute a whole region in the
/// engine's own node memory: the ops run in the engine's order (up, gate, act, down, weighted), so
/// any memory the engine's allocator let two of them share is shared the same way here.
struct MoeBuffers {
    void * up = nullptr, * gate = nullptr, * act = nullptr, * down = nullptr;
};

/// Runs expert FFNs on the CPU variant bound in the GgmlApi. Keeps its scratch memory between
/// calls (grown on demand). Not thread-safe: one executor per thread.
class MoeExecutor {
public:
    MoeExecutor(const GgmlApi & api, int n_threads) : api_(api), n_threads_(n_threads < 1 ? 1 : n_threads) {}
    void set_threads(int n_threads) { n_threads_ = n_threads < 1 ? 1 : n_threads; }
    /// The compute threads (the engine's n_threads of the current graph).
    int threads() const { return n_threads_; }

    /// Writes the weighted per-slot outputs to `out` [n_embd, k, n_rows] f32 (contiguous).
    /// Errors: invalid_argument (shapes disagree, an id outside [0, n_expert)), io_error (ggml
    /// compute failed). Never aborts on bad ids: they are checked before ggml sees them.
    /// `bufs`: intermediates in the caller's memory (each large enough for this batch), or null
    /// for the executor's own scratch.
    Status compute_slots(const ExpertWeights & w, const SlotBatch & batch, float * out, const MoeBuffers * bufs = nullptr);

    /// Releases the scratch and work buffers when they hold more than keep_bytes each (they only
    /// grow otherwise: one large batch would keep its memory for the life of the process).
    void trim(size_t keep_bytes);
    /// Bytes held by the scratch and work buffers now.
    size_t scratch_bytes() const { return scratch_.capacity() + work_.capacity(); }

private:
    const GgmlApi & api_;
    int n_threads_;
    std::vector<uint8_t> meta_;     // ggml context memory (tensor and graph metadata)
    std::vector<uint8_t> scratch_;  // intermediates: gate, up, act, down
    std::vector<uint8_t> work_;     // ggml_cplan work buffer
};

/// out[:, r] = slots[:, 0, r] + slots[:, 1, r] + ... in slot order, left to right, the order of
/// the engine's ADD chain (build_moe_ffn). slots: [n_embd, k, n_rows] f32; out: [n_embd, n_rows].
/// out may be the memory of slots (rows are read before they are overwritten), not any other overlap.
void moe_sum_slots(const float * slots, int64_t n_embd, int64_t k, int64_t n_rows, float * out);

/// One row of moe_sum_slots continued from the sum of its first m slots: out = prefix, then
/// out += slots[:, s] for s = m .. k-1 in slot order. The ADD chain is a left fold, so a prefix
/// summed in slot order elsewhere (a worker's row_sums reply of slots 0..m-1) followed by these adds
/// is the same sequence of f32 roundings as the whole chain. prefix: [n_embd] f32, any alignment
/// (libzmq frames); slots: [n_embd, k] of this row (slots before m are not read); out: [n_embd],
/// not overlapping either.
void moe_sum_slots_after_prefix(const void * prefix, int64_t m, const float * slots, int64_t n_embd, int64_t k, float * out);

} // namespace moezip
