// moezip-worker: the per-request budget. Every compute request's cost is bounded from its header
// alone (dims and announced frame sizes), before anything is allocated or computed; a request over
// any limit gets an over_budget error reply naming the limit and the worker keeps serving.
//
// Cost of a request with R = n_rows, S = n_rows * n_used (slots, an upper bound of the valid
// pairs), E = n_embd, F = n_ff (or the n_ff slice's count), all f32:
//   bytes in  = the announced data frame sizes
//   bytes out = E * S * 4 (reply slots) or E * R * 4 (reply row_sums)
//   scratch   = (3F + E) * S * 4   executor intermediates (up, gate, act, down)
//             + 2 * E * S * 4      gathered (row, slot) pairs, per-slot outputs before a row sum
//             + (E + F) * S * 4    ggml's work buffer (activations converted to the weights' dot type)
//             + bytes in           copies of frames libzmq handed over unaligned
// A request whose scratch exceeded kScratchKeepBytes keeps its buffers for the calls that follow
// (scratch_hold_ms, default kScratchHoldMs): faulting ~100 MB in afresh for every 512-row request made
// the worker 1.7x slower than the coordinator on the same work, and with 1 s the buffers went during
// the decode after each prompt, so every prompt's first layer faulted them in again (at a 40% CPU
// quota its request took twice as long: make bench, 2026-12-02, commit f807729). After that time (checked when the
// worker is idle and before each request) they shrink back to kScratchKeepBytes and freed heap pages
// go back to the system (malloc_trim), so one large request does not keep its memory for the life
// of the process.
#pragma once

#include "provider_map/status.h"
#include "coordinator/wire/protocol.h"

#include <cstdint>
#include <string>

namespace moezip {

/// Limits of one compute request (flags --max-rows, --max-slots, --max-in-mib, --max-out-mib,
/// --max-scratch-mib; [worker_server] max_rows, ...). Defaults fit a Qwen3-30B-A3B-shaped layer
/// (E 2048, F 768, top-8) at a 2048-row ubatch in rows mode.
struct WorkerBudget {
    int64_t max_rows = 4096;                     ///< rows per request
    int64_t max_slots = 32768;                   ///< rows * n_used per request
    int64_t max_in_bytes = int64_t(128) << 20;   ///< data frames received, bytes (also ZMQ_MAXMSGSIZE per frame)
    int64_t max_out_bytes = int64_t(256) << 20;  ///< result frame, bytes
    int64_t max_scratch_bytes = int64_t(1024) << 20;  ///< buffers the computation needs, bytes
};

/// Buffers kept between requests; larger ones are released after the request that needed them.
constexpr int64_t kScratchKeepBytes = int64_t(64) << 20;
/// How long a large request's buffers are kept for the next ones by default, ms (see above): a
/// prompt, the decode after it and a chat's next turn (--scratch-hold-ms, [worker_server] scratch_hold_ms).
constexpr int kScratchHoldMs = 30000;

/// What one request may cost, from its header (upper bounds, see the file comment).
struct RequestCost {
    int64_t rows = 0, slots = 0, in_bytes = 0, out_bytes = 0, scratch_bytes = 0;
};

/// The cost of compute request `h` whose expert FFN has `n_ff` units (the slice's count in shard
/// mode). The header must have passed the worker's header checks (non-negative dims).
RequestCost request_cost(const MsgHeader & h, int64_t n_ff);

/// ok, or invalid_argument naming the first limit exceeded ("scratch 1.5 GiB over the budget of
/// 1 GiB (--max-scratch-mib)"); `code` = over_budget then.
Status budget_check(const WorkerBudget & b, const RequestCost & c, ErrorCode & code);

/// "rows 4096, slots 32768, in 128 MiB, out 256 MiB, scratch 1024 MiB" (the ready line, hello_ok).
std::string budget_describe(const WorkerBudget & b);

/// Releases heap memory freed since (malloc_trim): called after a large request.
void budget_release_heap();

} // namespace moezip
