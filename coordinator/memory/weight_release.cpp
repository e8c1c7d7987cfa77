#include "coordinator/memory/weight_release.h"

#include "coordinator/base/log.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/mman.h>
#include <unistd.h>

namespace moezip {

std::vector<MemoryMapping> memory_mappings_parse(const std::string & text) {
    std::vector<MemoryMapping> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        // begin-end perms offset dev inode [path]
        uintmax_t b = 0, e = 0;
        char perms[8] = {0};
        int path_at = 0;
        if (sscanf(line.c_str(), "%jx-%jx %7s %*s %*s %*s %n", &b, &e, perms, &path_at) < 3 || e <= b) continue;
        MemoryMapping m;
        m.begin = (uintptr_t) b;
        m.end = (uintptr_t) e;
        m.readable = perms[0] == 'r';
        m.writable = perms[1] == 'w';
        m.shared = perms[3] == 's';
        if (path_at > 0 && (size_t) path_at <= line.size()) m.path = line.substr((size_t) path_at);
        out.push_back(m);
    }
    return out;
}

Status file_backed_read_only(const std::vector<MemoryMapping> & maps, const void * p, size_t bytes, std::string & file) {
    uintptr_t at = reinterpret_cast<uintptr_t>(p);
    const uintptr_t end = at + bytes;
    file.clear();
    while (at < end) {
        auto it = std::find_if(maps.begin(), maps.end(), [at](const MemoryMapping & m) { return m.begin <= at && at < m.end; });
        if (it == maps.end()) return Status::unsupported("the weights are not in a mapping of this process");
        if (it->path.empty() || it->path[0] != '/')
            return Status::unsupported("the weights are in anonymous memory (" + (it->path.empty() ? std::string("no file") : it->path) +
                                       "; the engine ran with --no-mmap?): releasing would discard the only copy");
        if (it->writable) return Status::unsupported("the weights' mapping of " + it->path + " is writable: releasing could lose changes");
        // A private mapping may hold copied-on-write pages that differ from the file (written before
        // an mprotect to read-only): dropped, they would come back as the file's bytes.
        if (!it->shared)
            return Status::unsupported("the weights' mapping of " + it->path + " is private: its pages may differ from the file");
        if (!file.empty() && file != it->path) return Status::unsupported("the weights span two files");
        file = it->path;
        at = it->end;
    }
    return Status::ok();
}

namespace {

// Ranges of t's data are inside its nb[2] x n_expert bytes, and those bytes are a read-only shared
// file mapping (else nothing may be dropped).
Status checked_tensor_ranges(const ggml_tensor * t, const ByteRanges & ranges, const std::vector<MemoryMapping> & maps) {
    const uint64_t total = (uint64_t) t->nb[2] * (uint64_t) t->ne[2];  // every expert: checked whole, whatever is released
    for (const auto & r : ranges)
        if (r.first > r.second || r.second > total)
            return Status::invalid_argument(std::string(t->name) + ": bytes [" + std::to_string(r.first) + ", " + std::to_string(r.second) +
                                            ") outside the tensor's " + std::to_string(total));
    std::string file;
    Status st = file_backed_read_only(maps, t->data, (size_t) total, file);
    if (!st) return Status::unsupported(std::string(t->name) + ": " + st.message());
    return Status::ok();
}

// madvise(MADV_DONTNEED) on the whole pages inside each merged address range (touching or
// overlapping ranges merge first). `what` names the memory in an error.
Status drop_whole_pages(ByteRanges ranges, const std::string & what, uint64_t & released) {
    std::sort(ranges.begin(), ranges.end());
    const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < ranges.size();) {
        uint64_t first = ranges[i].first, last = ranges[i].second;
        size_t j = i + 1;
        while (j < ranges.size() && ranges[j].first <= last) last = std::max(last, ranges[j++].second);  // neighbours merge
        uintptr_t b = (uintptr_t) first, e = (uintptr_t) last;
        b = (b + page - 1) / page * page;  // whole pages inside the merged range only
        e = e / page * page;
        if (e > b) {
            if (madvise(reinterpret_cast<void *>(b), e - b, MADV_DONTNEED) != 0)
                return Status::io_error(what + ": madvise(MADV_DONTNEED) failed: " + strerror(errno) +
                                        (errno == EINVAL ? " (mlock'ed weights cannot be released)" : ""));
            released += e - b;
        }
        i = j;
    }
    return Status::ok();
}

} // namespace

Status release_tensor_ranges(const ggml_tensor * t, ByteRanges ranges, const std::vector<MemoryMapping> & maps, uint64_t & released) {
    if (ranges.empty()) return Status::ok();
    Status st = checked_tensor_ranges(t, ranges, maps);
    if (!st) return st;
    const uintptr_t base = reinterpret_cast<uintptr_t>(t->data);
    for (auto & r : ranges) r = {base + r.first, base + r.second};
    return drop_whole_pages(std::move(ranges), t->name, released);
}

