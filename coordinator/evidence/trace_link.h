// moezip: what a worker link records into the trace (coordinator/evidence/trace.h): each request
// sent, each wait for a reply, and on the worker's own track the round trip with the worker's service
// time from the reply header. Kept apart from the transport so that wire/ holds only the wire.
#pragma once

#include "coordinator/wire/protocol.h"

#include <chrono>
#include <string>

namespace moezip {

/// A request left: "send" on this thread from t0 to now (the copy and queueing into ZeroMQ), with
/// the endpoint, kind, layer, rows and bytes (header included). No-op when tracing is off.
void trace_request_sent(const std::string & endpoint, const MsgHeader & h, uint64_t bytes, std::chrono::steady_clock::time_point t0);

/// The reply `rh` to a request sent at `sent` was taken: "reply" on this thread from wait0 (when
/// this host began to wait) to now, and on the worker's track the round trip from `sent` to now
/// with, inside it, the worker's service time (rh.service_us, placed from `sent`). No-op when off.
void trace_reply_taken(const std::string & endpoint, const MsgHeader & rh, uint64_t bytes_in,
                       std::chrono::steady_clock::time_point sent, std::chrono::steady_clock::time_point wait0);

/// A wait ended without a reply (`why`: timeout, error): "no reply" on this thread from wait0 to now.
void trace_reply_missing(const std::string & endpoint, const char * why, std::chrono::steady_clock::time_point wait0);

} // namespace moezip
