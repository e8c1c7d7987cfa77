// Experts mode maps the model without MAP_POPULATE (preload/hooks.cpp's mmap shim asks
// session_map_model_lazily); this fills in what this host computes from and leaves the workers'
// experts out, so a host's resident memory is its share of the model.
#pragma once

#include "coordinator/config/config.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace moezip {

/// What populate_model_map did. Bytes of the mapping.
struct ModelMapPopulation {
    uint64_t populated_bytes = 0;      ///< made resident (MADV_POPULATE_READ)
    uint64_t skipped_bytes = 0;        ///< worker-owned experts, left to come in on first read
    uint64_t populated_pmd_bytes = 0;  ///< of the mapping, mapped by 2 MiB entries afterwards (smaps)
    bool hugepage_advised = false;     ///< MADV_HUGEPAGE taken
    std::string why_not;               ///< "" or why nothing (or not all) was populated
};

/// Populates the mapping [addr, addr + len) of the GGUF open as fd (mapped from file offset 0)
/// except the experts cfg gives to workers (coordinator/modes/split.h expert_owners, layout from
/// coordinator/memory/weight_release.h model_map_plan). The mapping is advised MADV_HUGEPAGE
/// first: where the file is not cached yet, each fault then reads ahead 2 MiB folios
/// (mm/filemap.c, do_sync_mmap_readahead), mapped by one PMD entry each, whatever the disk's
/// read_ahead_kb, instead of the folio sizes readahead ramps up to (at most 128 KiB with the common
/// read_ahead_kb 128: 4 KiB entries on x86). Same bytes; a decode step misses the TLB far less
/// (docs/history/bench-runs.md, "The page cache decides the mapped single"). Pages cached already keep
/// their sizes. On failure (why_not set) the pages come in on first use: correct, only slower on
/// the first prompt. Needs libggml-base loaded (it reads the GGUF's tensor table).
ModelMapPopulation populate_model_map(const Config & cfg, char * addr, size_t len, int fd, long offset);

} // namespace moezip
