// moezip: one coordinator-side connection to a worker (ZeroMQ DEALER), with timeouts and the
// Lazy Pirate recovery of the zguide: poll with a deadline, and after a timeout or a bad reply close
// the socket (linger 0, so nothing queued survives) and open a fresh one, so a stale reply can never
// be taken for a new one. Requests carry ids; replies to other ids are dropped and counted. A socket
// monitor (link_monitor.h) ends a wait as soon as the connection carrying the request closes.
// Requests also carry the worker instance the dispatcher verified; a reply from any other instance
// (the worker restarted or was replaced behind the same endpoint) is discarded and counted.
// Frames are copied into ZeroMQ's own messages when sent: after a failed round trip ZeroMQ's I/O
// thread may still be reading a request while the caller's buffers are gone.
// Security (docs/security.md): with the worker's public key and this host's key pair the DEALER is a
// CURVE client (encrypted, and the worker must hold the matching secret key); ZMQ_MAXMSGSIZE is the
// largest reply this host expects (set_max_reply_bytes, applied when the socket is opened: libzmq
// drops a connection that announces a larger frame before allocating it); at most kMaxMessageParts
// parts of a reply are kept, the rest are read and freed at once. The DEALER has a random routing id
// of its own, kept when the socket is reopened, so the worker keeps this link's plan across reconnects.
#pragma once

#include "coordinator/evidence/latency_samples.h"
#include "coordinator/wire/curve_keys.h"
#include "coordinator/wire/link_monitor.h"
#include "coordinator/wire/protocol.h"
#include "provider_map/status.h"

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
    uint64_t disconnects = 0;       ///< connections the worker side closed (exit, kill, restart): seen by the socket monitor
    uint64_t handshakes = 0;        ///< connections whose ZeroMQ handshake completed (the first; again after each reconnect)
    uint64_t foreign_instance = 0;  ///< replies from another worker instance than the verified one, discarded
    uint64_t parts_dropped = 0;     ///< reply parts beyond kMaxMessageParts, read and freed
    /// exact-combine results received as one sum per row of the row's slots 0..m-1 (a prefix of the
    /// engine's ADD chain) instead of one output per slot (experts mode, experts_handler.cpp)
    uint64_t prefix_sum_replies = 0;
    uint64_t prefix_sum_rows = 0, prefix_sum_slots = 0;  ///< of them: the rows sent back as sums, the slots those cover
    /// Per-request times for the report's percentiles, bounded however long the run
    /// (coordinator/evidence/latency_samples.h: the first 4096 exact, then a fixed histogram).
    LatencySamples rtt_ms;  ///< send -> reply taken (after this host's own part), per request
    /// The same for requests of one row only (decode calls): a run's prompt calls take hundreds of ms
    /// and would be its p99 among a few hundred decode calls, hiding a decode stall.
    LatencySamples rtt_ms_one_row;
    LatencySamples service_ms;   ///< the worker's own time per result (MsgHeader::service_us)
    /// per result: round trip - service = transfer, ZeroMQ, queueing, and the time the reply waited
    /// while this host computed its own part (the round trip ends when the reply is taken)
    LatencySamples rtt_minus_service_ms;
    /// Sums over all results in whole us, as the replies said them (summed in integers so that setup
    /// <= service holds in the totals as in each reply: float sums broke it).
    uint64_t service_us_total = 0;
    uint64_t setup_us_total = 0;  ///< of it, making weights ready (reply setup_us: packing slices), not computing
    double service_ms_total() const { return (double) service_us_total / 1000.0; }
    double setup_ms_total() const { return (double) setup_us_total / 1000.0; }
};

/// A buffer to send as one data frame; read (copied) during send() only.
struct FrameRef {
    const void * data;
    size_t bytes;
};

/// CURVE settings of a link: both empty = plain ZeroMQ.
struct LinkKeys {
    std::string server_public;  ///< the worker's public key (Z85)
    CurveKeyPair client;        ///< this host's key pair
    bool curve() const { return !server_public.empty(); }
};

class WorkerLink {
public:
    /// `max_reply_bytes`: the largest reply frame accepted (see set_max_reply_bytes).
    WorkerLink(zmq::context_t & ctx, std::string endpoint, int timeout_ms, LinkKeys keys = LinkKeys(),
               int64_t max_reply_bytes = kDefaultMaxReplyBytes);
    ~WorkerLink();

