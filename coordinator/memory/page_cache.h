// moezip: the page-cache state of a model file, measured and set.
//
// A llama.cpp host maps its model file (llama-mmap.cpp: mmap of the whole file, read-only, shared).
// Its TLB cost depends on the sizes of the page-cache folios behind that mapping, not on anything in
// the process: a folio of PMD size (2 MiB on x86-64) at a PMD-aligned file offset is mapped by one PMD
// entry (mm/filemap.c, filemap_map_pmd; do_set_pmd in mm/memory.c), smaller folios by 4 KiB entries.
// The sizes come from how the file entered the page cache, and stay until its pages are evicted:
// - on filesystems with large folios (ext4 since Linux 6.16, xfs since 5.18) readahead builds them up,
//   capped by the readahead window: PMD size only where the device's read_ahead_kb is at least 2048
//   (8192 on the 2-core Debian 12 VM measured in docs/history/bench-runs.md; a common default is 128, which stops at 128 KiB folios), or at once when the
//   mapping is advised MADV_HUGEPAGE (mm/filemap.c, do_sync_mmap_readahead);
// - reads without readahead (POSIX_FADV_RANDOM, POSIX_FADV_WILLNEED / MADV_WILLNEED, whose
//   force_page_cache_ra reads at the mapping's minimum order) and other filesystems give 4 KiB folios.
// On the 2-core VM of docs/history/bench-runs.md the same unhooked run decoded at 27-34 tok/s with 10% of the
// file PMD-mapped and at 89-91 tok/s with 97%: one page-cache history apart. Benchmarks therefore set
// this state before their runs and record it (tools/run-bench.sh, tools/moezip-pagecache).
//
// Limits: residency (mincore) is shown only to the file's owner or a user who may write it (Linux 5.0,
// mm/mincore.c can_do_mincore), so other users' files are refused; tmpfs, ramfs and hugetlbfs hold
// their files in memory and are refused too. A file truncated while it is measured or filled raises
// SIGBUS in the touching loop, as in the engine.
#pragma once

#include "provider_map/status.h"

#include <cstdint>
#include <string>

namespace moezip {

/// What a file's page cache holds, seen through a fresh mapping of the whole file.
struct PageCacheState {
    uint64_t file_bytes = 0;        ///< st_size
    uint64_t resident_bytes = 0;    ///< pages in the page cache (mincore), in whole pages, capped at file_bytes
    uint64_t pmd_mapped_bytes = 0;  ///< of the resident bytes, those a PMD-aligned mapping maps with PMD
                                    ///< entries (smaps FilePmdMapped after touching each resident page)
    int64_t read_ahead_kb = -1;     ///< the file's block device's readahead window (sysfs), -1 unknown
};

/// How page_cache_fill reads the file into the page cache.
enum class PageCacheFill {
    kernel,  ///< one sequential pass through a mapping: the folio sizes the kernel's readahead chooses,
             ///< as an unhooked engine's first load (MAP_POPULATE) gets them
    huge,    ///< the same pass through a mapping advised MADV_HUGEPAGE: PMD-size folios wherever the
             ///< filesystem has large folios and transparent huge pages are not "never"
    small,   ///< POSIX_FADV_RANDOM reads: 4 KiB folios, as on kernels or filesystems without large
             ///< folios (Debian 12's 6.1 with ext4)
};

/// Measures `path` without changing it: maps it at a PMD-aligned address (MADV_RANDOM, so no fault
/// reads ahead), touches only the pages mincore reports resident, reads FilePmdMapped of that mapping
/// from /proc/self/smaps. Errors: io_error naming the path and the failing call; unsupported for a
/// file whose residency this process cannot see or that lives in memory (see Limits above).
Status page_cache_state(const std::string & path, PageCacheState & out);

/// Drops the file's clean pages from the page cache (POSIX_FADV_DONTNEED), then checks with mincore
/// that none is left. Errors: io_error when pages stay (the file is mapped by a running process or
/// its pages are locked), naming the path and the bytes left; unsupported as page_cache_state.
Status page_cache_evict(const std::string & path);

/// Reads the whole file into the page cache the way `how` says. The file should be evicted first:
/// pages already cached keep their folio sizes. Errors: io_error naming the path and the call.
Status page_cache_fill(const std::string & path, PageCacheFill how);

/// "kernel", "huge" or "small".
const char * page_cache_fill_name(PageCacheFill how);

/// What /proc/PID/smaps says of the mappings inside an address range.
struct SmapsTotals {
    int vmas = 0;                   ///< mappings that lie in the range (0: none; the numbers are then 0)
    uint64_t rss_bytes = 0;         ///< their Rss
    uint64_t pmd_mapped_bytes = 0;  ///< their FilePmdMapped (0 on kernels without file THP statistics)
};

/// Sums Rss and FilePmdMapped over the mappings of an smaps text that lie in [lo, hi): one mapping
/// of a file may be several after madvise splits it.
SmapsTotals smaps_totals(const std::string & smaps, uintptr_t lo, uintptr_t hi);

/// smaps_totals of this process's mappings in [lo, hi) (/proc/self/smaps read now; hi is rounded up
/// to a whole page, as a mapping's end is).
SmapsTotals smaps_totals_here(uintptr_t lo, uintptr_t hi);

/// Why the pages of `path` stay in memory whatever is evicted or dropped ("" when they do not):
/// "<path> is on tmpfs" (also ramfs, hugetlbfs; statfs(2) magic numbers).
std::string file_held_in_memory(const std::string & path);

} // namespace moezip
