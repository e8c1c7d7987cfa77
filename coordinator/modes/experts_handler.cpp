#include "coordinator/modes/dispatch_handler.h"
#include "coordinator/balance/worker_overhead.h"

#include "coordinator/base/log.h"
#include "coordinator/evidence/trace.h"
#include "coordinator/balance/expert_balance.h"
#include "coordinator/modes/split.h"
#include "coordinator/memory/page_presence.h"
#include "coordinator/memory/weight_release.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace moezip {

/// One worker's share of one call: the rows that selected any of its experts, sent once each.
struct ExpertsHandler::Part {
    std::vector<int64_t> rows;                       // region row of each sent row
    std::vector<std::pair<int64_t, int64_t>> pairs;  // (row, slot) it computes, in (row, slot) order
    std::vector<float> hidden;                       // [n_embd, rows]
    std::vector<int32_t> ids;                        // [n_used, rows], -1 = not this worker's slot
    std::vector<float> weights;                      // [n_used, rows]
    uint64_t request_id = 0;
    std::chrono::steady_clock::time_point sent_at;   // for the balancer's overhead estimate
    bool sent = false, done = false;
    // exact combine, every row's pairs its slots 0..m-1: the reply is one sum per row, the first m
    // adds of the engine's ADD chain (is_slot_prefix), instead of one output per slot
    bool prefix_sums = false;
    zmq::message_t result;                           // slots [n_embd, pairs] or row sums [n_embd, rows]
};

// True when, for every row of a part, its (row, slot) pairs (in (row, slot) order) are slots 0, 1,
// .., m-1 of that row, and some row has more than one: then a worker's row_sums reply is, per row,
// exactly the engine's ADD chain over those slots (the worker adds them in slot order,
// tools/moezip-worker/request/worker_compute.cpp), and this host continues the chain from it
// (moe_sum_slots_after_prefix): the same f32 adds in the same order, 1/m of the reply's bytes.
static bool is_slot_prefix(const std::vector<std::pair<int64_t, int64_t>> & pairs, size_t n_rows) {
    if (pairs.size() <= n_rows) return false;  // one slot per row: the per-slot reply is as small
    for (size_t q = 0; q < pairs.size(); ++q) {
        const bool row_start = q == 0 || pairs[q].first != pairs[q - 1].first;
        if (pairs[q].second != (row_start ? 0 : pairs[q - 1].second + 1)) return false;
    }
    return true;
}

ExpertsHandler::ExpertsHandler(const Config & cfg, const GgmlApi & api, EngineIdentity self)
    : DispatchHandler(cfg, api, std::move(self)) {
    if (!cfg.experts.copy_local) own_copies_.disable("experts.copy_local = false");
    // a shadow check computes every expert from the mapping: this host's would then be held twice
    else if (cfg.experts.shadow_every > 0) own_copies_.disable("experts.shadow_every > 0 (shadow checks read every expert from the mapping)");
}

Status ExpertsHandler::compute_pairs_here(const MoeRegion & r, const std::vector<std::pair<int64_t, int64_t>> & pairs) {
    if (pairs.empty()) return Status::ok();
    // this host's experts from their anonymous copy, the others (a fallback, a check of a worker's
    // part) from the engine's mapping: two batches, each slot computed alone, so the same bits
    const ExpertWeights mapped = region_expert_weights(r);
    const std::vector<bool> * held = own_copies_.held(r.plan_id, mapped);
    if (held == nullptr) return compute_pairs_with(r, mapped, pairs);
    pairs_copied_.clear();
    pairs_mapped_.clear();
    for (const auto & q : pairs) {
        const int32_t e = ids_[q.first * r.n_used + q.second];  // the engine's top-k: in [0, n_expert)
        (e >= 0 && (size_t) e < held->size() && (*held)[(size_t) e] ? pairs_copied_ : pairs_mapped_).push_back(q);
    }
    if (!pairs_copied_.empty()) {
        Status st = compute_pairs_with(r, own_copies_.weights(r.plan_id, mapped), pairs_copied_);
        if (!st) return st;
        slots_from_copy_ += pairs_copied_.size();
    }
    return compute_pairs_with(r, mapped, pairs_mapped_);
}

