// moezip-ceiling: the simulated decode step (decode_sim.h).
#include "decode_sim.h"
#include "spin.h"

#include <algorithm>
#include <cmath>

namespace moezip_ceiling {

HostSim::HostSim(const StepShape & shape, std::unique_ptr<HostLink> link)
    : shape_(shape), link_(std::move(link)), hidden_((size_t) shape.n_embd * 4 + (size_t) shape.n_used * 8, 1) {}

void HostSim::layer_call(const Split & split) {
    const double worker_slots = shape_.n_used - split.host_slots;
    SimHeader h{};
    h.compute_ms = worker_slots * shape_.slot_ms;
    h.in_bytes = (uint32_t) hidden_.size();
    // exact combine: one [n_embd] f32 output per slot the worker computed (a fraction rounds up)
    h.out_bytes = (uint32_t) (shape_.n_embd * 4 * (int) (worker_slots + 0.999));
    link_->send(h, hidden_);
    spin_ms(split.host_slots * shape_.slot_ms);
    link_->recv(split.wait);
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
    const std::vector<char> payload(16, 1);
    h.in_bytes = (uint32_t) payload.size();
    h.out_bytes = 16;
    std::vector<double> rtt;
    for (int i = 0; i < n + 20; ++i) {
        const auto t0 = clock_type::now();
        link_->send(h, payload);
        link_->recv(Wait::block);
        if (i >= 20) rtt.push_back(ms_since(t0));
    }
    return median(rtt);
}

void HostSim::stop_worker() {
    SimHeader h{};
    h.stop = 1;
    link_->send(h, {});
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

double run_floor_ms(const StepShape & shape, int rounds, size_t n_transports) {
    double round_ms = 0;
    for (const Split & s : splits_to_try(shape.n_used)) {
        const double slots = s.one_node ? shape.n_used : std::max(s.host_slots, shape.n_used - s.host_slots);
        round_ms += shape.non_moe_ms + shape.n_layers * slots * shape.slot_ms;
        if (s.one_node) continue;
        // what layer_call moves: the request and one [n_embd] f32 output per worker slot, each with a header
        const double bytes = 2.0 * sizeof(SimHeader) + shape.n_embd * 4.0 + shape.n_used * 8.0 +
                             shape.n_embd * 4.0 * std::ceil(shape.n_used - s.host_slots);
        round_ms += shape.n_layers * bytes / kFloorBytesPerMs;
    }
    return round_ms * (rounds + 3) * (double) n_transports;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

} // namespace moezip_ceiling
