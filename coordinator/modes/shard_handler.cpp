#include "coordinator/modes/dispatch_handler.h"

#include "coordinator/balance/worker_overhead.h"
#include "coordinator/base/cpu_capacity.h"
#include "coordinator/base/log.h"
#include "coordinator/evidence/trace.h"
#include "coordinator/memory/weight_release.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace moezip {

namespace {

// Units [slice.first, slice.first + slice.count) of every expert's n_ff.
ExpertWeights slice_weights(const MoeRegion & r, const RowBlock & slice) {
    ExpertWeights w = region_expert_weights(r);
    w.ff_first = slice.first;
    w.ff_count = slice.count;
    return w;
}

} // namespace

void ShardHandler::forget_plans(const std::vector<uint64_t> & plans) {
    DispatchHandler::forget_plans(plans);
    for (uint64_t p : plans) {
        down_copies_.forget(p);
        downs_.erase(p);
        for (auto it = released_.begin(); it != released_.end();) it = (*it)[0] == (int64_t) p ? released_.erase(it) : std::next(it);
    }
}

nlohmann::json ShardHandler::memory_json() const {
    nlohmann::json j = DispatchHandler::memory_json();
    j["shard_down_copy_bytes_max"] = down_copies_.max_bytes();
    j["release_unowned"] = cfg_.shard.release_unowned;
    release_.add_to(j);
    return j;
}

void ShardHandler::release_unowned(const MoeRegion & r, const RowBlock & own, bool down_packed) {
    // again after every new packed copy: making it read the whole of down back into memory
    if (!released_.insert({(int64_t) r.plan_id, own.first, own.count, (int64_t) down_copies_.made(r.plan_id)}).second) return;
    std::vector<std::pair<const ggml_tensor *, ByteRanges>> drop = {{r.gate_exps, rows_outside_slice(r.gate_exps, own.first, own.count)},
                                                                    {r.up_exps, rows_outside_slice(r.up_exps, own.first, own.count)}};
    // down [n_ff, n_embd, n_expert]: this host reads its packed copy only (or nothing, without a slice)
    if (down_packed || own.count == 0) drop.push_back({r.down_exps, {{0, (uint64_t) r.down_exps->nb[2] * (uint64_t) r.down_exps->ne[2]}}});
    release_.release(drop, config_why_shard_resident(cfg_), "every expert's whole n_ff");
}

void ShardHandler::note_empty_slices(const MoeRegion & r, int64_t block, const std::vector<RowBlock> & slices) {
    const std::vector<double> & shares = disp_.shard_shares();
    for (size_t i = 0; i < slices.size() && i < shares.size(); ++i) {
        if (slices[i].count > 0 || shares[i] <= 0) continue;
        NoSlice & ns = no_slice_[i];
        if (!ns.layers.insert(r.il).second) continue;
        if (!ns.reason.empty()) continue;
        char text[256];
        snprintf(text, sizeof text, "share %.3g of n_ff %lld is less than one block of %lld units (%s) after rounding", shares[i],
                 (long long) r.n_ff, (long long) block, disp_.api().ggml_type_name(r.down_exps->type));
        ns.reason = text;
        const std::string who = i == 0 ? std::string("this host") : "worker " + cfg_.workers[i - 1].endpoint;
        LOG_WARN("shard: %s gets no n_ff slice in layer %d: %s; it computes nothing there (docs/config.md, [shard])", who.c_str(),
                 r.il, ns.reason.c_str());
    }
}

std::string ShardHandler::refuses(const MoeRegion & r) const {
    if (r.slot_out)
        return "shard mode returns per-row partial sums, but this split form (" + r.pattern + ") must give each slot's own "
               "output to the backend that sums them: use rows or experts mode";
    if (r.gate_b || r.up_b || r.down_b)
        return "shard mode sums partial results over n_ff slices, but these experts have biases (gpt-oss: ADD_ID after "
               "the down matmul belongs to the whole sum): use rows or experts mode";
    if (!r.repacked) return "";
    return "shard mode slices every expert's n_ff, but these experts are repacked (CPU_REPACK interleaves their rows): "
           "set no_repack = true, or use experts mode";
}

