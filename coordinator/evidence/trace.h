// moezip: an opt-in per-call timeline of the run (config `trace = "path"`), written as a Chrome
// trace-event file (JSON object format) that Perfetto (https://ui.perfetto.dev) and chrome://tracing
// open.
//
// Why: the report sums each layer's time over a whole run, so it cannot show one decode step, a
// stall, or how a worker's reply lines up with this host's own part. The trace records what really
// happened, call by call, with the steady clock:
//   - on the engine thread that computes a region: the region (layer, rows, slots), each request
//     sent (worker, rows, bytes), this host's compute, each wait for a reply, the combine;
//   - on one track per worker: each request from its send to its reply taken, and inside it the
//     worker's own service time from the reply header (drawn from the send: the worker's clock is
//     not shared, so where inside the round trip the service fell is not known; its length is).
// Bounded: at most `max_events` events are kept; later ones are counted and the file ends with one
// "dropped" marker that says how many. Thread-safe: every add takes one mutex; with tracing off the
// cost at each call site is one atomic load.
// Process-wide (like the log): the transport, the executor and the handlers record into it without
// a pointer threaded through every constructor. Only the preload's session starts it; moezip-worker never does.
#pragma once

#include "provider_map/status.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace moezip {

/// One complete event ("X"): [ts_us, ts_us + dur_us) on track `tid`. Times in µs since the trace's origin.
struct TraceEvent {
    std::string name;
    const char * cat = "";  ///< category: "region", "send", "compute", "wait", "combine", "worker", "service"
    double ts_us = 0, dur_us = 0;
    int64_t tid = 0;
    nlohmann::json args;    ///< null or an object
};

class Trace {
public:
    /// `max_events` >= 1: events kept; more are counted as dropped.
    explicit Trace(size_t max_events);

    using clock = std::chrono::steady_clock;
    /// µs from the trace's origin (its construction) to t; negative before it.
    double to_us(clock::time_point t) const { return std::chrono::duration<double, std::micro>(t - origin_).count(); }

    /// Adds a complete event from t0 to t1 on track tid (t1 < t0 is recorded as duration 0).
    void add(std::string name, const char * cat, int64_t tid, clock::time_point t0, clock::time_point t1,
             nlohmann::json args = nullptr);
    /// The track of a worker (one per endpoint, numbered in order of first use, named "worker <endpoint>").
    int64_t worker_track(const std::string & endpoint);
    /// Names the calling thread's track (first name given wins).
    void name_thread(int64_t tid, const std::string & name);

    size_t size() const;
    uint64_t dropped() const;
    size_t max_events() const { return max_events_; }

    /// The file's JSON: {"traceEvents": [metadata..., events sorted by ts (ties: longer first, so a
    /// parent precedes its children), the dropped marker if any], "displayTimeUnit": "ms",
    /// "otherData": {"max_events", "events", "dropped_events", ...}}.
    nlohmann::json to_json() const;
    /// Writes to_json() to path atomically (tmp + rename). Errors: io_error naming the path.
    Status write(const std::string & path) const;

    static constexpr int64_t kWorkerTrackBase = 1000000;  ///< worker w's track id = base + w (no real tid is this large here)

private:
    const clock::time_point origin_;
    const size_t max_events_;
    mutable std::mutex mu_;
    std::vector<TraceEvent> events_;
    uint64_t dropped_ = 0;
    double first_drop_us_ = 0;
    std::map<std::string, int64_t> worker_tracks_;
    std::map<int64_t, std::string> track_names_;
    int pid_ = 0;
};

/// Starts the process's trace (once; later calls keep the first). max_events >= 1.
void trace_start(size_t max_events);
/// The process's trace, or nullptr when tracing is off (the default).
Trace * trace_active();
/// The calling thread's id (gettid), cached per thread: the track of its events.
int64_t trace_thread_id();

/// Records one complete event on the calling thread's track from construction to destruction, when
/// tracing is on; args() may be filled meanwhile. Inert (no clock read) when tracing is off.
class TraceSpan {
public:
    TraceSpan(const char * name, const char * cat);
    ~TraceSpan();
    TraceSpan(const TraceSpan &) = delete;
    TraceSpan & operator=(const TraceSpan &) = delete;
    bool on() const { return trace_ != nullptr; }
    /// The event's arguments (an object); only meaningful when on().
    nlohmann::json & args() { return args_; }
    /// Replaces the event's name (build the name only when on(): it costs an allocation).
    void rename(std::string name) { if (trace_ != nullptr) name_ = std::move(name); }

private:
    Trace * trace_;
    std::string name_;
    const char * cat_;
    Trace::clock::time_point t0_;
    nlohmann::json args_;
};

} // namespace moezip
