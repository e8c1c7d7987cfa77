#include "tests/support/memory_cgroup.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace moezip_test {

namespace {

constexpr const char * kV1Root = "/sys/fs/cgroup/memory";
constexpr const char * kV2Root = "/sys/fs/cgroup";

bool exists(const std::string & p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0;
}

std::string slurp(const std::string & p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool put(const std::string & p, const std::string & value, std::string & err) {
    std::ofstream out(p);
    out << value;
    out.flush();
    if (out) return true;
    err = "writing \"" + value + "\" to " + p + " failed: " + strerror(errno);
    return false;
}

// The number after "<key> " on a line of a flat keyed file (memory.events, memory.oom_control).
uint64_t keyed(const std::string & text, const std::string & key) {
    std::istringstream in(text);
    std::string k;
    uint64_t v = 0;
    while (in >> k >> v)
        if (k == key) return v;
    return 0;
}

uint64_t number_in(const std::string & p) {
    const std::string t = slurp(p);
    return t.empty() ? 0 : std::stoull(t);
}

// Which hierarchy holds the memory controller: 1 (v1), 2 (v2 root), 0 none.
int hierarchy() {
    if (exists(std::string(kV1Root) + "/memory.limit_in_bytes")) return 1;
    if (slurp(std::string(kV2Root) + "/cgroup.controllers").find("memory") != std::string::npos) return 2;
    return 0;
}

} // namespace

std::string MemoryCgroup::unavailable_reason() {
    const int h = hierarchy();
    if (h == 0) return "no memory cgroup controller mounted (neither /sys/fs/cgroup/memory nor a cgroup2 root with \"memory\")";
    const std::string root = h == 1 ? kV1Root : kV2Root;
    if (access(root.c_str(), W_OK) != 0) return root + " is not writable (" + strerror(errno) + "): memory cgroups need root";
    return "";
}

bool MemoryCgroup::create(const std::string & name, uint64_t limit_bytes, const std::string & dir) {
    const int h = hierarchy();
    if (h == 0) {
        error_ = unavailable_reason();
        return false;
    }
    v2_ = h == 2;
    path_ = std::string(v2_ ? kV2Root : kV1Root) + "/" + name;
    limit_ = limit_bytes;
    rmdir(path_.c_str());  // left by an earlier run that was killed; fails harmlessly when absent
    if (v2_) put(std::string(kV2Root) + "/cgroup.subtree_control", "+memory", error_);  // may be enabled already
    if (mkdir(path_.c_str(), 0755) != 0) {
        error_ = "mkdir " + path_ + ": " + strerror(errno);
        path_.clear();
        return false;
    }
    const std::string limit = std::to_string(limit_bytes);
    if (v2_ ? !put(path_ + "/memory.max", limit, error_) || (exists(path_ + "/memory.swap.max") && !put(path_ + "/memory.swap.max", "0", error_))
            : !put(path_ + "/memory.limit_in_bytes", limit, error_))
        return false;
    wrapper_ = dir + "/cgexec-" + name + ".sh";
    std::ofstream w(wrapper_);
    // the shell's own pid joins, then exec keeps it: the program starts inside the cgroup
    w << "#!/bin/sh\necho $$ > " << path_ << "/cgroup.procs || exit 125\nexec \"$@\"\n";
    w.close();
    if (!w || chmod(wrapper_.c_str(), 0755) != 0) {
        error_ = "writing " + wrapper_ + " failed";
        return false;
    }
    return true;
}

MemoryCgroup::~MemoryCgroup() {
    if (!path_.empty()) rmdir(path_.c_str());
}

uint64_t MemoryCgroup::peak_bytes() const {
    return number_in(path_ + (v2_ ? "/memory.peak" : "/memory.max_usage_in_bytes"));
}

uint64_t MemoryCgroup::oom_kills() const {
    return keyed(slurp(path_ + (v2_ ? "/memory.events" : "/memory.oom_control")), "oom_kill");
}

uint64_t MemoryCgroup::limit_hits() const {
    return v2_ ? keyed(slurp(path_ + "/memory.events"), "max") : number_in(path_ + "/memory.failcnt");
}

} // namespace moezip_test
