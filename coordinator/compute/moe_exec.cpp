#include "coordinator/compute/moe_exec.h"

#include "coordinator/compute/down_slice.h"

#include "coordinator/evidence/trace.h"

#include <cstring>
#include <string>

namespace moezip {

namespace {

// A metadata-only copy of an external tensor that points at its data; fails when the layout is
// not the dense one ggml would give (we never guess strides). Its buffer and extra are the source's:
// for weights the CPU backend repacked (CPU_REPACK) they are how the backend finds the repack
// kernels (ggml_cpu_extra_compute_forward, ggml/src/ggml-cpu/traits.cpp), so this graph runs the
// kernels the engine's own node runs.
ggml_tensor * external_tensor(const GgmlApi & api, ggml_context * ctx, const ggml_tensor * src) {
    ggml_tensor * t = api.ggml_new_tensor_3d(ctx, src->type, src->ne[0], src->ne[1], src->ne[2]);
    for (int i = 0; i < 4; ++i) if (t->nb[i] != src->nb[i]) return nullptr;
    t->data = src->data;
    t->buffer = src->buffer;
    t->extra = src->extra;
    return t;
}

// A view of src's units [first, first + count) along dimension `dim` (0 or 1) with src's strides.
ggml_tensor * slice_tensor(const GgmlApi & api, ggml_context * ctx, const ggml_tensor * src, int dim, int64_t first, int64_t count) {
    int64_t ne[3] = {src->ne[0], src->ne[1], src->ne[2]};
    ne[dim] = count;
    ggml_tensor * t = api.ggml_new_tensor_3d(ctx, src->type, ne[0], ne[1], ne[2]);
    for (int i = 1; i < 4; ++i) t->nb[i] = src->nb[i];
    const size_t offset = dim == 0 ? (size_t) (first / api.ggml_blck_size(src->type)) * api.ggml_type_size(src->type)
                                   : (size_t) first * src->nb[1];
    t->data = static_cast<char *>(src->data) + offset;
    return t;
}

// Units [first, first + count) of n_ff from a packed slice holding [op_params[0], + op_params[1])
// (checked by the caller): the packed tensor itself when it holds exactly those, else a view.
ggml_tensor * packed_slice_tensor(const GgmlApi & api, ggml_context * ctx, const ggml_tensor * packed, int dim, int64_t first, int64_t count) {
    const int64_t held_first = packed->op_params[0], held_count = packed->op_params[1];
    if (held_first == first && held_count == count) return external_tensor(api, ctx, packed);
    return slice_tensor(api, ctx, packed, dim, first - held_first, count);
}

uint8_t * carve(std::vector<uint8_t> & buf, size_t & used, size_t bytes) {
    const size_t align = 64;
    uint8_t * p = buf.data() + used;
    used += (bytes + align - 1) / align * align;
    return p;
}

} // namespace

Status MoeExecutor::compute_slots(const ExpertWeights & w, const SlotBatch & b, float * out, const MoeBuffers * bufs) {
    if (b.n_rows == 0) return Status::ok();
    TraceSpan span("compute here", "compute");  // the coordinator's own part (the worker never traces)
    if (span.on()) span.args() = {{"rows", b.n_rows}, {"slots", b.n_rows * b.k}, {"ff_count", w.ff_count}};
    const int64_t n_embd = w.gate_exps->ne[0], n_ff_all = w.gate_exps->ne[1], n_expert = w.gate_exps->ne[2];
    const bool sliced = w.ff_count > 0;
    if (b.k < 1 || b.n_rows < 0 || b.hidden_stride < (size_t) n_embd * sizeof(float))
        return Status::invalid_argument("bad batch: k=" + std::to_string(b.k) + " rows=" + std::to_string(b.n_rows));
    if (w.up_exps->ne[0] != n_embd || w.up_exps->ne[1] != n_ff_all || w.down_exps->ne[0] != n_ff_all ||
        w.down_exps->ne[1] != n_embd || w.up_exps->ne[2] != n_expert || w.down_exps->ne[2] != n_expert)
        return Status::invalid_argument("expert weight shapes disagree");
    // a packed slice holds units [op_params[0], op_params[0] + op_params[1]) of n_ff: the slice asked
    // for, or one that contains it (a host's slices of the decode and the prefill split share the
    // larger copy when one contains the other; the view reads the same blocks in the same order)
    const int64_t blk = api_.ggml_blck_size(w.down_exps->type);
    auto holds_slice = [&](const ggml_tensor * t, int64_t held_count) {
        const int64_t first = t->op_params[0], count = t->op_params[1];
        return sliced && count == held_count && first >= 0 && ff_range_holds(first, count, w.ff_first, w.ff_count) &&
               (w.ff_first - first) % blk == 0;
    };
    if (w.down_slice != nullptr && (w.down_slice->type != w.down_exps->type || w.down_slice->ne[1] != n_embd ||
                                    w.down_slice->ne[2] != n_expert || !holds_slice(w.down_slice, w.down_slice->ne[0])))
        return Status::invalid_argument("the packed down slice does not hold the n_ff slice");
    if ((w.gate_slice != nullptr) != (w.up_slice != nullptr)) return Status::invalid_argument("a packed gate slice needs a packed up slice");
    for (const ggml_tensor * t : {w.gate_slice, w.up_slice})
        if (t != nullptr && (t->type != w.gate_exps->type || t->ne[0] != n_embd || t->ne[2] != n_expert || !holds_slice(t, t->ne[1])))
            return Status::invalid_argument("a packed gate/up slice does not hold the n_ff slice");
    if (w.gate_slice != nullptr && (w.gate_slice->op_params[0] != w.up_slice->op_params[0] || w.gate_slice->op_params[1] != w.up_slice->op_params[1]))
        return Status::invalid_argument("the packed gate and up slices hold different n_ff slices");
    if (w.gate_slice != nullptr && w.up_slice->type != w.up_exps->type)
        return Status::invalid_argument("a packed gate/up slice does not match the n_ff slice");
    if (sliced) {
        if (w.gate_exps->extra || w.up_exps->extra || w.down_exps->extra)
            return Status::unsupported("an n_ff slice of repacked expert weights (their rows are interleaved)");
        if (w.ff_first < 0 || w.ff_first + w.ff_count > n_ff_all || w.ff_first % blk != 0 || w.ff_count % blk != 0)
            return Status::invalid_argument("n_ff slice [" + std::to_string(w.ff_first) + ", " + std::to_string(w.ff_first + w.ff_count) +
                                            ") is outside [0, " + std::to_string(n_ff_all) + ") or not a multiple of " + std::to_string(blk));
    }
    for (int64_t i = 0; i < b.k * b.n_rows; ++i) {
        if (b.ids[i] < 0 || b.ids[i] >= n_expert)
            return Status::invalid_argument("expert id " + std::to_string(b.ids[i]) + " out of range [0, " +
                                            std::to_string(n_expert) + ")");
    }

    const size_t n_tensors = 24;
    meta_.resize(n_tensors * api_.ggml_tensor_overhead() + api_.ggml_graph_overhead_custom(n_tensors, false));
    ggml_init_params ip = {meta_.size(), meta_.data(), /*no_alloc =*/ true};
    ggml_context * ctx = api_.ggml_init(ip);
    if (ctx == nullptr) return Status::io_error("ggml_init failed");

    Status st = Status::ok();
    ggml_tensor * gate_w = external_tensor(api_, ctx, w.gate_exps);
    ggml_tensor * up_w = external_tensor(api_, ctx, w.up_exps);
    ggml_tensor * down_w = external_tensor(api_, ctx, w.down_exps);
    if (sliced && gate_w && up_w && down_w) {
        gate_w = w.gate_slice != nullptr ? packed_slice_tensor(api_, ctx, w.gate_slice, 1, w.ff_first, w.ff_count)
                                         : slice_tensor(api_, ctx, w.gate_exps, 1, w.ff_first, w.ff_count);
        up_w = w.up_slice != nullptr ? packed_slice_tensor(api_, ctx, w.up_slice, 1, w.ff_first, w.ff_count)
                                     : slice_tensor(api_, ctx, w.up_exps, 1, w.ff_first, w.ff_count);
        down_w = w.down_slice != nullptr ? packed_slice_tensor(api_, ctx, w.down_slice, 0, w.ff_first, w.ff_count)
                                         : slice_tensor(api_, ctx, w.down_exps, 0, w.ff_first, w.ff_count);
    }
    if (!gate_w || !up_w || !down_w) {
        api_.ggml_free(ctx);
        return Status::invalid_argument("expert weights are not densely laid out");
    }
    ggml_tensor * biases[3] = {nullptr, nullptr, nullptr};  // gate, up, down
    const ggml_tensor * const bias_src[3] = {w.gate_b, w.up_b, w.down_b};
    for (int i = 0; i < 3; ++i) {
        if (bias_src[i] == nullptr) continue;
        if (sliced) {
            api_.ggml_free(ctx);
            return Status::unsupported("an n_ff slice of experts with biases");
        }
        biases[i] = external_tensor(api_, ctx, bias_src[i]);
        if (biases[i] == nullptr) {
            api_.ggml_free(ctx);
            return Status::invalid_argument("expert biases are not densely laid out");
        }
    }
    // [n_embd, 1, n_rows]: one input row per token, broadcast to its k slots (as in build_moe_ffn).
    ggml_tensor * x = api_.ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_embd, 1, b.n_rows);
    x->nb[2] = b.hidden_stride;
    x->nb[3] = b.hidden_stride * b.n_rows;
    x->data = const_cast<float *>(b.hidden);
    ggml_tensor * ids = api_.ggml_new_tensor_2d(ctx, GGML_TYPE_I32, b.k, b.n_rows);
    ids->data = const_cast<int32_t *>(b.ids);
    ggml_tensor * weights = api_.ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, b.k, b.n_rows);
    weights->data = const_cast<float *>(b.weights);

    // build_moe_ffn's order: [weight the input], up [+ bias], gate [+ bias], activation, down [+ bias],
    // [weight the output]. Every node but the last is an intermediate; the last writes `out`.
    std::vector<ggml_tensor *> nodes;
    auto add = [&nodes](ggml_tensor * t) { nodes.push_back(t); return t; };
    ggml_tensor * in = x;
    if (w.weight_before) in = add(api_.ggml_mul(ctx, add(api_.ggml_repeat_4d(ctx, x, n_embd, b.k, b.n_rows, 1)), weights));
    ggml_tensor * up = add(api_.ggml_mul_mat_id(ctx, up_w, in, ids));             // [n_ff, k, n_rows]
    if (biases[1]) up = add(api_.ggml_add_id(ctx, up, biases[1], ids));
    ggml_tensor * gate = add(api_.ggml_mul_mat_id(ctx, gate_w, in, ids));         // [n_ff, k, n_rows]
    if (biases[0]) gate = add(api_.ggml_add_id(ctx, gate, biases[0], ids));
    ggml_tensor * act = add(w.glu_op == GGML_GLU_OP_SWIGLU_OAI ? api_.ggml_swiglu_oai(ctx, gate, up, w.glu_alpha, w.glu_limit)
                                                              : api_.ggml_glu_split(ctx, gate, up, w.glu_op));  // [n_ff, k, n_rows]
    ggml_tensor * down = add(api_.ggml_mul_mat_id(ctx, down_w, act, ids));        // [n_embd, k, n_rows]
    if (biases[2]) add(api_.ggml_add_id(ctx, down, biases[2], ids));
    if (!w.weight_before) add(api_.ggml_mul(ctx, nodes.back(), weights));         // [n_embd, k, n_rows]
    ggml_tensor * weighted = nodes.back();
    nodes.pop_back();

    const bool plain = nodes.size() == 4;  // up, gate, act, down: the engine's node memory fits (MoeBuffers)
    if (bufs != nullptr && plain) {
        up->data = bufs->up; gate->data = bufs->gate; act->data = bufs->act; down->data = bufs->down;
    } else {
        size_t need = 0;
        for (ggml_tensor * t : nodes) need += (api_.ggml_nbytes(t) + 63) / 64 * 64;
        if (scratch_.size() < need) scratch_.resize(need);
        size_t used = 0;
        for (ggml_tensor * t : nodes) t->data = carve(scratch_, used, api_.ggml_nbytes(t));
    }
    weighted->data = out;

    ggml_cgraph * gf = api_.ggml_new_graph_custom(ctx, n_tensors, false);
    api_.ggml_build_forward_expand(gf, weighted);
    ggml_cplan plan = api_.ggml_graph_plan(gf, n_threads_, nullptr);
    if (work_.size() < plan.work_size) work_.resize(plan.work_size);
    plan.work_data = plan.work_size ? work_.data() : nullptr;
    ggml_status gs = api_.ggml_graph_compute(gf, &plan);
    if (gs != GGML_STATUS_SUCCESS) st = Status::io_error("ggml_graph_compute failed with status " + std::to_string((int) gs));
    api_.ggml_free(ctx);
    return st;
}

