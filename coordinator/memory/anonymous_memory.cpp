#include "coordinator/memory/anonymous_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace moezip {

AnonymousMemory & AnonymousMemory::operator=(AnonymousMemory && o) noexcept {
    if (this != &o) {
        reset();
        data_ = o.data_;
        size_ = o.size_;
        o.data_ = nullptr;
        o.size_ = 0;
    }
    return *this;
}

Status AnonymousMemory::reserve(size_t bytes, const std::string & what) {
    reset();
    const size_t n = std::max<size_t>(bytes, 1);
    void * p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return Status::io_error("reserving " + std::to_string(bytes) + " bytes for " + what + ": " + strerror(errno));
    madvise(p, n, MADV_HUGEPAGE);  // a hint; fails harmlessly without THP
    data_ = p;
    size_ = bytes;
    return Status::ok();
}

void AnonymousMemory::reset() {
    if (data_ != nullptr) munmap(data_, std::max<size_t>(size_, 1));
    data_ = nullptr;
    size_ = 0;
}

} // namespace moezip
