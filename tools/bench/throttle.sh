# Sourced by tools/run-bench.sh: a CPU quota for the workers of the *_slow variants (a slower host
# beside the coordinator: a throttled VM, a container with cpu.max, an older CPU).
#
# CFS bandwidth control caps the group's CPU time per period: `quota` microseconds of every `period`.
# cgroup v2 writes both to cpu.max ("40000 100000"); cgroup v1 (the cpu controller mounted on its own,
# as on the development VM) to cpu.cfs_quota_us and cpu.cfs_period_us (kernel
# Documentation/scheduler/sched-bwc.rst). A process joins the group by writing its pid to cgroup.procs;
# its children stay in it.
#
# Globals: THROTTLE_CG (the group's folder once made, "" before), THROTTLE_PCT, THROTTLE_PERIOD_US.

THROTTLE_CG=""

# throttle_available: prints why not and returns 1 when no CPU controller can be written here
throttle_available() {
    if [ -w /sys/fs/cgroup/cpu ] && [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then return 0; fi   # v1
    if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null &&
       [ -w /sys/fs/cgroup ]; then return 0; fi   # v2, cpu enabled for children of the root
    echo "no writable cgroup CPU controller (cgroup v2 cpu.max or v1 cpu.cfs_quota_us; run as root)"
    return 1
}

# throttle_setup PCT PERIOD_US: makes the group, PCT% of one core per PERIOD_US
throttle_setup() {
    local pct=$1 period=$2 quota
    quota=$((period * pct / 100))
    if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
        THROTTLE_CG=/sys/fs/cgroup/cpu/moezip-bench-$$
        mkdir -p "$THROTTLE_CG" &&
            echo "$period" > "$THROTTLE_CG/cpu.cfs_period_us" && echo "$quota" > "$THROTTLE_CG/cpu.cfs_quota_us"
    else
        THROTTLE_CG=/sys/fs/cgroup/moezip-bench-$$
        mkdir -p "$THROTTLE_CG" && echo "$quota $period" > "$THROTTLE_CG/cpu.max"
    fi
}

# throttle_stat: "throttled periods / periods" of the group so far (cpu.stat)
throttle_stat() {
    [ -n "$THROTTLE_CG" ] || { echo "0 0"; return; }
    awk '/^nr_periods/ {p=$2} /^nr_throttled/ {t=$2} END {printf "%d %d\n", t, p}' "$THROTTLE_CG/cpu.stat" 2>/dev/null || echo "0 0"
}

# throttle_teardown: removes the group (its processes have exited)
throttle_teardown() {
    [ -n "$THROTTLE_CG" ] || return 0
    rmdir "$THROTTLE_CG" 2>/dev/null || true
    THROTTLE_CG=""
}