void MoeExecutor::trim(size_t keep_bytes) {
    if (scratch_.capacity() > keep_bytes || keep_bytes == 0) std::vector<uint8_t>().swap(scratch_);
    if (work_.capacity() > keep_bytes || keep_bytes == 0) std::vector<uint8_t>().swap(work_);
}

void moe_sum_slots(const float * slots, int64_t n_embd, int64_t k, int64_t n_rows, float * out) {
    for (int64_t r = 0; r < n_rows; ++r) {
        const float * s0 = slots + r * k * n_embd;
        float * o = out + r * n_embd;
        if (o != s0) memcpy(o, s0, n_embd * sizeof(float));  // out may be slots' memory: row r lies at or before slot row r*k
        for (int64_t s = 1; s < k; ++s) {
            const float * si = s0 + s * n_embd;
            for (int64_t j = 0; j < n_embd; ++j) o[j] += si[j];  // one rounding per add, as ggml_vec_add_f32
        }
    }
}

void moe_sum_slots_after_prefix(const void * prefix, int64_t m, const float * slots, int64_t n_embd, int64_t k, float * out) {
    memcpy(out, prefix, (size_t) n_embd * sizeof(float));
    for (int64_t s = m; s < k; ++s) {
        const float * si = slots + s * n_embd;
        for (int64_t j = 0; j < n_embd; ++j) out[j] += si[j];
    }
}

} // namespace moezip