Status ShardHandler::compute(const MoeRegion & r, LayerCounters & c) {
    const int64_t n = r.n_tokens, k = r.n_used, E = r.n_embd;
    auto t0 = std::chrono::steady_clock::now();
    const Dispatcher::UsableTime checks0 = checks_ms();
    gather_inputs(r);
    const int64_t block = disp_.api().ggml_blck_size(r.down_exps->type);
    if (r.n_ff % block != 0)
        return Status::unsupported("layer " + std::to_string(r.il) + ": n_ff " + std::to_string(r.n_ff) +
                                   " is not a multiple of the down weights' block size " + std::to_string(block));
    double prepack_ms = 0;  // this host's new down slices packed at a slice change: setup, not compute
    if (cfg_.shard.auto_share) {
        if (calls_auto_ == 0) seed_prefill_split(r, r.n_ff / block);
        downs_[r.plan_id] = r.down_exps;
        prepack_ms = adjust_slices(r.n_ff / block, n);
    }
    const CallSize size = call_size(n);
    const std::vector<RowBlock> slices = split_ff(r.n_ff, block, disp_.shard_shares(size));
    if (!cfg_.shard.auto_share) note_empty_slices(r, block, slices);
    std::vector<int64_t> blocks_per_host;  // local_share = "auto": what the balancer expects this call to take
    if (cfg_.shard.auto_share) {
        for (const RowBlock & s : slices) blocks_per_host.push_back(s.count / block);
        share_bal_.count(blocks_per_host);
    }
    parts_.resize(slices.size());
    ff_frames_.resize(disp_.n_workers());
    // a shadow call verifies every worker's slice before it measures the whole region
    const bool shadow_call = cfg_.shard.shadow_every > 0 && ++calls_ % (uint64_t) cfg_.shard.shadow_every == 0;
    const uint64_t fallbacks_before = c.fallbacks;
    for (auto & p : parts_) p.resize((size_t) (E * n));

    // 1. every worker with a slice gets every row, and its slice as a fourth frame
    std::vector<std::pair<size_t, uint64_t>> pending;  // worker, request id
    std::vector<size_t> here;                          // workers whose slice this host computes
    const auto t_sent = std::chrono::steady_clock::now();
    for (size_t w = 0; w < disp_.n_workers(); ++w) {
        const RowBlock & s = slices[w + 1];
        if (s.count == 0) continue;
        if (!disp_.usable(w, r)) { here.push_back(w); continue; }
        MsgHeader h = request_header(r, n, ReplyKind::row_sums);
        ff_frames_[w] = {(int32_t) s.first, (int32_t) s.count};
        Status st = disp_.link(w).send(h, {{WireType::f32, {hidden_.data(), hidden_.size() * sizeof(float)}},
                                           {WireType::i32, {ids_.data(), ids_.size() * sizeof(int32_t)}},
                                           {WireType::f32, {weights_.data(), weights_.size() * sizeof(float)}},
                                           {WireType::i32, {ff_frames_[w].data(), sizeof(int32_t) * 2}}},
                                       disp_.fault_corrupt_request());
        if (!st) { disp_.mark_failed(w, st); here.push_back(w); continue; }
        pending.push_back({w, h.request_id});
    }
    if (!pending.empty()) disp_.let_io_thread_send();
    // 2. this host's slice, while the workers compute theirs
    const auto t_own = std::chrono::steady_clock::now();
    bool down_packed = false;
    double setup_ms = prepack_ms;  // packing this host's down slices: not compute (ms_setup)
    if (slices[0].count > 0) {
        // this host's own slice reads a packed copy of its down columns (built once per plan and slice)
        ExpertWeights own = slice_weights(r, slices[0]);
        const uint64_t made = down_copies_.made();
        const auto t_get = std::chrono::steady_clock::now();
        own.down_slice = down_copies_.get(r.plan_id, r.down_exps, slices[0].first, slices[0].count);
        if (down_copies_.made() != made) setup_ms += ms_between(t_get, std::chrono::steady_clock::now());
        down_packed = own.down_slice != nullptr;
        Status st = compute_rows_into(r, own, 0, n, parts_[0].data());
        if (!st) return st;
        c.local_rows += n;
        c.local_slots += n * k;
    }
    auto t_local = std::chrono::steady_clock::now();
    // without packing, as a worker's service time is (it packs a new plan's slices before it reads the next request)
    share_bal_.observe(0, call_size(n), (double) (n * (slices[0].count / block)), ms_between(t_own, t_local) - (setup_ms - prepack_ms));
    c.ms_local += ms_between(t0, t_local) - setup_ms;
    c.ms_setup += setup_ms;
    checks_time_to_setup(checks0, c);
    // 3. partial sums from the workers
    for (auto & p : pending) {
        WorkerLink & link = disp_.link(p.first);
        zmq::message_t data;
        // units: rows x n_ff blocks of its slice; the transfer: every row of the call
        Status rs = recv_row_sums(r, p.first, p.second, n, share_bal_, call_size(n),
                                  (double) (n * (slices[p.first + 1].count / block)), (double) n, t_sent, data);
        if (!rs) { disp_.mark_failed(p.first, rs); here.push_back(p.first); continue; }
        const bool due = disp_.verify_due(p.first);
        if (due || shadow_call) {
            const RowBlock & s = slices[p.first + 1];
            verify_buf_.resize((size_t) (E * n));
            Status vs = compute_rows_into(r, slice_weights(r, s), 0, n, verify_buf_.data());
            if (!vs) return vs;
            const std::string what = "layer " + std::to_string(r.il) + " n_ff slice " + std::to_string(s.first) + "-" +
                                     std::to_string(s.first + s.count - 1);
            if (!accept_part(p.first, data.data(), verify_buf_.data(), verify_buf_.size(), /*exact =*/ false, what)) {
                parts_[p.first + 1].swap(verify_buf_);  // this host's slice: the same bits a trusted worker sends
                disp_.count_fallback(p.first);
                c.fallbacks += 1;
                c.local_slots += n * k;
                continue;
            }
        }
        memcpy(parts_[p.first + 1].data(), data.data(), data.size());
        link.stats().rows += n;
        link.stats().pairs += n * k;
        c.remote_rows += n;
        c.remote_slots += n * k;
    }
    c.ms_wait += ms_between(t_local, std::chrono::steady_clock::now());
    // 4. a failed worker's slice: here (the same bits the worker would have sent), or stop
    for (size_t w : here) {
        if (cfg_.dispatch.on_worker_error == WorkerErrorPolicy::abort)
            return Status::io_error("worker " + cfg_.workers[w].endpoint + " unavailable and on_worker_error = \"abort\"");
        Status st = compute_rows_into(r, slice_weights(r, slices[w + 1]), 0, n, parts_[w + 1].data());
        if (!st) return st;
        disp_.count_fallback(w);
        c.fallbacks += 1;
        c.local_slots += n * k;
    }
    // every worker served its slice: what this host's slices never read can leave its memory (its
    // slice of the other call size's split too: this host's slice is the first of both)
    if (c.fallbacks == fallbacks_before && !pending.empty()) {
        const CallSize other = other_call_size(size);
        const RowBlock other_own = split_ff(r.n_ff, block, disp_.shard_shares(other))[0];
        const bool other_packed = other_own.count == 0 || other_own.count == slices[0].count ||
                                  down_copies_.holds(r.plan_id, r.down_exps, other_own.first, other_own.count);
        RowBlock own = slices[0];
        own.count = std::max(own.count, other_own.count);
        release_unowned(r, own, down_packed && other_packed);
    }
    // 5. reduce in slice order, whoever computed each slice: the result does not depend on failures
    TraceSpan combine_span("combine", "combine");
    float * out = static_cast<float *>(r.out->data);
    bool first = true;
    for (size_t i = 0; i < slices.size(); ++i) {
        if (slices[i].count == 0) continue;
        const float * p = parts_[i].data();
        if (first) memcpy(out, p, (size_t) (E * n) * sizeof(float));
        else for (int64_t j = 0; j < E * n; ++j) out[j] += p[j];
        first = false;
    }
    if (shadow_call) shadow_check(r);
    // the calls right after a slice change carry its repacks: what they took over the expected
    // time, and at least this host's own repack plus the slowest worker's. A worker packs gate, up
    // and down of its slice (this host only down), at its own speed: taken as 3 x this host's repack
    // x its expected compute time for its slice over this host's for its own.
    if (cfg_.shard.auto_share) {
        const double own_ms = blocks_per_host[0] * share_bal_.per_unit(0, size);
        double worker_factor = 0;
        for (size_t h = 1; h < blocks_per_host.size() && own_ms > 0; ++h)
            worker_factor = std::max(worker_factor, 3 * blocks_per_host[h] * share_bal_.per_unit(h, size) / own_ms);
        change_gate_.observe_call(size, r.il, ms_between(t0, std::chrono::steady_clock::now()), share_bal_.makespan(blocks_per_host, (double) n, size),
                                  setup_ms * (1 + worker_factor));
    }
    return Status::ok();
}

