#include "coordinator/modes/share_balance.h"
#include "coordinator/modes/moving_average.h"

#include <algorithm>
#include <cmath>

namespace moezip {

namespace {

constexpr size_t kHistoryMax = 256;

} // namespace

ShareBalancer::ShareBalancer(size_t n_hosts)
    : ms_per_unit_(n_hosts, 0), overhead_ms_(n_hosts, 0), samples_(n_hosts, 0), overhead_samples_(n_hosts, 0), units_(n_hosts, 0),
      probes_(n_hosts, 0), idle_calls_(n_hosts, 0) {}

double ShareBalancer::per_unit(size_t h) const {
    if (samples_[h] > 0) return ms_per_unit_[h];
    double sum = 0;
    int n = 0;
    for (size_t k = 0; k < samples_.size(); ++k)
        if (samples_[k] > 0) { sum += ms_per_unit_[k]; ++n; }
    return n > 0 ? sum / n : 1.0;
}

std::vector<int64_t> ShareBalancer::split(int64_t units, double scale) {
    const size_t H = ms_per_unit_.size();
    std::vector<bool> in(H, true);
    std::vector<double> exact(H, 0);
    // equal finish T: sum over active hosts of (T - o_h) / c_h = units; drop hosts with T < o_h
    for (size_t round = 0; round < H; ++round) {
        double inv = 0, o_over_c = 0;
        for (size_t h = 0; h < H; ++h) {
            if (!in[h]) continue;
            const double c = std::max(per_unit(h) * scale, 1e-12);
            inv += 1 / c;
            o_over_c += overhead_ms_[h] / c;
        }
        const double T = (units + o_over_c) / inv;
        bool dropped = false;
        for (size_t h = 0; h < H; ++h) {
            if (!in[h]) continue;
            exact[h] = (T - overhead_ms_[h]) / std::max(per_unit(h) * scale, 1e-12);
            if (exact[h] < 0) { in[h] = false; exact[h] = 0; dropped = true; }
        }
        if (!dropped) break;
    }
    // whole units: floors, then the units left to the largest remainders
    std::vector<int64_t> counts(H, 0);
    int64_t given = 0;
    std::vector<std::pair<double, size_t>> rem;
    for (size_t h = 0; h < H; ++h) {
        counts[h] = (int64_t) std::floor(std::max(0.0, exact[h]));
        counts[h] = std::min(counts[h], units);
        given += counts[h];
        rem.push_back({exact[h] - (double) counts[h], h});
    }
    std::stable_sort(rem.begin(), rem.end(), [](const auto & a, const auto & b) { return a.first > b.first; });
    for (size_t i = 0; given < units; i = (i + 1) % H) { ++counts[rem[i].second]; ++given; }
    while (given > units) {  // rounding of a degenerate solve: take back from the largest
        size_t big = (size_t) (std::max_element(counts.begin(), counts.end()) - counts.begin());
        --counts[big];
        --given;
    }
    // a host idle too long gets one unit from the largest, to be measured again
    for (size_t h = 0; h < H; ++h) {
        if (counts[h] > 0) { idle_calls_[h] = 0; continue; }
        if (++idle_calls_[h] < kShareProbeCalls || units < 2) continue;
        size_t big = (size_t) (std::max_element(counts.begin(), counts.end()) - counts.begin());
        --counts[big];
        ++counts[h];
        ++probes_[h];
        idle_calls_[h] = 0;
    }
    return counts;
}

void ShareBalancer::count(const std::vector<int64_t> & counts) {
    for (size_t h = 0; h < counts.size() && h < units_.size(); ++h) units_[h] += (uint64_t) counts[h];
}

double ShareBalancer::makespan(const std::vector<int64_t> & counts, double scale) const {
    double m = 0;
    for (size_t h = 0; h < counts.size(); ++h)
        if (counts[h] > 0) m = std::max(m, overhead_ms_[h] + per_unit(h) * scale * (double) counts[h]);
    return m;
}

void ShareBalancer::observe(size_t h, double units, double ms) {
    if (units <= 0 || !(ms >= 0)) return;
    moving_average_add(ms_per_unit_[h], ms / units, samples_[h]);
}

void ShareBalancer::observe_overhead(size_t h, double ms, bool waited) {
    if (!(ms >= 0)) return;
    if (waited) moving_average_add(overhead_ms_[h], ms, overhead_samples_[h]);
    else if (overhead_samples_[h] > 0 && ms < overhead_ms_[h]) moving_average_add(overhead_ms_[h], ms, overhead_samples_[h], 0.5);
}

void ShareBalancer::record(uint64_t call, const std::vector<int64_t> & counts, bool always) {
    if (history_.size() >= kHistoryMax || !(always || call <= 32 || call % 64 == 0)) return;
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    nlohmann::json shares = nlohmann::json::array();
    for (int64_t c : counts) shares.push_back(total > 0 ? (double) c / (double) total : 0.0);
    history_.push_back({{"call", call}, {"shares", shares}});
}

nlohmann::json ShareBalancer::to_json(const std::vector<std::string> & names, const std::string & unit) const {
    nlohmann::json hosts = nlohmann::json::array();
    for (size_t h = 0; h < ms_per_unit_.size(); ++h)
        hosts.push_back({{"host", h < names.size() ? names[h] : std::to_string(h)}, {"ms_per_unit", ms_per_unit_[h]},
                         {"samples", samples_[h]}, {"overhead_ms", overhead_ms_[h]}, {"units", units_[h]}, {"probes", probes_[h]}});
    return {{"unit", unit}, {"hosts", hosts}, {"history", history_}};
}

} // namespace moezip