Status ExpertsHandler::compute_pairs_with(const MoeRegion & r, const ExpertWeights & w, const std::vector<std::pair<int64_t, int64_t>> & pairs) {
    if (pairs.empty()) return Status::ok();
    const int64_t E = r.n_embd, k = r.n_used, P = (int64_t) pairs.size();
    pair_hidden_.resize((size_t) (E * P));
    pair_ids_.resize((size_t) P);
    pair_weights_.resize((size_t) P);
    pair_out_.resize((size_t) (E * P));
    for (int64_t p = 0; p < P; ++p) {
        int64_t t = pairs[p].first, s = pairs[p].second;
        memcpy(&pair_hidden_[p * E], &hidden_[t * E], E * sizeof(float));
        pair_ids_[p] = ids_[t * k + s];
        pair_weights_[p] = weights_[t * k + s];
    }
    // one slot per "row": each (row, slot) pair is computed exactly as in the engine's batch
    SlotBatch b;
    b.n_rows = P;
    b.k = 1;
    b.hidden = pair_hidden_.data();
    b.hidden_stride = E * sizeof(float);
    b.ids = pair_ids_.data();
    b.weights = pair_weights_.data();
    MoeBuffers bufs;  // intermediates in the region's node memory; results go to our own pair_out_
    const bool in_engine = region_engine_buffers(r, bufs, /*out_may_overlap =*/ false);
    Status st = disp_.executor().compute_slots(w, b, pair_out_.data(), in_engine ? &bufs : nullptr);
    if (!st) return st;
    for (int64_t p = 0; p < P; ++p)
        memcpy(&slots_[(pairs[p].first * k + pairs[p].second) * E], &pair_out_[p * E], E * sizeof(float));
    return Status::ok();
}

// Computes worker w's part here and compares it with what the worker sent (exact: its per-slot
// outputs bit for bit; partial: its per-row sums within the tolerances). This host's per-slot values
// are left in slots_ either way. False with st ok: the worker's part must not be used.
bool ExpertsHandler::verify_part(const MoeRegion & r, size_t w, const Part & p, bool exact, Status & st) {
    st = compute_pairs_here(r, p.pairs);  // into slots_, where the combine reads them if the part is refused
    if (!st) return false;
    const int64_t E = r.n_embd, k = r.n_used;
    const std::string what = "layer " + std::to_string(r.il) + ", " + std::to_string(p.pairs.size()) + " slots of " +
                             std::to_string(p.rows.size()) + " rows";
    auto slot = [&](size_t q) { return &slots_[(p.pairs[q].first * k + p.pairs[q].second) * E]; };
    if (exact && !p.prefix_sums) {
        // the worker's per-slot outputs [n_embd, pairs] in (row, slot) order
        verify_buf_.resize((size_t) E * p.pairs.size());
        for (size_t q = 0; q < p.pairs.size(); ++q) memcpy(&verify_buf_[q * E], slot(q), E * sizeof(float));
        return accept_part(w, p.result.data(), verify_buf_.data(), verify_buf_.size(), true, what);
    }
    // the worker's row sums: per row, its first slot copied and the next ones added in slot order
    // (with exact combine a slot-order prefix of the chain: compared bit for bit)
    verify_buf_.assign((size_t) E * p.rows.size(), 0.0f);
    size_t row = 0;
    for (size_t q = 0; q < p.pairs.size(); ++q) {
        const bool first = q == 0 || p.pairs[q].first != p.pairs[q - 1].first;
        if (first && q > 0) ++row;
        float * o = &verify_buf_[row * E];
        const float * v = slot(q);
        for (int64_t j = 0; j < E; ++j) o[j] = first ? v[j] : o[j] + v[j];
    }
    return accept_part(w, p.result.data(), verify_buf_.data(), verify_buf_.size(), exact, what);
}