    const std::string & endpoint() const { return endpoint_; }
    int timeout_ms() const { return timeout_ms_; }
    void set_timeout_ms(int ms) { timeout_ms_ = ms; }
    WorkerStats & stats() { return stats_; }
    const WorkerStats & stats() const { return stats_; }
    /// The worker instance verified by the dispatcher (0: none yet; only hello may be sent then).
    void set_instance(uint64_t instance) { instance_ = instance; }
    uint64_t instance() const { return instance_; }
    bool curve() const { return keys_.curve(); }
    /// The largest reply frame accepted (ZMQ_MAXMSGSIZE), bytes; applied when the socket is next
    /// opened (reset). Default kDefaultMaxReplyBytes.
    void set_max_reply_bytes(int64_t bytes) { max_reply_bytes_ = bytes; }
    int64_t max_reply_bytes() const { return max_reply_bytes_; }
    /// The socket's ZMQ_MAXMSGSIZE now (what the open socket enforces).
    int64_t max_reply_bytes_open() const { return open_max_reply_bytes_; }
    static constexpr int64_t kDefaultMaxReplyBytes = int64_t(16) << 20;

    /// Sends header + frames; the frames' bytes are copied into ZeroMQ messages, so the caller's
    /// buffers may go away at once. Sets the header's frame sizes, hashes and instance first.
    /// Waits for a connection up to timeout_ms (timeout), or 250 ms once the worker closed the last
    /// one (io_error: it exited or was killed; a restarted worker reconnects within that).
    /// `corrupt_after_hash` flips one byte of frame 0 after hashing (test-only fault switch).
    Status send(MsgHeader & h, const std::vector<std::pair<WireType, FrameRef>> & frames, bool corrupt_after_hash = false);

    /// Waits for the reply to `request_id` until timeout_ms after its send (a signal's EINTR resumes
    /// the wait). Verifies the header and frame hashes and, once an instance was verified
    /// (set_instance), that the reply comes from it. On success `data` holds data frame 0 (result, error text or hello
    /// JSON). Errors: timeout; io_error when the connection that carried the request closes (the
    /// worker exited or was killed: found by the socket monitor; a reply already received is still
    /// taken within 100 ms, though libzmq may drop one that arrived as the connection closed; the
    /// rest of the timeout is not waited); corruption (bad header or hash: counted); mismatch (a reply from
    /// another worker instance: counted in foreign_instance, the worker must be verified again);
    /// io_error (error reply: message and code; or the process is exiting, see
    /// transport_stop_waiting); an error reply bad_plan is a mismatch too (say hello again), and
    /// over_budget is invalid_argument (the worker is fine, this request was too large for it);
    /// model_changed is a mismatch (the worker will never serve its model again).
    /// After any other error the caller should reset().
    Status recv(uint64_t request_id, MsgHeader & h, zmq::message_t & data);
    /// The code of the last error reply recv() took since the last send() (ok: none).
    ErrorCode last_error() const { return last_error_; }

    /// Closes the socket (linger 0) and connects a fresh one.
    void reset();

    /// Reads the disconnect monitor now: true when a connection to the worker that had completed
    /// its handshake closed since the last look (by send, recv or this call). A refused worker's
    /// process that exits or is killed says so here, before any request goes to it.
    bool saw_disconnect() { return note_disconnects(); }
    /// Reads the socket monitor now and returns stats().handshakes: connections to the worker whose
    /// ZeroMQ handshake completed, over every socket this link opened. A count that grew since a
    /// failure means a worker process answers at the endpoint again (restarted, resumed after
    /// SIGSTOP, its link restored): the dispatcher probes it at once instead of at its back-off.
    uint64_t handshakes() {
        note_disconnects();
        return stats_.handshakes;
    }

private:
    /// Opens and connects the socket; a signal's EINTR opens it again (see open_once).
    void open();
    void open_once();
    /// Stops the disconnect monitor and closes the socket (linger 0).
    void close_socket();
    /// Reads the monitor's events; true (and peer_closed_ set, counted) when a connection closed.
    bool note_disconnects();
    Status recv_parts(std::vector<zmq::message_t> & parts);

    zmq::context_t & ctx_;
    std::string endpoint_;
    int timeout_ms_;
    std::unique_ptr<zmq::socket_t> sock_;
    LinkMonitor monitor_;  // declared after sock_: destroyed first (close_socket stops it anyway)
    // the worker closed its connection and no send found a new one since: kept across reset(), the
    // worker is gone whatever socket this host opens
    bool peer_closed_ = false;
    std::chrono::steady_clock::time_point closed_seen_{};
    std::chrono::steady_clock::time_point sent_at_;
    int32_t sent_rows_ = 0;  // n_rows of the request in flight
    ErrorCode last_error_ = ErrorCode::ok;  // of the reply to the request in flight
    WorkerStats stats_;
    uint64_t instance_ = 0;
    LinkKeys keys_;
    int64_t max_reply_bytes_ = kDefaultMaxReplyBytes, open_max_reply_bytes_ = 0;
    std::string routing_id_;  // random, kept across reopen
};

/// Makes every wait of every WorkerLink in this process return at once (within 50 ms) with
/// io_error "exiting": called when the host exits, so exit never waits a timeout for a worker.
void transport_stop_waiting();
/// True once transport_stop_waiting was called.
bool transport_stopping();

} // namespace moezip
