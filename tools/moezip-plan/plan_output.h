// moezip-plan: the plan written out: the coordinator's config (mode, [experts], [[worker]]) with the
// workers' command lines as comments, and a JSON summary for scripts and tests.
#pragma once

#include "tools/moezip-plan/placement.h"
#include "tools/moezip-plan/plan_input.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace moezip_plan {

/// What the output needs besides the placement.
struct PlanContext {
    const RoutingLoad * input = nullptr;
    std::vector<PlanHost> hosts;
    std::vector<double> speeds;       ///< relative, one per host
    std::vector<std::string> speed_from;  ///< per host: "flag", "measured", "assumed"
    double prefill_weight = 0;
    std::string model = "MODEL.gguf";  ///< for the worker command lines
    std::string with;                  ///< text put after `mode` (the user's other settings)
};

/// Expert ids (ascending) as config ranges, "0-3,8".
std::string plan_ranges(const std::vector<int> & ids);

/// The config text: comments (sources, per host experts, bytes, speed, expected share; worker
/// command lines), `mode = "experts"`, ctx.with, [experts] (local, replicas when any) and one
/// [[worker]] per worker host in --host order.
std::string plan_toml(const PlanContext & ctx, const Placement & p);

/// {"n_expert", "expert_bytes", "replicated", "hosts": [{"endpoint", "experts", "count", "bytes",
/// "budget_bytes", "capacity", "speed", "speed_from", "share"}]}.
nlohmann::json plan_json(const PlanContext & ctx, const Placement & p);

} // namespace moezip_plan
