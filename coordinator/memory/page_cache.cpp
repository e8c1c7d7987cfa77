// Page-cache state of a model file: measured through a private mapping, evicted with fadvise,
// filled by a mapping pass or by 4 KiB reads (page_cache.h says why benchmarks need this).
#include "coordinator/memory/page_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

namespace moezip {

namespace {

constexpr uint64_t page_bytes = 4096;
constexpr uint64_t pmd_bytes = 2u << 20;

Status fail(const std::string & path, const char * call) {
    return Status::io_error(path + ": " + call + " failed: " + strerror(errno));
}

/// An open file and, on demand, a read-only mapping of all of it at a 2 MiB-aligned address (so a
/// file offset that is a multiple of 2 MiB lands on a PMD boundary, as the kernel's own placement of
/// large file mappings does).
class MappedFile {
public:
    ~MappedFile() {
        if (map_ != nullptr) munmap(map_, bytes_);
        if (fd_ >= 0) close(fd_);
    }
    Status open_file(const std::string & path) {
        path_ = path;
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd_ < 0) return fail(path, "open");
        struct stat st;
        if (fstat(fd_, &st) != 0) return fail(path, "fstat");
        if (!S_ISREG(st.st_mode)) return Status::invalid_argument(path + ": not a regular file");
        bytes_ = static_cast<uint64_t>(st.st_size);
        return Status::ok();
    }
    Status map_aligned(int advice) {
        if (bytes_ == 0) return Status::ok();
        // reserve size + 2 MiB, then map the file over the first aligned address inside it
        void * r = mmap(nullptr, bytes_ + pmd_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED) return fail(path_, "mmap (reserve)");
        const uintptr_t base = reinterpret_cast<uintptr_t>(r);
        const uintptr_t aligned = (base + pmd_bytes - 1) & ~(uintptr_t)(pmd_bytes - 1);
        void * m = mmap(reinterpret_cast<void *>(aligned), bytes_, PROT_READ, MAP_SHARED | MAP_FIXED, fd_, 0);
        if (m == MAP_FAILED) { munmap(r, bytes_ + pmd_bytes); return fail(path_, "mmap"); }
        if (aligned > base) munmap(r, aligned - base);
        const uintptr_t tail = aligned + bytes_, end = base + bytes_ + pmd_bytes;
        if (end > tail) munmap(reinterpret_cast<void *>(tail), end - tail);
        map_ = static_cast<unsigned char *>(m);
        if (madvise(map_, bytes_, advice) != 0) return fail(path_, "madvise");
        return Status::ok();
    }
    /// mincore of the whole mapping: one byte per 4 KiB page, bit 0 set when resident.
    Status residency(std::vector<unsigned char> & pages) const {
        pages.assign((bytes_ + page_bytes - 1) / page_bytes, 0);
        if (bytes_ != 0 && mincore(map_, bytes_, pages.data()) != 0) return fail(path_, "mincore");
        return Status::ok();
    }
    int fd() const { return fd_; }
    uint64_t bytes() const { return bytes_; }
    const unsigned char * data() const { return map_; }
    const std::string & path() const { return path_; }

private:
    std::string path_;
    int fd_ = -1;
    uint64_t bytes_ = 0;
    unsigned char * map_ = nullptr;
};

/// FilePmdMapped (kB) of the mapping that starts at `start`, from /proc/self/smaps.
Status pmd_mapped_of(const void * start, const std::string & path, uint64_t & bytes) {
    FILE * f = fopen("/proc/self/smaps", "re");
    if (f == nullptr) return fail(path, "fopen /proc/self/smaps");
    char line[512];
    bool in_vma = false, found = false;
    const uintptr_t want = reinterpret_cast<uintptr_t>(start);
    while (fgets(line, sizeof line, f) != nullptr) {
        uintptr_t lo, hi;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in_vma = lo == want;
            continue;
        }
        unsigned long long kb;
        if (in_vma && sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1) {
            bytes = kb * 1024;
            found = true;
            break;
        }
    }
    fclose(f);
    // kernels without file THP statistics have no such line: nothing is PMD-mapped there
    if (!found) bytes = 0;
    return Status::ok();
}