// A prompt's split with a worker capped by a CPU quota: at even halves the capped worker sets the
// pace of every prefill call until the calibration measures it (call kShardCalibrationCalls), and the
// change then taken costs every host a repack of its slices, the capped one at its quota. make bench
// (a3b-L4-q8_0, worker at 40% of a core) had that repack inside the prompt after the warm-up. The
// cores a host states are a guess, not a measure (another CPU, memory bandwidth): the split is judged
// at every check like any other, but a change of it has to pay for its repacks first (adjust_slices).
void ShardHandler::seed_prefill_split(const MoeRegion & r, int64_t n_blocks) {
    share_bal_.set_cores(0, cpu_capacity_self().cores_for(disp_.executor().threads()));
    for (size_t w = 0; w < disp_.n_workers(); ++w) share_bal_.set_cores(1 + w, disp_.usable(w, r) ? disp_.worker_cores(w) : 0);
    if (!share_bal_.cores_differ()) return;
    std::vector<int64_t> counts = share_bal_.solve(n_blocks, (double) r.n_tokens, CallSize::large);
    // every host keeps a block, so the calls measure it: a stated core count is a peer's word (a
    // hostile worker said 1e6 and this host got no prefill slice, its speed then guessed from the
    // worker's claim per core, which no call could correct)
    for (size_t h = 0; h < counts.size(); ++h)
        if (counts[h] == 0) give_unit_from_largest(counts, h);
    std::vector<double> shares;
    for (int64_t c : counts) shares.push_back((double) c / (double) n_blocks);
    std::string said;
    for (size_t h = 0; h < counts.size(); ++h) {
        char one[64];
        snprintf(one, sizeof one, " %.2f cores: %.3f", share_bal_.cores(h), shares[h]);
        said += (h ? ", worker " + cfg_.workers[h - 1].endpoint : std::string("this host")) + one;
    }
    LOG_INFO("shard: the first split of prefill calls follows the cores each host may use (%s); the calls measure it, "
             "and a better split is taken once its saving has paid for the repack", said.c_str());
    disp_.set_shard_shares(CallSize::large, shares);  // the hello that follows tells the workers
    change_gate_.mark_chosen(CallSize::large);         // judged at the calibration, not replaced at once
    prefill_seeded_ = true;
}

