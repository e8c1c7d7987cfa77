// Pages present in this process's page tables (page_presence.h).
#include "coordinator/memory/page_presence.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <string>
#include <unistd.h>

namespace moezip {

Status pages_present_bytes(std::vector<std::pair<uintptr_t, uintptr_t>> ranges, uint64_t & pages, uint64_t & present) {
    present = pages = 0;
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uintptr_t, uintptr_t>> merged;
    for (const auto & r : ranges) {
        if (!merged.empty() && r.first <= merged.back().second) merged.back().second = std::max(merged.back().second, r.second);
        else merged.push_back(r);
    }
    const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::io_error(std::string("/proc/self/pagemap: ") + strerror(errno));
    std::vector<uint64_t> entries(4096);  // 16 MiB of address space per read
    Status st = Status::ok();
    for (const auto & r : merged) {
        const uintptr_t first = (r.first + page - 1) / page, end = r.second / page;  // whole pages inside
        if (end > first) pages += (end - first) * page;
        for (uintptr_t p = first; st && p < end;) {
            const size_t n = (size_t) std::min<uintptr_t>(entries.size(), end - p);
            const ssize_t got = pread(fd, entries.data(), n * sizeof(uint64_t), (off_t) (p * sizeof(uint64_t)));
            if (got <= 0) { st = Status::io_error(std::string("/proc/self/pagemap: ") + (got < 0 ? strerror(errno) : "short read")); break; }
            const size_t m = (size_t) got / sizeof(uint64_t);
            for (size_t i = 0; i < m; ++i)
                if (entries[i] >> 63) present += page;  // bit 63: page present in RAM
            p += m;
        }
    }
    close(fd);
    return st;
}

bool pages_touching_present(const void * p, size_t n) {
    static std::mutex mu;
    static int fd = -1;
    static pid_t fd_pid = 0;
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    const uintptr_t first = reinterpret_cast<uintptr_t>(p) / page, last = (reinterpret_cast<uintptr_t>(p) + (n > 0 ? n - 1 : 0)) / page;
    std::lock_guard<std::mutex> lock(mu);
    if (fd < 0 || fd_pid != getpid()) {  // a forked child reads its own page tables, not its parent's
        if (fd >= 0) close(fd);
        fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        fd_pid = getpid();
        if (fd < 0) return false;
    }
    for (uintptr_t q = first; q <= last; ++q) {
        uint64_t e = 0;
        if (pread(fd, &e, sizeof e, (off_t) (q * sizeof e)) != (ssize_t) sizeof e || !(e >> 63)) return false;
    }
    return true;
}

} // namespace moezip
