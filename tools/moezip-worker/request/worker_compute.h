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
#include "provider_map/status.h"
#include "tools/moezip-worker/request/request_check.h"
#include "tools/moezip-worker/model/slice_residency.h"
#include "tools/moezip-worker/model/worker_slices.h"
#include "tools/moezip-worker/request/worker_budget.h"
#include "tools/moezip-worker/model/worker_model.h"
#include "tools/moezip-worker/request/worker_plan.h"

#include <zmq.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace moezip {

class WorkerCompute {
public:
    /// `release_unsliced`: in shard mode, give back the originals once every slice in use computes
    /// from its packed copies (model/slice_residency.h); false keeps them (--keep-unsliced).
    /// `keep_ms`: how long a slice's rows outlive its last request (SliceResidency::kKeepMs).
    WorkerCompute(const WorkerModel & model, const GgmlApi & api, int n_threads, bool release_unsliced = true,
                  int keep_ms = SliceResidency::kKeepMs)
        : model_(model), api_(api), exec_(api, n_threads), shape_(request_shape_of(model, api)),
          residency_(model, release_unsliced, keep_ms) {}

    /// request_check_compute (request_check.h) of a compute request against the served model's
    /// shape, then the connection's plan (worker_plan_check) and the per-request budget
    /// (budget_check; `cost` gets the request's cost). Nothing is allocated. On error `code` is the
    /// reply's ErrorCode (request_check's, bad_plan, over_budget) and the message names the field.
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

    /// The shape requests are checked against: the model's MoE layers (down weights' block size
    /// from `api`), experts and served experts.
    static RequestShape request_shape_of(const WorkerModel & model, const GgmlApi & api);
    const RequestShape & shape() const { return shape_; }
    /// The served model (its file checks: WorkerModel::file_unchanged, file_stamp_moved).
    const WorkerModel & model() const { return model_; }
    /// What shard mode gave back and read again (bytes).
    const SliceResidency & residency() const { return residency_; }
    /// Shard mode's packed slices (bytes held).
    const WorkerSlices & slices() const { return slices_; }
    /// Between requests: gives back the originals of layers no recent request needs (SliceResidency::sweep).
    void idle() { residency_.sweep(slices_); }
    /// After a shard plan's hello_ok from connection `who`: queues this worker's slices of both of its
    /// splits in every layer that does not hold them yet, to be packed one at a time between requests
    /// (pack_one_queued), so that the requests after a slice change (a prompt's, on a slow worker:
    /// seconds of packing) find them made, and no request waits for more than one slice. Returns the
    /// slices queued.
    int queue_prepack(const WorkerPlan & plan, const std::string & who);
    /// At every hello from `who`: its earlier plan's slices not packed yet leave the queue unless
    /// another connection's plan queued them too (dropping the whole queue made a worker serving three
    /// coordinators pack their slices inside their requests). A coordinator with automatic shares
    /// says hello again at every change of its slices: packing the old plan's slices, which it will
    /// not ask for, would take the CPU (a capped worker's quota) its requests need.
    void withdraw_prepack(const std::string & who);
    /// Packs the next queued slice still missing; false when the queue is empty. A failure is left
    /// to the request that needs the slice (it packs again, or says why). A slice whose layer has no
    /// place but copies serving the plans of connections that computed (`plans`) is passed over
    /// (WorkerSlices::Use::ahead): a hello alone never pushes out a copy a computing connection reads.
    bool pack_one_queued(const WorkerPlans & plans);
    bool packs_queued() const { return !queued_.empty(); }

private:
    /// slices_.get, and with --mmap a copy just made is dropped (io_error) when the model file's
    /// stamp moved meanwhile (WorkerModel::file_stamp_moved).
    Status pack_checked(const WorkerLayer & l, int64_t first, int64_t count, const WorkerSlices::Packed *& out,
                        WorkerSlices::Use use = WorkerSlices::Use::request, const WorkerSlices::SlicesInUse & in_use = {});
    const void * aligned(const void * p, size_t bytes, std::vector<uint8_t> & copy);
    Status compute_pairs(const ExpertWeights & w, const MsgHeader & h, const float * hidden, const int32_t * ids,
                         const float * weights, int64_t n_pairs, float * slots);

    const WorkerModel & model_;
    const GgmlApi & api_;
    MoeExecutor exec_;
    WorkerSlices slices_{model_, api_};               // shard mode: packed copies of the slices asked for
    RequestShape shape_;
    SliceResidency residency_;
    std::vector<float> slots_;                        // [n_embd, n_pairs] when the reply is row_sums
    std::vector<float> pair_hidden_, pair_weights_;   // gathered rows for the (row, slot) pair path
    std::vector<int32_t> pair_ids_;
    std::vector<int32_t> ids_local_;                  // ids mapped through WorkerLayer::local_of (--repack)
    std::vector<uint8_t> align_[3];                   // copies of misaligned received frames
    struct QueuedSlice {
        int il;
        int64_t first, count;
        std::vector<std::string> askers;  // connections whose plan queued it (at most kMaxAskers)
        bool kept = false;                // more asked than are listed: never withdrawn
    };
    static constexpr size_t kMaxAskers = 16;
    std::vector<QueuedSlice> queued_;                 // queue_prepack's slices, packed from the back
};

/// Counts the ids >= 0 of [n_used, n_rows] ids.
int64_t compute_count_pairs(const int32_t * ids, int64_t n);

} // namespace moezip
