#include "tools/moezip-plan/placement.h"

#include <algorithm>
#include <numeric>

namespace moezip_plan {

namespace {

// Experts in the order they are placed: most load first (summed over layers), ties by id.
std::vector<int> hottest_first(const std::vector<std::vector<double>> & load, int n_expert) {
    std::vector<double> total((size_t) n_expert, 0);
    for (const auto & layer : load)
        for (int e = 0; e < n_expert && e < (int) layer.size(); ++e) total[e] += layer[e];
    std::vector<int> order((size_t) n_expert);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return total[a] > total[b]; });
    return order;
}

// Sum over layers of the busiest host's time, with expert e's load added to host h's (h < 0: as is).
double expected_time(const std::vector<std::vector<double>> & time, const std::vector<std::vector<double>> & load,
                     const std::vector<double> & speeds, int e, int h) {
    double sum = 0;
    for (size_t l = 0; l < load.size(); ++l) {
        double busiest = 0;
        for (size_t k = 0; k < speeds.size(); ++k) {
            double t = time[k][l];
            if ((int) k == h) t += load[l][e] / speeds[k];
            busiest = std::max(busiest, t);
        }
        sum += busiest;
    }
    return sum;
}

moezip::Status budgets_too_small(int n_expert, uint64_t expert_bytes, const std::vector<PlanHost> & hosts,
                                 const std::vector<int> & cap) {
    int held = 0;
    std::string each;
    for (size_t h = 0; h < hosts.size(); ++h) {
        held += cap[h];
        each += (each.empty() ? "" : ", ") + hosts[h].endpoint + " " + plan_bytes_format(hosts[h].budget_bytes) + " (" +
                std::to_string(cap[h]) + " experts)";
    }
    const uint64_t missing = (uint64_t) (n_expert - held) * expert_bytes;
    return moezip::Status::invalid_argument("budgets too small: the hosts hold " + std::to_string(held) + " of the model's " +
                                            std::to_string(n_expert) + " experts (" + each + "; one expert is " +
                                            plan_bytes_format(expert_bytes) + " over all MoE layers); at least " +
                                            plan_bytes_format(missing) + " more are needed");
}

} // namespace

moezip::Status plan_place(const std::vector<std::vector<double>> & load, int n_expert, uint64_t expert_bytes,
                          const std::vector<PlanHost> & hosts, const std::vector<double> & speeds, Placement & out) {
    if (expert_bytes == 0) return moezip::Status::invalid_argument("the size of an expert is unknown (no report names the expert tensors)");
    if (hosts.empty()) return moezip::Status::invalid_argument("no --host given");
    const size_t H = hosts.size();
    out = Placement();
    out.capacity.resize(H);
    int held = 0;
    for (size_t h = 0; h < H; ++h) {
        out.capacity[h] = (int) std::min<uint64_t>((uint64_t) n_expert, hosts[h].budget_bytes / expert_bytes);
        held += out.capacity[h];
    }
    if (held < n_expert) return budgets_too_small(n_expert, expert_bytes, hosts, out.capacity);

    // 1. one owner each
    out.owners.assign((size_t) n_expert, {});
    std::vector<int> room = out.capacity;
    std::vector<std::vector<double>> time(H, std::vector<double>(load.size(), 0));
    const std::vector<int> order = hottest_first(load, n_expert);
    for (int e : order) {
        int best = -1;
        double best_t = 0;
        for (size_t h = 0; h < H; ++h) {
            if (room[h] == 0) continue;
            const double t = expected_time(time, load, speeds, e, (int) h);
            // ties (cold experts): the host with the most room left, so budgets fill evenly
            if (best < 0 || t < best_t || (t == best_t && room[h] > room[best])) { best = (int) h; best_t = t; }
        }
        out.owners[e].push_back(best);
        --room[best];
        for (size_t l = 0; l < load.size(); ++l) time[best][l] += load[l][e] / speeds[best];
    }
    double total = 0;
    out.share.assign(H, 0);
    for (size_t h = 0; h < H; ++h)
        for (size_t l = 0; l < load.size(); ++l) { out.share[h] += time[h][l] * speeds[h]; total += time[h][l] * speeds[h]; }
    for (double & s : out.share) s = total > 0 ? s / total : 0;

    // 2. replicas with the memory left, hottest first, a second owner for all before a third
    for (size_t pass = 2; pass <= H; ++pass) {
        bool placed = false;
        for (int e : order) {
            if (out.owners[e].size() >= pass) continue;
            int best = -1;
            for (size_t h = 0; h < H; ++h) {
                if (room[h] == 0 || std::find(out.owners[e].begin(), out.owners[e].end(), (int) h) != out.owners[e].end()) continue;
                if (best < 0 || room[h] > room[best] || (room[h] == room[best] && speeds[h] > speeds[best])) best = (int) h;
            }
            if (best < 0) continue;
            out.owners[e].push_back(best);
            --room[best];
            placed = true;
        }
        if (!placed) break;
    }
    out.experts_of.assign(H, {});
    for (int e = 0; e < n_expert; ++e) {
        for (int h : out.owners[e]) out.experts_of[h].push_back(e);
        if (out.owners[e].size() > 1) ++out.replicated;
    }
    return moezip::Status::ok();
}

} // namespace moezip_plan