Status ExpertsHandler::compute(const MoeRegion & r, LayerCounters & c) {
    const int64_t n = r.n_tokens, k = r.n_used, E = r.n_embd;
    // the split form hands each slot's own output to another backend: per-slot replies, whatever the combine
    const bool exact = cfg_.experts.combine == ExpertCombine::exact || r.slot_out;
    // partial combine: a shadow call verifies every worker's part before it measures the whole region
    const bool shadow_call = !exact && cfg_.experts.shadow_every > 0 && ++partial_calls_ % (uint64_t) cfg_.experts.shadow_every == 0;
    if ((int64_t) owners_.size() != r.n_expert) {
        Status cov = config_check_expert_coverage(cfg_, (int) r.n_expert);
        if (!cov) return cov;
        owners_ = expert_owners(cfg_, (int) r.n_expert);
        owner_sets_ = expert_owner_sets(cfg_, (int) r.n_expert);
        own_.assign((size_t) r.n_expert, false);
        for (size_t e = 0; e < owner_sets_.size(); ++e)
            own_[e] = std::find(owner_sets_[e].begin(), owner_sets_[e].end(), -1) != owner_sets_[e].end();
    }
    const auto t_setup = std::chrono::steady_clock::now();
    plan_weights_[r.plan_id] = {r.gate_exps, r.up_exps, r.down_exps};
    own_copies_.prepare(r.plan_id, region_expert_weights(r), own_);  // once per plan, before ms_local's clock starts
    auto t0 = std::chrono::steady_clock::now();
    c.ms_setup += ms_between(t_setup, t0);
    const Dispatcher::UsableTime checks0 = checks_ms();
    gather_inputs(r);
    slots_.assign((size_t) (E * k * n), 0.0f);
    const CallSize size = call_size(n);
    const std::vector<int> host_of = assign_hosts(r, size);  // per expert: 0 = here, 1 + w = worker w

    // 1. build and send each worker's part (only rows that selected its experts)
    std::vector<Part> parts(disp_.n_workers());
    std::vector<std::pair<int64_t, int64_t>> local_pairs;
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t s = 0; s < k; ++s) {
            const int h = host_of[ids_[t * k + s]];
            if (h == 0) { local_pairs.push_back({t, s}); continue; }
            Part & p = parts[h - 1];
            if (p.rows.empty() || p.rows.back() != t) {
                p.rows.push_back(t);
                p.hidden.insert(p.hidden.end(), &hidden_[t * E], &hidden_[t * E] + E);
                p.ids.insert(p.ids.end(), k, -1);
                p.weights.insert(p.weights.end(), k, 0.0f);
            }
            p.ids[(p.rows.size() - 1) * k + s] = ids_[t * k + s];
            p.weights[(p.rows.size() - 1) * k + s] = weights_[t * k + s];
            p.pairs.push_back({t, s});
        }
    }
    // Every worker is asked whether it is usable before any part is sent: under "abort" a part whose
    // worker is down fails the compute, and a part already sent to another worker would then never
    // be collected. Its reply would wait in that link's receive queue (up to ZeroMQ's high-water
    // mark of 1000 replies, each of the part's rows x n_embd f32): while one worker was out, every
    // failed compute queued one more reply from the others, and the host's memory grew by that
    // queue at each outage.
    std::vector<bool> usable(parts.size(), false);
    for (size_t w = 0; w < parts.size(); ++w) {
        Part & p = parts[w];
        if (p.rows.empty()) continue;
        usable[w] = disp_.usable(w, r);
        if (!usable[w] && cfg_.dispatch.on_worker_error == WorkerErrorPolicy::abort && !covered_here(r, p))
            return Status::io_error("worker " + cfg_.workers[w].endpoint + " unavailable and on_worker_error = \"abort\"");
    }
    for (size_t w = 0; w < parts.size(); ++w) {
        Part & p = parts[w];
        if (p.rows.empty() || !usable[w]) continue;
        // the split form hands every slot's own output on: no sums, whatever the combine
        p.prefix_sums = exact && !r.slot_out && is_slot_prefix(p.pairs, p.rows.size());
        MsgHeader h = request_header(r, (int64_t) p.rows.size(), exact && !p.prefix_sums ? ReplyKind::slots : ReplyKind::row_sums);
        p.request_id = h.request_id;
        p.sent_at = std::chrono::steady_clock::now();
        Status st = disp_.link(w).send(h, {{WireType::f32, {p.hidden.data(), p.hidden.size() * sizeof(float)}},
                                           {WireType::i32, {p.ids.data(), p.ids.size() * sizeof(int32_t)}},
                                           {WireType::f32, {p.weights.data(), p.weights.size() * sizeof(float)}}},
                                       disp_.fault_corrupt_request());
        if (!st) disp_.mark_failed(w, st); else p.sent = true;
    }
    if (std::any_of(parts.begin(), parts.end(), [](const Part & p) { return p.sent; })) disp_.let_io_thread_send();
    // 2. this host's experts, while the workers compute theirs
    auto t_own = std::chrono::steady_clock::now();
    Status st = compute_pairs_here(r, local_pairs);
    if (!st) return st;
    c.local_slots += local_pairs.size();
    for (size_t i = 0; i < local_pairs.size(); ++i)  // rows with at least one slot computed here
        if (i == 0 || local_pairs[i].first != local_pairs[i - 1].first) ++c.local_rows;
    auto t_local = std::chrono::steady_clock::now();
    c.ms_local += ms_between(t0, t_local);
    checks_time_to_setup(checks0, c);
    balancer_.observe_compute(0, size, (int64_t) local_pairs.size(), ms_between(t_own, t_local));

    // 3. collect; a failed part is computed here or stops the compute
    for (size_t w = 0; w < parts.size(); ++w) {
        Part & p = parts[w];
        if (p.rows.empty()) continue;
        if (p.sent) {
            WorkerLink & link = disp_.link(w);
            MsgHeader rh;
            const auto t_wait = std::chrono::steady_clock::now();
            Status rs = link.recv(p.request_id, rh, p.result);
            if (rs) observe_reply(w, size, p, rh, t_wait);
            const bool per_slot = exact && !p.prefix_sums;
            size_t expect = (size_t) (E * (per_slot ? (int64_t) p.pairs.size() : (int64_t) p.rows.size())) * sizeof(float);
            if (rs && (rh.kind != static_cast<uint16_t>(MsgKind::result) || p.result.size() != expect ||
                       (per_slot && rh.n_pairs != (int32_t) p.pairs.size())))
                rs = Status::corruption(link.endpoint() + ": result does not match the request");
            if (rs) {
                if (p.prefix_sums) {  // used (combined below) unless a check refuses it
                    ++link.stats().prefix_sum_replies;
                    link.stats().prefix_sum_rows += p.rows.size();
                    link.stats().prefix_sum_slots += p.pairs.size();
                }
                const bool due = disp_.verify_due(w);
                if (due || shadow_call) {
                    // The check reads this worker's experts here; the pages it faults in stay (dropping
                    // them again after every check cost more than the check: /proc/self/maps, madvise
                    // and the faults at the next check). Verification trades some pooled memory for trust.
                    Status vs;
                    if (!verify_part(r, w, p, exact, vs)) {
                        if (!vs) return vs;
                        disp_.count_fallback(w);  // this host's values (in slots_) are used, p.done stays false
                        c.fallbacks += 1;
                        c.local_slots += p.pairs.size();
                        continue;
                    }
                }
                p.done = true;
                if (!released_.count({r.plan_id, w})) release_unowned(r, w);
                link.stats().rows += p.rows.size();
                link.stats().pairs += p.pairs.size();
                c.remote_rows += p.rows.size();
                c.remote_slots += p.pairs.size();
                if (per_slot) {
                    // libzmq may hand large frames back at addresses not aligned for float: copy bytes
                    const char * res = static_cast<const char *>(p.result.data());
                    for (size_t q = 0; q < p.pairs.size(); ++q)
                        memcpy(&slots_[(p.pairs[q].first * k + p.pairs[q].second) * E], res + q * E * sizeof(float), E * sizeof(float));
                }
                continue;
            }
            disp_.mark_failed(w, rs);
        }
        if (covered_here(r, p)) {
            // this host owns every expert of the part too (a replica): computed here as configured
            st = compute_pairs_here(r, p.pairs);
            if (!st) return st;
            balancer_.count_covered(0, (int64_t) p.pairs.size());
            c.local_slots += p.pairs.size();
            continue;
        }
        if (cfg_.dispatch.on_worker_error == WorkerErrorPolicy::abort)
            return Status::io_error("worker " + cfg_.workers[w].endpoint + " unavailable and on_worker_error = \"abort\"");
        st = compute_pairs_here(r, p.pairs);
        if (!st) return st;
        released_.erase({r.plan_id, w});  // the fallback faulted them back in: drop them again when w serves again
        disp_.count_fallback(w);
        c.fallbacks += 1;
        c.local_slots += p.pairs.size();
    }
    c.ms_wait += ms_between(t_local, std::chrono::steady_clock::now());

    // 4. combine
    TraceSpan combine_span("combine", "combine");
    float * out = static_cast<float *>(r.out->data);
    if (r.slot_out) {  // the split form: every slot's own output, in the engine's layout; no sum here
        region_write_slots(r, slots_.data());
        return Status::ok();
    }
    if (exact) {
        combine_exact(r, parts, out);
        return Status::ok();
    }
    return merge_partial(r, parts, shadow_call);
}

