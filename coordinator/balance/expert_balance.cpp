#include "coordinator/balance/expert_balance.h"
#include "coordinator/balance/moving_average.h"

#include <algorithm>
#include <numeric>

namespace moezip {

ExpertBalancer::ExpertBalancer(size_t n_hosts)
    : speed_(n_hosts), instances_(n_hosts), slots_(n_hosts, 0), replicated_slots_(n_hosts, 0), probes_(n_hosts, 0), covered_(n_hosts, 0),
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
    const double transfer = size == CallSize::large ? o.per_row_ms() * (double) slots : 0.0;
    return fixed + per_slot(h, size) * (double) slots + transfer;
}

std::vector<int> ExpertBalancer::assign(const std::vector<ExpertGroup> & groups, CallSize size) {
    const size_t H = speed_.size();
    std::vector<int> host(groups.size(), -1);
    std::vector<double> finish(H, 0);
    std::vector<bool> busy(H, false), candidate(H, false);
    auto add = [&](size_t g, int h) {
        host[g] = h;
        finish[h] += expected_ms(h, size, groups[g].slots, !busy[h]);
        busy[h] = true;
    };
    std::vector<size_t> open;  // groups with a choice
    for (size_t g = 0; g < groups.size(); ++g) {
        if (groups[g].hosts.size() == 1) add(g, groups[g].hosts[0]);
        else open.push_back(g);
    }
    ++calls_;
    if (!open.empty()) ++balanced_calls_;
    // largest first; ties by expert id, so equal inputs give equal decisions
    std::stable_sort(open.begin(), open.end(), [&](size_t a, size_t b) {
        return groups[a].slots != groups[b].slots ? groups[a].slots > groups[b].slots : groups[a].expert < groups[b].expert;
    });
    for (size_t g : open) {
        int best = -1;
        double best_finish = 0;
        for (int h : groups[g].hosts) {
            candidate[h] = true;
            const double f = finish[h] + expected_ms(h, size, groups[g].slots, !busy[h]);
            if (best < 0 || f < best_finish) { best = h; best_finish = f; }
        }
        add(g, best);
        ++groups_decided_;
    }
    // a candidate left idle too long gets the smallest group it may take, to be measured again
    for (size_t h = 0; h < H; ++h) {
        if (!candidate[h] || busy[h]) continue;
        if (++idle_calls_[h] < kProbeCalls) continue;
        for (auto it = open.rbegin(); it != open.rend(); ++it) {
            const std::vector<int> & hs = groups[*it].hosts;
            if (std::find(hs.begin(), hs.end(), (int) h) == hs.end()) continue;
            host[*it] = (int) h;
            ++probes_[h];
            break;
        }
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
        instances_.describe(h, hosts.back());
    }
    return {{"calls", calls_},
            {"balanced_calls", balanced_calls_},
            {"groups_decided", groups_decided_},
            {"expected_makespan_ms_mean", balanced_calls_ > 0 ? makespan_ms_sum_ / (double) balanced_calls_ : 0.0},
            {"hosts", hosts}};
}

bool prefer_slot_prefix(const int32_t * ids, int64_t k, const std::vector<ExpertGroup> & groups, std::vector<int> & host_of) {
    int worker = -1;
    int64_t m = 0;
    for (int64_t s = 0; s < k; ++s) {
        const int h = host_of[(size_t) ids[s]];
        if (h == 0) continue;
        if (worker >= 0 && h != worker) return false;  // two workers: no single prefix
        worker = h;
        ++m;
    }
    if (worker < 0 || m < 2) return false;  // one slot: its output is already one row
    bool prefix = true;
    for (int64_t s = 0; s < m; ++s) prefix = prefix && host_of[(size_t) ids[s]] == worker;
    if (prefix) return true;
    auto may = [&](int expert, int h) {
        for (const ExpertGroup & g : groups)
            if (g.expert == expert) return std::find(g.hosts.begin(), g.hosts.end(), h) != g.hosts.end();
        return false;
    };
    for (int64_t s = 0; s < k; ++s)
        if (!may(ids[s], s < m ? worker : 0)) return false;
    const std::vector<int> before = host_of;
    for (int64_t s = 0; s < k; ++s) host_of[(size_t) ids[s]] = s < m ? worker : 0;
    for (int64_t s = 0; s < k; ++s)  // an expert picked twice cannot be on both sides
        if (host_of[(size_t) ids[s]] != (s < m ? worker : 0)) { host_of = before; return false; }
    return true;
}

} // namespace moezip
