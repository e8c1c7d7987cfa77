#include "coordinator/wire/link_monitor.h"
#include "coordinator/wire/zmq_eintr.h"

#include <atomic>
#include <cstring>
#include <string>

namespace moezip {

void LinkMonitor::start(zmq::context_t & ctx, zmq::socket_t & sock) {
    stop();
    // inproc names are per context and a closed monitor's name is freed only when its socket is
    // reaped, so every watch gets a name of its own
    static std::atomic<uint64_t> next{0};
    const std::string addr = "inproc://moezip-link-monitor-" + std::to_string(next.fetch_add(1));
    if (zmq_socket_monitor(sock.handle(), addr.c_str(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED) != 0)
        throw zmq::error_t();
    watched_ = &sock;
    handshaken_ = false;
    try {
        pair_ = zmq::socket_t(ctx, zmq::socket_type::pair);
        pair_.set(zmq::sockopt::linger, 0);
        pair_.connect(addr);
    } catch (...) {
        stop();
        throw;
    }
}

void LinkMonitor::stop() {
    if (watched_ != nullptr) zmq_socket_monitor(watched_->handle(), nullptr, 0);
    watched_ = nullptr;
    if (pair_) pair_.close();
}

int LinkMonitor::drain_disconnects(int * handshakes) {
    int n = 0;
    if (!pair_) return 0;
    zmq::message_t event;
    while (recv_part_through_signals(pair_, event, zmq::recv_flags::dontwait)) {
        uint16_t id = 0;
        if (event.size() >= sizeof id) memcpy(&id, event.data(), sizeof id);
        if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            handshaken_ = true;
            if (handshakes != nullptr) ++*handshakes;
        }
        // a connection whose handshake failed closes too (CURVE keys, not a ZeroMQ peer): the
        // send's timeout then names the cause; only a connection that served can be lost
        if (id == ZMQ_EVENT_DISCONNECTED && handshaken_) {
            handshaken_ = false;
            ++n;
        }
        // the event's other part (the address) was sent with it: read and drop it
        for (zmq::message_t rest; event.more() && recv_part_through_signals(pair_, rest, zmq::recv_flags::dontwait);) event = std::move(rest);
    }
    return n;
}

} // namespace moezip
