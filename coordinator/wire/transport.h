// moezip: one coordinator-side connection to a worker (ZeroMQ DEALER), with timeouts and the
// Lazy Pirate recovery of the zguide: poll with a deadline, and after a timeout or a bad reply close
// the socket (linger 0, so nothing queued survives) and open a fresh one, so a stale reply can never
// be taken for a new one. Requests carry ids; replies to other ids are dropped and counted.
#pragma once

#include "coordinator/wire/protocol.h"
#include "coordinator/base/status.h"

#include <zmq.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace moezip {

/// Per-worker counters for the report. Bytes include headers. Times in ms.
struct WorkerStats {
    uint64_t requests = 0, rows = 0, pairs = 0;
    uint64_t bytes_out = 0, bytes_in = 0;
    uint64_t hash_ok = 0, hash_failed = 0;
    uint64_t errors = 0;      ///< error replies and malformed replies
    uint64_t timeouts = 0;
    uint64_t fallbacks = 0;   ///< requests whose work was computed on this host instead
    uint64_t stale = 0;       ///< replies to an older request, dropped
    uint64_t reconnects = 0;
    std::vector<float> rtt_ms;  ///< send -> reply taken (after this host's own part), per request (first 1,000,000 kept)
    std::vector<float> service_ms;   ///< the worker's own time per result (MsgHeader::service_us)
    /// per result: round trip - service = transfer, ZeroMQ, queueing, and the time the reply waited
    /// while this host computed its own part (the round trip ends when the reply is taken)
    std::vector<float> rtt_minus_service_ms;
    double service_ms_total = 0;     ///< sum over all results
};

/// A buffer to send as one data frame; it must stay valid until the reply arrives or reset().
struct FrameRef {
    const void * data;
    size_t bytes;
};

class WorkerLink {
public:
    WorkerLink(zmq::context_t & ctx, std::string endpoint, int timeout_ms);
    ~WorkerLink();

    const std::string & endpoint() const { return endpoint_; }
    int timeout_ms() const { return timeout_ms_; }
    void set_timeout_ms(int ms) { timeout_ms_ = ms; }
    WorkerStats & stats() { return stats_; }
    const WorkerStats & stats() const { return stats_; }

    /// Sends header + frames (frames zero-copy). Sets the header's frame sizes and hashes first.
    /// `corrupt_after_hash` flips one byte of frame 0 after hashing (test-only fault switch).
    Status send(MsgHeader & h, const std::vector<std::pair<WireType, FrameRef>> & frames, bool corrupt_after_hash = false);

    /// Waits for the reply to `request_id` until timeout_ms after its send. Verifies the header and
    /// frame hashes. On success `data` holds data frame 0 (result, error text or hello JSON).
    /// Errors: timeout; corruption (bad header or hash: counted); io_error (error reply: message
    /// and code). After any error the caller should reset().
    Status recv(uint64_t request_id, MsgHeader & h, zmq::message_t & data);

    /// Closes the socket (linger 0) and connects a fresh one.
    void reset();

private:
    void open();

    zmq::context_t & ctx_;
    std::string endpoint_;
    int timeout_ms_;
    std::unique_ptr<zmq::socket_t> sock_;
    std::chrono::steady_clock::time_point sent_at_;
    WorkerStats stats_;
};

} // namespace moezip
