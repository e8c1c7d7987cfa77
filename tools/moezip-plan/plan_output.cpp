#include "tools/moezip-plan/plan_output.h"

#include "coordinator/config/expert_range.h"

#include <cstdio>

namespace moezip_plan {

std::string plan_ranges(const std::vector<int> & ids) {
    std::vector<moezip::ExpertRange> ranges;
    for (int e : ids) {
        if (!ranges.empty() && ranges.back().last + 1 == e) ranges.back().last = e;
        else ranges.push_back({e, e});
    }
    return moezip::expert_ranges_format(ranges);
}

namespace {

std::string percent(double share) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.1f%%", share * 100);
    return buf;
}

std::string number(double v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

std::string header(const PlanContext & ctx, const Placement & p) {
    const RoutingLoad & in = *ctx.input;
    std::string t = "# moezip-plan: experts mode, " + std::to_string(in.n_expert) + " experts over " + std::to_string(ctx.hosts.size()) +
                    " hosts (docs/placement.md)\n# routing from:";
    for (const std::string & s : in.sources) t += " " + s;
    t += "\n# load per layer and expert: decode slots + " + number(ctx.prefill_weight) + " x prefill slots, over " +
         std::to_string(in.layers.size()) + " MoE layers; one expert is " + plan_bytes_format(in.expert_bytes) + " over them\n";
    for (size_t h = 0; h < ctx.hosts.size(); ++h) {
        const PlanHost & host = ctx.hosts[h];
        t += "# " + host.endpoint + ": " + std::to_string(p.experts_of[h].size()) + " experts (" +
             plan_bytes_format((uint64_t) p.experts_of[h].size() * in.expert_bytes) + " of a " + plan_bytes_format(host.budget_bytes) +
             " budget), speed " + number(ctx.speeds[h]) + " (" + ctx.speed_from[h] + "), expected share with single owners " +
             percent(p.share[h]) + "\n";
    }
    if (p.replicated > 0)
        t += "# " + std::to_string(p.replicated) + " experts have several owners: each call's slots are balanced between them\n";
    bool any_worker = false;
    for (size_t h = 0; h < ctx.hosts.size(); ++h) {
        if (ctx.hosts[h].here()) continue;
        if (!any_worker) t += "# the workers (each host with the model file; a worker on another host binds its own address):\n";
        any_worker = true;
        t += "#   moezip-worker --model " + ctx.model + " --bind " + ctx.hosts[h].endpoint + " --experts " + plan_ranges(p.experts_of[h]) +
             "\n";
    }
    return t;
}

} // namespace

std::string plan_toml(const PlanContext & ctx, const Placement & p) {
    std::string t = header(ctx, p) + "mode = \"experts\"\n";
    if (!ctx.with.empty()) t += ctx.with + (ctx.with.back() == '\n' ? "" : "\n");
    std::string local;
    for (size_t h = 0; h < ctx.hosts.size(); ++h)
        if (ctx.hosts[h].here()) local = plan_ranges(p.experts_of[h]);
    t += "\n[experts]\nlocal = \"" + local + "\"\n";
    if (p.replicated > 0) t += "replicas = true\n";
    for (size_t h = 0; h < ctx.hosts.size(); ++h) {
        if (ctx.hosts[h].here()) continue;
        t += "\n[[worker]]\nendpoint = \"" + ctx.hosts[h].endpoint + "\"\nexperts = \"" + plan_ranges(p.experts_of[h]) + "\"\n";
        if (!ctx.hosts[h].public_key.empty()) t += "public_key = \"" + ctx.hosts[h].public_key + "\"\n";
    }
    return t;
}

nlohmann::json plan_json(const PlanContext & ctx, const Placement & p) {
    nlohmann::json hosts = nlohmann::json::array();
    for (size_t h = 0; h < ctx.hosts.size(); ++h)
        hosts.push_back({{"endpoint", ctx.hosts[h].endpoint}, {"experts", plan_ranges(p.experts_of[h])},
                         {"count", p.experts_of[h].size()}, {"bytes", (uint64_t) p.experts_of[h].size() * ctx.input->expert_bytes},
                         {"budget_bytes", ctx.hosts[h].budget_bytes}, {"capacity", p.capacity[h]}, {"speed", ctx.speeds[h]},
                         {"speed_from", ctx.speed_from[h]}, {"share", p.share[h]}});
    return {{"n_expert", ctx.input->n_expert}, {"expert_bytes", ctx.input->expert_bytes}, {"replicated", p.replicated},
            {"hosts", hosts}};
}

} // namespace moezip_plan
