// Page-cache state of a model file: measured through a private mapping, evicted with fadvise,
// filled by a mapping pass or by reads without readahead (page_cache.h says why benchmarks need this).
#include "coordinator/memory/page_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace moezip {

namespace {

uint64_t page_bytes() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

/// The PMD size THP uses (2 MiB on x86-64), from sysfs; 2 MiB when the kernel does not say.
uint64_t pmd_bytes() {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    uint64_t v = 0;
    return (in >> v) && v > 0 ? v : (2u << 20);
}

uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

Status fail(const std::string & path, const char * call, int err) {
    return Status::io_error(path + ": " + call + " failed: " + strerror(err));
}

/// read_ahead_kb of the block device holding `st` (a partition's is its disk's), -1 when unknown.
int64_t read_ahead_kb_of(const struct stat & st) {
    const std::string dev = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
    for (const char * rel : {"/queue/read_ahead_kb", "/../queue/read_ahead_kb"}) {
        std::ifstream in(dev + rel);
        int64_t kb = -1;
        if (in >> kb) return kb;
    }
    return -1;
}

/// An open file and, on demand, a read-only mapping of all of it at a PMD-aligned address (so a
/// PMD-aligned file offset lands on a PMD boundary, as the kernel places large file mappings).
class MappedFile {
public:
    MappedFile() = default;
    MappedFile(const MappedFile &) = delete;
    MappedFile & operator=(const MappedFile &) = delete;
    ~MappedFile() {
        if (map_ != nullptr) munmap(map_, bytes_);
        if (fd_ >= 0) close(fd_);
    }
    Status open_file(const std::string & path) {
        path_ = path;
        // O_NONBLOCK: opening a FIFO for reading would wait for a writer; regular files ignore it
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd_ < 0) return fail(path, "open", errno);
        if (fstat(fd_, &st_) != 0) return fail(path, "fstat", errno);
        if (!S_ISREG(st_.st_mode)) return Status::invalid_argument(path + ": not a regular file");
        const std::string held = file_held_in_memory(path);
        if (!held.empty()) return Status::unsupported(held + ": its pages are memory, not an evictable page cache");
        // mincore reports every page of someone else's read-only file as resident (mm/mincore.c,
        // can_do_mincore); touching them would then read the whole file in
        if (geteuid() != 0 && st_.st_uid != geteuid() && faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) != 0)
            return Status::unsupported(path + ": the kernel shows page-cache residency only to the file's owner or a "
                                       "user who may write it (Linux >= 5.0); run as its owner");
        bytes_ = static_cast<uint64_t>(st_.st_size);
        return Status::ok();
    }
    Status map_aligned(int advice) {
        if (bytes_ == 0) return Status::ok();
        const uint64_t pmd = pmd_bytes(), span = round_up(bytes_, page_bytes());
        // reserve span + one PMD, map the file over the first PMD-aligned address in it, give the rest back
        void * r = mmap(nullptr, span + pmd, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED) return fail(path_, "mmap (reserve)", errno);
        const uintptr_t base = reinterpret_cast<uintptr_t>(r);
        const uintptr_t aligned = (base + pmd - 1) & ~(uintptr_t)(pmd - 1);
        void * m = mmap(reinterpret_cast<void *>(aligned), bytes_, PROT_READ, MAP_SHARED | MAP_FIXED, fd_, 0);
        if (m == MAP_FAILED) {
            const int err = errno;
            munmap(r, span + pmd);
            return fail(path_, "mmap", err);
        }
        if (aligned > base) munmap(r, aligned - base);
        const uintptr_t tail = aligned + span, end = base + span + pmd;
        if (end > tail) munmap(reinterpret_cast<void *>(tail), end - tail);
        map_ = static_cast<unsigned char *>(m);
        if (madvise(map_, bytes_, advice) != 0) return fail(path_, "madvise", errno);
        return Status::ok();
    }
    /// mincore of the whole mapping: one byte per page, bit 0 set when resident.
    Status residency(std::vector<unsigned char> & pages) const {
        pages.assign(round_up(bytes_, page_bytes()) / page_bytes(), 0);
        if (bytes_ != 0 && mincore(map_, bytes_, pages.data()) != 0) return fail(path_, "mincore", errno);
        return Status::ok();
    }
    /// Reads one byte of every page (of those `only` marks, when given): a fault maps the page, a
    /// whole PMD when its folio is one.
    void touch(const std::vector<unsigned char> * only = nullptr) const {
        volatile unsigned char sink = 0;
        const uint64_t step = page_bytes();
        for (uint64_t i = 0, off = 0; off < bytes_; i++, off += step)
            if (only == nullptr || ((*only)[i] & 1)) sink = sink + map_[off];
        (void)sink;
    }
    int fd() const { return fd_; }
    uint64_t bytes() const { return bytes_; }
    const struct stat & stat_of() const { return st_; }
    const unsigned char * data() const { return map_; }

private:
    std::string path_;
    int fd_ = -1;
    struct stat st_ = {};
    uint64_t bytes_ = 0;
    unsigned char * map_ = nullptr;
};

