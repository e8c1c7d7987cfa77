// moezip: how much CPU a process may use, in cores: the CPUs of its affinity mask and the CFS
// bandwidth limit of its cgroup (a container's or a VM slice's CPU quota).
//
// A quota is a budget of CPU time per period (cgroup v2 `cpu.max` "40000 100000": 40 ms of every
// 100 ms; v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`; kernel Documentation/scheduler/sched-bwc.rst).
// Work that lasts many periods runs at quota / period of a core; a burst shorter than what is left of
// the period's budget runs at full speed. So a quota says how fast a host computes a prompt, not how
// fast it computes one decode call: the automatic shares use it only as the first guess for prefill
// calls (coordinator/balance/share_balance.h), before any call was measured.
#pragma once

#include <functional>
#include <string>

namespace moezip {

/// What a process may use. Unknown parts are 0.
struct CpuCapacity {
    int affinity_cpus = 0;   ///< CPUs in its affinity mask (sched_getaffinity); 0 = unknown
    double quota_cores = 0;  ///< the tightest CFS limit on its cgroup and the cgroup's ancestors, in cores; 0 = none
    /// The cores `threads` compute threads can keep busy under these limits: min(threads,
    /// affinity_cpus, quota_cores), each where known.
    double cores_for(int threads) const;
};

/// This process's capacity (/proc/self/mountinfo, /proc/self/cgroup, the cgroup files). A file that
/// cannot be read counts as no limit: the capacity is a guess to start from, never an error.
CpuCapacity cpu_capacity_self();

/// Reads a whole file into `text`; false when it cannot.
using FileReader = std::function<bool(const std::string & path, std::string & text)>;

/// The tightest CPU limit in cores on the cgroup that `proc_cgroup` (the text of /proc/PID/cgroup)
/// names, and on its ancestors, found through the mounts in `mountinfo` (the text of
/// /proc/PID/mountinfo; proc(5)): the v1 hierarchy whose controllers include "cpu" when there is one
/// (cpu.cfs_quota_us / cpu.cfs_period_us), else the v2 one (cpu.max). 0 when no level is limited or
/// nothing could be read.
double cgroup_cpu_quota_cores(const std::string & mountinfo, const std::string & proc_cgroup, const FileReader & read);

/// Cores of a v2 `cpu.max` text: "40000 100000" -> 0.4; "max 100000", or anything else, -> 0.
double cpu_max_cores(const std::string & text);

/// Cores of v1 quota and period texts: "40000", "100000" -> 0.4; a quota of -1 (none), or anything
/// else, -> 0.
double cfs_quota_cores(const std::string & quota_us, const std::string & period_us);

} // namespace moezip