std::vector<int> ExpertsHandler::assign_hosts(const MoeRegion & r, CallSize size) {
    const int64_t n = r.n_tokens, k = r.n_used;
    expert_slots_.assign((size_t) r.n_expert, 0);
    for (int64_t i = 0; i < n * k; ++i) ++expert_slots_[ids_[i]];
    std::vector<int8_t> usable(disp_.n_workers(), -1);  // asked once per call, only for owners of a selected expert
    std::vector<ExpertGroup> groups;
    for (int e = 0; e < (int) r.n_expert; ++e) {
        if (expert_slots_[e] == 0) continue;
        ExpertGroup g;
        g.expert = e;
        g.slots = expert_slots_[e];
        const std::vector<int> & owners = owner_sets_[e];
        for (int o : owners) {
            if (o < 0) { g.hosts.push_back(0); continue; }
            if (owners.size() > 1 && usable[o] < 0) usable[o] = disp_.usable((size_t) o, r) ? 1 : 0;
            if (owners.size() == 1 || usable[o] == 1) g.hosts.push_back(1 + o);
        }
        // no usable owner: the first one keeps it, and its failure is handled as without replicas
        if (g.hosts.empty()) g.hosts.push_back(owners[0] < 0 ? 0 : 1 + owners[0]);
        groups.push_back(std::move(g));
    }
    const std::vector<int> chosen = balancer_.assign(groups, size);
    std::vector<int> host_of((size_t) r.n_expert, 0);
    for (size_t g = 0; g < groups.size(); ++g) host_of[groups[g].expert] = chosen[g];
    // decode: the worker's slots as a prefix of the slot order, so its reply is one sum (same counts)
    if (n == 1 && cfg_.experts.replicas && cfg_.experts.combine == ExpertCombine::exact)
        prefer_slot_prefix(ids_.data(), k, groups, host_of);
    return host_of;
}