uint64_t resident_bytes_of(const std::vector<unsigned char> & pages, uint64_t file_bytes) {
    uint64_t n = 0;
    for (unsigned char p : pages) n += p & 1;
    const uint64_t b = n * page_bytes;
    return b < file_bytes ? b : file_bytes;
}

} // namespace

const char * page_cache_fill_name(PageCacheFill how) {
    return how == PageCacheFill::kernel ? "kernel" : "small";
}

Status page_cache_state(const std::string & path, PageCacheState & out) {
    out = PageCacheState();
    MappedFile f;
    Status st = f.open_file(path);
    if (st) st = f.map_aligned(MADV_RANDOM);  // VM_RAND_READ: a fault reads no page ahead
    std::vector<unsigned char> pages;
    if (st) st = f.residency(pages);
    if (!st) return st;
    out.file_bytes = f.bytes();
    out.resident_bytes = resident_bytes_of(pages, f.bytes());
    // touching a resident page maps it (a whole PMD when its folio is one) and reads nothing
    volatile unsigned char sink = 0;
    for (size_t i = 0; i < pages.size(); i++)
        if (pages[i] & 1) sink = sink + f.data()[i * page_bytes];
    (void)sink;
    return pmd_mapped_of(f.data(), path, out.pmd_mapped_bytes);
}

Status page_cache_evict(const std::string & path) {
    MappedFile f;
    Status st = f.open_file(path);
    if (!st) return st;
    // dirty pages cannot be dropped: write them back first (a model just written by a tool)
    if (fdatasync(f.fd()) != 0 && errno != EINVAL) return fail(path, "fdatasync");
    errno = posix_fadvise(f.fd(), 0, 0, POSIX_FADV_DONTNEED);
    if (errno != 0) return fail(path, "posix_fadvise(POSIX_FADV_DONTNEED)");
    PageCacheState left;
    st = page_cache_state(path, left);
    if (!st) return st;
    if (left.resident_bytes != 0)
        return Status::io_error(path + ": " + std::to_string(left.resident_bytes) +
                                " bytes stay in the page cache after POSIX_FADV_DONTNEED (the file is mapped "
                                "by a running process, or its pages are locked)");
    return Status::ok();
}

Status page_cache_fill(const std::string & path, PageCacheFill how) {
    MappedFile f;
    Status st = f.open_file(path);
    if (!st) return st;
    if (how == PageCacheFill::small) {
        // FMODE_RANDOM: no readahead, a read fills the page cache with folios of the mapping's minimum
        // order (mm/readahead.c, page_cache_ra_unbounded), 4 KiB on ext4 and xfs; 1 MiB reads keep
        // the I/O batched
        errno = posix_fadvise(f.fd(), 0, 0, POSIX_FADV_RANDOM);
        if (errno != 0) return fail(path, "posix_fadvise(POSIX_FADV_RANDOM)");
        std::vector<unsigned char> buf(1u << 20);
        for (uint64_t off = 0; off < f.bytes(); off += buf.size())
            if (pread(f.fd(), buf.data(), buf.size(), static_cast<off_t>(off)) < 0) return fail(path, "pread");
        return Status::ok();
    }
    // as an engine's first load (llama-mmap.cpp: POSIX_FADV_SEQUENTIAL on the file, then a populated
    // mapping): one pass through a mapping, readahead as the kernel chooses it
    errno = posix_fadvise(f.fd(), 0, 0, POSIX_FADV_SEQUENTIAL);
    if (errno != 0) return fail(path, "posix_fadvise(POSIX_FADV_SEQUENTIAL)");
    st = f.map_aligned(MADV_NORMAL);
    if (!st) return st;
    volatile unsigned char sink = 0;
    for (uint64_t off = 0; off < f.bytes(); off += page_bytes) sink = sink + f.data()[off];
    (void)sink;
    return Status::ok();
}

} // namespace moezip
