// moezip: the page-cache state of a model file, measured and set.
//
// A llama.cpp host maps its model file (llama-mmap.cpp: mmap of the whole file, read-only, shared).
// Its TLB cost depends on the sizes of the page-cache folios behind that mapping, not on anything in
// the process: a folio of 2 MiB (PMD order) at a 2 MiB-aligned file offset is mapped by one PMD entry
// (mm/filemap.c, filemap_map_pmd / do_set_pmd in mm/memory.c), smaller folios by 4 KiB entries. The
// sizes come from how the file entered the page cache: readahead on filesystems with large folios
// (ext4 since Linux 6.16, xfs since 5.18) builds them up to PMD order, a writer's small writes or
// reads with readahead off (POSIX_FADV_RANDOM) leave 4 KiB folios, and they stay as they are until
// the pages are evicted. On the 2-core VM of docs/performance.md the same unhooked run decoded at
// 27-34 tok/s with 10% of the file PMD-mapped and at 89-91 tok/s with 98%: one page-cache history
// apart. Benchmarks therefore set this state before their runs and record it (tools/run-bench.sh).
#pragma once

#include "coordinator/base/status.h"

#include <cstdint>
#include <string>

namespace moezip {

/// What a file's page cache holds, seen through a fresh mapping of the whole file.
struct PageCacheState {
    uint64_t file_bytes = 0;        ///< st_size
    uint64_t resident_bytes = 0;    ///< pages in the page cache (mincore), 4 KiB units, capped at file_bytes
    uint64_t pmd_mapped_bytes = 0;  ///< of the resident bytes, those a 2 MiB-aligned mapping maps with
                                    ///< PMD entries (smaps FilePmdMapped after touching each resident page)
};

/// How page_cache_fill reads the file into the page cache.
enum class PageCacheFill {
    kernel,  ///< one sequential pass through a mapping: the folio sizes the kernel's readahead chooses,
             ///< as an engine's first load after a reboot gets them
    small,   ///< POSIX_FADV_RANDOM and 4 KiB preads: 4 KiB folios, as on kernels or filesystems
             ///< without large folios (Debian 12's 6.1 with ext4)
};

/// Measures `path` without changing it: maps it at a 2 MiB-aligned address (MADV_RANDOM, so no fault
/// reads ahead), touches only the pages mincore reports resident, reads FilePmdMapped of that mapping
/// from /proc/self/smaps. Errors: io_error naming the path and the failing call.
Status page_cache_state(const std::string & path, PageCacheState & out);

/// Drops the file's clean pages from the page cache (POSIX_FADV_DONTNEED), then checks with mincore
/// that none is left. Errors: io_error when pages stay (the file is mapped by a running process, or
/// dirty and not yet written back), naming the path and the bytes left.
Status page_cache_evict(const std::string & path);

/// Reads the whole file into the page cache the way `how` says. The file should be evicted first:
/// pages already cached keep their folio sizes. Errors: io_error naming the path and the call.
Status page_cache_fill(const std::string & path, PageCacheFill how);

/// "kernel" or "small".
const char * page_cache_fill_name(PageCacheFill how);

} // namespace moezip
