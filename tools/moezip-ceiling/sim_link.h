// moezip-ceiling: the two transports a simulated decode call crosses (decode_sim.h), each a host end
// and a worker loop. zeromq: DEALER to ROUTER over loopback TCP, as moezip's WorkerLink and
// moezip-worker talk (each side's I/O thread sleeps in epoll until a message wakes it).
// tcp_busy_poll: one plain TCP connection whose worker thread polls its socket without sleeping, so
// a request lands in a running thread: no wake-up of a sleeping thread or vCPU on the request path.
// The second is not moezip's transport; it tells what the wake-ups cost.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace moezip_ceiling {

enum class Transport { zeromq, tcp_busy_poll };
const char * transport_name(Transport t);

/// How the host waits for the worker's reply after its own slots.
enum class Wait { block, spin };
const char * wait_name(Wait w);

/// Frame 0 of a request, as long as moezip's MsgHeader (coordinator/wire/protocol.h) so the bytes
/// on the wire match a decode call's. The payload that follows has in_bytes.
struct SimHeader {
    uint32_t stop;        ///< 1: the worker exits
    uint32_t out_bytes;   ///< bytes of the reply
    uint32_t in_bytes;    ///< bytes of the request's payload after this header
    uint32_t reserved;
    double   compute_ms;  ///< the worker's slots (ms)
    uint8_t  pad[104];
};
static_assert(sizeof(SimHeader) == 128, "as long as moezip's request header");

/// Largest request payload or reply a worker accepts (bytes): 64 slots of n_embd 65536 f32.
constexpr uint32_t k_max_sim_bytes = 64u * 65536u * 4u;

/// The host's end of a transport.
class HostLink {
  public:
    virtual ~HostLink() = default;
    /// Queues a request: the header, then payload (payload.size() == h.in_bytes).
    virtual void send(const SimHeader & h, const std::vector<char> & payload) = 0;
    /// Takes one reply of the out_bytes last sent, waiting as told.
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
