// The cores a process may use (coordinator/base/cpu_capacity.h), read from /proc and cgroup files
// given here as text: cgroup v1 (the cpu controller alone or with cpuacct, as on the development VM
// and in older container hosts), v2 (cpu.max), nested limits, and a container's mount of its own subtree.
// And what a coordinator takes from the cores a worker states (coordinator/dispatch/dispatcher.h).
#include "coordinator/base/cpu_capacity.h"
#include "coordinator/dispatch/dispatcher.h"

#include <gtest/gtest.h>

#include <map>

using namespace moezip;

namespace {

// A reader over a map of path -> text.
FileReader files(const std::map<std::string, std::string> & m) {
    return [m](const std::string & path, std::string & text) {
        auto it = m.find(path);
        if (it == m.end()) return false;
        text = it->second;
        return true;
    };
}

const char * kMountsV1 =
    "24 23 0:21 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "25 24 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "26 24 0:23 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n";

const char * kMountsV2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";

} // namespace

TEST(CpuCapacity, CpuMaxAndCfsTextsGiveCores) {
    EXPECT_DOUBLE_EQ(cpu_max_cores("40000 100000\n"), 0.4);
    EXPECT_DOUBLE_EQ(cpu_max_cores("250000 100000"), 2.5);
    EXPECT_EQ(cpu_max_cores("max 100000\n"), 0.0) << "no limit";
    EXPECT_EQ(cpu_max_cores(""), 0.0);
    EXPECT_EQ(cpu_max_cores("40000"), 0.0) << "a period is needed";
    EXPECT_EQ(cpu_max_cores("-5 100000"), 0.0);
    EXPECT_DOUBLE_EQ(cfs_quota_cores("50000\n", "100000\n"), 0.5);
    EXPECT_EQ(cfs_quota_cores("-1\n", "100000\n"), 0.0) << "v1's no limit";
    EXPECT_EQ(cfs_quota_cores("x", "100000"), 0.0);
}

