#include "coordinator/memory/model_files.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace moezip {

namespace {

// "-00002-of-00003.gguf" at the end of `name` (llama.cpp's split naming): the offset of its first
// '-', or npos.
size_t split_suffix_at(const std::string & name) {
    static const char kTail[] = ".gguf";
    const size_t n = name.size(), tail = sizeof kTail - 1, width = 5;
    const size_t len = 1 + width + 4 + width + tail;  // "-NNNNN" "-of-" "MMMMM" ".gguf"
    if (n < len || name.compare(n - tail, tail, kTail) != 0) return std::string::npos;
    const size_t at = n - len;
    auto digits = [&](size_t from) {
        for (size_t i = from; i < from + width; ++i)
            if (name[i] < '0' || name[i] > '9') return false;
        return true;
    };
    if (name[at] != '-' || !digits(at + 1) || name.compare(at + 1 + width, 4, "-of-") != 0 || !digits(at + 1 + width + 4))
        return std::string::npos;
    return at;
}

// The part number k of a split part's name "...-kkkkk-of-nnnnn.gguf" (1-based), 0 when not one.
int split_part_no(const std::string & name) {
    const size_t at = split_suffix_at(name);
    return at == std::string::npos ? 0 : atoi(name.c_str() + at + 1);
}

// The "-of-nnnnn.gguf" tail of a split part's name ("" when not one).
std::string split_count_tail(const std::string & name) {
    const size_t at = split_suffix_at(name);
    return at == std::string::npos ? std::string() : name.substr(at + 6);
}

bool overlaps(const char * b0, const char * e0, const char * b1, const char * e1) { return b0 < e1 && b1 < e0; }

} // namespace

std::string model_file_identity(const std::string & path) {
    char buf[PATH_MAX];
    std::string real = realpath(path.c_str(), buf) != nullptr ? std::string(buf) : path;
    const size_t at = split_suffix_at(real);
    if (at != std::string::npos) real.replace(at + 1, 5, "*");
    return real;
}

void ModelFiles::mapped(const void * addr, size_t len, const std::string & path, uint64_t offset) {
    const char * b = static_cast<const char *>(addr);
    Entry e{b, b + len, path, model_file_identity(path), 0, offset, nullptr};
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = entries_.size(); i-- > 0;)
        if (overlaps(entries_[i].begin, entries_[i].end, e.begin, e.end)) entries_.erase(entries_.begin() + (long) i);
    // A later part of a split model belongs to the model whose parts are being mapped: the engine
    // maps them in order (llama-model-loader.cpp, init_mappings), and a part's file may be a link to
    // another directory or name than the first part's, so its own realpath would name another model.
    const std::string tail = split_count_tail(e.path);
    if (split_part_no(e.path) > 1) {
        const Entry * latest = nullptr;
        for (const Entry & o : entries_)
            if (split_count_tail(o.path) == tail && (latest == nullptr || o.seq > latest->seq)) latest = &o;
        if (latest != nullptr) e.identity = latest->identity;
    }
    e.seq = ++seq_;
    entries_.push_back(std::move(e));
}

void ModelFiles::released(const void * base, size_t len) {
    const char * b = static_cast<const char *>(base);
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = entries_.size(); i-- > 0;)
        if (overlaps(entries_[i].begin, entries_[i].end, b, b + len)) entries_.erase(entries_.begin() + (long) i);
}

bool ModelFiles::read(const void * addr, void * out, size_t n) const {
    const char * a = static_cast<const char *>(addr);
    std::shared_ptr<int> fd;
    uint64_t at = 0;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry & e) { return a >= e.begin && a + n <= e.end; });
        if (it == entries_.end()) return false;
        if (!it->fd) {
            const int f = open(it->path.c_str(), O_RDONLY | O_CLOEXEC);
            if (f < 0) return false;
            it->fd = std::shared_ptr<int>(new int(f), [](int * p) { close(*p); delete p; });
        }
        fd = it->fd;  // stays open while this read runs, even if the entry ends meanwhile
        at = it->offset + (uint64_t) (a - it->begin);
    }
    size_t done = 0;
    while (done < n) {
        const ssize_t got = pread(*fd, static_cast<char *>(out) + done, n - done, (off_t) (at + done));
        if (got <= 0) return false;  // an error, or the file is shorter now than it was mapped
        done += (size_t) got;
    }
    return true;
}

std::string ModelFiles::path_of(const void * addr) const {
    const char * a = static_cast<const char *>(addr);
    std::lock_guard<std::mutex> lock(mu_);
    for (const Entry & e : entries_)
        if (a >= e.begin && a < e.end) return e.path;
    return "";
}

std::string ModelFiles::oldest_identity() const {
    std::lock_guard<std::mutex> lock(mu_);
    const Entry * oldest = nullptr;
    for (const Entry & e : entries_)
        if (oldest == nullptr || e.seq < oldest->seq) oldest = &e;
    return oldest ? oldest->identity : "";
}

ModelVerdict ModelFiles::verdict(const void * weights, const std::string & configured) const {
    ModelVerdict v;
    const char * a = static_cast<const char *>(weights);
    std::string identity;
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (const Entry & e : entries_)
            if (a >= e.begin && a < e.end) { v.path = e.path; identity = e.identity; }
    }
    if (v.path.empty()) return v;
    const std::string target = configured.empty() ? oldest_identity() : configured;
    if (identity == target) return v;
    v.distributed = false;
    v.reason = "not the distributed model (" + v.path + ")";
    return v;
}

bool ModelFiles::would_distribute(const std::string & path, const std::string & configured) const {
    const std::string identity = model_file_identity(path);
    if (!configured.empty()) return identity == configured;
    const std::string oldest = oldest_identity();
    return oldest.empty() || oldest == identity;
}

} // namespace moezip
