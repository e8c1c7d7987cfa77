// moezip: what a worker costs beyond its own compute (transfer, ZeroMQ, queues), as the balancers
// of automatic shares and replicated experts estimate it from the round trips.
#pragma once

#include "coordinator/balance/moving_average.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace moezip {

/// Which estimates a call uses: at most kSmallCallRows rows (decode) or more (prefill). A decode
/// call's cost is latency, a prefill call's is mostly bytes, so one estimate cannot serve both:
/// an overhead measured on 512-row calls made every decode call after it look expensive.
enum class CallSize { small = 0, large = 1 };
constexpr int64_t kSmallCallRows = 8;

/// The size class of a call of `n_rows` rows (tokens of the ubatch reaching the MoE region).
inline CallSize call_size(int64_t n_rows) { return n_rows <= kSmallCallRows ? CallSize::small : CallSize::large; }

/// The size class that is not `size` (shard mode keeps a split for each).
inline CallSize other_call_size(CallSize size) { return size == CallSize::small ? CallSize::large : CallSize::small; }

/// True when the round trip of a request, minus the worker's service time (reply header
/// `service_us`), is the worker's overhead; false when it is only an upper bound.
///
/// The coordinator computes its own part between sending a request and waiting for the reply. A
/// reply that arrives meanwhile sits in the socket, and when the coordinator's ZeroMQ I/O thread
/// shares a core with the compute thread (one engine thread per core, as `taskset` runs it) it is not
/// even read until the compute ends, so the time spent in recv says nothing about when it arrived.
/// Only when this host began waiting before the worker could have finished (the wait started less
/// than `service_ms` after the send) did the reply certainly arrive during the wait. Taking the other
/// samples as true made the overhead include this host's own compute time: the slower this host, the
/// costlier the worker looked and the more work this host was given (docs/history/bench-runs.md,
/// "Placement and a slower worker").
///
/// sent_at: when the request was handed to ZeroMQ; wait_from: when this host began waiting for the
/// reply; service_ms: the worker's own time from the reply header, ms.
inline bool reply_arrival_observed(std::chrono::steady_clock::time_point sent_at,
                                   std::chrono::steady_clock::time_point wait_from, double service_ms) {
    const double ms_before_wait = std::chrono::duration<double, std::milli>(wait_from - sent_at).count();
    return ms_before_wait < service_ms;
}

/// One reply's overhead sample: the round trip minus the worker's service time, whether it is the
/// overhead or only an upper bound (reply_arrival_observed), and the rows its request carried.
struct OverheadSample {
    CallSize size = CallSize::small;  ///< of the call (decode or prefill)
    double ms = 0;        ///< round trip - service, ms
    double payload = 1;   ///< rows the request carried (rows: the worker's rows; shard: all rows; experts: see the call site)
    bool observed = false;
};

/// Builds the sample of a reply to a request of a call of `size` that carried `payload_rows` rows,
/// received at `arrived` (times: steady_clock; service_ms from the reply header).
inline OverheadSample overhead_sample(CallSize size, double payload_rows, std::chrono::steady_clock::time_point sent_at,
                                      std::chrono::steady_clock::time_point wait_from,
                                      std::chrono::steady_clock::time_point arrived, double service_ms) {
    OverheadSample s;
    s.size = size;
    s.ms = std::chrono::duration<double, std::milli>(arrived - sent_at).count() - service_ms;
    s.payload = payload_rows;
    s.observed = reply_arrival_observed(sent_at, wait_from, service_ms);
    return s;
}

/// A worker's overhead as an affine model of the rows a request carries: a fixed cost per call
/// (latency; from decode calls) plus a cost per row (transfer; from prefill calls: their mean
/// overhead less the fixed cost, over their mean rows, taken when asked, so a fixed cost measured
/// after the first prefill still comes off, and a one-row part of a prefill moves the means a
/// little instead of standing for a per-row cost alone). Observed samples are averaged
/// (moving_average.h); upper bounds only lower an estimate that observed samples made, and never
/// start one: a worker stays cheap until measured, so it is given work (a cold first call's bound
/// would otherwise keep it idle).
class WorkerOverhead {
public:
    void observe(const OverheadSample & s) {
        if (!(s.ms >= 0) || !(s.payload > 0)) return;
        if (s.size == CallSize::small) {
            if (s.observed) moving_average_add(per_call_ms_, s.ms, n_small_);
            else if (n_small_ > 0 && s.ms < per_call_ms_) moving_average_add(per_call_ms_, s.ms, n_small_, 0.5);
            return;
        }
        const bool lowers = n_large_ > 0 && (s.ms - per_call_ms_) / s.payload < per_row_ms();
        if (!s.observed && !lowers) return;
        const double alpha = s.observed ? kMovingAverageAlpha : 0.5;
        uint64_t n = n_large_;
        moving_average_add(large_ms_, s.ms, n, alpha);
        moving_average_add(large_rows_, s.payload, n_large_, alpha);
    }
    /// Expected overhead of a request of a call of `size` that carries `payload_rows` rows, ms.
    double expected_ms(CallSize size, double payload_rows) const {
        return per_call_ms_ + (size == CallSize::large ? per_row_ms() * payload_rows : 0.0);
    }
    double per_call_ms() const { return per_call_ms_; }
    /// Transfer per row of a large request, ms (0 until one was measured).
    double per_row_ms() const {
        return n_large_ > 0 && large_rows_ > 0 ? std::max(0.0, large_ms_ - per_call_ms_) / large_rows_ : 0.0;
    }
    uint64_t samples(CallSize size) const { return size == CallSize::small ? n_small_ : n_large_; }

private:
    double per_call_ms_ = 0, large_ms_ = 0, large_rows_ = 0;
    uint64_t n_small_ = 0, n_large_ = 0;
};

} // namespace moezip
