#include "tools/moezip-worker/request/worker_compute.h"

#include "coordinator/base/log.h"
#include "coordinator/base/micros.h"
#include "coordinator/compute/down_slice.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

namespace moezip {

int64_t compute_count_pairs(const int32_t * ids, int64_t n) {
    int64_t pairs = 0;
    for (int64_t i = 0; i < n; ++i) pairs += ids[i] >= 0;
    return pairs;
}

RequestShape WorkerCompute::request_shape_of(const WorkerModel & model, const GgmlApi & api) {
    RequestShape shape;
    for (const WorkerLayer & l : model.layers())
        shape.layers.push_back({l.il, l.n_embd, l.n_ff, (int64_t) api.ggml_blck_size(l.down_exps->type), l.bias_flags()});
    shape.n_expert = model.n_expert();
    shape.served = model.served();
    shape.served_mask.assign((size_t) std::max<int64_t>(model.n_expert(), 0), false);
    for (int64_t e = 0; e < model.n_expert(); ++e) shape.served_mask[(size_t) e] = model.serves(e);
    return shape;
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
    // A mapping (--mmap) reads whatever the file holds now: once it changed in place, its bytes are
    // not the ones hello_ok's digests named, so nothing is computed from it (an fstat per request;
    // the digests again when only the status-change time moved: WorkerModel::file_unchanged).
    if (model_.mapped()) {
        Status st = model_.file_unchanged();
        if (!st) return st;
    }
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
    ExpertWeights w = l->weights;  // the model's tensors, or the served experts' copies (--repack)
    w.glu_op = static_cast<ggml_glu_op>(h.glu_op);
    w.glu_alpha = h.glu_alpha;
    w.glu_limit = h.glu_limit;
    w.weight_before = (h.ffn_flags & kFfnWeightBefore) != 0;
    // request_check: the request's bias bits are the layer's, so w's biases are the ones asked for
    if (!l->local_of.empty()) {  // served-experts tensors: expert ids to their index there
        ids_local_.resize((size_t) (n_used * n_rows));
        for (size_t i = 0; i < ids_local_.size(); ++i) ids_local_[i] = ids[i] < 0 ? -1 : l->local_of[(size_t) ids[i]];
        ids = ids_local_.data();
    }
    const bool shard = h.n_frames == 4;
    int64_t ff_first = 0, ff_count = l->n_ff;
    uint32_t setup_us = 0;  // making the weights ready (reply header setup_us)
    Status st = Status::ok();
    if (shard) {  // a partial sum over this slice, from packed copies of it (model/worker_slices.h)
        request_slice_of(frames[3], ff_first, ff_count);
        w.ff_first = ff_first;
        w.ff_count = ff_count;
        if (slice_packable(*l)) {
            const WorkerSlices::Packed * p = nullptr;
            const auto t_pack = std::chrono::steady_clock::now();
            st = pack_checked(*l, ff_first, ff_count, p);
            setup_us = micros_since(t_pack);
            if (!st) return st;
            w.gate_slice = &p->gate;
            w.up_slice = &p->up;
            w.down_slice = &p->down;
        }
    } else {
        const auto t_read = std::chrono::steady_clock::now();
        st = residency_.before_whole(*l);  // the originals, read back if shard mode gave them back
        setup_us = micros_since(t_read);
        if (!st) return st;
    }
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
    residency_.after(*l, ff_first, ff_count, !shard, slices_);
    if (!want_slots && n_pairs == n_used * n_rows) moe_sum_slots(slots, n_embd, n_used, n_rows, static_cast<float *>(out.data()));
    else if (!want_slots) sum_valid_slots(slots, ids, n_embd, n_used, n_rows, static_cast<float *>(out.data()));

    reply = msg_header_make(MsgKind::result);
    reply.request_id = h.request_id;
    reply.setup_us = setup_us;
    reply.layer = h.layer;
    reply.n_embd = h.n_embd;
    reply.n_ff = h.n_ff;
    reply.n_used = h.n_used;
    reply.n_rows = h.n_rows;
    reply.row_offset = h.row_offset;
    reply.n_pairs = (int32_t) n_pairs;
    reply.reply = h.reply;
    reply.glu_op = h.glu_op;
    reply.ffn_flags = h.ffn_flags;
    reply.glu_alpha = h.glu_alpha;
    reply.glu_limit = h.glu_limit;
    msg_header_set_frame(reply, 0, WireType::f32, out.data(), out.size());
    return Status::ok();
}

Status WorkerCompute::validate(const MsgHeader & h, int n, const void * const * frames, const size_t * sizes, const WorkerPlan & plan,
                               const WorkerBudget & budget, RequestCost & cost, ErrorCode & code) const {
    Status st = request_check_compute(shape_, h, n, frames, sizes, code);
    if (!st) return st;
    int64_t ff_count = 0;
    st = worker_plan_check(plan, shape_, h, frames, ff_count, code);
    if (!st) return st;
    cost = request_cost(h, ff_count);
    return budget_check(budget, cost, code);
}

// A --mmap worker's copy is read from the mapping, which holds whatever the file holds now: one made
// while the file's stamp moved may hold bytes of another content even when the file is written back
// before the next check (seen: a hello's packing while the file was tampered with, then
// restored; the re-hash found it unchanged and the tampered copy was served). Such a copy is
// dropped, and the request fails. (A default worker copies from its checked originals, or from the
// file through read_file, which checks its own read.)
Status WorkerCompute::pack_checked(const WorkerLayer & l, int64_t first, int64_t count, const WorkerSlices::Packed *& out,
                                   WorkerSlices::Use use, const WorkerSlices::SlicesInUse & in_use) {
    const bool had = slices_.holds(l.il, first, count);
    Status st = slices_.get(l, first, count, residency_.originals_held(l), out, use, in_use);
    // originals in anonymous memory were checked at load, and a copy read from the file checked its
    // read (WorkerModel::read_file): only the mapping is read as the file is now
    if (!st || had || out == nullptr || !model_.mapped()) return st;
    if (model_.file_stamp_moved()) {
        slices_.drop(l.il, first, count);
        out = nullptr;
        return Status::io_error("model " + model_.path() + " changed on disk (size, modification or status-change time) while "
                                "this worker packed its slice of layer " + std::to_string(l.il) + ": the copy is dropped");
    }
    return Status::ok();
}

void WorkerCompute::withdraw_prepack(const std::string & who) {
    for (QueuedSlice & q : queued_) q.askers.erase(std::remove(q.askers.begin(), q.askers.end(), who), q.askers.end());
    queued_.erase(std::remove_if(queued_.begin(), queued_.end(), [](const QueuedSlice & q) { return q.askers.empty() && !q.kept; }),
                  queued_.end());
}

int WorkerCompute::queue_prepack(const WorkerPlan & plan, const std::string & who) {
    if (plan.mode != WorkerPlan::Mode::shard) return 0;
    int queued = 0;
    const std::vector<WorkerLayer> & layers = model_.layers();
    for (auto l = layers.rbegin(); l != layers.rend(); ++l) {  // packed from the back: the first layer first
        const RequestShape::Layer * s = shape_.layer(l->il);
        if (s == nullptr || !slice_packable(*l)) continue;
        int64_t ranges[2][2];
        worker_plan_ff_range(plan, s->n_ff, s->ff_block, ranges[0][0], ranges[0][1]);
        worker_plan_decode_ff_range(plan, s->n_ff, s->ff_block, ranges[1][0], ranges[1][1]);
        // a range inside the other is computed from the other's copies (WorkerSlices::get): only the larger is packed
        for (int i = 0; i < 2; ++i) {
            const int64_t * r = ranges[i], * o = ranges[1 - i];
            if (ff_range_holds(o[0], o[1], r[0], r[1]) && (o[1] > r[1] || i == 1)) ranges[i][1] = 0;
        }
        for (const auto & r : ranges) {
            if (r[1] <= 0 || slices_.holds(l->il, r[0], r[1])) continue;
            auto same = std::find_if(queued_.begin(), queued_.end(),
                                     [&](const QueuedSlice & q) { return q.il == l->il && q.first == r[0] && q.count == r[1]; });
            if (same != queued_.end()) {  // queued by another connection too
                if (std::find(same->askers.begin(), same->askers.end(), who) != same->askers.end()) continue;
                if (same->askers.size() < kMaxAskers) same->askers.push_back(who);
                else same->kept = true;
                continue;
            }
            if (queued_.size() >= 4 * layers.size()) continue;  // bounded: what a layer keeps (WorkerSlices::kPerLayer)
            queued_.push_back({l->il, r[0], r[1], {who}, false});
            ++queued;
        }
    }
    return queued;
}

bool WorkerCompute::pack_one_queued(const WorkerPlans & plans) {
    while (!queued_.empty()) {
        const QueuedSlice q = queued_.back();
        queued_.pop_back();
        const WorkerLayer * l = model_.layer(q.il);
        const RequestShape::Layer * s = shape_.layer(q.il);
        if (l == nullptr || s == nullptr || slices_.holds(q.il, q.first, q.count)) continue;
        WorkerSlices::SlicesInUse in_use;  // this layer's slices of the connections that computed
        plans.for_each_computing([&](const WorkerPlan & plan) {
            if (plan.mode != WorkerPlan::Mode::shard) return;
            int64_t first = 0, count = 0;
            worker_plan_ff_range(plan, s->n_ff, s->ff_block, first, count);
            if (count > 0) in_use.push_back({first, count});
            worker_plan_decode_ff_range(plan, s->n_ff, s->ff_block, first, count);
            if (count > 0) in_use.push_back({first, count});
        });
        const WorkerSlices::Packed * p = nullptr;
        Status st = pack_checked(*l, q.first, q.count, p, WorkerSlices::Use::ahead, in_use);
        if (st && p == nullptr) continue;  // every place of the layer serves a computing connection: left to its request
        if (!st) {
            // said once: the rest would fail alike (a changed file, no memory); requests pack or say why
            LOG_WARN("packing slices ahead of their requests stopped at layer %d: %s", q.il, st.message().c_str());
            queued_.clear();
        }
        return true;
    }
    return false;
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
    release_if_larger(ids_local_, keep_bytes);
    for (auto & a : align_) release_if_larger(a, keep_bytes);
    exec_.trim(keep_bytes);
    size_t kept = (slots_.capacity() + pair_hidden_.capacity() + pair_weights_.capacity()) * sizeof(float) +
                  (pair_ids_.capacity() + ids_local_.capacity()) * sizeof(int32_t) + exec_.scratch_bytes();
    for (auto & a : align_) kept += a.capacity();
    if (kept > keep_bytes && keep_bytes > 0) trim(0);  // what is left must fit in keep_bytes as a whole
}

} // namespace moezip
