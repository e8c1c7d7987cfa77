// moezip: a private anonymous reservation for weights that kernels stream.
//
// Used for the coordinator's copy of its own experts (own_expert_copies.h), its packed down slices
// (coordinator/compute/down_slice.h) and a worker's packed shard slices; a worker's model is reserved
// the same way per tensor (tools/moezip-worker/model/worker_model.cpp). MAP_NORESERVE: a page takes
// memory only once written, so a reservation of a whole [.., .., n_expert] tensor costs only the
// experts copied into it (rounded to 2 MiB at the edges of each written run when huge pages are
// used). MADV_HUGEPAGE: with transparent huge pages in "madvise" mode (Debian's default) the kernel
// backs it with 2 MiB pages, fewer TLB misses than the 4 KiB page-cache pages of a file mapping
// (docs/history/bench-runs.md, "The coordinator's own experts in huge pages").
#pragma once

#include "provider_map/status.h"

#include <cstddef>
#include <string>

namespace moezip {

class AnonymousMemory {
public:
    AnonymousMemory() = default;
    ~AnonymousMemory() { reset(); }
    AnonymousMemory(AnonymousMemory && o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; o.size_ = 0; }
    AnonymousMemory & operator=(AnonymousMemory && o) noexcept;
    AnonymousMemory(const AnonymousMemory &) = delete;
    AnonymousMemory & operator=(const AnonymousMemory &) = delete;

    /// Maps `bytes` (>= 1 is mapped for 0) of zero pages, read-write, and advises huge pages (a hint:
    /// ignored without THP). Replaces what was held. Errors: io_error naming `what` and errno.
    Status reserve(size_t bytes, const std::string & what);
    /// Unmaps (the pages return to the system).
    void reset();
    void * data() const { return data_; }
    size_t size() const { return size_; }

private:
    void * data_ = nullptr;
    size_t size_ = 0;
};

} // namespace moezip
