// libFuzzer target: the worker's request decoder. One input is one multipart request as the worker
// receives it (tests/fuzz/fuzz_message.h), decoded as Server::handle does (worker_server.cpp): the
// header (msg_header_parse), then a compute request against a small described model
// (request_check_compute, what WorkerCompute::validate runs) and hello/ping frames against the header
// (msg_frames_verify). Besides "no crash, no sanitizer report", a request the check accepts must hold
// everything WorkerCompute::compute reads without checking again. Then, as WorkerCompute::validate
// does, the connection's plan (worker_plan_check; the plan picked by the request id: rows, experts
// 0-2, or shard slice 1 of [0.5, 0.5]) and the per-request budget: an accepted request keeps to
// both. A hello's JSON is read as a plan (worker_plan_parse), as the server does.
#include "tests/fuzz/fuzz_message.h"
#include "ggml.h"  // enum ggml_glu_op (values only)
#include "tools/moezip-worker/request/request_check.h"
#include "tools/moezip-worker/request/worker_budget.h"
#include "tools/moezip-worker/request/worker_plan.h"

#include <algorithm>
#include <cmath>

using namespace moezip;
using moezip_fuzz::fuzz_require;

namespace {

// Three MoE layers of a q8_0-like (block 32) and an f32-like (block 1) model, the last with
// gpt-oss's expert biases, 8 experts, some served.
RequestShape fuzz_shape() {
    RequestShape s;
    s.layers = {{0, 8, 64, 32, 0}, {3, 8, 16, 1, 0}, {5, 8, 16, 1, kFfnBiases}};
    s.n_expert = 8;
    s.served = {{0, 3}, {6, 6}};
    s.served_mask = {true, true, true, true, false, false, true, false};
    return s;
}

int32_t read_i32(const void * frame, int64_t i) {
    int32_t v;
    memcpy(&v, static_cast<const uint8_t *>(frame) + i * 4, 4);
    return v;
}

// What compute() relies on once validate() said ok.
void require_computable(const RequestShape & shape, const MsgHeader & h, int n, const void * const * frames, const size_t * sizes) {
    fuzz_require(n == h.n_frames && (n == 3 || n == 4), "frame count", std::to_string(n));
    const RequestShape::Layer * l = shape.layer(h.layer);
    fuzz_require(l != nullptr && h.n_embd == l->n_embd && h.n_ff == l->n_ff, "layer and dims");
    fuzz_require(h.n_rows >= 0 && h.n_rows <= kMaxRows && h.n_used >= 1 && h.n_used <= kMaxUsed, "counts");
    const uint64_t cells = (uint64_t) h.n_used * (uint64_t) h.n_rows;
    fuzz_require(sizes[0] == (uint64_t) h.n_embd * h.n_rows * 4 && sizes[1] == cells * 4 && sizes[2] == cells * 4, "frame sizes");
    fuzz_require(h.reply == (uint16_t) ReplyKind::slots || h.reply == (uint16_t) ReplyKind::row_sums, "reply kind");
    fuzz_require((h.ffn_flags & ~(uint32_t) kFfnKnown) == 0 && (h.ffn_flags & kFfnBiases) == l->biases, "ffn form",
                 std::to_string(h.ffn_flags));
    fuzz_require(h.glu_op == GGML_GLU_OP_SWIGLU_OAI ? std::isfinite(h.glu_alpha) && std::isfinite(h.glu_limit)
                                                    : h.glu_alpha == 0 && h.glu_limit == 0, "glu parameters");
    fuzz_require(n == 3 || l->biases == 0, "no n_ff slice of experts with biases");
    int64_t pairs = 0;
    for (uint64_t i = 0; i < cells; ++i) {
        const int32_t id = read_i32(frames[1], (int64_t) i);
        fuzz_require(id >= -1 && id < shape.n_expert && (id < 0 || shape.serves(id)), "expert id", std::to_string(id));
        pairs += id >= 0;
    }
    const uint64_t out_rows = h.reply == (uint16_t) ReplyKind::slots ? (uint64_t) pairs : (uint64_t) h.n_rows;
    fuzz_require(out_rows * (uint64_t) h.n_embd <= (uint64_t) kMaxUsed * kMaxRows * (uint64_t) l->n_embd, "reply size");
    if (n == 4) {
        int64_t first = 0, count = 0;
        fuzz_require(sizes[3] == 8 && h.reply == (uint16_t) ReplyKind::row_sums, "slice frame");
        request_slice_of(frames[3], first, count);
        fuzz_require(first >= 0 && count >= 1 && first + count <= l->n_ff && first % l->ff_block == 0 && count % l->ff_block == 0,
                     "slice", std::to_string(first) + "+" + std::to_string(count));
    }
}

// The plans a connection may have; the request id picks one.
const WorkerPlan & fuzz_plan(uint64_t pick) {
    static const WorkerPlan plans[4] = {
        WorkerPlan{WorkerPlan::Mode::rows, {}, {}, {}, -1},
        WorkerPlan{WorkerPlan::Mode::experts, {{0, 2}}, {}, {}, -1},
        WorkerPlan{WorkerPlan::Mode::shard, {}, {0.5, 0.5}, {}, 1},
        WorkerPlan{WorkerPlan::Mode::shard, {}, {0.75, 0.25}, {0.5, 0.5}, 1},  // a decode split of its own
    };
    return plans[pick % 4];
}

// What the server checks after request_check_compute: the plan, then the budget.
void check_plan_and_budget(const RequestShape & shape, const MsgHeader & h, int n, const void * const * frames) {
    const WorkerPlan & plan = fuzz_plan(h.request_id);
    int64_t ff_count = 0;
    ErrorCode code = ErrorCode::ok;
    Status st = worker_plan_check(plan, shape, h, frames, ff_count, code);
    moezip_fuzz::fuzz_require_status(st, code);
    if (!st) return;
    fuzz_require((n == 4) == (plan.mode == WorkerPlan::Mode::shard), "slice frame only in shard plans");
    const RequestShape::Layer * l = shape.layer(h.layer);
    fuzz_require(ff_count >= 1 && ff_count <= l->n_ff, "planned n_ff units", std::to_string(ff_count));
    for (int64_t i = 0; plan.mode == WorkerPlan::Mode::experts && i < (int64_t) h.n_used * h.n_rows; ++i)
        fuzz_require(read_i32(frames[1], i) < 0 || worker_plan_allows_expert(plan, read_i32(frames[1], i)), "planned expert");
    WorkerBudget budget;
    budget.max_rows = 64;
    budget.max_scratch_bytes = 1 << 20;
    const RequestCost cost = request_cost(h, ff_count);
    st = budget_check(budget, cost, code);
    moezip_fuzz::fuzz_require_status(st, code);
    if (st) fuzz_require(cost.rows <= budget.max_rows && cost.scratch_bytes <= budget.max_scratch_bytes && cost.scratch_bytes >= 0, "budget");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static const RequestShape shape = fuzz_shape();
    moezip_fuzz::FuzzMessage m = moezip_fuzz::fuzz_message_parse(data, size);
    if (m.n() < 1) return 0;  // the server answers "empty message" before decoding anything
    MsgHeader h;
    ErrorCode code = ErrorCode::ok;
    Status st = msg_header_parse(m.ptrs[0], m.sizes[0], h, code);
    moezip_fuzz::fuzz_require_status(st, code);
    if (!st) return 0;
    const int n = m.n() - 1;
    const void * const * frames = m.ptrs.data() + 1;
    const size_t * sizes = m.sizes.data() + 1;
    const MsgKind kind = static_cast<MsgKind>(h.kind);
    if (kind == MsgKind::compute) {
        st = request_check_compute(shape, h, n, frames, sizes, code);
        moezip_fuzz::fuzz_require_status(st, code);
        if (st) require_computable(shape, h, n, frames, sizes);
        if (st) check_plan_and_budget(shape, h, n, frames);
    } else if (kind == MsgKind::hello || kind == MsgKind::ping) {
        st = msg_frames_verify(h, n, frames, sizes, code);
        moezip_fuzz::fuzz_require_status(st, code);
        if (st && n > 0) (void) std::string(static_cast<const char *>(frames[0]), std::min<size_t>(sizes[0], 400));  // logged
        if (st && kind == MsgKind::hello) {
            const char * text = n > 0 ? static_cast<const char *>(frames[0]) : "";
            nlohmann::json j = nlohmann::json::parse(text, text + (n > 0 ? sizes[0] : 0), nullptr, false);
            WorkerPlan plan;
            st = worker_plan_parse(j, shape, plan, code);
            moezip_fuzz::fuzz_require_status(st, code);
            if (st && plan.mode == WorkerPlan::Mode::shard)
                fuzz_require(plan.slice >= 0 && plan.slice < (int) plan.shares.size(), "plan slice");
        }
    }
    return 0;
}
