// moezip-ceiling: the transports a simulated decode call crosses (decode_sim.h), each a host end and
// a worker loop.
//   zeromq         DEALER to ROUTER over loopback TCP, as moezip's WorkerLink and moezip-worker talk:
//                  each side's ZeroMQ I/O thread sleeps in epoll until a message wakes it
//   zeromq_poll    the same, the worker's thread polling its socket (ZMQ_DONTWAIT) between requests:
//                  its I/O thread still sleeps
//   tcp_block      one plain TCP connection, the worker's thread blocking in recv: no I/O thread,
//                  but a sleeping thread on the request's path
//   tcp_busy_poll  the same, the worker's thread polling with MSG_DONTWAIT: a request lands in a
//                  running thread, nothing is woken on its path
// Only zeromq is moezip's transport; the others tell what of its cost is the wake-ups.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moezip_ceiling {

enum class Transport { zeromq, zeromq_poll, tcp_block, tcp_busy_poll };

/// The name of t as the --transports flag and the JSON spell it ("zeromq", "tcp_busy_poll", ...).
const char * transport_name(Transport t);

/// The transport of that name; false when there is none.
bool transport_from_name(const std::string & name, Transport & t);

/// How the host waits for the worker's reply after its own slots.
enum class Wait { block, spin };

/// "block" or "spin", as the JSON spells it.
const char * wait_name(Wait w);

/// The header of a request and of its reply, as long as moezip's MsgHeader (152 bytes,
/// coordinator/wire/protocol.h) so the bytes on the wire match a decode call's. A request's payload
/// has in_bytes, its reply's out_bytes.
struct SimHeader {
    uint32_t stop;        ///< 1: the worker exits
    uint32_t out_bytes;   ///< bytes of the reply's payload
    uint32_t in_bytes;    ///< bytes of the request's payload
    uint32_t reserved;
    double   compute_ms;  ///< the worker's slots (ms)
    uint8_t  pad[128];
};
static_assert(sizeof(SimHeader) == 152, "as long as moezip's MsgHeader");

/// Largest request payload or reply a worker accepts (bytes): 64 slots of n_embd 65536 f32.
constexpr uint32_t k_max_sim_bytes = 64u * 65536u * 4u;

/// How long a host waits for a reply before it gives the run up (ms): a worker gone or stuck.
constexpr int k_reply_timeout_ms = 10000;

/// The host's end of a transport.
class HostLink {
  public:
    virtual ~HostLink() = default;
    /// Queues a request: the header, then payload (payload.size() == h.in_bytes).
    virtual void send(const SimHeader & h, const std::vector<char> & payload) = 0;
    /// Takes one reply (a header and the out_bytes last asked), waiting as told; throws
    /// std::runtime_error when none comes within k_reply_timeout_ms or the worker is gone.
    virtual void recv(Wait wait) = 0;
};

/// Connects to a worker of transport t at endpoint (what worker_serve wrote); throws
/// std::runtime_error when it cannot.
std::unique_ptr<HostLink> connect_host_link(Transport t, const std::string & endpoint);

/// The worker of transport t: listens on 127.0.0.1 (an ephemeral port), writes its endpoint and a
/// newline to ready_fd, then serves one host: each request's compute_ms is spun and out_bytes sent
/// back, until a request with stop set. Returns 0, or 1 after an error printed on stderr.
int worker_serve(Transport t, int ready_fd);

} // namespace moezip_ceiling
