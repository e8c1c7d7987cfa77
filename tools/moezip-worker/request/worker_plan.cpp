#include "tools/moezip-worker/request/worker_plan.h"

#include "coordinator/modes/split.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace moezip {

namespace {

Status refuse(ErrorCode & code, const std::string & why) {
    code = ErrorCode::bad_plan;
    return Status::invalid_argument("hello: plan " + why);
}

// One split of n_ff: 1..1024 numbers in [0, 1] summing to 1 (+-1e-6), `size` of them unless 0.
Status parse_split(const nlohmann::json & plan, const char * key, size_t size, std::vector<double> & out, ErrorCode & code) {
    auto shares = plan.find(key);
    if (shares == plan.end() || !shares->is_array() || shares->empty() || shares->size() > 1024)
        return refuse(code, std::string("mode shard needs \"") + key + "\": 1..1024 numbers");
    if (size > 0 && shares->size() != size) return refuse(code, std::string(key) + " must have as many numbers as shares");
    double sum = 0;
    for (const auto & s : *shares) {
        if (!s.is_number() || !std::isfinite(s.get<double>()) || s.get<double>() < 0 || s.get<double>() > 1)
            return refuse(code, std::string(key) + " must be numbers in [0, 1]");
        out.push_back(s.get<double>());
        sum += out.back();
    }
    if (std::fabs(sum - 1.0) > 1e-6) return refuse(code, std::string(key) + " must sum to 1");
    return Status::ok();
}

Status parse_shares(const nlohmann::json & plan, const RequestShape & shape, WorkerPlan & out, ErrorCode & code) {
    Status st = parse_split(plan, "shares", 0, out.shares, code);
    if (!st) return st;
    if (plan.contains("decode_shares") && !(st = parse_split(plan, "decode_shares", out.shares.size(), out.decode_shares, code))) return st;
    auto slice = plan.find("slice");
    if (slice == plan.end() || !slice->is_number_integer() || slice->get<int64_t>() < 0 ||
        slice->get<int64_t>() >= (int64_t) out.shares.size())
        return refuse(code, "mode shard needs \"slice\": an index into shares");
    out.slice = (int) slice->get<int64_t>();
    // A zero share is an empty n_ff slice in every layer: nothing this connection could be asked for.
    // The coordinator never says hello to a worker whose slice is empty (ShardHandler skips it before
    // Dispatcher::usable), so such a hello is not from it. A request for an empty slice is refused
    // anyway (bad_shape); this refuses the plan itself. With two splits, one may leave it empty.
    if (out.shares[out.slice] == 0 && (out.decode_shares.empty() || out.decode_shares[out.slice] == 0))
        return refuse(code, "slice " + std::to_string(out.slice) + " has share 0: an empty n_ff slice");
    // A share smaller than one block of n_ff (1e-300, or one of 1024 equal shares of 768) is empty in
    // every layer too: the slices are whole blocks (split_ff). Such a hello was once
    // accepted and every request on it refused (bad_shape).
    bool any = shape.layers.empty();
    for (const RequestShape::Layer & l : shape.layers) {
        int64_t first = 0, count = 0, decode_first = 0, decode_count = 0;
        worker_plan_ff_range(out, l.n_ff, l.ff_block, first, count);
        worker_plan_decode_ff_range(out, l.n_ff, l.ff_block, decode_first, decode_count);
        any = any || count > 0 || decode_count > 0;
    }
    if (!any) {
        char share[32];
        snprintf(share, sizeof share, "%g", out.shares[out.slice]);
        return refuse(code, "slice " + std::to_string(out.slice) + " (share " + share + ") holds no whole block of n_ff in any layer: an empty n_ff slice");
    }
    return Status::ok();
}

} // namespace

Status worker_plan_parse(const nlohmann::json & hello, const RequestShape & shape, WorkerPlan & out, ErrorCode & code) {
    out = WorkerPlan();
    auto plan = hello.is_object() ? hello.find("plan") : hello.end();
    if (!hello.is_object() || plan == hello.end() || !plan->is_object()) return refuse(code, "missing (the hello names no \"plan\" object)");
    auto mode = plan->find("mode");
    const std::string m = mode != plan->end() && mode->is_string() ? mode->get<std::string>() : "";
    if (m == "rows") {
        out.mode = WorkerPlan::Mode::rows;
    } else if (m == "shard") {
        out.mode = WorkerPlan::Mode::shard;
        Status st = parse_shares(*plan, shape, out, code);
        if (!st) return st;
    } else if (m == "experts") {
        out.mode = WorkerPlan::Mode::experts;
        auto experts = plan->find("experts");
        if (experts == plan->end() || !experts->is_string()) return refuse(code, "mode experts needs \"experts\": ranges");
        Status st = expert_ranges_parse(experts->get<std::string>(), out.experts);
        if (!st || out.experts.empty()) return refuse(code, "experts \"" + experts->get<std::string>() + "\": " + (st ? "empty" : st.message()));
        for (const ExpertRange & r : out.experts)
            for (int e = r.first; e <= r.last; ++e)
                if (!shape.serves(e)) return refuse(code, "names expert " + std::to_string(e) + ", not served here");
    } else {
        return refuse(code, "mode \"" + m + "\" unknown (rows, experts, shard)");
    }
    code = ErrorCode::ok;
    return Status::ok();
}

namespace {

void ff_range_of(const WorkerPlan & p, const std::vector<double> & shares, int64_t n_ff, int64_t block, int64_t & first, int64_t & count) {
    first = 0;
    count = n_ff;
    if (p.mode != WorkerPlan::Mode::shard) return;
    count = 0;
    if (block < 1 || n_ff % block != 0) return;  // the coordinator cannot shard this layer either
    const std::vector<RowBlock> slices = split_ff(n_ff, block, shares);
    first = slices[p.slice].first;
    count = slices[p.slice].count;
}

} // namespace