uint64_t resident_bytes_of(const std::vector<unsigned char> & pages, uint64_t file_bytes) {
    uint64_t n = 0;
    for (unsigned char p : pages) n += p & 1;
    const uint64_t b = n * page_bytes();
    return b < file_bytes ? b : file_bytes;
}

} // namespace

std::string file_held_in_memory(const std::string & path) {
    struct statfs fs;
    if (statfs(path.c_str(), &fs) != 0) return "";
    if (fs.f_type == 0x01021994) return path + " is on tmpfs";
    if (fs.f_type == (decltype(fs.f_type)) 0x858458f6) return path + " is on ramfs";
    if (fs.f_type == (decltype(fs.f_type)) 0x958458f6) return path + " is on hugetlbfs";
    return "";
}

SmapsTotals smaps_totals(const std::string & smaps, uintptr_t lo, uintptr_t hi) {
    std::istringstream in(smaps);
    std::string line;
    SmapsTotals t;
    bool inside = false;
    while (std::getline(in, line)) {
        // a mapping's header: "start-end perms offset dev inode [path]"; field lines are "Name: value kB"
        uintptr_t b, e;
        char perms[5];
        if (sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " %4s ", &b, &e, perms) == 3) {
            inside = b >= lo && e <= hi && b < e;
            t.vmas += inside;
            continue;
        }
        if (!inside) continue;
        unsigned long long kb;
        if (sscanf(line.c_str(), "Rss: %llu kB", &kb) == 1) t.rss_bytes += kb * 1024;
        else if (sscanf(line.c_str(), "FilePmdMapped: %llu kB", &kb) == 1) t.pmd_mapped_bytes += kb * 1024;
    }
    return t;
}

SmapsTotals smaps_totals_here(uintptr_t lo, uintptr_t hi) {
    std::ifstream in("/proc/self/smaps");
    std::ostringstream text;
    text << in.rdbuf();
    return smaps_totals(text.str(), lo, round_up(hi, page_bytes()));
}

const char * page_cache_fill_name(PageCacheFill how) {
    switch (how) {
        case PageCacheFill::kernel: return "kernel";
        case PageCacheFill::huge: return "huge";
        case PageCacheFill::small: return "small";
    }
    return "?";
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
    out.read_ahead_kb = read_ahead_kb_of(f.stat_of());
    if (f.bytes() == 0) return Status::ok();
    f.touch(&pages);  // resident pages only: a fault on one reads nothing
    const uintptr_t at = reinterpret_cast<uintptr_t>(f.data());
    const SmapsTotals t = smaps_totals_here(at, at + f.bytes());
    if (t.vmas == 0) return Status::io_error(path + ": its mapping is not in /proc/self/smaps");
    out.pmd_mapped_bytes = t.pmd_mapped_bytes;
    return Status::ok();
}

Status page_cache_evict(const std::string & path) {
    MappedFile f;
    Status st = f.open_file(path);
    if (!st) return st;
    // dirty pages cannot be dropped: write them back first (a model just written by a tool)
    if (fdatasync(f.fd()) != 0 && errno != EINVAL) return fail(path, "fdatasync", errno);
    if (int err = posix_fadvise(f.fd(), 0, 0, POSIX_FADV_DONTNEED)) return fail(path, "posix_fadvise(POSIX_FADV_DONTNEED)", err);
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
        // FMODE_RANDOM: no readahead, so a read fills the page cache with folios of the mapping's
        // minimum order (mm/readahead.c, page_cache_ra_unbounded): 4 KiB on ext4 and xfs. 1 MiB reads
        // keep the I/O batched.
        if (int err = posix_fadvise(f.fd(), 0, 0, POSIX_FADV_RANDOM)) return fail(path, "posix_fadvise(POSIX_FADV_RANDOM)", err);
        // a read may return fewer bytes than asked: the next one starts where it stopped
        std::vector<unsigned char> buf(1u << 20);
        for (uint64_t off = 0; off < f.bytes();) {
            const ssize_t n = pread(f.fd(), buf.data(), buf.size(), static_cast<off_t>(off));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return fail(path, "pread", errno);
            if (n == 0) break;  // the file was cut short meanwhile: what is there is read
            off += (uint64_t) n;
        }
        return Status::ok();
    }
    // as an engine's first load (llama-mmap.cpp: POSIX_FADV_SEQUENTIAL on the file, then a populated
    // mapping): one pass through a mapping, readahead as the kernel chooses it; `huge` advises the
    // mapping MADV_HUGEPAGE first, so each fault's readahead is PMD-order
    if (int err = posix_fadvise(f.fd(), 0, 0, POSIX_FADV_SEQUENTIAL)) return fail(path, "posix_fadvise(POSIX_FADV_SEQUENTIAL)", err);
    st = f.map_aligned(how == PageCacheFill::huge ? MADV_HUGEPAGE : MADV_NORMAL);
    if (!st) return st;
    f.touch();
    return Status::ok();
}

} // namespace moezip