void ExpertsHandler::observe_reply(size_t w, CallSize size, const Part & p, const MsgHeader & rh,
                                   std::chrono::steady_clock::time_point t_wait) {
    const auto now = std::chrono::steady_clock::now();
    const double service = rh.service_us / 1000.0;
    balancer_.bind_instance(1 + w, rh.instance);  // a restarted or replaced worker is measured afresh
    balancer_.observe_compute(1 + w, size, (int64_t) p.pairs.size(), result_compute_ms(rh));
    // payload, in the unit the balancer's transfer cost is per (ExpertBalancer::expected_ms): slots
    // with exact combine (a prefix-sum reply's fewer bytes then show as a lower cost per slot), rows
    // with partial combine
    const bool exact = cfg_.experts.combine == ExpertCombine::exact;
    const double payload = exact ? (double) p.pairs.size() : (double) p.rows.size();
    balancer_.observe_overhead(1 + w, overhead_sample(size, payload, p.sent_at, t_wait, now, service));
}

bool ExpertsHandler::covered_here(const MoeRegion & r, const Part & p) const {
    if (!cfg_.experts.replicas) return false;
    for (const auto & q : p.pairs)
        if (owners_[ids_[q.first * r.n_used + q.second]] != -1) return false;
    return true;
}

nlohmann::json ExpertsHandler::balance_json() const {
    if (!cfg_.experts.replicas) return nullptr;
    std::vector<std::string> names = {"here"};
    for (const WorkerConfig & w : cfg_.workers) names.push_back(w.endpoint);
    return balancer_.to_json(names);
}

