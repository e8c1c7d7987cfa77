// moezip-plan: what the reports say about a model's routing and the hosts' speeds.
// A report ("moezip-report/1", docs/report.md) gives, per MoE layer, the slots routed to each expert
// (`routing[]`, prefill and decode apart), the expert tensors' types and shapes (`provider_map`),
// and the hosts' measured times (`balance.hosts[]`, or `workers[]` service times and `layers[]`).
#pragma once

#include "provider_map/status.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moezip_plan {

/// The routing statistics of one or more runs of one model, summed.
struct RoutingLoad {
    int n_expert = 0;
    std::vector<int> layers;                   ///< il of each row of decode/prefill, ascending
    std::vector<std::vector<double>> decode;   ///< [layer][expert] decode slots routed
    std::vector<std::vector<double>> prefill;  ///< [layer][expert] prefill slots routed
    /// Bytes of one expert id on a host: its gate, up and down slices summed over the MoE layers
    /// (every id has the same size); 0 when no report named the expert tensors.
    uint64_t expert_bytes = 0;
    /// Measured decode time per slot (ms) by host: "here" (the coordinator) or a worker's endpoint.
    std::map<std::string, double> ms_per_slot;
    std::vector<std::string> sources;          ///< the reports read, in order
};

/// Adds the report at `path` to `in`. Errors (the message starts with the path): unreadable, not a
/// moezip report, no routing statistics (run with mode local, rows, experts or shard), another
/// n_expert than the reports before.
moezip::Status plan_input_add_report(const std::string & path, RoutingLoad & in);

/// Per layer and expert the load to balance: decode slots + prefill_weight x prefill slots.
std::vector<std::vector<double>> plan_input_load(const RoutingLoad & in, double prefill_weight);

} // namespace moezip_plan
