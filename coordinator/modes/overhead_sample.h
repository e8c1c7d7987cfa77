// moezip: when a worker's round trip tells its overhead (transfer, ZeroMQ, queues), and when it only
// bounds it from above.
#pragma once

#include <chrono>

namespace moezip {

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
/// costlier the worker looked and the more work this host was given (docs/performance.md,
/// "Placement and a slower worker").
///
/// sent_at: when the request was handed to ZeroMQ; wait_from: when this host began waiting for the
/// reply; service_ms: the worker's own time from the reply header, ms.
inline bool reply_arrival_observed(std::chrono::steady_clock::time_point sent_at,
                                   std::chrono::steady_clock::time_point wait_from, double service_ms) {
    const double ms_before_wait = std::chrono::duration<double, std::milli>(wait_from - sent_at).count();
    return ms_before_wait < service_ms;
}

} // namespace moezip
