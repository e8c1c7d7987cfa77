// moezip: automatic shares for rows and shard modes (`local_share = "auto"`, docs/placement.md).
//
// Host h's expected time for u units of a call (rows; or, in shard mode, n_ff blocks for every row
// of the call) is overhead_ms[h] + ms_per_unit[h] x scale x u (scale: 1 in rows mode, the call's
// rows in shard mode). ms_per_unit is a moving average of this host's own compute time and the
// workers' service times from the reply headers; a worker's overhead is its round trip minus its
// service time, taken only when this host was waiting for the reply. The shares make every host's
// expected time equal (a host whose overhead alone exceeds that time gets nothing). Unmeasured
// hosts are assumed as fast as the measured ones, so the first calls split evenly. A host with no
// share for kShareProbeCalls calls is given one unit, so it is measured again. Hosts: 0 = this
// host, 1 + w = worker w. Rows results do not depend on the split (docs/numerics.md); shard results
// depend on the slice boundaries in the last bits, within the documented tolerance.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace moezip {

constexpr uint64_t kShareProbeCalls = 32;

class ShareBalancer {
public:
    explicit ShareBalancer(size_t n_hosts = 1);

    /// Units per host (they sum to `units`) for a call whose per-unit cost is multiplied by `scale`.
    /// Counts probes: a host left without units too long gets one.
    std::vector<int64_t> split(int64_t units, double scale);
    /// Adds one call's units per host to the totals the report shows.
    void count(const std::vector<int64_t> & counts);
    /// Expected time of the slowest host (ms) for `counts` units each at `scale`.
    double makespan(const std::vector<int64_t> & counts, double scale) const;
    /// Host h computed `units` units (already multiplied by scale) in `ms`.
    void observe(size_t h, double units, double ms);
    /// A worker's round trip minus service time; `waited` as in ExpertBalancer::observe_overhead.
    void observe_overhead(size_t h, double ms, bool waited);
    /// Keeps the shares of call `call` in the history (the first 32 calls, then every 64th, at most 256).
    void record(uint64_t call, const std::vector<int64_t> & counts, bool always = false);
    /// {"unit", "hosts": [{"host", "ms_per_unit", "samples", "overhead_ms", "units", "probes"}],
    /// "history": [{"call", "shares": [...]}]}.
    nlohmann::json to_json(const std::vector<std::string> & names, const std::string & unit) const;

private:
    double per_unit(size_t h) const;

    std::vector<double> ms_per_unit_, overhead_ms_;
    std::vector<uint64_t> samples_, overhead_samples_, units_, probes_, idle_calls_;
    nlohmann::json history_ = nlohmann::json::array();
};

} // namespace moezip
