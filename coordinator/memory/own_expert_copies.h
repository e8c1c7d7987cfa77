// moezip: this host's experts copied out of the engine's file mapping into anonymous memory.
//
// llama.cpp maps the GGUF read-only and shared (src/llama-mmap.cpp), and the coordinator computes
// its own experts from those 4 KiB page-cache pages, while a moezip-worker (by default) and a
// ggml-rpc-server hold theirs in anonymous memory. On the VMs this project is measured on the same
// kernels decode about 2x faster over anonymous memory with huge pages (docs/performance.md, "Each
// program's default load"), so the host with the mapped experts set the pace of every call.
//
// At a plan's first call each of gate/up/down gets an anonymous reservation of the tensor's full
// size (AnonymousMemory: only what is written takes memory), this host's experts are copied into
// it, and this process's pages of them in the mapping are dropped (MADV_DONTNEED; a read-only
// shared file mapping gives the same bytes back from the file if they are read again). The copy
// holds the same quantization blocks at the same offsets, so the kernels, and the results, are
// bit-identical. Resident memory stays that of one copy; the page cache keeps the file's pages as
// clean, reclaimable memory.
//
// Nothing is copied when the weights are not a read-only shared file mapping: already anonymous
// (--no-mmap), repacked by the CPU backend (CPU_REPACK: extra set), or not densely laid out.
#pragma once

#include "coordinator/compute/moe_exec.h"
#include "coordinator/memory/anonymous_memory.h"
#include "coordinator/memory/weight_release.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moezip {

class OwnExpertCopies {
public:
    explicit OwnExpertCopies(const GgmlApi & api) : api_(api) {}

    /// Makes the copies of `key` (a plan) from `orig` unless they exist for the same data and
    /// `own` ([n_expert]: the experts this host computes) or copies are not made (not_copied()).
    /// Each of gate_exps/up_exps/down_exps ([.., .., n_expert], GGUF layout) is copied one after the
    /// other, and the mapped pages of its copied experts dropped before the next, so resident memory
    /// rises by one tensor's share at most. Called before a call is timed: it takes a while once.
    void prepare(uint64_t key, const ExpertWeights & orig, const std::vector<bool> & own);
    /// Weights like `orig` over the copies of `key`, or null when there are none for orig's data or
    /// any of ids[0..n_ids) is not held (compute those from the originals: a fallback, a check).
    const ExpertWeights * get(uint64_t key, const ExpertWeights & orig, const int32_t * ids, int64_t n_ids) const;
    /// Frees the copies of `key` (its weights were freed, e.g. the engine unloaded the model).
    void forget(uint64_t key) { copies_.erase(key); }
    /// Sets why nothing is copied (a config choice), before any get().
    void disable(const std::string & why) { not_copied_ = why; }
    const std::string & not_copied() const { return not_copied_; }
    /// Adds to the report's memory section: own_copy_bytes (held now), own_copy_bytes_max,
    /// own_copy_ms (copying and dropping), own_copy_layers, own_copy_not_made (why not, when so) and
    /// own_copy_dropped_bytes (mapped pages given to madvise; the RSS they freed in
    /// own_copy_rss_dropped_bytes).
    void add_to(nlohmann::json & j) const;

private:
    struct Copy {
        const void * src[3] = {nullptr, nullptr, nullptr};  // gate, up, down data it was made from
        std::vector<bool> held;                              // [n_expert]
        AnonymousMemory mem[3];
            ggml_tensor tensor[3];
        ExpertWeights weights;
        uint64_t bytes = 0;  // copied (held experts x their slices)
    };
    /// Copies own experts of orig into c; false when none were made (not_copied_ set: the reason
    /// holds for every layer, nothing is tried again).
    bool make(Copy & c, const ExpertWeights & orig, const std::vector<bool> & own);
    /// The copies of `key` when made from orig's data, else null.
    const Copy * made_from(uint64_t key, const ExpertWeights & orig) const;
    uint64_t bytes() const;

    const GgmlApi & api_;
    std::map<uint64_t, std::unique_ptr<Copy>> copies_;
    std::string not_copied_;
    uint64_t max_bytes_ = 0, layers_ = 0;
    double ms_ = 0;
    WeightReleaseTally dropped_;  // this process's mapped pages of the copied experts
};

} // namespace moezip
