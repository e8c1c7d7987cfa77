// moezip-worker: who may connect. With a key (--key), the ROUTER is a CURVE server and every
// handshake asks this ZAP handler (ZeroMQ's authentication protocol, RFC 27, on
// inproc://zeromq.zap.01) whether the client's public key is in the allow-list (--allow); an
// unknown key is refused at the handshake, before any message of that peer is read. A peer that
// speaks plain ZeroMQ, uses another worker key, or sends junk fails the handshake in libzmq itself;
// a socket monitor counts those failures by class, and the connections accepted and closed, for the
// worker's counters. Without a key the socket is plain (no ZAP; allowed on loopback and ipc only,
// or with --insecure).
#pragma once

#include "provider_map/status.h"

#include <zmq.hpp>

#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace moezip {

/// Connection and handshake counters (printed with the worker's counters at exit).
struct AuthCounters {
    std::atomic<uint64_t> zap_accepted{0};   ///< CURVE clients whose key is in the allow-list
    std::atomic<uint64_t> zap_refused{0};    ///< CURVE clients with an unknown key (or another mechanism)
    uint64_t handshake_failed_protocol = 0;  ///< plain peers, another worker key, junk (libzmq)
    uint64_t handshake_failed_auth = 0;      ///< refused by the ZAP handler (as libzmq saw it)
    uint64_t handshake_timed_out = 0;        ///< no complete handshake within --handshake-ms (idle peers)
    uint64_t handshake_peer_closed = 0;      ///< the peer closed or reset the connection before the handshake ended
    uint64_t handshake_failed_other = 0;     ///< failed without detail for another reason
    int handshake_other_errno = 0;           ///< errno of the last of those (printed with strerror)
    uint64_t accepted = 0;                   ///< TCP/ipc connections accepted
    uint64_t accept_failed = 0;              ///< accept() failed (descriptor table full)
    uint64_t disconnected = 0;               ///< connections closed
};

/// "handshakes: refused key 2, failed protocol 1, ...; connections accepted 5, ..." ("" when all 0).
std::string auth_counters_text(const AuthCounters & c);

/// The ZAP handler: a thread with a REP socket on inproc://zeromq.zap.01 of `ctx`, answering 200
/// for a CURVE client whose key is allowed and 400 otherwise. Start it before the ROUTER binds (a
/// CURVE server without a handler would accept every client key).
class ZapHandler {
public:
    ZapHandler(zmq::context_t & ctx, const std::vector<std::string> & allowed_z85, AuthCounters & counters);
    ~ZapHandler();
    /// Binds the REP socket and starts the thread. Errors: io_error when binding fails.
    Status start();
    /// Stops the thread and closes its socket (before the context is closed). Idempotent.
    void stop();

private:
    void run();
    void answer(std::vector<zmq::message_t> & request);

    zmq::context_t & ctx_;
    std::set<std::string> allowed_;  // 32-byte binary keys
    AuthCounters & counters_;
    zmq::socket_t sock_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
};

/// A socket monitor of the ROUTER (zmq_socket_monitor over inproc): read in the serving loop.
class SocketMonitor {
public:
    /// Starts monitoring `sock` (events: accepted, accept failed, disconnected, handshake failures).
    SocketMonitor(zmq::context_t & ctx, zmq::socket_t & sock, AuthCounters & counters);
    ~SocketMonitor();
    zmq::socket_t & socket() { return pair_; }
    /// Counts every event waiting (non-blocking).
    void drain();
    void close();

private:
    /// Counts a HANDSHAKE_FAILED_NO_DETAIL event by its errno: timed out, closed by the peer, other.
    void count_no_detail(uint32_t err);
    zmq::socket_t & watched_;
    zmq::socket_t pair_;
    AuthCounters & counters_;
};

} // namespace moezip
