#include "tools/moezip-worker/request/worker_budget.h"

#include <malloc.h>

#include <cstdio>

namespace moezip {

namespace {

std::string mib(int64_t bytes) {
    char buf[32];
    if (bytes >= (int64_t(10) << 30)) snprintf(buf, sizeof buf, "%.1f GiB", (double) bytes / (1 << 30));
    else snprintf(buf, sizeof buf, "%.1f MiB", (double) bytes / (1 << 20));
    return buf;
}

Status over(ErrorCode & code, const std::string & what, const std::string & value, const std::string & limit, const char * flag) {
    code = ErrorCode::over_budget;
    return Status::invalid_argument(what + " " + value + " over the worker's per-request budget of " + limit + " (" + flag + ")");
}

} // namespace

RequestCost request_cost(const MsgHeader & h, int64_t n_ff) {
    RequestCost c;
    const int64_t E = h.n_embd, F = n_ff;
    c.rows = h.n_rows;
    c.slots = (int64_t) h.n_rows * h.n_used;
    for (int i = 0; i < h.n_frames && i < kMaxDataFrames; ++i) c.in_bytes += (int64_t) h.frame_bytes[i];
    c.out_bytes = E * (h.reply == static_cast<uint16_t>(ReplyKind::slots) ? c.slots : c.rows) * 4;
    // dims are bounded by the header checks (E <= 2^16, S <= 2^28): no overflow in 64 bits
    c.scratch_bytes = (3 * F + E) * c.slots * 4 + 2 * E * c.slots * 4 + (E + F) * c.slots * 4 + c.in_bytes;
    // the forms of protocol v4 add nodes (moe_exec.cpp): one ADD_ID result per bias ([n_ff or
    // n_embd] per slot), and before the FFN the repeated input and its weighted copy ([n_embd] each)
    if (h.ffn_flags & kFfnGateBias) c.scratch_bytes += F * c.slots * 4;
    if (h.ffn_flags & kFfnUpBias) c.scratch_bytes += F * c.slots * 4;
    if (h.ffn_flags & kFfnDownBias) c.scratch_bytes += E * c.slots * 4;
    if (h.ffn_flags & kFfnWeightBefore) c.scratch_bytes += 2 * E * c.slots * 4;
    return c;
}

Status budget_check(const WorkerBudget & b, const RequestCost & c, ErrorCode & code) {
    if (c.rows > b.max_rows) return over(code, "rows", std::to_string(c.rows), std::to_string(b.max_rows), "--max-rows");
    if (c.slots > b.max_slots) return over(code, "slots (rows x n_used)", std::to_string(c.slots), std::to_string(b.max_slots), "--max-slots");
    if (c.in_bytes > b.max_in_bytes) return over(code, "bytes in", mib(c.in_bytes), mib(b.max_in_bytes), "--max-in-mib");
    if (c.out_bytes > b.max_out_bytes) return over(code, "bytes out", mib(c.out_bytes), mib(b.max_out_bytes), "--max-out-mib");
    if (c.scratch_bytes > b.max_scratch_bytes)
        return over(code, "scratch", mib(c.scratch_bytes), mib(b.max_scratch_bytes), "--max-scratch-mib");
    code = ErrorCode::ok;
    return Status::ok();
}

std::string budget_describe(const WorkerBudget & b) {
    return "rows " + std::to_string(b.max_rows) + ", slots " + std::to_string(b.max_slots) + ", in " +
           std::to_string(b.max_in_bytes >> 20) + " MiB, out " + std::to_string(b.max_out_bytes >> 20) + " MiB, scratch " +
           std::to_string(b.max_scratch_bytes >> 20) + " MiB";
}

void budget_release_heap() { malloc_trim(0); }

} // namespace moezip
