// moezip: which worker process a balancer's measurements of each host came from.
//
// The balancers (share_balance.h, expert_balance.h) keep moving averages of each host's speed and
// overhead. A worker restarted or replaced at the same endpoint is another process, maybe on another
// machine, under another CPU quota: what was measured of the one before says nothing of it. Every
// reply header names the process that answered (`instance`), so each speed sample is bound to an
// instance, and a sample from a new instance starts that host's estimates afresh (the balancers'
// bind_instance) instead of averaging two machines for the next ~10 calls (moving_average.h), which
// for prefill calls can be many prompts.
#pragma once

#include "coordinator/base/hex.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

namespace moezip {

class HostInstances {
public:
    explicit HostInstances(size_t n_hosts) : instance_(n_hosts, 0), replaced_(n_hosts, 0) {}

    /// Host h's next sample comes from process `instance` (a reply header's; 0: unknown, which
    /// keeps the binding). True when h was bound to another process before: its estimates were
    /// measured on that one and are to be forgotten.
    bool rebind(size_t h, uint64_t instance) {
        if (h >= instance_.size() || instance == 0 || instance == instance_[h]) return false;
        const bool replaced = instance_[h] != 0;
        instance_[h] = instance;
        if (replaced) ++replaced_[h];
        return replaced;
    }
    /// The process host h's estimates come from (0: this host, or no sample yet).
    uint64_t instance(size_t h) const { return instance_[h]; }
    /// How often host h's estimates were started afresh for another process.
    uint64_t replaced(size_t h) const { return replaced_[h]; }
    /// Adds "instance" (hex, or null) and "instances_replaced" to host h's entry of a report.
    void describe(size_t h, nlohmann::json & host) const {
        host["instance"] = instance_[h] ? nlohmann::json(hex64(instance_[h])) : nlohmann::json();
        host["instances_replaced"] = replaced_[h];
    }

private:
    std::vector<uint64_t> instance_;
    std::vector<uint64_t> replaced_;
};

} // namespace moezip