ByteRanges rows_outside_slice(const ggml_tensor * t, int64_t ff_first, int64_t ff_count) {
    ByteRanges out;
    const uint64_t row = (uint64_t) t->nb[1], slice = (uint64_t) t->nb[2];
    const uint64_t keep_b = (uint64_t) ff_first * row, keep_e = (uint64_t) (ff_first + ff_count) * row;
    for (int64_t e = 0; e < t->ne[2]; ++e) {
        const uint64_t at = (uint64_t) e * slice;
        if (keep_b > 0) {
            if (!out.empty() && out.back().second == at) out.back().second = at + keep_b;  // joins the previous expert's tail
            else out.push_back({at, at + keep_b});
        }
        if (keep_e < slice) out.push_back({at + keep_e, at + slice});
    }
    return out;
}

Status expert_slice_ranges(const ggml_tensor * t, const std::vector<int> & experts, ByteRanges & out) {
    const int64_t n_expert = t->ne[2];
    const uint64_t slice = (uint64_t) t->nb[2];
    out.clear();
    for (int e : experts) {
        if (e < 0 || e >= n_expert) return Status::invalid_argument("expert " + std::to_string(e) + " outside [0, " + std::to_string(n_expert) + ")");
        out.push_back({(uint64_t) e * slice, (uint64_t) (e + 1) * slice});
    }
    return Status::ok();
}

Status release_expert_slices(const ggml_tensor * t, std::vector<int> experts, const std::vector<MemoryMapping> & maps,
                             uint64_t & released) {
    ByteRanges ranges;
    Status st = expert_slice_ranges(t, experts, ranges);
    if (!st) return st;
    return release_tensor_ranges(t, ranges, maps, released);
}

bool WeightReleaseTally::release(const std::vector<std::pair<const ggml_tensor *, ByteRanges>> & drop, const std::string & kept_why,
                                 const char * what) {
    if (!not_released.empty()) return false;  // a reason that holds for every layer was found already
    if (!kept_why.empty()) {
        not_released = kept_why;
        LOG_INFO("keeping %s resident here: %s", what, kept_why.c_str());
        return false;
    }
    const std::vector<MemoryMapping> maps = memory_mappings_parse(proc_self_maps());
    // Every range as addresses, merged across tensors: a page shared by two dropped ranges of
    // neighbouring tensors (gate, up and down lie back to back in the file) is dropped too. Per
    // tensor, such a page was never dropped, and a read nearby (the kernel's fault-around maps up to
    // 16 cached neighbours of a faulting page) kept it resident.
    ByteRanges at;
    for (const auto & d : drop) {
        Status st = checked_tensor_ranges(d.first, d.second, maps);
        if (!st) {
            not_released = st.message();
            LOG_INFO("keeping %s resident here: %s", what, st.message().c_str());
            return false;
        }
        const uintptr_t base = reinterpret_cast<uintptr_t>(d.first->data);
        for (const auto & r : d.second) at.push_back({base + r.first, base + r.second});
    }
    const int64_t rss_before = proc_status_kib("VmRSS");
    Status st = drop_whole_pages(at, "expert weights", advised_bytes);
    if (!st) {
        not_released = st.message();
        LOG_INFO("keeping %s resident here: %s", what, st.message().c_str());
        return false;
    }
    ++parts;
    const int64_t rss_after = proc_status_kib("VmRSS");
    if (rss_before > rss_after && rss_after >= 0) rss_dropped_bytes += (uint64_t) (rss_before - rss_after) * 1024;
    return true;
}

void WeightReleaseTally::add_to(nlohmann::json & j) const {
    j["advised_bytes"] = advised_bytes;
    j["rss_dropped_bytes"] = rss_dropped_bytes;
    j["released_parts"] = parts;
    if (!not_released.empty()) j["not_released"] = not_released;
}

ModelMapPlan model_map_plan(uint64_t file_bytes, const std::vector<ExpertTensorBytes> & tensors, const std::vector<int> & owners,
                            uint64_t page) {
    ModelMapPlan plan;
    for (const ExpertTensorBytes & t : tensors) {
        if (t.n_expert < 1 || t.bytes % (uint64_t) t.n_expert != 0) continue;  // not a slice-per-expert layout: keep all
        const uint64_t slice = t.bytes / (uint64_t) t.n_expert;
        for (int64_t e = 0; e < t.n_expert;) {
            if (e >= (int64_t) owners.size() || owners[e] < 0) { ++e; continue; }
            int64_t end = e;
            while (end < t.n_expert && end < (int64_t) owners.size() && owners[end] >= 0) ++end;
            uint64_t b = t.offset + (uint64_t) e * slice, f = t.offset + (uint64_t) end * slice;
            b = (b + page - 1) / page * page;
            f = std::min(f, file_bytes) / page * page;
            if (f > b) plan.skip.push_back({b, f});
            e = end;
        }
    }
    std::sort(plan.skip.begin(), plan.skip.end());
    uint64_t at = 0;
    for (const auto & s : plan.skip) {
        if (s.first > at) plan.populate.push_back({at, s.first});
        at = std::max(at, s.second);
    }
    if (at < file_bytes) plan.populate.push_back({at, file_bytes});
    return plan;
}

int64_t proc_status_kib(const char * key) { return proc_file_kib("/proc/self/status", key); }

int64_t proc_file_kib(const char * path, const char * key) {
    std::ifstream in(path);
    std::string line;
    const size_t n = strlen(key);
    while (std::getline(in, line))
        if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') return strtoll(line.c_str() + n + 1, nullptr, 10);
    return -1;
}

std::string proc_self_maps() {
    std::ifstream in("/proc/self/maps");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

} // namespace moezip
