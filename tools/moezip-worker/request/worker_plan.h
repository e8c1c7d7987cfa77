// moezip-worker: the plan each coordinator states in its hello, and the per-connection table of
// plans. A worker computes for a connection only what its plan allows:
//   {"mode": "rows"}                                   whole n_ff, any served expert
//   {"mode": "experts", "experts": "0-3"}              whole n_ff, only those experts (all served here)
//   {"mode": "shard", "shares": [0.5, 0.25, 0.25], "slice": 1}
//                                                      only slice `slice` of split_ff(n_ff, block,
//                                                      shares) of every layer (coordinator/modes/split.h),
//                                                      every served expert
// A compute request outside the plan (an n_ff slice frame where none is planned, another slice, an
// expert outside the planned set) or on a connection without a plan gets a bad_plan error reply.
// So a peer cannot pick one-block slices of n_ff or single experts at will to take an expert's
// weights apart from its outputs; it gets the shapes its coordinator's configuration gives.
// Connections are told apart by the ROUTER's routing id (a coordinator that reconnects says hello
// again); the table keeps kMaxPlans connections. When it is full, a connection that only said hello
// is forgotten before one that has computed (least recently used first in each group), so a flood of
// hellos from other peers cannot take the plan from a coordinator that is working (it was seen to
// make the coordinator refuse a healthy worker for the whole run).
#pragma once

#include "coordinator/config/expert_range.h"
#include "provider_map/status.h"
#include "coordinator/wire/protocol.h"
#include "tools/moezip-worker/request/request_check.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <list>
#include <map>
#include <string>
#include <vector>

namespace moezip {

struct WorkerPlan {
    enum class Mode { rows, experts, shard };
    Mode mode = Mode::rows;
    std::vector<ExpertRange> experts;  ///< experts mode: the experts this connection may ask for
    std::vector<double> shares;        ///< shard mode: every host's share of n_ff, in slice order
    /// shard mode, optional ("decode_shares"): the split of decode calls when it differs from the
    /// split of prefill calls (`local_share = "auto"`: a host throttled under sustained load is
    /// slower in prefill than in decode); empty: `shares` for every call. Same length as shares.
    std::vector<double> decode_shares;
    int slice = -1;                    ///< shard mode: this worker's slice in `shares` (and decode_shares)
};

/// Connections remembered at most (hello-only connections forgotten first, then least recently used).
constexpr size_t kMaxPlans = 256;

/// Reads hello JSON's "plan" against the shape this worker serves. Errors (invalid_argument, code
/// bad_plan): no plan, unknown mode, experts that are not ranges or not all served here, shares
/// that are not 1..1024 numbers in [0, 1] summing to 1 (+-1e-6) (decode_shares too, and as many),
/// a slice index outside them or whose share is 0 in both splits (an empty n_ff slice in every layer).
Status worker_plan_parse(const nlohmann::json & hello, const RequestShape & shape, WorkerPlan & out, ErrorCode & code);

/// The n_ff units [first, first + count) plan `p` allows for a layer of `n_ff` units whose down
/// weights have `block` units per quantization block: the whole n_ff, or the planned slice
/// (count 0: this worker's share of that layer is empty).
void worker_plan_ff_range(const WorkerPlan & p, int64_t n_ff, int64_t block, int64_t & first, int64_t & count);
/// The same for the split of decode calls (decode_shares; `shares` when the plan has none).
void worker_plan_decode_ff_range(const WorkerPlan & p, int64_t n_ff, int64_t block, int64_t & first, int64_t & count);

/// Checks a compute request that passed request_check_compute against plan `p`: an n_ff slice
/// frame exactly when the plan is shard, the slice one of the planned ones (of shares or
/// decode_shares, whatever the request's rows), every id >= 0 allowed.
/// `ff_count` gets the n_ff units the request computes. Errors: bad_plan in `code`.
Status worker_plan_check(const WorkerPlan & p, const RequestShape & shape, const MsgHeader & h, const void * const * frames,
                         int64_t & ff_count, ErrorCode & code);

/// True when `p` lets the connection ask for expert `e` (served-ness is checked separately).
bool worker_plan_allows_expert(const WorkerPlan & p, int32_t e);

/// "rows", "experts 0-3", "shard slice 1 of 3" (for messages).
std::string worker_plan_describe(const WorkerPlan & p);

/// The per-connection plans, keyed by routing id.
class WorkerPlans {
public:
    void set(const std::string & peer, WorkerPlan plan);
    /// The plan of `peer` (marked as recently used and as having computed), or nullptr.
    const WorkerPlan * find(const std::string & peer);
    /// Forgets the plan of `peer` (a hello whose plan was refused leaves the connection without one).
    void erase(const std::string & peer);
    /// Calls f with the plan of every connection that has computed (its slices are in use).
    template <typename F> void for_each_computing(F f) const {
        for (const Entry & e : plans_)
            if (e.computed) f(e.plan);
    }
    size_t size() const { return plans_.size(); }
    /// Plans forgotten because the table was full: of hello-only connections, of computing ones.
    uint64_t evicted_idle() const { return evicted_idle_; }
    uint64_t evicted_active() const { return evicted_active_; }

private:
    struct Entry {
        std::string peer;
        WorkerPlan plan;
        bool computed = false;  // a compute request was checked against this plan
    };
    std::list<Entry> plans_;  // most recently used first
    std::map<std::string, std::list<Entry>::iterator> index_;
    uint64_t evicted_idle_ = 0, evicted_active_ = 0;
};

} // namespace moezip