// Slices change rarely: each change is a new plan every worker must be told in a hello, and moves
// the boundaries of the partial sums (the last bits of shard results, within the tolerance). Decode
// and prefill calls have a split each: a host's speed may differ between them (a worker capped by a
// CPU quota keeps its speed in short decode calls and loses it in long prefill ones, so the split
// that balances a prompt leaves decode waiting on this host). Both stay packed (two copies of this
// host's down slice, two slices on each worker, while they differ).
double ShardHandler::adjust_slices(int64_t n_blocks, int64_t n_rows) {
    mix_.add(n_rows);
    ++calls_since_check_[(int) call_size(n_rows)];
    if (++calls_auto_ == 1) {
        split_since_[0] = split_since_[1] = std::chrono::steady_clock::now();
        std::vector<int64_t> first;
        for (const RowBlock & b : split_ff(n_blocks, 1, disp_.shard_shares())) first.push_back(b.count);
        // the calibration calls' slices: even, or seed_prefill_split's for prefill calls (then said
        // apart from the decode calls' even ones)
        share_bal_.record(0, first, /*always =*/ true, prefill_seeded_ ? "prefill" : nullptr, prefill_seeded_ ? "cores" : "even");
        if (prefill_seeded_) {
            std::vector<int64_t> even;
            for (const RowBlock & b : split_ff(n_blocks, 1, disp_.shard_shares(CallSize::small))) even.push_back(b.count);
            share_bal_.record(0, even, /*always =*/ true, "decode", "even");
        }
    }
    const bool calibration = calls_auto_ == kShardCalibrationCalls;
    if (!(calibration || (calls_auto_ > kShardCalibrationCalls && calls_auto_ % kShardAdjustEvery == 0))) return 0;
    double packed_ms = 0;
    for (CallSize size : {CallSize::small, CallSize::large}) {
        const int sc = (int) size;
        // a split is judged (changed, probed) only at checks that saw its calls: a change of the
        // prefill split during decode repacks every layer for prompts that may not come (make bench:
        // a probe at call 192 of a 64-step decode)
        if (calls_since_check_[sc] == 0 && !calibration) continue;
        std::vector<int64_t> cur;
        for (const RowBlock & b : split_ff(n_blocks, 1, disp_.shard_shares(size))) cur.push_back(b.count);
        CallMix only;  // the recent calls of this size
        only.calls[sc] = mix_.calls[sc];
        only.rows[sc] = mix_.rows[sc];
        std::vector<int64_t> next = only.calls[sc] > 0 ? share_bal_.best_for_mix(n_blocks, only, cur) : cur;
        // a better split is taken once what the current one lost since the last change pays for the
        // repack a change costs (slice_change_gate.h; the calibration's change is taken at once unless
        // the split was chosen from the cores); a probe below rides on a paid change, or waits until
        // the split went unchanged for ten times a change's price (SliceChangeGate::probe_affordable)
        const char * why = calibration && !change_gate_.chosen(size) ? "calibration" : "paid";
        if (next != cur && !change_gate_.take(size, share_bal_.mix_ms(cur, only) / only.calls[sc],
                                              share_bal_.mix_ms(next, only) / only.calls[sc], calls_since_check_[sc], calibration))
            next = cur;
        if (calls_since_check_[sc] > 0) {
            const std::vector<int64_t> unprobed = next;
            const double ms_since_change = ms_between(split_since_[sc], std::chrono::steady_clock::now());
            share_bal_.probe_idle(next, kShardProbeAdjustments, size, next != cur || change_gate_.probe_affordable(ms_since_change));
            if (next != unprobed) why = "probe";
        }
        calls_since_check_[sc] = 0;
        if (next == cur) continue;
        change_gate_.changed(size);
        split_since_[sc] = std::chrono::steady_clock::now();
        std::vector<double> shares;
        for (int64_t c : next) shares.push_back((double) c / (double) n_blocks);
        const std::vector<double> before = disp_.shard_shares(size);
        disp_.set_shard_shares(size, shares);
        ++slice_changes_;
        share_bal_.record(calls_auto_, next, /*always =*/ true, size == CallSize::small ? "decode" : "prefill", why);
        packed_ms += pack_own_slices(size, before);
    }
    mix_.age();
    downs_.clear();  // refilled by the calls until the next check: no plan freed since is dereferenced
    return packed_ms;
}

