// moezip-ceiling: the simulated decode step (decode_sim.h).
#include "decode_sim.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unistd.h>

namespace moezip_ceiling {

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

/// Busy work of a given length: a slot's compute, as far as the other side and the clock can tell.
void spin_ms(double ms) {
    const auto t0 = clock_type::now();
    while (ms_since(t0) < ms) {
    }
}

/// Frame 0 of a request, as long as moezip's MsgHeader (coordinator/wire/protocol.h) so the bytes
/// on the wire match a decode call's.
struct SimHeader {
    uint32_t stop;        ///< 1: the worker exits
    uint32_t out_bytes;   ///< bytes of the reply's payload
    double   compute_ms;  ///< the worker's slots (ms)
    uint8_t  pad[112];
};
static_assert(sizeof(SimHeader) == 128, "as long as moezip's request header");

} // namespace

const char * wait_name(Wait w) { return w == Wait::spin ? "spin" : "block"; }

int worker_serve(int ready_fd) {
    try {
        zmq::context_t ctx(1);
        zmq::socket_t sock(ctx, zmq::socket_type::router);
        sock.set(zmq::sockopt::linger, 0);
        sock.bind("tcp://127.0.0.1:*");
        const std::string ep = sock.get(zmq::sockopt::last_endpoint) + "\n";
        if (write(ready_fd, ep.data(), ep.size()) != (ssize_t) ep.size()) {
            fprintf(stderr, "moezip-ceiling: error: worker: cannot report its endpoint\n");
            return 1;
        }
        close(ready_fd);
        std::vector<char> out;
        for (;;) {
            std::vector<zmq::message_t> parts;
            if (!zmq::recv_multipart(sock, std::back_inserter(parts))) continue;
            if (parts.size() < 2 || parts[1].size() != sizeof(SimHeader)) {
                fprintf(stderr, "moezip-ceiling: error: worker: a request of %zu frames\n", parts.size());
                return 1;
            }
            SimHeader h;
            memcpy(&h, parts[1].data(), sizeof h);
            if (h.stop) return 0;
            spin_ms(h.compute_ms);
            out.resize(h.out_bytes);
            sock.send(parts[0], zmq::send_flags::sndmore);
            sock.send(zmq::buffer(out), zmq::send_flags::none);
        }
    } catch (const zmq::error_t & e) {
        fprintf(stderr, "moezip-ceiling: error: worker: %s\n", e.what());
        return 1;
    }
}

struct HostSim::Impl {
    zmq::context_t ctx{1};
    zmq::socket_t  sock{ctx, zmq::socket_type::dealer};
    std::vector<char> hidden;
};

HostSim::HostSim(const StepShape & shape, const std::string & endpoint) : impl_(new Impl), shape_(shape) {
    impl_->sock.set(zmq::sockopt::linger, 0);
    impl_->sock.connect(endpoint);
    // a decode call's request: the row's hidden state [n_embd] f32, its ids and weights [n_used] i32, f32
    impl_->hidden.assign((size_t) shape.n_embd * 4 + (size_t) shape.n_used * 8, 1);
}

HostSim::~HostSim() { delete impl_; }

double HostSim::layer_call(const Split & split) {
    const double worker_slots = shape_.n_used - split.host_slots;
    SimHeader h{};
    h.compute_ms = worker_slots * shape_.slot_ms;
    // exact combine: one [n_embd] f32 output per slot the worker computed (a fraction rounds up)
    h.out_bytes = (uint32_t) (shape_.n_embd * 4 * (int) (worker_slots + 0.999));
    const auto t0 = clock_type::now();
    impl_->sock.send(zmq::buffer(&h, sizeof h), zmq::send_flags::sndmore);
    impl_->sock.send(zmq::buffer(impl_->hidden), zmq::send_flags::none);
    spin_ms(split.host_slots * shape_.slot_ms);
    std::vector<zmq::message_t> parts;
    if (split.wait == Wait::spin) {
        while (!zmq::recv_multipart(impl_->sock, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
        }
    } else {
        (void) zmq::recv_multipart(impl_->sock, std::back_inserter(parts));
    }
    return ms_since(t0);
}

double HostSim::step(const Split & split) {
    const double pause_ms = shape_.non_moe_ms / (shape_.n_layers + 1);
    const auto t0 = clock_type::now();
    for (int il = 0; il < shape_.n_layers; ++il) {
        spin_ms(pause_ms);
        if (split.one_node) spin_ms(shape_.n_used * shape_.slot_ms);
        else layer_call(split);
    }
    spin_ms(pause_ms);
    return ms_since(t0);
}

double HostSim::rtt16_ms(int n) {
    SimHeader h{};
    std::vector<char> payload(16, 1);
    std::vector<double> rtt;
    for (int i = 0; i < n + 20; ++i) {
        const auto t0 = clock_type::now();
        impl_->sock.send(zmq::buffer(&h, sizeof h), zmq::send_flags::sndmore);
        impl_->sock.send(zmq::buffer(payload), zmq::send_flags::none);
        std::vector<zmq::message_t> parts;
        (void) zmq::recv_multipart(impl_->sock, std::back_inserter(parts));
        if (i >= 20) rtt.push_back(ms_since(t0));
    }
    return median(rtt);
}

void HostSim::stop_worker() {
    SimHeader h{};
    h.stop = 1;
    impl_->sock.send(zmq::buffer(&h, sizeof h), zmq::send_flags::sndmore);
    impl_->sock.send(zmq::buffer(impl_->hidden), zmq::send_flags::none);
}

std::vector<Split> splits_to_try(int n_used) {
    std::vector<Split> out{Split{(double) n_used, Wait::block, true}};
    const double lo = std::max(1.0, n_used / 2.0 - 2), hi = std::min(n_used - 1.0, n_used / 2.0 + 2);
    for (double h = lo; h <= hi + 1e-9; h += 0.25) {
        out.push_back(Split{h, Wait::block});
        out.push_back(Split{h, Wait::spin});
    }
    return out;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace moezip_ceiling
