// moezip: the coordinator's watch on one worker connection (zmq_socket_monitor over inproc).
// A DEALER hides its connections: when the worker process exits or is killed, the request in flight is
// gone with the connection, and without this watch the wait for its reply runs to the full timeout
// (20 s in a user's config) although the kernel said at once that the peer closed. The monitor
// reports ZMQ_EVENT_HANDSHAKE_SUCCEEDED and ZMQ_EVENT_DISCONNECTED on an inproc PAIR socket, read without blocking by the waiting thread.
#pragma once

#include <zmq.hpp>

namespace moezip {

class LinkMonitor {
public:
    LinkMonitor() = default;
    ~LinkMonitor() { stop(); }
    LinkMonitor(const LinkMonitor &) = delete;
    LinkMonitor & operator=(const LinkMonitor &) = delete;

    /// Starts watching `sock` for disconnects; call before sock connects (events before the PAIR
    /// connects are lost). Each start uses a new inproc address. Throws zmq::error_t (EINTR included:
    /// the caller opens the link again).
    void start(zmq::context_t & ctx, zmq::socket_t & sock);
    /// Stops the watch and closes the PAIR socket; safe to call twice and before start.
    void stop();
    /// The PAIR socket to poll for ZMQ_POLLIN (valid between start and stop).
    zmq::socket_t & socket() { return pair_; }
    bool active() const { return watched_ != nullptr; }
    /// Reads every event waiting (non-blocking) and returns how many were disconnects of a
    /// connection whose ZeroMQ handshake had succeeded (a failed handshake is not a lost peer).
    /// `handshakes`, when given, is increased by the connections whose handshake succeeded among
    /// them (a worker process that answers at the ZeroMQ level: it is up, bound and not stopped).
    int drain_disconnects(int * handshakes = nullptr);

private:
    zmq::socket_t * watched_ = nullptr;
    zmq::socket_t pair_;
    bool handshaken_ = false;  // the connection now open completed its handshake
};

} // namespace moezip
