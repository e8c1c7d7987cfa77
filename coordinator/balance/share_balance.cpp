#include "coordinator/balance/share_balance.h"
#include "coordinator/balance/moving_average.h"

#include <algorithm>
#include <cmath>

namespace moezip {

namespace {

constexpr size_t kHistoryMax = 256;

} // namespace

ShareBalancer::ShareBalancer(size_t n_hosts, SharePayload payload)
    : payload_(payload), ms_per_unit_(n_hosts), overhead_(n_hosts), samples_(n_hosts), cores_(n_hosts, 0), units_(n_hosts, 0), probes_(n_hosts, 0),
      idle_calls_(n_hosts, {0, 0}), instances_(n_hosts) {}

bool ShareBalancer::bind_instance(size_t h, uint64_t instance) {
    if (!instances_.rebind(h, instance)) return false;
    ms_per_unit_[h] = {0, 0};
    samples_[h] = {0, 0};
    overhead_[h] = WorkerOverhead();
    cores_[h] = 0;
    return true;
}

bool ShareBalancer::cores_differ() const {
    if (cores_.empty() || *std::min_element(cores_.begin(), cores_.end()) <= 0) return false;
    return *std::max_element(cores_.begin(), cores_.end()) > 1.05 * *std::min_element(cores_.begin(), cores_.end());
}

double ShareBalancer::per_unit(size_t h, CallSize size) const {
    const int c = (int) size;
    if (samples_[h][c] > 0) return ms_per_unit_[h][c];
    if (size == CallSize::large && !cores_.empty() && *std::min_element(cores_.begin(), cores_.end()) > 0) {
        // as fast per core as the measured hosts (1 ms a unit per core before any is measured)
        double per_core = 0;
        int n = 0;
        for (size_t k = 0; k < samples_.size(); ++k)
            if (samples_[k][c] > 0) { per_core += ms_per_unit_[k][c] * cores_[k]; ++n; }
        return (n > 0 ? per_core / n : 1.0) / cores_[h];
    }
    double sum = 0;
    int n = 0;
    for (size_t k = 0; k < samples_.size(); ++k)
        if (samples_[k][c] > 0) { sum += ms_per_unit_[k][c]; ++n; }
    return n > 0 ? sum / n : 1.0;
}

std::vector<int64_t> round_to_units(const std::vector<double> & exact, int64_t units) {
    const size_t H = exact.size();
    std::vector<int64_t> counts(H, 0);
    if (H == 0) return counts;
    // floors, then the units left to the largest remainders
    int64_t given = 0;
    std::vector<std::pair<double, size_t>> rem;
    for (size_t h = 0; h < H; ++h) {
        counts[h] = std::min((int64_t) std::floor(std::max(0.0, exact[h])), units);
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
    return counts;
}

void ShareBalancer::cost_terms(size_t h, double scale, CallSize size, double & fixed, double & per_unit_ms) const {
    const WorkerOverhead & o = overhead_[h];
    const double per_row = size == CallSize::large ? o.per_row_ms() : 0.0;
    fixed = o.per_call_ms() + (payload_ == SharePayload::call_rows ? per_row * scale : 0.0);
    per_unit_ms = std::max(per_unit(h, size) * scale + (payload_ == SharePayload::units ? per_row : 0.0), 1e-12);
}

std::vector<int64_t> ShareBalancer::split(int64_t units, double scale, CallSize size) {
    std::vector<int64_t> counts = solve(units, scale, size);
    probe_idle(counts, kShareProbeCalls);
    return counts;
}

std::vector<int64_t> ShareBalancer::solve(int64_t units, double scale, CallSize size) const {
    const size_t H = ms_per_unit_.size();
    std::vector<bool> in(H, true);
    std::vector<double> exact(H, 0), fixed(H, 0), c(H, 0);
    for (size_t h = 0; h < H; ++h) cost_terms(h, scale, size, fixed[h], c[h]);
    // equal finish T: sum over active hosts of (T - o_h) / c_h = units; drop hosts with T < o_h
    for (size_t round = 0; round < H; ++round) {
        double inv = 0, o_over_c = 0;
        for (size_t h = 0; h < H; ++h) {
            if (!in[h]) continue;
            inv += 1 / c[h];
            o_over_c += fixed[h] / c[h];
        }
        const double T = (units + o_over_c) / inv;
        bool dropped = false;
        for (size_t h = 0; h < H; ++h) {
            if (!in[h]) continue;
            exact[h] = (T - fixed[h]) / c[h];
            if (exact[h] < 0) { in[h] = false; exact[h] = 0; dropped = true; }
        }
        if (!dropped) break;
    }
    return round_to_units(exact, units);
}

bool ShareBalancer::measured(CallSize size) const {
    for (const auto & n : samples_)
        if (n[(int) size] > 0) return true;
    return false;
}

// A class nobody has measured yet (say the first decode call, counted before it ran) would be
// priced at the placeholder 1 ms per unit and outweigh everything: it is left out until measured.
double ShareBalancer::mix_ms(const std::vector<int64_t> & counts, const CallMix & mix) const {
    double t = 0;
    for (int c = 0; c < 2; ++c)
        if (mix.calls[c] > 0 && measured((CallSize) c)) t += mix.calls[c] * makespan(counts, mix.rows[c] / mix.calls[c], (CallSize) c);
    return t;
}

std::vector<int64_t> ShareBalancer::best_for_mix(int64_t units, const CallMix & mix, const std::vector<int64_t> & current) const {
    std::vector<std::vector<int64_t>> solved, candidates = {current};
    for (int c = 0; c < 2; ++c)
        if (mix.calls[c] > 0 && measured((CallSize) c)) solved.push_back(solve(units, mix.rows[c] / mix.calls[c], (CallSize) c));
    candidates.insert(candidates.end(), solved.begin(), solved.end());
    if (solved.size() == 2) {
        for (double t : {0.25, 0.5, 0.75}) {
            std::vector<double> blend;
            for (size_t h = 0; h < current.size(); ++h) blend.push_back((1 - t) * (double) solved[0][h] + t * (double) solved[1][h]);
            candidates.push_back(round_to_units(blend, units));
        }
    }
    std::vector<int64_t> best = current;
    for (const auto & cand : candidates)
        if (mix_ms(cand, mix) < mix_ms(best, mix)) best = cand;
    return mix_ms(best, mix) <= 0.95 * mix_ms(current, mix) ? best : current;
}

bool give_unit_from_largest(std::vector<int64_t> & counts, size_t h) {
    const size_t big = (size_t) (std::max_element(counts.begin(), counts.end()) - counts.begin());
    if (big == h || counts[big] < 2) return false;
    --counts[big];
    ++counts[h];
    return true;
}

void ShareBalancer::probe_idle(std::vector<int64_t> & counts, uint64_t after, CallSize size, bool allowed) {
    for (size_t h = 0; h < counts.size(); ++h) {
        uint64_t & idle = idle_calls_[h][(int) size];
        if (counts[h] > 0) { idle = 0; continue; }
        if (++idle < after || !allowed || !give_unit_from_largest(counts, h)) continue;
        ++probes_[h];
        idle = 0;
    }
}

void ShareBalancer::count(const std::vector<int64_t> & counts) {
    for (size_t h = 0; h < counts.size() && h < units_.size(); ++h) units_[h] += (uint64_t) counts[h];
}

double ShareBalancer::makespan(const std::vector<int64_t> & counts, double scale, CallSize size) const {
    double m = 0;
    for (size_t h = 0; h < counts.size(); ++h) {
        if (counts[h] <= 0) continue;
        double fixed = 0, c = 0;
        cost_terms(h, scale, size, fixed, c);
        m = std::max(m, fixed + c * (double) counts[h]);
    }
    return m;
}

void ShareBalancer::observe(size_t h, CallSize size, double units, double ms) {
    if (units <= 0 || !(ms >= 0)) return;
    moving_average_add(ms_per_unit_[h][(int) size], ms / units, samples_[h][(int) size]);
}

void ShareBalancer::record(uint64_t call, const std::vector<int64_t> & counts, bool always, const char * call_size, const char * why) {
    if (history_.size() >= kHistoryMax || !(always || call <= 32 || call % 64 == 0)) return;
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    nlohmann::json shares = nlohmann::json::array();
    for (int64_t c : counts) shares.push_back(total > 0 ? (double) c / (double) total : 0.0);
    history_.push_back({{"call", call}, {"shares", shares}});
    if (call_size != nullptr) history_.back()["call_size"] = call_size;
    if (why != nullptr) history_.back()["why"] = why;
}

nlohmann::json ShareBalancer::to_json(const std::vector<std::string> & names, const std::string & unit) const {
    nlohmann::json hosts = nlohmann::json::array();
    for (size_t h = 0; h < ms_per_unit_.size(); ++h) {
        hosts.push_back({{"host", h < names.size() ? names[h] : std::to_string(h)}, {"ms_per_unit_small", ms_per_unit_[h][0]},
                         {"ms_per_unit_large", ms_per_unit_[h][1]}, {"samples_small", samples_[h][0]}, {"samples_large", samples_[h][1]}, {"overhead_ms_per_call", overhead_[h].per_call_ms()},
                         {"overhead_ms_per_row_large", overhead_[h].per_row_ms()}, {"units", units_[h]}, {"probes", probes_[h]},
                         {"cores", cores_[h] > 0 ? nlohmann::json(cores_[h]) : nlohmann::json()}});
        instances_.describe(h, hosts.back());
    }
    return {{"unit", unit}, {"hosts", hosts}, {"history", history_}};
}

} // namespace moezip
