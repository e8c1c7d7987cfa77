#include "coordinator/modes/dispatch_handler.h"
#include "coordinator/balance/worker_overhead.h"

#include "coordinator/base/log.h"
#include "coordinator/modes/split.h"

#include <chrono>
#include <cmath>
#include <cstring>

namespace moezip {

nlohmann::json DispatchHandler::workers_json() const {
    nlohmann::json j = disp_.stats_json();
    if (shadow_calls_ > 0) {
        j.push_back({{"shadow", {{"calls", shadow_calls_}, {"max_abs_err", shadow_max_abs_}, {"min_cosine", shadow_min_cos_},
                                 {"exceeded", shadow_exceeded_}}}});
    }
    return j;
}

nlohmann::json DispatchHandler::memory_json() const {
    return {{"identity_digest_bytes", disp_.digests_here().bytes_read()}, {"identity_digest_ms", disp_.digests_here().ms()}};
}

void DispatchHandler::gather_inputs(const MoeRegion & r) {
    const int64_t n = r.n_tokens, E = r.n_embd;
    region_gather_routing(r, ids_, weights_);
    hidden_.resize((size_t) (n * E));
    for (int64_t t = 0; t < n; ++t) memcpy(&hidden_[t * E], region_hidden_row(r, t), E * sizeof(float));
}

void DispatchHandler::shadow_check(const MoeRegion & r) {
    const int64_t n = r.n_tokens, E = r.n_embd;
    std::vector<float> saved_slots;
    saved_slots.swap(slots_);
    shadow_out_.resize((size_t) (n * E));
    std::vector<float> out_copy(static_cast<float *>(r.out->data), static_cast<float *>(r.out->data) + n * E);
    if (!compute_rows_here(r, 0, n)) { slots_.swap(saved_slots); return; }
    // compute_rows_here wrote the exact result into r.out: compare, then put the partial result back
    memcpy(shadow_out_.data(), r.out->data, n * E * sizeof(float));
    memcpy(r.out->data, out_copy.data(), n * E * sizeof(float));
    double dot = 0, na = 0, nb = 0, max_abs = 0;
    for (int64_t i = 0; i < n * E; ++i) {
        double a = out_copy[i], b = shadow_out_[i];
        dot += a * b; na += a * a; nb += b * b;
        max_abs = std::max(max_abs, std::fabs(a - b));
    }
    double cos = (na > 0 && nb > 0) ? dot / std::sqrt(na * nb) : 1.0;
    ++shadow_calls_;
    shadow_max_abs_ = std::max(shadow_max_abs_, max_abs);
    shadow_min_cos_ = std::min(shadow_min_cos_, cos);
    slots_.swap(saved_slots);
    double scale = 1;
    for (int64_t i = 0; i < n * E; ++i) scale = std::max(scale, (double) std::fabs(shadow_out_[i]));
    if (!(max_abs <= cfg_.dispatch.verify_max_abs * scale) || cos < cfg_.dispatch.verify_min_cosine) {
        // every worker's part was verified on this call: what is left is this host's own arithmetic
        ++shadow_exceeded_;
        LOG_CAPPED(LogLevel::error, "layer %d: shadow check: max abs difference %.3g, cosine %.9f beyond the verify tolerances",
                   r.il, max_abs, cos);
    }
}

bool DispatchHandler::accept_part(size_t w, const void * theirs, const float * here, size_t n, bool exact, const std::string & what) {
    exact = exact && !disp_.inexact(w);  // other kernels (numerics = "approximate"): within the tolerances
    const PartComparison c = exact ? part_compare_exact(theirs, here, n)
                                   : part_compare_close(theirs, here, n, cfg_.dispatch.verify_max_abs, cfg_.dispatch.verify_min_cosine);
    disp_.record_verify(w, c, what);
    return c.equal;
}

Status DispatchHandler::recv_row_sums(const MoeRegion & r, size_t w, uint64_t id, int64_t n_rows, ShareBalancer & bal,
                                      CallSize size, double units, double payload_rows,
                                      std::chrono::steady_clock::time_point sent, zmq::message_t & data) {
    WorkerLink & link = disp_.link(w);
    MsgHeader rh;
    const auto t_wait = std::chrono::steady_clock::now();
    Status rs = link.recv(id, rh, data);
    if (!rs) return rs;
    const auto t_got = std::chrono::steady_clock::now();
    // a row is one sum [n_embd], or in the split form its n_used slots' own outputs (ReplyKind::slots)
    const int64_t row_floats = r.n_embd * (r.slot_out ? r.n_used : 1);
    if (rh.kind != static_cast<uint16_t>(MsgKind::result) || rh.n_rows != n_rows ||
        data.size() != (size_t) (n_rows * row_floats) * sizeof(float))
        return Status::corruption(link.endpoint() + ": result does not match the request");  // and no sample of its speed
    const double service = rh.service_us / 1000.0;
    // a restarted or replaced worker is measured afresh; the cores it states replace the old
    // process's where the split uses them (shard mode's, set with this host's at the first call)
    if (bal.bind_instance(1 + w, rh.instance) && bal.cores(0) > 0) bal.set_cores(1 + w, disp_.worker_cores(w));
    bal.observe(1 + w, size, units, result_compute_ms(rh));  // its speed: without packing its slice
    if (!disp_.take_first_after_hello(w)) bal.observe_overhead(1 + w, overhead_sample(size, payload_rows, sent, t_wait, t_got, service));
    return Status::ok();
}

MsgHeader DispatchHandler::request_header(const MoeRegion & r, int64_t n_rows, ReplyKind reply) {
    MsgHeader h = msg_header_make(MsgKind::compute);
    h.request_id = disp_.next_request_id();
    h.layer = r.il;
    h.n_embd = (int32_t) r.n_embd;
    h.n_ff = (int32_t) r.n_ff;
    h.n_used = (int32_t) r.n_used;
    h.n_rows = (int32_t) n_rows;
    h.reply = static_cast<uint16_t>(reply);
    h.glu_op = (uint32_t) r.glu_op;
    h.ffn_flags = region_ffn_flags(r);
    if (r.glu_op == GGML_GLU_OP_SWIGLU_OAI) {
        h.glu_alpha = r.glu_alpha;
        h.glu_limit = r.glu_limit;
    }
    return h;
}

Status DispatchHandler::compute_rows_here(const MoeRegion & r, int64_t first, int64_t count) {
    const int64_t row_floats = r.n_embd * (r.slot_out ? r.n_used : 1);
    return compute_rows_into(r, region_expert_weights(r), first, count, static_cast<float *>(r.out->data) + first * row_floats);
}

Status DispatchHandler::compute_rows_into(const MoeRegion & r, const ExpertWeights & w, int64_t first, int64_t count, float * out) {
    if (count == 0) return Status::ok();
    const int64_t k = r.n_used, E = r.n_embd;
    SlotBatch b;
    b.n_rows = count;
    b.k = k;
    b.hidden = &hidden_[first * E];
    b.hidden_stride = E * sizeof(float);
    b.ids = ids_.data() + first * k;
    b.weights = weights_.data() + first * k;
    slots_.resize((size_t) (E * k * count));
    MoeBuffers bufs;
    const bool in_engine = region_engine_buffers(r, bufs, /*out_may_overlap =*/ false);
    Status st = disp_.executor().compute_slots(w, b, slots_.data(), in_engine ? &bufs : nullptr);
    if (st && r.slot_out) memcpy(out, slots_.data(), slots_.size() * sizeof(float));  // the split form: slots, no sum
    else if (st) moe_sum_slots(slots_.data(), E, k, count, out);
    return st;
}

Status RowsHandler::compute(const MoeRegion & r, LayerCounters & c) {
    const int64_t n = r.n_tokens, k = r.n_used, E = r.n_embd;
    // floats of one row of the output: its sum, or in the split form its k slots (workers reply slots)
    const int64_t row_floats = r.slot_out ? k * E : E;
    const ReplyKind reply = r.slot_out ? ReplyKind::slots : ReplyKind::row_sums;
    auto t0 = std::chrono::steady_clock::now();
    const Dispatcher::UsableTime checks0 = checks_ms();
    gather_inputs(r);
    if (n < cfg_.rows.min_rows || disp_.n_workers() == 0) {
        Status st = compute_rows_here(r, 0, n);
        c.local_rows += n;
        c.local_slots += n * k;
        c.ms_local += ms_between(t0, std::chrono::steady_clock::now());
        return st;
    }
    std::vector<RowBlock> blocks = row_blocks(n);

    // 1. requests out first, so the workers compute while this host does its own rows
    std::vector<std::pair<size_t, uint64_t>> pending;  // worker, request id
    const auto t_sent = std::chrono::steady_clock::now();
    std::vector<size_t> here;                          // workers whose rows this host computes
    for (size_t w = 0; w < disp_.n_workers(); ++w) {
        const RowBlock & b = blocks[w + 1];
        if (b.count == 0) continue;
        if (!disp_.usable(w, r)) { here.push_back(w); continue; }
        MsgHeader h = request_header(r, b.count, reply);
        h.row_offset = (int32_t) b.first;
        Status st = disp_.link(w).send(h, {{WireType::f32, {&hidden_[b.first * E], (size_t) (b.count * E) * sizeof(float)}},
                                           {WireType::i32, {&ids_[b.first * k], (size_t) (b.count * k) * sizeof(int32_t)}},
                                           {WireType::f32, {&weights_[b.first * k], (size_t) (b.count * k) * sizeof(float)}}},
                                       disp_.fault_corrupt_request());
        if (!st) { disp_.mark_failed(w, st); here.push_back(w); continue; }
        pending.push_back({w, h.request_id});
    }
    if (!pending.empty()) disp_.let_io_thread_send();
    // 2. this host's rows
    const auto t_own = std::chrono::steady_clock::now();
    Status st = compute_rows_here(r, blocks[0].first, blocks[0].count);
    if (!st) return st;
    c.local_rows += blocks[0].count;
    c.local_slots += blocks[0].count * k;
    auto t_local = std::chrono::steady_clock::now();
    c.ms_local += ms_between(t0, t_local);
    checks_time_to_setup(checks0, c);
    share_bal_.observe(0, call_size(n), (double) blocks[0].count, ms_between(t_own, t_local));
    // 3. results land in their original row positions
    float * out = static_cast<float *>(r.out->data);
    for (auto & p : pending) {
        const RowBlock & b = blocks[p.first + 1];
        WorkerLink & link = disp_.link(p.first);
        zmq::message_t data;
        Status rs = recv_row_sums(r, p.first, p.second, b.count, share_bal_, call_size(n), (double) b.count,
                                  (double) b.count, t_sent, data);
        if (!rs) { disp_.mark_failed(p.first, rs); here.push_back(p.first); continue; }
        if (disp_.verify_due(p.first)) {
            verify_buf_.resize((size_t) (b.count * row_floats));
            st = compute_rows_into(r, region_expert_weights(r), b.first, b.count, verify_buf_.data());
            if (!st) return st;
            const std::string what = "layer " + std::to_string(r.il) + " rows " + std::to_string(b.first) + "-" +
                                     std::to_string(b.first + b.count - 1);
            if (!accept_part(p.first, data.data(), verify_buf_.data(), verify_buf_.size(), /*exact =*/ true, what)) {
                memcpy(out + b.first * row_floats, verify_buf_.data(), verify_buf_.size() * sizeof(float));
                disp_.count_fallback(p.first);
                c.fallbacks += 1;
                c.local_rows += b.count;
                c.local_slots += b.count * k;
                continue;
            }
        }
        memcpy(out + b.first * row_floats, data.data(), data.size());
        link.stats().rows += b.count;
        link.stats().pairs += b.count * k;
        c.remote_rows += b.count;
        c.remote_slots += b.count * k;
    }
    c.ms_wait += ms_between(t_local, std::chrono::steady_clock::now());
    // 4. a failed worker's rows: here, or stop
    for (size_t w : here) {
        const RowBlock & b = blocks[w + 1];
        if (cfg_.dispatch.on_worker_error == WorkerErrorPolicy::abort)
            return Status::io_error("worker " + cfg_.workers[w].endpoint + " unavailable and on_worker_error = \"abort\"");
        st = compute_rows_here(r, b.first, b.count);
        if (!st) return st;
        disp_.count_fallback(w);
        c.fallbacks += 1;
        c.local_rows += b.count;
        c.local_slots += b.count * k;
    }
    return Status::ok();
}

std::vector<RowBlock> RowsHandler::row_blocks(int64_t n) {
    if (!cfg_.rows.auto_share) {
        std::vector<double> shares = {cfg_.rows.local_share};
        for (const WorkerConfig & w : cfg_.workers) shares.push_back(w.share);
        return split_rows(n, shares);
    }
    const std::vector<int64_t> counts = share_bal_.split(n, 1.0, call_size(n));
    share_bal_.count(counts);
    share_bal_.record(++split_calls_, counts);
    return split_counts(counts);
}

static std::vector<std::string> host_names(const Config & cfg) {
    std::vector<std::string> names = {"here"};
    for (const WorkerConfig & w : cfg.workers) names.push_back(w.endpoint);
    return names;
}

nlohmann::json RowsHandler::balance_json() const {
    if (!cfg_.rows.auto_share) return nullptr;
    nlohmann::json j = share_bal_.to_json(host_names(cfg_), "row");
    j["mode"] = "rows";
    j["calls"] = split_calls_;
    return j;
}

nlohmann::json ShardHandler::balance_json() const {
    if (!cfg_.shard.auto_share) {
        if (no_slice_.empty()) return nullptr;
        const std::vector<std::string> names = host_names(cfg_);
        nlohmann::json none = nlohmann::json::array();
        for (const auto & [host, ns] : no_slice_)
            none.push_back({{"host", names[host]}, {"share", disp_.shard_shares()[host]}, {"layers", ns.layers}, {"reason", ns.reason}});
        return {{"mode", "shard"}, {"shares", disp_.shard_shares()}, {"no_slice", none}};
    }
    nlohmann::json j = share_bal_.to_json(host_names(cfg_), "row x n_ff block");
    j["mode"] = "shard";
    j["slice_changes"] = slice_changes_;
    j.update(change_gate_.to_json());  // slice_change_cost_ms, slice_changes_declined, regret_ms(_decode, _prefill)
    j["shares"] = disp_.shard_shares(CallSize::large);
    j["decode_shares"] = disp_.shard_shares(CallSize::small);
    return j;
}

} // namespace moezip
