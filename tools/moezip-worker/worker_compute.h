// moezip-worker: validation and computation of one `compute` request (coordinator/wire/protocol.h).
// No sockets here: the server hands in the parsed header and the received data frames.
//
// A request carries, for rows r and slots s:
//   hidden  f32 [n_embd, n_rows], ids i32 [n_used, n_rows] (-1 = slot not for this worker),
//   weights f32 [n_used, n_rows], and in shard mode a fourth frame
//   ff_slice i32 [2] = (first, count): only units [first, first + count) of every expert's n_ff
//   (whole blocks of the down weights), so every output is a partial sum (reply row_sums only).
// The worker computes slot[r, s] = weights[s, r] * down_e(act(gate_e(x_r), up_e(x_r))), e = ids[s, r],
// with MoeExecutor (the engine's kernels) for every slot with id >= 0, and replies
//   slots:    f32 [n_embd, n_pairs], the slots with id >= 0 in (row, slot) order;
//   row_sums: f32 [n_embd, n_rows], per row the slot-order sum of its valid slots (moe_sum_slots:
//             the first valid slot copied, the next ones added left to right, as the engine's ADD
//             chain in build_moe_ffn, src/llama-graph.cpp); zeros for a row without a valid slot.
#pragma once

#include "coordinator/compute/moe_exec.h"
#include "coordinator/wire/protocol.h"
#include "coordinator/base/status.h"
#include "tools/moezip-worker/worker_budget.h"
#include "tools/moezip-worker/worker_model.h"
#include "tools/moezip-worker/worker_plan.h"

#include <zmq.hpp>

#include <cstdint>
#include <vector>

namespace moezip {

class WorkerCompute {
public:
    WorkerCompute(const WorkerModel & model, const GgmlApi & api, int n_threads) : model_(model), api_(api), exec_(api, n_threads) {}

    /// Checks everything about a compute request before anything is allocated or computed: frame
    /// count (3, or 4 with an n_ff slice: 8 bytes, reply row_sums), dtypes (f32, i32, f32[, i32]),
    /// layer (a MoE layer of the model), n_embd and n_ff (the model's), 0 <= n_rows <= kMaxRows,
    /// 1 <= n_used <= kMaxUsed, reply kind, glu_op (SWIGLU, GEGLU, REGLU, GEGLU_ERF, GEGLU_QUICK),
    /// frame sizes against the dims; then the connection's plan (an n_ff slice frame exactly when the
    /// plan is shard) and the budget (worker_budget.h: `cost` gets the request's cost); then the
    /// received frames against the header (sizes, XXH3-64), the slice (the planned one, whole
    /// blocks), every id in [-1, n_expert), served here and allowed by the plan.
    /// `frames`/`sizes` are the n received data frames. On error `code` is the reply's ErrorCode
    /// (bad_frames, bad_hash, bad_layer, bad_shape, bad_kind, bad_plan, over_budget, bad_expert) and
    /// the message names the field.
    Status validate(const MsgHeader & h, int n, const void * const * frames, const size_t * sizes, const WorkerPlan & plan,
                    const WorkerBudget & budget, RequestCost & cost, ErrorCode & code) const;

    /// Computes a validated request. `reply` gets the result header (request_id, layer, dims,
    /// n_pairs, reply kind echoed; frame 0 size and hash set); `out` the result bytes.
    /// Errors: io_error from ggml (reply compute_failed). Allocation failures throw std::bad_alloc
    /// or zmq::error_t (ENOMEM) and leave `out` empty (the caller answers out_of_memory).
    Status compute(const MsgHeader & h, const void * const * frames, MsgHeader & reply, zmq::message_t & out);

    /// Releases every buffer larger than keep_bytes, and all of them when the rest still holds more
    /// than keep_bytes (they are kept between requests otherwise); 0 releases everything.
    void trim(size_t keep_bytes);

private:
    Status validate_header(const MsgHeader & h, ErrorCode & code) const;
    Status validate_ids(const MsgHeader & h, const int32_t * ids, const WorkerPlan & plan, ErrorCode & code) const;
    Status validate_plan(const MsgHeader & h, const WorkerPlan & plan, int64_t & ff_count, ErrorCode & code) const;
    const void * aligned(const void * p, size_t bytes, std::vector<uint8_t> & copy);
    Status compute_pairs(const ExpertWeights & w, const MsgHeader & h, const float * hidden, const int32_t * ids,
                         const float * weights, int64_t n_pairs, float * slots);

    static void slice_of(const void * frame, int64_t & first, int64_t & count);

    const WorkerModel & model_;
    const GgmlApi & api_;
    MoeExecutor exec_;
    std::vector<float> slots_;                        // [n_embd, n_pairs] when the reply is row_sums
    std::vector<float> pair_hidden_, pair_weights_;   // gathered rows for the (row, slot) pair path
    std::vector<int32_t> pair_ids_;
    std::vector<uint8_t> align_[3];                   // copies of misaligned received frames
};

/// Counts the ids >= 0 of [n_used, n_rows] ids.
int64_t compute_count_pairs(const int32_t * ids, int64_t n);

} // namespace moezip