TEST(CpuCapacity, V1TakesTheTightestLimitOnThePathUp) {
    const std::string cgroup = "5:cpuset:/\n4:cpu,cpuacct:/bench/worker\n0::/\n";
    // the group itself is capped at 1.5 cores, its parent at 0.4: the parent's budget is shared by
    // its children, so 0.4 is what the process gets at most
    const auto read = files({{"/sys/fs/cgroup/cpu,cpuacct/bench/worker/cpu.cfs_quota_us", "150000\n"},
                             {"/sys/fs/cgroup/cpu,cpuacct/bench/worker/cpu.cfs_period_us", "100000\n"},
                             {"/sys/fs/cgroup/cpu,cpuacct/bench/cpu.cfs_quota_us", "40000\n"},
                             {"/sys/fs/cgroup/cpu,cpuacct/bench/cpu.cfs_period_us", "100000\n"},
                             {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"},
                             {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"}});
    EXPECT_DOUBLE_EQ(cgroup_cpu_quota_cores(kMountsV1, cgroup, read), 0.4);
    // the root of the hierarchy alone, unlimited
    EXPECT_EQ(cgroup_cpu_quota_cores(kMountsV1, "4:cpu,cpuacct:/\n", read), 0.0);
}

TEST(CpuCapacity, V2ReadsCpuMax) {
    const auto read = files({{"/sys/fs/cgroup/system.slice/app.service/cpu.max", "30000 100000\n"},
                             {"/sys/fs/cgroup/system.slice/cpu.max", "max 100000\n"}});
    EXPECT_DOUBLE_EQ(cgroup_cpu_quota_cores(kMountsV2, "0::/system.slice/app.service\n", read), 0.3);
    EXPECT_EQ(cgroup_cpu_quota_cores(kMountsV2, "0::/system.slice\n", read), 0.0);
}

TEST(CpuCapacity, AContainerSeesItsOwnSubtreeAtTheMountPoint) {
    // without a cgroup namespace a container mounts its subtree (mount root /docker/abc) and
    // /proc/self/cgroup names the whole path
    const std::string mounts = "40 30 0:26 /docker/abc /sys/fs/cgroup ro,nosuid - cgroup2 cgroup2 rw\n";
    const auto read = files({{"/sys/fs/cgroup/cpu.max", "200000 100000\n"}});
    EXPECT_DOUBLE_EQ(cgroup_cpu_quota_cores(mounts, "0::/docker/abc\n", read), 2.0);
}

TEST(CpuCapacity, UnreadableOrMissingFilesMeanNoLimit) {
    EXPECT_EQ(cgroup_cpu_quota_cores("", "", files({})), 0.0);
    EXPECT_EQ(cgroup_cpu_quota_cores(kMountsV1, "garbage\n", files({})), 0.0);
    EXPECT_EQ(cgroup_cpu_quota_cores(kMountsV2, "0::/a/b\n", files({})), 0.0);
}

TEST(CpuCapacity, CoresForThreadsTakeTheSmallestLimit) {
    CpuCapacity c;
    EXPECT_EQ(c.cores_for(4), 4.0) << "nothing known: the threads";
    c.affinity_cpus = 2;
    EXPECT_EQ(c.cores_for(4), 2.0);
    c.quota_cores = 0.4;
    EXPECT_DOUBLE_EQ(c.cores_for(4), 0.4);
    EXPECT_DOUBLE_EQ(c.cores_for(0), 0.4) << "no thread count: one thread";
}

TEST(CpuCapacity, ThisProcessHasAtLeastOneCpu) {
    const CpuCapacity c = cpu_capacity_self();
    EXPECT_GE(c.affinity_cpus, 1);
    EXPECT_GE(c.quota_cores, 0.0);
}

// What a coordinator takes from a worker's statement: a hostile worker said 1e6 cores beside 1
// thread, and the first prompt split gave it 7/8 of n_ff for the whole run on a tiny model.
TEST(StatedCores, OnlyAStatementAWorkerCanBeInCounts) {
    auto cores = [](const char * cpu) { return moezip::stated_cores(nlohmann::json::parse(std::string(R"({"cpu":)") + cpu + "}")); };
    EXPECT_DOUBLE_EQ(cores(R"({"threads":1,"affinity_cpus":2,"quota_cores":0.4,"cores":0.4})"), 0.4);
    EXPECT_DOUBLE_EQ(cores(R"({"threads":4,"affinity_cpus":8,"quota_cores":null,"cores":4})"), 4.0);
    EXPECT_EQ(cores(R"({"cores":2})"), 0.0) << "without the counts a worker states beside it";
    EXPECT_EQ(cores(R"({"threads":-1,"affinity_cpus":0,"cores":1023.99})"), 0.0) << "counts that bound nothing";
    EXPECT_EQ(cores(R"({"threads":4,"cores":2})"), 0.0) << "no affinity CPUs";
    EXPECT_EQ(cores(R"({"threads":4,"affinity_cpus":4,"quota_cores":0.5,"cores":2})"), 0.0) << "more than its quota";
    EXPECT_EQ(cores(R"({"threads":1,"affinity_cpus":1,"cores":5e-324})"), 5e-324) << "tiny but a state it can be in";
    EXPECT_EQ(cores(R"({"threads":1,"affinity_cpus":2,"quota_cores":null,"cores":1000000})"), 0.0) << "more than its threads";
    EXPECT_EQ(cores(R"({"threads":8,"affinity_cpus":2,"cores":4})"), 0.0) << "more than its CPUs";
    EXPECT_EQ(cores(R"({"threads":1e6,"affinity_cpus":1e6,"cores":1e6})"), 0.0) << "beyond kMaxStatedCores";
    EXPECT_EQ(cores(R"({"cores":-1})"), 0.0);
    EXPECT_EQ(cores(R"({"cores":"4"})"), 0.0);
    EXPECT_EQ(cores(R"({"cores":{"n":4}})"), 0.0);
    EXPECT_EQ(cores(R"("4")"), 0.0);
    EXPECT_EQ(moezip::stated_cores(nlohmann::json()), 0.0);
}
