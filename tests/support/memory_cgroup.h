// moezip tests: a memory cgroup of its own for a child process, to run a host or a worker within a
// memory limit as a smaller machine would (cgroup v1 at /sys/fs/cgroup/memory, or v2 at
// /sys/fs/cgroup with the memory controller). The page cache a process faults in is charged to its
// cgroup, so a limit bounds what a host may keep of a mapped model file too.
#pragma once

#include <cstdint>
#include <string>

namespace moezip_test {

/// One memory cgroup, created with a limit and removed by the destructor (its processes must be
/// gone by then: declare it before what kills them).
class MemoryCgroup {
public:
    /// Why no memory cgroup can be made here ("" when one can): no memory controller mounted, or
    /// its folder not writable (not root).
    static std::string unavailable_reason();

    MemoryCgroup() = default;
    ~MemoryCgroup();
    MemoryCgroup(const MemoryCgroup &) = delete;
    MemoryCgroup & operator=(const MemoryCgroup &) = delete;

    /// Creates <memory root>/<name> (removed first if left from an earlier run) with a hard limit of
    /// `limit_bytes` (v1 memory.limit_in_bytes, v2 memory.max; v2 also memory.swap.max 0) and writes
    /// <dir>/cgexec-<name>.sh, a program that joins the cgroup and execs its arguments. False with
    /// the reason in error() when a step fails.
    bool create(const std::string & name, uint64_t limit_bytes, const std::string & dir);

    const std::string & error() const { return error_; }
    /// The wrapper: argv {wrapper(), program, args...} runs program in this cgroup.
    const std::string & wrapper() const { return wrapper_; }
    uint64_t limit() const { return limit_; }
    /// The most memory charged at once since creation (v1 memory.max_usage_in_bytes, v2
    /// memory.peak); 0 when the kernel does not say (v2 before Linux 5.19).
    uint64_t peak_bytes() const;
    /// Processes of the cgroup killed by the OOM killer (v1 memory.oom_control oom_kill, v2
    /// memory.events oom_kill).
    uint64_t oom_kills() const;
    /// Times the usage reached the limit (v1 memory.failcnt; v2 memory.events max): how often the
    /// cgroup had to reclaim to stay under it.
    uint64_t limit_hits() const;

private:
    std::string path_, wrapper_, error_;
    uint64_t limit_ = 0;
    bool v2_ = false;
};

} // namespace moezip_test
