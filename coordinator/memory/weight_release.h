// moezip: give back the coordinator's memory for the experts that workers own.
//
// llama.cpp maps the GGUF read-only and shared (src/llama-mmap.cpp: PROT_READ, MAP_SHARED, plus
// MAP_POPULATE), so every expert is resident in the coordinator once the model is loaded, also
// those a worker computes. In experts mode the coordinator never reads those slices again, so
// madvise(MADV_DONTNEED) on them takes them out of this process's resident set: the machines'
// memory adds up. Nothing is lost: for a read-only file mapping the kernel faults the same bytes
// back in from the file if they are ever read again (a fallback after a worker error, a shadow
// check), so on_worker_error = "local" stays correct. The pages stay in the page cache as clean,
// reclaimable memory until the kernel needs it.
//
// Memory that is not a read-only shared file mapping (--no-mmap reads the weights into anonymous
// memory; a writable or private copy) is never released: MADV_DONTNEED would discard the only copy.
#pragma once

#include "provider_map/status.h"

#include "ggml.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace moezip {

/// One line of /proc/self/maps: the address range [begin, end) and what backs it.
struct MemoryMapping {
    uintptr_t begin = 0, end = 0;
    bool readable = false, writable = false, shared = false;
    std::string path;  ///< backing file ("" or "[heap]", "[anon:...]" for anonymous memory)
};

/// Parses the text of /proc/<pid>/maps (proc(5)). Lines that do not parse are skipped.
std::vector<MemoryMapping> memory_mappings_parse(const std::string & maps_text);

/// Checks that [p, p + bytes) lies wholly in read-only shared mappings of one regular file, so pages
/// dropped there come back unchanged from the file. On success `file` names the file.
/// Errors: unsupported naming why (anonymous memory, writable or private mapping, not mapped, two files).
Status file_backed_read_only(const std::vector<MemoryMapping> & maps, const void * p, size_t bytes, std::string & file);

/// Byte ranges [first, second): of a model file, or of a tensor's data.
using ByteRanges = std::vector<std::pair<uint64_t, uint64_t>>;

/// Drops this process's pages of byte ranges of an expert tensor's data [.., .., n_expert]
/// (offsets from t->data, in any order; touching ranges are merged first); only whole pages inside
/// a merged range are dropped. Adds the bytes dropped to `released`. The tensor's whole
/// nb[2] x n_expert bytes must be a read-only shared file mapping, else nothing is dropped.
/// Errors as release_expert_slices; invalid_argument for a range past those bytes.
Status release_tensor_ranges(const ggml_tensor * t, ByteRanges ranges, const std::vector<MemoryMapping> & maps, uint64_t & released);

/// Shard mode: the bytes of an expert tensor [n_embd, n_ff, n_expert] (gate, up: one row per n_ff
/// unit, ggml.h) outside rows [ff_first, ff_first + ff_count) of every expert: what a host whose n_ff
/// slice is that never reads. Offsets from t->data, in order; neighbouring experts' parts are joined.
ByteRanges rows_outside_slice(const ggml_tensor * t, int64_t ff_first, int64_t ff_count);

/// What one handler gave back of this host's weights, for the report's memory section.
struct WeightReleaseTally {
    uint64_t advised_bytes = 0;      ///< given to madvise(MADV_DONTNEED), resident or not
    uint64_t rss_dropped_bytes = 0;  ///< the VmRSS decrease measured across those calls
    uint64_t parts = 0;              ///< releases done (experts: (layer, worker); shard: (layer, slice))
    std::string not_released;        ///< why memory is kept: the first reason found, then nothing more is tried

    /// Drops every (tensor, byte ranges) of `drop` (as release_tensor_ranges, but the ranges of all
    /// tensors merged by address: a page shared by dropped ranges of two neighbouring tensors is
    /// dropped too), measuring VmRSS around it. Nothing is dropped unless every tensor passes
    /// release_tensor_ranges' checks. `kept_why`: a reason found before (config), recorded instead. On the first failure the
    /// reason is recorded and logged as `what`; later calls then do nothing. True when released.
    bool release(const std::vector<std::pair<const ggml_tensor *, ByteRanges>> & drop, const std::string & kept_why, const char * what);
    /// Adds advised_bytes, rss_dropped_bytes, released_parts and not_released (when set) to `j`.
    void add_to(nlohmann::json & j) const;
};

/// The byte ranges of `experts`' slices of an expert tensor [.., .., n_expert] (GGUF layout).
/// Errors: invalid_argument for an expert outside [0, n_expert).
Status expert_slice_ranges(const ggml_tensor * t, const std::vector<int> & experts, ByteRanges & out);

/// Drops this process's pages of the slices of `experts` of an expert tensor [.., .., n_expert]
/// in GGUF layout (slice e = bytes [e*nb[2], (e+1)*nb[2]) from data; ggml.h). Neighbouring experts
/// are merged into one range; only whole pages inside a range are dropped (a page shared with a
/// slice that is kept stays). Adds the bytes dropped to `released`.
/// Errors: unsupported when the memory is not a read-only file mapping (nothing is dropped),
/// invalid_argument for an expert outside [0, n_expert), io_error when madvise fails (e.g. the
/// pages are mlock'ed: EINVAL).
Status release_expert_slices(const ggml_tensor * t, std::vector<int> experts, const std::vector<MemoryMapping> & maps,
                             uint64_t & released);


/// What to make resident of a model file mapped from offset 0 when workers own some experts.
struct ModelMapPlan {
    ByteRanges populate;  ///< everything else: dense weights, this host's experts, metadata
    ByteRanges skip;      ///< whole pages inside runs of worker-owned expert slices
};

/// One routed-expert tensor as model_map_plan needs it (provider_map/gguf_expert_layout.h).
struct ExpertTensorBytes {
    uint64_t offset = 0, bytes = 0;  ///< in the file
    int64_t n_expert = 0;            ///< slices of bytes / n_expert each
};

/// Splits [0, file_bytes) into pages to populate and pages to skip: a run of neighbouring experts
/// e with owners[e] >= 0 (a worker) is skipped, except pages it shares with anything else.
/// `owners` as expert_owners (coordinator/modes/split.h): -1 this host, >= 0 a worker.
ModelMapPlan model_map_plan(uint64_t file_bytes, const std::vector<ExpertTensorBytes> & tensors, const std::vector<int> & owners,
                            uint64_t page);

/// Reads a "<key>: <n> kB" line of /proc/self/status (e.g. "VmRSS", "VmHWM"); -1 when missing.
int64_t proc_status_kib(const char * key);

/// Reads a "<key>: <n> kB" line of a proc(5) file (e.g. /proc/meminfo, "MemAvailable"); -1 when missing.
int64_t proc_file_kib(const char * path, const char * key);

/// Reads /proc/self/maps whole ("" when it cannot be read).
std::string proc_self_maps();

} // namespace moezip
