#include "coordinator/base/cpu_capacity.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace moezip {

namespace {

std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    std::string cur;
    std::istringstream in(s);
    while (std::getline(in, cur, sep)) out.push_back(cur);
    return out;
}

// mountinfo escapes space, tab, newline and backslash as \ooo (proc(5))
std::string unescape_octal(const std::string & s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 3 < s.size()) {
            const std::string o = s.substr(i + 1, 3);
            if (o.find_first_not_of("01234567") == std::string::npos) {
                out.push_back((char) std::strtol(o.c_str(), nullptr, 8));
                i += 3;
                continue;
            }
        }
        out.push_back(s[i]);
    }
    return out;
}

// A positive finite number, the whole text but surrounding whitespace; else 0.
double positive_number(const std::string & text) {
    const char * b = text.c_str();
    char * end = nullptr;
    const double v = std::strtod(b, &end);
    if (end == b) return 0;
    while (*end == ' ' || *end == '\n' || *end == '\t') ++end;
    return *end == '\0' && v > 0 && v < 1e18 ? v : 0;
}

struct Mount {
    std::string root, point;
};

// The mount of the v1 hierarchy with the cpu controller (v1 = true), or of the v2 hierarchy.
bool find_mount(const std::string & mountinfo, bool v1, Mount & out) {
    for (const std::string & line : split(mountinfo, '\n')) {
        const std::vector<std::string> f = split(line, ' ');
        size_t dash = 0;
        while (dash < f.size() && f[dash] != "-") ++dash;
        if (dash < 5 || dash + 3 >= f.size()) continue;
        const std::string & fstype = f[dash + 1];
        if (v1) {
            if (fstype != "cgroup") continue;
            const std::vector<std::string> opts = split(f[dash + 3], ',');
            if (std::find(opts.begin(), opts.end(), "cpu") == opts.end()) continue;
        } else if (fstype != "cgroup2") {
            continue;
        }
        out.root = unescape_octal(f[3]);
        out.point = unescape_octal(f[4]);
        return true;
    }
    return false;
}

// The cgroup path of the v1 hierarchy with the cpu controller (v1 = true) or of the v2 one.
bool find_path(const std::string & proc_cgroup, bool v1, std::string & out) {
    for (const std::string & line : split(proc_cgroup, '\n')) {
        const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string controllers = line.substr(a + 1, b - a - 1);
        const bool match = v1 ? [&] {
            const std::vector<std::string> c = split(controllers, ',');
            return std::find(c.begin(), c.end(), "cpu") != c.end();
        }()
                              : line.compare(0, a, "0") == 0 && controllers.empty();
        if (!match) continue;
        out = line.substr(b + 1);
        return true;
    }
    return false;
}

double level_limit(const std::string & dir, bool v1, const FileReader & read) {
    std::string a, b;
    if (v1) return read(dir + "/cpu.cfs_quota_us", a) && read(dir + "/cpu.cfs_period_us", b) ? cfs_quota_cores(a, b) : 0;
    return read(dir + "/cpu.max", a) ? cpu_max_cores(a) : 0;
}

} // namespace

double CpuCapacity::cores_for(int threads) const {
    double c = threads > 0 ? threads : 1;
    if (affinity_cpus > 0) c = std::min(c, (double) affinity_cpus);
    if (quota_cores > 0) c = std::min(c, quota_cores);
    return c;
}

double cpu_max_cores(const std::string & text) {
    const std::vector<std::string> f = split(text.substr(0, text.find('\n')), ' ');
    if (f.size() != 2) return 0;
    const double quota = positive_number(f[0]), period = positive_number(f[1]);
    return quota > 0 && period > 0 ? quota / period : 0;
}

double cfs_quota_cores(const std::string & quota_us, const std::string & period_us) {
    const double quota = positive_number(quota_us), period = positive_number(period_us);
    return quota > 0 && period > 0 ? quota / period : 0;
}

double cgroup_cpu_quota_cores(const std::string & mountinfo, const std::string & proc_cgroup, const FileReader & read) {
    for (bool v1 : {true, false}) {
        Mount m;
        std::string path;
        if (!find_path(proc_cgroup, v1, path) || !find_mount(mountinfo, v1, m)) continue;
        // the cgroup's path is relative to the hierarchy's root, the mount shows the subtree at m.root
        std::string rel = path;
        if (m.root != "/" && rel.compare(0, m.root.size(), m.root) == 0) rel = rel.substr(m.root.size());
        else if (m.root != "/") rel.clear();  // another subtree than the one mounted: its top only
        while (!rel.empty() && rel.back() == '/') rel.pop_back();
        double tightest = 0;
        for (;;) {
            const double l = level_limit(m.point + rel, v1, read);
            if (l > 0 && (tightest == 0 || l < tightest)) tightest = l;
            if (rel.empty()) break;
            const size_t slash = rel.rfind('/');
            rel = slash == std::string::npos ? std::string() : rel.substr(0, slash);
        }
        return tightest;
    }
    return 0;
}

CpuCapacity cpu_capacity_self() {
    CpuCapacity c;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) c.affinity_cpus = CPU_COUNT(&set);
    const FileReader read = [](const std::string & path, std::string & text) {
        std::ifstream in(path);
        if (!in) return false;
        std::ostringstream s;
        s << in.rdbuf();
        text = s.str();
        return true;
    };
    std::string mountinfo, cgroup;
    if (read("/proc/self/mountinfo", mountinfo) && read("/proc/self/cgroup", cgroup))
        c.quota_cores = cgroup_cpu_quota_cores(mountinfo, cgroup, read);
    return c;
}

} // namespace moezip
