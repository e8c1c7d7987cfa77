// moezip: sending and receiving one ZeroMQ part through signals.
// libzmq runs a socket's pending commands before it takes or queues a part, and that wait returns
// EINTR when a signal arrives (libzmq src/socket_base.cpp, send() and recv(): process_commands
// comes first and returns -1 before xsend/xrecv). So after EINTR nothing was queued and nothing
// taken: the same call made again is the whole fix. Done anywhere else (a part dropped, a message
// abandoned halfway) an interrupted multipart message loses its framing: the next part read is
// taken for the start of a new message, or a ROUTER's next reply is glued onto a half-sent one.
// Both sides use these: a worker gets SIGTERM, SIGINT or a profiler's timer; a host is the user's
// program, whose handlers we do not choose (tests/hosts/scenario_host.cpp, "signals").
#pragma once

#include <zmq.hpp>

#include <cerrno>

namespace moezip {

/// Calls `call` (one ZeroMQ send or receive) until it returns without EINTR; other errors throw
/// zmq::error_t as cppzmq does.
template <class Call> auto retry_through_signals(Call call) -> decltype(call()) {
    for (;;) {
        try {
            return call();
        } catch (const zmq::error_t & e) {
            if (e.num() != EINTR) throw;
        }
    }
}

/// Receives one part into `m` as sock.recv would (an empty result: none waiting with dontwait).
inline zmq::recv_result_t recv_part_through_signals(zmq::socket_t & sock, zmq::message_t & m, zmq::recv_flags flags) {
    return retry_through_signals([&] { return sock.recv(m, flags); });
}

/// Sends one part as sock.send would (an empty result: not queued with dontwait).
inline zmq::send_result_t send_part_through_signals(zmq::socket_t & sock, zmq::message_t & m, zmq::send_flags flags) {
    return retry_through_signals([&] { return sock.send(m, flags); });
}

/// The same for a buffer the call copies (the header of a reply).
inline zmq::send_result_t send_part_through_signals(zmq::socket_t & sock, zmq::const_buffer b, zmq::send_flags flags) {
    return retry_through_signals([&] { return sock.send(b, flags); });
}

} // namespace moezip
