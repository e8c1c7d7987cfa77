#include "coordinator/modes/expert_balance.h"
#include "coordinator/modes/moving_average.h"

#include <algorithm>
#include <numeric>

namespace moezip {

ExpertBalancer::ExpertBalancer(size_t n_hosts)
    : speed_(n_hosts), slots_(n_hosts, 0), replicated_slots_(n_hosts, 0), probes_(n_hosts, 0), covered_(n_hosts, 0),
      idle_calls_(n_hosts, 0) {}

// An unmeasured host is taken to be as fast as the measured ones (so the first calls split evenly
// and measure everyone); with nothing measured at all every host costs 1 per slot.
double ExpertBalancer::per_slot(size_t h, CallSize size) const {
    const int c = (int) size;
    if (speed_[h].samples[c] > 0) return speed_[h].ms_per_slot[c];
    double sum = 0;
    int n = 0;
    for (const HostSpeed & s : speed_)
        if (s.samples[c] > 0) { sum += s.ms_per_slot[c]; ++n; }
    if (n > 0) return sum / n;
    return 1.0;
}

double ExpertBalancer::expected_ms(size_t h, CallSize size, int64_t slots, bool first) const {
    const WorkerOverhead & o = speed_[h].overhead;
    const double fixed = first ? o.per_call_ms() : 0.0;
    return fixed + per_slot(h, size) * (double) slots + (o.expected_ms(size, (double) slots) - o.per_call_ms());
}

// A replicated expert's home: the owner it goes to when that keeps the call balanced. Keeping each
// expert on one host keeps each host's working set (and its page-table walks) to its share of the
// experts: on a3b-L4-q8_0 a host computing any of 128 experts took 0.93 ms per decode slot where one
// computing its half took 0.67 (docs/performance.md, "Balancer estimates per call size").
static int home_of(const ExpertGroup & g) { return g.hosts[(size_t) g.expert % g.hosts.size()]; }

std::vector<int> ExpertBalancer::assign(const std::vector<ExpertGroup> & groups, CallSize size) {
    const size_t H = speed_.size();
    std::vector<int> host(groups.size(), -1);
    std::vector<double> finish(H, 0);
    std::vector<int> n_parts(H, 0);
    std::vector<bool> candidate(H, false);
    auto add = [&](size_t g, int h) {
        host[g] = h;
        finish[h] += expected_ms(h, size, groups[g].slots, n_parts[h] == 0);
        ++n_parts[h];
    };
    auto remove = [&](size_t g) {
        const int h = host[g];
        --n_parts[h];
        finish[h] = n_parts[h] == 0 ? 0.0 : finish[h] - expected_ms(h, size, groups[g].slots, false);
    };
    std::vector<size_t> open;  // groups with a choice
    for (size_t g = 0; g < groups.size(); ++g) {
        if (groups[g].hosts.size() == 1) { add(g, groups[g].hosts[0]); continue; }
        open.push_back(g);
        for (int h : groups[g].hosts) candidate[h] = true;
    }
    ++calls_;
    if (!open.empty()) ++balanced_calls_;
    for (size_t g : open) add(g, home_of(groups[g]));
    groups_decided_ += open.size();
    // then move replicated experts off the busiest host while that shortens the call: each step
    // takes the move with the earliest resulting finish (ties: fewer slots, then lower expert id,
    // so equal inputs give equal decisions); every step shortens the call, so it ends
    for (size_t step = 0; step < 4 * open.size() + 4; ++step) {
        const int busiest = (int) (std::max_element(finish.begin(), finish.end()) - finish.begin());
        const double makespan = finish[busiest];
        size_t best_g = 0;
        int best_h = -1;
        double best_after = makespan;
        for (size_t g : open) {
            if (host[g] != busiest) continue;
            const double from = n_parts[busiest] == 1 ? 0.0 : finish[busiest] - expected_ms(busiest, size, groups[g].slots, false);
            for (int h : groups[g].hosts) {
                if (h == busiest) continue;
                const double to = finish[h] + expected_ms(h, size, groups[g].slots, n_parts[h] == 0);
                double after = std::max(from, to);
                for (size_t o = 0; o < H; ++o)
                    if ((int) o != busiest && (int) o != h) after = std::max(after, finish[o]);
                const bool better = after < best_after - 1e-9 ||
                                    (best_h >= 0 && after <= best_after + 1e-9 &&
                                     (groups[g].slots < groups[best_g].slots ||
                                      (groups[g].slots == groups[best_g].slots && groups[g].expert < groups[best_g].expert)));
                if (after < makespan - 1e-9 && better) { best_g = g; best_h = h; best_after = after; }
            }
        }
        if (best_h < 0) break;
        remove(best_g);
        add(best_g, best_h);
    }
    // a candidate left idle too long gets the smallest group it may take, to be measured again
    for (size_t h = 0; h < H; ++h) {
        if (!candidate[h] || n_parts[h] > 0) continue;
        if (++idle_calls_[h] < kProbeCalls) continue;
        size_t smallest = groups.size();
        for (size_t g : open) {
            const std::vector<int> & hs = groups[g].hosts;
            if (std::find(hs.begin(), hs.end(), (int) h) == hs.end()) continue;
            if (smallest == groups.size() || groups[g].slots < groups[smallest].slots) smallest = g;
        }
        if (smallest == groups.size()) continue;
        host[smallest] = (int) h;
        ++probes_[h];
    }
    std::vector<double> load(H, 0);
    std::vector<bool> has(H, false);
    for (size_t g = 0; g < groups.size(); ++g) {
        const int h = host[g];
        slots_[h] += (uint64_t) groups[g].slots;
        if (groups[g].hosts.size() > 1) replicated_slots_[h] += (uint64_t) groups[g].slots;
        load[h] += expected_ms(h, size, groups[g].slots, !has[h]);
        has[h] = true;
    }
    double makespan = 0;
    for (size_t h = 0; h < H; ++h) {
        if (has[h]) idle_calls_[h] = 0;
        if (has[h]) makespan = std::max(makespan, load[h]);
    }
    if (!open.empty()) makespan_ms_sum_ += makespan;
    return host;
}

void ExpertBalancer::observe_compute(size_t h, CallSize size, int64_t slots, double ms) {
    if (slots <= 0 || !(ms >= 0)) return;
    HostSpeed & s = speed_[h];
    const int c = (int) size;
    moving_average_add(s.ms_per_slot[c], ms / (double) slots, s.samples[c]);
}

nlohmann::json ExpertBalancer::to_json(const std::vector<std::string> & names) const {
    nlohmann::json hosts = nlohmann::json::array();
    for (size_t h = 0; h < speed_.size(); ++h) {
        const HostSpeed & s = speed_[h];
        hosts.push_back({{"host", h < names.size() ? names[h] : std::to_string(h)},
                         {"slots", slots_[h]},
                         {"replicated_slots", replicated_slots_[h]},
                         {"ms_per_slot_small", s.ms_per_slot[0]},
                         {"ms_per_slot_large", s.ms_per_slot[1]},
                         {"samples_small", s.samples[0]},
                         {"samples_large", s.samples[1]},
                         {"overhead_ms_per_call", s.overhead.per_call_ms()},
                         {"overhead_ms_per_slot_large", s.overhead.per_row_ms()},
                         {"probes", probes_[h]},
                         {"covered_slots", covered_[h]}});
    }
    return {{"calls", calls_},
            {"balanced_calls", balanced_calls_},
            {"groups_decided", groups_decided_},
            {"expected_makespan_ms_mean", balanced_calls_ > 0 ? makespan_ms_sum_ / (double) balanced_calls_ : 0.0},
            {"hosts", hosts}};
}

} // namespace moezip