void ExpertsHandler::combine_exact(const MoeRegion & r, const std::vector<Part> & parts, float * out) {
    const int64_t n = r.n_tokens, k = r.n_used, E = r.n_embd;
    // rows whose first slots came back as one sum (a worker's prefix part): where it is, and m
    prefix_at_.assign((size_t) n, nullptr);
    prefix_len_.assign((size_t) n, 0);
    bool any = false;
    for (const Part & p : parts) {
        if (!p.done || !p.prefix_sums) continue;
        const char * res = static_cast<const char *>(p.result.data());  // possibly unaligned (libzmq)
        for (size_t q = 0, i = 0; q < p.pairs.size(); ++q) {
            if (q > 0 && p.pairs[q].first != p.pairs[q - 1].first) ++i;
            prefix_at_[(size_t) p.pairs[q].first] = res + i * E * sizeof(float);
            prefix_len_[(size_t) p.pairs[q].first] = p.pairs[q].second + 1;
            any = true;
        }
    }
    if (!any) {
        moe_sum_slots(slots_.data(), E, k, n, out);
        return;
    }
    for (int64_t t = 0; t < n; ++t) {
        if (prefix_at_[(size_t) t] != nullptr)
            moe_sum_slots_after_prefix(prefix_at_[(size_t) t], prefix_len_[(size_t) t], &slots_[t * k * E], E, k, out + t * E);
        else
            moe_sum_slots(&slots_[t * k * E], E, k, 1, out + t * E);
    }
}

Status ExpertsHandler::merge_partial(const MoeRegion & r, std::vector<Part> & parts, bool shadow_call) {
    const int64_t n = r.n_tokens, k = r.n_used, E = r.n_embd;
    float * out = static_cast<float *>(r.out->data);
    // slots computed here (own experts and fallbacks) in slot order, then each worker's partial sum
    std::vector<uint8_t> remote((size_t) (n * k), 0);
    for (const Part & p : parts)
        if (p.done)
            for (const auto & q : p.pairs) remote[q.first * k + q.second] = 1;
    memset(out, 0, n * E * sizeof(float));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t s = 0; s < k; ++s)
            if (!remote[t * k + s])
                for (int64_t j = 0; j < E; ++j) out[t * E + j] += slots_[(t * k + s) * E + j];
    std::vector<float> row((size_t) E);
    for (const Part & p : parts) {
        if (!p.done) continue;
        const char * res = static_cast<const char *>(p.result.data());  // possibly unaligned (libzmq)
        for (size_t i = 0; i < p.rows.size(); ++i) {
            memcpy(row.data(), res + i * E * sizeof(float), E * sizeof(float));
            for (int64_t j = 0; j < E; ++j) out[p.rows[i] * E + j] += row[j];
        }
    }
    if (shadow_call) shadow_check(r);
    return Status::ok();
}

