// moezip-worker: the ROUTER socket's options and the process's descriptor limit.
//
//   CURVE server (ZMQ_CURVE_SERVER, ZMQ_CURVE_SECRETKEY, ZMQ_ZAP_DOMAIN "moezip") when a key is
//     given: the peer must hold a key the ZAP handler allows (worker_auth.h) before it may send
//   ZMQ_MAXMSGSIZE = the budget's bytes in: a peer announcing a larger frame is disconnected by
//     libzmq before the frame is allocated
//   ZMQ_HANDSHAKE_IVL = handshake_ms (default 5000): a connection that does not complete the ZeroMQ
//     handshake (with CURVE: authenticate) in that time is closed, so idle or refused peers do not
//     hold descriptors
//   no ZMTP heartbeats (ZMQ_HEARTBEAT_IVL stays 0): libzmq 4.3.4's heartbeat timer writes on a
//     connection whose input already stopped with an error (stream_engine_base.cpp:331,
//     `!_io_error`, github.com/zeromq/libzmq/issues/4364) and aborts the process; after a link outage a coordinator
//     that reconnects takes its routing id over (ROUTER_HANDOVER), the old connection's late bytes
//     stop its input, its reset sets the error, and the next heartbeat killed the worker
//   TCP keepalive (ZMQ_TCP_KEEPALIVE, idle 10 s, a probe every 5 s) and ZMQ_TCP_MAXRT 30000 ms
//     (TCP_USER_TIMEOUT) instead: the kernel, not a libzmq timer, closes a connection whose peer
//     acknowledged nothing for about 30 s (a vanished host), and its descriptor is freed
//   ZMQ_BACKLOG 1024: connections waiting for accept() while the descriptor table is full
//   ZMQ_ROUTER_HANDOVER: a coordinator reconnecting with its routing id takes it over (and its plan)
//   linger 0; IPv6 for tcp://[...] endpoints
// worker_raise_fd_limit raises RLIMIT_NOFILE's soft limit to the hard limit at start: one
// descriptor per connection, so a low soft limit (1024, or 128 in the reproduction) is what a
// flood of idle connections exhausts first.
#pragma once

#include "coordinator/wire/curve_keys.h"

#include <zmq.hpp>

#include <cstdint>
#include <string>

namespace moezip {

struct WorkerSocketOptions {
    std::string bind;            ///< endpoint
    CurveKeyPair key;            ///< this worker's key pair; empty secret = plain ZeroMQ
    int64_t max_frame_bytes = 0; ///< ZMQ_MAXMSGSIZE (0 = libzmq's default, unlimited)
    int handshake_ms = 5000;     ///< ZMQ_HANDSHAKE_IVL
};

constexpr int kKeepaliveIdleS = 10;      ///< ZMQ_TCP_KEEPALIVE_IDLE: seconds of silence before the first probe
constexpr int kKeepaliveIntervalS = 5;   ///< ZMQ_TCP_KEEPALIVE_INTVL: seconds between probes
constexpr int kKeepaliveProbes = 4;      ///< ZMQ_TCP_KEEPALIVE_CNT (TCP_USER_TIMEOUT ends it first)
constexpr int kPeerSilenceMaxMs = 30000; ///< ZMQ_TCP_MAXRT: unacknowledged data or probes this long close the connection
constexpr int kListenBacklog = 1024;

/// Sets the options above on `sock` (before bind).
void worker_socket_configure(zmq::socket_t & sock, const WorkerSocketOptions & o);

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit in effect afterwards
/// (-1 when it cannot be read).
long worker_raise_fd_limit();

/// True for ipc://, inproc:// and tcp:// endpoints on 127.x.x.x, localhost or [::1].
bool worker_endpoint_is_loopback(const std::string & endpoint);

} // namespace moezip
