#include "tools/moezip-worker/worker_compute.h"

#include <cstring>
#include <string>

namespace moezip {

namespace {

bool glu_op_supported(uint32_t op) {
    switch (op) {
        case GGML_GLU_OP_SWIGLU: case GGML_GLU_OP_GEGLU: case GGML_GLU_OP_REGLU:
        case GGML_GLU_OP_GEGLU_ERF: case GGML_GLU_OP_GEGLU_QUICK: return true;
        default: return false;  // swiglu_oai / swiglu_clamp take parameters the protocol does not carry
    }
}

Status fail(ErrorCode & code, ErrorCode c, std::string message) {
    code = c;
    return Status::invalid_argument(std::move(message));
}

} // namespace

int64_t compute_count_pairs(const int32_t * ids, int64_t n) {
    int64_t pairs = 0;
    for (int64_t i = 0; i < n; ++i) pairs += ids[i] >= 0;
    return pairs;
}

Status WorkerCompute::validate_header(const MsgHeader & h, ErrorCode & code) const {
    if (h.n_frames != 3 && h.n_frames != 4)
        return fail(code, ErrorCode::bad_frames, "compute needs 3 data frames (hidden, ids, weights) or 4 (and an n_ff slice), header announces " +
                                                     std::to_string(h.n_frames));
    const WireType want[4] = {WireType::f32, WireType::i32, WireType::f32, WireType::i32};
    for (int i = 0; i < h.n_frames; ++i)
        if (h.dtype[i] != static_cast<uint8_t>(want[i]))
            return fail(code, ErrorCode::bad_frames, "frame " + std::to_string(i + 1) + " dtype " + std::to_string(h.dtype[i]) +
                                                         ", expected " + std::to_string(static_cast<int>(want[i])) +
                                                         " (hidden f32, ids i32, weights f32, n_ff slice i32)");
    if (h.n_frames == 4 && h.frame_bytes[3] != 2 * sizeof(int32_t))
        return fail(code, ErrorCode::bad_frames, "n_ff slice frame is announced as " + std::to_string(h.frame_bytes[3]) +
                                                     " bytes, needs 8 (first, count)");
    if (h.n_frames == 4 && h.reply != static_cast<uint16_t>(ReplyKind::row_sums))
        return fail(code, ErrorCode::bad_kind, "an n_ff slice gives partial sums: the reply must be row_sums (2)");
    const WorkerLayer * l = model_.layer(h.layer);
    if (l == nullptr) return fail(code, ErrorCode::bad_layer, "layer " + std::to_string(h.layer) + " is not a MoE layer of this model");
    if (h.n_embd != l->n_embd || h.n_ff != l->n_ff)
        return fail(code, ErrorCode::bad_shape, "n_embd " + std::to_string(h.n_embd) + ", n_ff " + std::to_string(h.n_ff) +
                                                    " differ from layer " + std::to_string(h.layer) + "'s n_embd " +
                                                    std::to_string(l->n_embd) + ", n_ff " + std::to_string(l->n_ff));
    if (h.n_rows < 0 || h.n_rows > kMaxRows)
        return fail(code, ErrorCode::bad_shape, "n_rows " + std::to_string(h.n_rows) + " outside 0.." + std::to_string(kMaxRows));
    if (h.n_used < 1 || h.n_used > kMaxUsed)
        return fail(code, ErrorCode::bad_shape, "n_used " + std::to_string(h.n_used) + " outside 1.." + std::to_string(kMaxUsed));
    if (h.reply != static_cast<uint16_t>(ReplyKind::slots) && h.reply != static_cast<uint16_t>(ReplyKind::row_sums))
        return fail(code, ErrorCode::bad_kind, "reply kind " + std::to_string(h.reply) + " unknown (1 = slots, 2 = row_sums)");
    if (!glu_op_supported(h.glu_op))
        return fail(code, ErrorCode::bad_kind, "glu_op " + std::to_string(h.glu_op) +
                                                   " not supported (swiglu, geglu, reglu, geglu_erf, geglu_quick)");
    const uint64_t want_bytes[3] = {(uint64_t) h.n_embd * h.n_rows * 4, (uint64_t) h.n_used * h.n_rows * 4,
                                    (uint64_t) h.n_used * h.n_rows * 4};
    const char * names[3] = {"hidden", "ids", "weights"};
    for (int i = 0; i < 3; ++i)
        if (h.frame_bytes[i] != want_bytes[i])
            return fail(code, ErrorCode::bad_frames, std::string(names[i]) + " frame is announced as " +
                                                         std::to_string(h.frame_bytes[i]) + " bytes, n_rows " +
                                                         std::to_string(h.n_rows) + " needs " + std::to_string(want_bytes[i]));
    return Status::ok();
}

Status WorkerCompute::validate_ids(const MsgHeader & h, const int32_t * ids, const WorkerPlan & plan, ErrorCode & code) const {
    const int64_t n = (int64_t) h.n_used * h.n_rows;
    for (int64_t i = 0; i < n; ++i) {
        int32_t id;
        memcpy(&id, ids + i, sizeof id);  // the frame may be misaligned
        const std::string where = " (row " + std::to_string(i / h.n_used) + ", slot " + std::to_string(i % h.n_used) + ")";
        if (id < -1 || id >= model_.n_expert())
            return fail(code, ErrorCode::bad_expert, "expert id " + std::to_string(id) + where + " outside [-1, " +
                                                         std::to_string(model_.n_expert()) + ")");
        if (id >= 0 && !model_.serves(id))
            return fail(code, ErrorCode::bad_expert, "expert " + std::to_string(id) + where + " is not served here (serving " +
                                                         expert_ranges_format(model_.served()) + ")");
        if (id >= 0 && !worker_plan_allows_expert(plan, id))
            return fail(code, ErrorCode::bad_plan, "expert " + std::to_string(id) + where + " is outside this connection's plan (" +
                                                       worker_plan_describe(plan) + ")");
    }
    return Status::ok();
}

// The n_ff units this request computes, and whether the plan allows that shape at all.
Status WorkerCompute::validate_plan(const MsgHeader & h, const WorkerPlan & plan, int64_t & ff_count, ErrorCode & code) const {
    const WorkerLayer * l = model_.layer(h.layer);
    int64_t first = 0;
    worker_plan_ff_range(plan, *l, api_.ggml_blck_size(l->down_exps->type), first, ff_count);
    const bool shard = plan.mode == WorkerPlan::Mode::shard;
    if (shard && h.n_frames != 4)
        return fail(code, ErrorCode::bad_plan, "this connection's plan is " + worker_plan_describe(plan) + ": requests need its n_ff slice frame");
    if (!shard && h.n_frames == 4)
        return fail(code, ErrorCode::bad_plan, "an n_ff slice, but this connection's plan is " + worker_plan_describe(plan) +
                                                   " (whole n_ff only)");
    if (shard && ff_count == 0)
        return fail(code, ErrorCode::bad_plan, "this connection's plan (" + worker_plan_describe(plan) + ") gives layer " +
                                                   std::to_string(h.layer) + " no n_ff slice");
    return Status::ok();
}

Status WorkerCompute::validate(const MsgHeader & h, int n, const void * const * frames, const size_t * sizes, const WorkerPlan & plan,
                               const WorkerBudget & budget, RequestCost & cost, ErrorCode & code) const {
    Status st = validate_header(h, code);
    if (!st) return st;
    int64_t ff_count = 0;
    st = validate_plan(h, plan, ff_count, code);
    if (!st) return st;
    cost = request_cost(h, ff_count);
    st = budget_check(budget, cost, code);
    if (!st) return st;
    st = msg_frames_verify(h, n, frames, sizes, code);
    if (!st) return st;
    if (h.n_frames == 4) {
        int64_t first = 0, count = 0, want_first = 0, want_count = 0;
        slice_of(frames[3], first, count);
        const WorkerLayer * l = model_.layer(h.layer);
        const int64_t block = api_.ggml_blck_size(l->down_exps->type);
        if (first < 0 || count < 1 || first + count > l->n_ff || first % block != 0 || count % block != 0)
            return fail(code, ErrorCode::bad_shape, "n_ff slice [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                                        ") is empty, outside [0, " + std::to_string(l->n_ff) +
                                                        ") or not made of whole blocks of " + std::to_string(block));
        worker_plan_ff_range(plan, *l, block, want_first, want_count);
        if (first != want_first || count != want_count)
            return fail(code, ErrorCode::bad_plan, "n_ff slice [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                                       ") is not the planned [" + std::to_string(want_first) + ", " +
                                                       std::to_string(want_first + want_count) + ") (" + worker_plan_describe(plan) + ")");
    }
    return validate_ids(h, static_cast<const int32_t *>(frames[1]), plan, code);
}

void WorkerCompute::slice_of(const void * frame, int64_t & first, int64_t & count) {
    int32_t v[2];
    memcpy(v, frame, sizeof v);  // the frame may be misaligned
    first = v[0];
    count = v[1];
}

const void * WorkerCompute::aligned(const void * p, size_t bytes, std::vector<uint8_t> & copy) {
    if (reinterpret_cast<uintptr_t>(p) % alignof(float) == 0) return p;
    copy.resize(bytes);
    memcpy(copy.data(), p, bytes);
    return copy.data();
}

// Slots with id >= 0 as single-slot rows (k = 1), in (row, slot) order. Each output depends only
// on its row and expert (moe_exec.h), so this gives the same bits as the rectangular batch.
Status WorkerCompute::compute_pairs(const ExpertWeights & w, const MsgHeader & h, const float * hidden, const int32_t * ids,
                                    const float * weights, int64_t n_pairs, float * slots) {
    const int64_t n_embd = h.n_embd;
    pair_hidden_.resize((size_t) (n_embd * n_pairs));
    pair_ids_.resize((size_t) n_pairs);
    pair_weights_.resize((size_t) n_pairs);
    int64_t p = 0;
    for (int64_t r = 0; r < h.n_rows; ++r)
        for (int64_t s = 0; s < h.n_used; ++s) {
            const int64_t i = r * h.n_used + s;
            if (ids[i] < 0) continue;
            memcpy(pair_hidden_.data() + p * n_embd, hidden + r * n_embd, (size_t) n_embd * sizeof(float));
            pair_ids_[p] = ids[i];
            pair_weights_[p] = weights[i];
            ++p;
        }
    SlotBatch b;
    b.n_rows = n_pairs;
    b.k = 1;
    b.hidden = pair_hidden_.data();
    b.hidden_stride = (size_t) n_embd * sizeof(float);
    b.ids = pair_ids_.data();
    b.weights = pair_weights_.data();
    return exec_.compute_slots(w, b, slots);
}

// Per row, the slot-order sum of its valid slots; `slots` holds the valid slots in (row, slot) order.
static void sum_valid_slots(const float * slots, const int32_t * ids, int64_t n_embd, int64_t n_used, int64_t n_rows, float * out) {
    const float * next = slots;
    for (int64_t r = 0; r < n_rows; ++r) {
        float * o = out + r * n_embd;
        bool first = true;
        for (int64_t s = 0; s < n_used; ++s) {
            if (ids[r * n_used + s] < 0) continue;
            if (first) memcpy(o, next, (size_t) n_embd * sizeof(float));
            else for (int64_t j = 0; j < n_embd; ++j) o[j] += next[j];
            first = false;
            next += n_embd;
        }
        if (first) memset(o, 0, (size_t) n_embd * sizeof(float));
    }
}

Status WorkerCompute::compute(const MsgHeader & h, const void * const * frames, MsgHeader & reply, zmq::message_t & out) {
    const WorkerLayer * l = model_.layer(h.layer);
    const size_t bytes[3] = {h.frame_bytes[0], h.frame_bytes[1], h.frame_bytes[2]};
    const float * hidden = static_cast<const float *>(aligned(frames[0], bytes[0], align_[0]));
    const int32_t * ids = static_cast<const int32_t *>(aligned(frames[1], bytes[1], align_[1]));
    const float * weights = static_cast<const float *>(aligned(frames[2], bytes[2], align_[2]));
    const int64_t n_embd = h.n_embd, n_rows = h.n_rows, n_used = h.n_used;
    const int64_t n_pairs = compute_count_pairs(ids, n_used * n_rows);
    const bool want_slots = h.reply == static_cast<uint16_t>(ReplyKind::slots);

    // constructed, then moved: a message_t whose rebuild() failed must not be destroyed (its
    // zmq_msg_close would read the content libzmq could not allocate)
    out = zmq::message_t((size_t) (n_embd * (want_slots ? n_pairs : n_rows)) * sizeof(float));
    float * slots = static_cast<float *>(out.data());
    if (!want_slots) {
        slots_.resize((size_t) (n_embd * n_pairs));
        slots = slots_.data();
    }
    ExpertWeights w;
    w.gate_exps = l->gate_exps;
    w.up_exps = l->up_exps;
    w.down_exps = l->down_exps;
    w.glu_op = static_cast<ggml_glu_op>(h.glu_op);
    if (h.n_frames == 4) slice_of(frames[3], w.ff_first, w.ff_count);  // shard mode: a partial sum over this slice
    Status st = Status::ok();
    if (n_pairs == n_used * n_rows) {  // every slot ours: the rectangular batch, as the engine runs it
        SlotBatch b;
        b.n_rows = n_rows;
        b.k = n_used;
        b.hidden = hidden;
        b.hidden_stride = (size_t) n_embd * sizeof(float);
        b.ids = ids;
        b.weights = weights;
        st = exec_.compute_slots(w, b, slots);
    } else if (n_pairs > 0) {
        st = compute_pairs(w, h, hidden, ids, weights, n_pairs, slots);
    }
    if (!st) return st;
    if (!want_slots && n_pairs == n_used * n_rows) moe_sum_slots(slots, n_embd, n_used, n_rows, static_cast<float *>(out.data()));
    else if (!want_slots) sum_valid_slots(slots, ids, n_embd, n_used, n_rows, static_cast<float *>(out.data()));

    reply = msg_header_make(MsgKind::result);
    reply.request_id = h.request_id;
    reply.layer = h.layer;
    reply.n_embd = h.n_embd;
    reply.n_ff = h.n_ff;
    reply.n_used = h.n_used;
    reply.n_rows = h.n_rows;
    reply.row_offset = h.row_offset;
    reply.n_pairs = (int32_t) n_pairs;
    reply.reply = h.reply;
    reply.glu_op = h.glu_op;
    msg_header_set_frame(reply, 0, WireType::f32, out.data(), out.size());
    return Status::ok();
}

namespace {

template <typename T>
void release_if_larger(std::vector<T> & v, size_t keep_bytes) {
    if (v.capacity() * sizeof(T) > keep_bytes || (keep_bytes == 0 && v.capacity() > 0)) std::vector<T>().swap(v);
}

} // namespace

void WorkerCompute::trim(size_t keep_bytes) {
    release_if_larger(slots_, keep_bytes);
    release_if_larger(pair_hidden_, keep_bytes);
    release_if_larger(pair_weights_, keep_bytes);
    release_if_larger(pair_ids_, keep_bytes);
    for (auto & a : align_) release_if_larger(a, keep_bytes);
    exec_.trim(keep_bytes);
    size_t kept = (slots_.capacity() + pair_hidden_.capacity() + pair_weights_.capacity()) * sizeof(float) +
                  pair_ids_.capacity() * sizeof(int32_t) + exec_.scratch_bytes();
    for (auto & a : align_) kept += a.capacity();
    if (kept > keep_bytes && keep_bytes > 0) trim(0);  // what is left must fit in keep_bytes as a whole
}

} // namespace moezip