void ExpertsHandler::release_unowned(const MoeRegion & r, size_t w) {
    released_.insert({r.plan_id, w});
    if (!release_.not_released.empty()) return;
    // The experts this host does not own (replicas of its own stay resident) of every worker released
    // for this plan, w included: dropped together, a page shared by two workers' experts (a slice
    // boundary inside a page) is dropped too; per worker it never was, and reads nearby (the
    // kernel's fault-around at a fault maps up to 16 cached neighbouring pages) kept it resident.
    std::vector<int> experts;
    for (size_t e = 0; e < owner_sets_.size(); ++e) {
        if (owners_[e] == -1) continue;
        for (int o : owner_sets_[e])
            if (o >= 0 && released_.count({r.plan_id, (size_t) o})) { experts.push_back((int) e); break; }
    }
    const std::string kept_why = config_why_experts_resident(cfg_);
    if (kept_why.empty() && experts.empty()) return;  // every expert w serves is this host's too
    std::vector<std::pair<const ggml_tensor *, ByteRanges>> drop;
    for (const ggml_tensor * t : {r.gate_exps, r.up_exps, r.down_exps}) {
        drop.push_back({t, {}});
        Status st = expert_slice_ranges(t, experts, drop.back().second);
        if (!st) return;  // owners_ is sized from this region's n_expert: cannot happen
    }
    release_.release(drop, kept_why, "the experts workers own");
}

ExpertsHandler::WorkerExpertsPresence ExpertsHandler::worker_experts_presence() const {
    WorkerExpertsPresence out;
    std::vector<int> theirs;
    for (size_t e = 0; e < own_.size(); ++e)
        if (!own_[e]) theirs.push_back((int) e);
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    for (const auto & kv : plan_weights_)
        for (const ggml_tensor * t : kv.second) {
            ByteRanges br;
            if (t == nullptr || t->data == nullptr || !expert_slice_ranges(t, theirs, br)) continue;
            const uintptr_t base = reinterpret_cast<uintptr_t>(t->data);
            for (const auto & b : br) ranges.push_back({base + b.first, base + b.second});
        }
    // whole pages of them: a page shared with this host's weights does not count
    out.measured = !plan_weights_.empty() && pages_present_bytes(ranges, out.pages, out.present);
    return out;
}

void ExpertsHandler::forget_plans(const std::vector<uint64_t> & plans) {
    // the weights are still mapped here (the engine frees them after this): their last state
    const WorkerExpertsPresence before = worker_experts_presence();
    if (before.measured) presence_at_free_ = before;
    DispatchHandler::forget_plans(plans);
    for (uint64_t p : plans) {
        own_copies_.forget(p);
        plan_weights_.erase(p);
        for (auto it = released_.lower_bound({p, 0}); it != released_.end() && it->first == p;) it = released_.erase(it);
    }
}

nlohmann::json ExpertsHandler::memory_json() const {
    nlohmann::json j = DispatchHandler::memory_json();
    j["release_unowned"] = cfg_.experts.release_unowned;
    release_.add_to(j);
    j["copy_local"] = cfg_.experts.copy_local;
    j["own_copy_slots"] = slots_from_copy_;
    own_copies_.add_to(j);
    // the experts only workers compute: how much of them is in this process's memory now, or, once
    // the engine freed the weights (a model's end, before the exit report), when it freed them
    WorkerExpertsPresence now = worker_experts_presence();
    if (!now.measured) now = presence_at_free_;
    if (now.measured) {
        j["worker_experts_mapped_bytes"] = now.pages;
        j["worker_experts_resident_bytes"] = now.present;
    }
    return j;
}

} // namespace moezip