// This host's down slice of the new split of `size` calls, packed now for every plan seen since the
// last check (the workers pack theirs after the hello that tells them:
// tools/moezip-worker/request/worker_compute.h): the calls of that size that follow, a prompt's
// maybe, then compute instead of packing. The copy of the split's old slice goes first unless the
// other split reads from it: least-recently-used alone dropped the other split's live copy (review).
// Returns the time spent, ms.
double ShardHandler::pack_own_slices(CallSize size, const std::vector<double> & before) {
    const auto t0 = std::chrono::steady_clock::now();
    const CallSize other = other_call_size(size);
    for (const auto & [plan, down] : downs_) {
        const int64_t block = disp_.api().ggml_blck_size(down->type);
        if (block < 1 || down->ne[0] % block != 0) continue;
        const RowBlock own = split_ff(down->ne[0], block, disp_.shard_shares(size))[0];
        const RowBlock old = split_ff(down->ne[0], block, before)[0];
        const RowBlock kept = split_ff(down->ne[0], block, disp_.shard_shares(other))[0];
        // the old copy stays when the other split's slice is read from it (the same, or inside it)
        const bool serves_kept = kept.count > 0 && ff_range_holds(old.first, old.count, kept.first, kept.count);
        if (old.count > 0 && !serves_kept) down_copies_.drop(plan, down, old.first, old.count);
        if (own.count > 0) down_copies_.get(plan, down, own.first, own.count);
    }
    return ms_between(t0, std::chrono::steady_clock::now());
}

} // namespace moezip