void worker_plan_ff_range(const WorkerPlan & p, int64_t n_ff, int64_t block, int64_t & first, int64_t & count) {
    ff_range_of(p, p.shares, n_ff, block, first, count);
}

void worker_plan_decode_ff_range(const WorkerPlan & p, int64_t n_ff, int64_t block, int64_t & first, int64_t & count) {
    ff_range_of(p, p.decode_shares.empty() ? p.shares : p.decode_shares, n_ff, block, first, count);
}

namespace {

Status plan_fail(ErrorCode & code, const std::string & message) {
    code = ErrorCode::bad_plan;
    return Status::invalid_argument(message);
}

} // namespace

Status worker_plan_check(const WorkerPlan & p, const RequestShape & shape, const MsgHeader & h, const void * const * frames,
                         int64_t & ff_count, ErrorCode & code) {
    code = ErrorCode::ok;
    const RequestShape::Layer * l = shape.layer(h.layer);  // request_check_compute found it
    int64_t first = 0;
    worker_plan_ff_range(p, l->n_ff, l->ff_block, first, ff_count);
    const bool shard = p.mode == WorkerPlan::Mode::shard;
    if (shard && h.n_frames != 4)
        return plan_fail(code, "this connection's plan is " + worker_plan_describe(p) + ": requests need its n_ff slice frame");
    if (!shard && h.n_frames == 4)
        return plan_fail(code, "an n_ff slice, but this connection's plan is " + worker_plan_describe(p) + " (whole n_ff only)");
    if (shard) {
        int64_t got_first = 0, got_count = 0, decode_first = 0, decode_count = 0;
        request_slice_of(frames[3], got_first, got_count);
        worker_plan_decode_ff_range(p, l->n_ff, l->ff_block, decode_first, decode_count);
        const bool planned = (got_first == first && got_count == ff_count) || (got_first == decode_first && got_count == decode_count);
        if (!planned) {
            std::string want = "[" + std::to_string(first) + ", " + std::to_string(first + ff_count) + ")";
            if (decode_first != first || decode_count != ff_count)
                want += " or [" + std::to_string(decode_first) + ", " + std::to_string(decode_first + decode_count) + ")";
            return plan_fail(code, "n_ff slice [" + std::to_string(got_first) + ", " + std::to_string(got_first + got_count) +
                                       ") is not the planned " + want + " of layer " + std::to_string(h.layer) + " (" +
                                       worker_plan_describe(p) + ")");
        }
        ff_count = got_count;
    }
    if (p.mode != WorkerPlan::Mode::experts) return Status::ok();
    const uint8_t * ids = static_cast<const uint8_t *>(frames[1]);
    const int64_t n = (int64_t) h.n_used * h.n_rows;
    for (int64_t i = 0; i < n; ++i) {
        int32_t id;
        memcpy(&id, ids + i * sizeof id, sizeof id);  // the frame may be misaligned
        if (id >= 0 && !worker_plan_allows_expert(p, id))
            return plan_fail(code, "expert " + std::to_string(id) + " (row " + std::to_string(i / h.n_used) + ", slot " +
                                       std::to_string(i % h.n_used) + ") is outside this connection's plan (" + worker_plan_describe(p) + ")");
    }
    code = ErrorCode::ok;
    return Status::ok();
}

bool worker_plan_allows_expert(const WorkerPlan & p, int32_t e) {
    return p.mode != WorkerPlan::Mode::experts || expert_ranges_contains(p.experts, e);
}

std::string worker_plan_describe(const WorkerPlan & p) {
    switch (p.mode) {
        case WorkerPlan::Mode::rows: return "rows";
        case WorkerPlan::Mode::experts: return "experts " + expert_ranges_format(p.experts);
        case WorkerPlan::Mode::shard:
            return "shard slice " + std::to_string(p.slice) + " of " + std::to_string(p.shares.size()) +
                   (p.decode_shares.empty() ? "" : " (decode calls: their own split)");
    }
    return "?";
}

void WorkerPlans::set(const std::string & peer, WorkerPlan plan) {
    // a connection that has computed stays one when it says hello again: automatic shares say hello
    // at every slice change, and a hello flood once took the plan of a working coordinator
    // as that of a hello-only connection (its worker refused for the rest of the run)
    bool computed = false;
    auto it = index_.find(peer);
    if (it != index_.end()) {
        computed = it->second->computed;
        plans_.erase(it->second);
        index_.erase(it);
    }
    plans_.push_front(Entry{peer, std::move(plan), computed});
    index_[peer] = plans_.begin();
    if (plans_.size() <= kMaxPlans) return;
    // the least recently used hello-only connection (not the one just added), else the least recently used
    auto victim = std::prev(plans_.end());
    for (auto r = std::prev(plans_.end()); r != plans_.begin(); --r)
        if (!r->computed) { victim = r; break; }
    (victim->computed ? evicted_active_ : evicted_idle_) += 1;
    index_.erase(victim->peer);
    plans_.erase(victim);
}

void WorkerPlans::erase(const std::string & peer) {
    auto it = index_.find(peer);
    if (it == index_.end()) return;
    plans_.erase(it->second);
    index_.erase(it);
}

const WorkerPlan * WorkerPlans::find(const std::string & peer) {
    auto it = index_.find(peer);
    if (it == index_.end()) return nullptr;
    plans_.splice(plans_.begin(), plans_, it->second);  // most recently used first; iterators stay valid
    plans_.front().computed = true;
    return &plans_.front().plan;
}

} // namespace moezip
