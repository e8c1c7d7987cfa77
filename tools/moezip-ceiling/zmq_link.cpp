// moezip-ceiling: the zeromq and zeromq_poll transports (sim_link.h): DEALER on the host, ROUTER on
// the worker, over loopback TCP, as moezip's WorkerLink and moezip-worker.
#include "sim_link.h"
#include "spin.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

namespace moezip_ceiling {

namespace {

class ZmqHostLink : public HostLink {
  public:
    explicit ZmqHostLink(const std::string & endpoint) {
        sock_.set(zmq::sockopt::linger, 1000);  // the stop request must leave before the socket closes
        sock_.set(zmq::sockopt::rcvtimeo, k_reply_timeout_ms);
        sock_.connect(endpoint);
    }
    void send(const SimHeader & h, const std::vector<char> & payload) override {
        sock_.send(zmq::buffer(&h, sizeof h), zmq::send_flags::sndmore);
        sock_.send(zmq::buffer(payload), zmq::send_flags::none);
    }
    void recv(Wait wait) override {
        std::vector<zmq::message_t> parts;
        if (wait == Wait::spin) {
            const auto t0 = clock_type::now();
            while (!zmq::recv_multipart(sock_, std::back_inserter(parts), zmq::recv_flags::dontwait))
                if (ms_since(t0) > k_reply_timeout_ms) throw std::runtime_error("no reply within " + std::to_string(k_reply_timeout_ms) + " ms");
        } else if (!zmq::recv_multipart(sock_, std::back_inserter(parts))) {
            throw std::runtime_error("no reply within " + std::to_string(k_reply_timeout_ms) + " ms");
        }
        if (parts.size() != 2 || parts[0].size() != sizeof(SimHeader)) throw std::runtime_error("a malformed reply");
    }

  private:
    zmq::context_t ctx_{1};
    zmq::socket_t  sock_{ctx_, zmq::socket_type::dealer};
};

/// One request of [identity, header, payload]; false when none was whole.
bool take_request(zmq::socket_t & sock, bool poll, std::vector<zmq::message_t> & parts) {
    parts.clear();
    if (!poll) return zmq::recv_multipart(sock, std::back_inserter(parts)).has_value();
    while (!zmq::recv_multipart(sock, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
    }
    return true;
}

} // namespace

std::unique_ptr<HostLink> connect_zmq_host_link(const std::string & endpoint) {
    return std::make_unique<ZmqHostLink>(endpoint);
}

int zmq_worker_serve(int ready_fd, bool poll) {
    try {
        zmq::context_t ctx(1);
        zmq::socket_t sock(ctx, zmq::socket_type::router);
        sock.set(zmq::sockopt::linger, 0);
        sock.bind("tcp://127.0.0.1:*");
        const std::string ep = sock.get(zmq::sockopt::last_endpoint) + "\n";
        if (write(ready_fd, ep.data(), ep.size()) != (ssize_t) ep.size()) {
            fprintf(stderr, "moezip-ceiling: error: zeromq worker: cannot report its endpoint\n");
            return 1;
        }
        close(ready_fd);
        std::vector<zmq::message_t> parts;
        std::vector<char> out;
        for (;;) {
            if (!take_request(sock, poll, parts)) continue;
            SimHeader h;
            if (parts.size() != 3 || parts[1].size() != sizeof h) {
                fprintf(stderr, "moezip-ceiling: error: zeromq worker: a request of %zu frames\n", parts.size());
                return 1;
            }
            memcpy(&h, parts[1].data(), sizeof h);
            if (h.stop) return 0;
            if (h.out_bytes > k_max_sim_bytes) {
                fprintf(stderr, "moezip-ceiling: error: zeromq worker: a reply of %u bytes asked\n", h.out_bytes);
                return 1;
            }
            spin_ms(h.compute_ms);
            out.resize(h.out_bytes);
            sock.send(parts[0], zmq::send_flags::sndmore);
            sock.send(zmq::buffer(&h, sizeof h), zmq::send_flags::sndmore);
            sock.send(zmq::buffer(out), zmq::send_flags::none);
        }
    } catch (const zmq::error_t & e) {
        fprintf(stderr, "moezip-ceiling: error: zeromq worker: %s\n", e.what());
        return 1;
    }
}

} // namespace moezip_ceiling
