// moezip: this host's experts copied out of the engine's file mapping into anonymous memory.
//
// llama.cpp maps the GGUF read-only and shared (src/llama-mmap.cpp), and the coordinator computed
// its own experts from those 4 KiB page-cache pages, while a moezip-worker holds its experts in
// anonymous memory with transparent huge pages. On the VMs this project is measured on, an experts1
// coordinator decodes 1.5x faster from such a copy (docs/history/bench-runs.md, "The coordinator's own
// experts in huge pages"; one node with --no-mmap, anonymous but in 4 KiB pages, gains 1.1x: it is
// the TLB, not the page cache).
//
// At a plan's first call each of gate/up/down gets an anonymous reservation of the tensor's full
// size (AnonymousMemory: only what is written takes memory, rounded to 2 MiB huge pages at the edges
// of each run of experts), this host's experts are copied into it, and this process's pages of them
// in the mapping are dropped (MADV_DONTNEED; a read-only shared file mapping gives the same bytes back
// from the file if they are read again), one tensor at a time. The copy holds the same quantization
// blocks at the same offsets, so the kernels, and the results, are bit-identical.
//
// Nothing is copied when it would not pay or not be safe: weights already in anonymous memory
// (--no-mmap), repacked by the CPU backend (extra set), not densely laid out, on tmpfs (dropping
// frees nothing there), locked (--mlock: the mapped pages cannot be dropped), or when the copy of a
// layer does not fit in MemAvailable. The report says why.
#pragma once

#include "coordinator/compute/down_slice.h"
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

    /// Makes the copies of `key` (a plan) from `orig` unless they exist for the same data and `own`
    /// ([n_expert]: the experts this host computes), or were refused for this plan (decided once
    /// per plan), or copies are off (not_copied()). Called before a call's own compute is timed:
    /// the first call of each plan takes a while (ms in own_copy_ms).
    void prepare(uint64_t key, const ExpertWeights & orig, const std::vector<bool> & own);
    /// [n_expert]: the experts the copies of `key` made from orig's data hold; null when there are none.
    const std::vector<bool> * held(uint64_t key, const ExpertWeights & orig) const;
    /// `orig` with gate_exps/up_exps/down_exps replaced by the copies of `key` (everything else,
    /// e.g. the activation and biases, from orig). Only for experts held() names.
    ExpertWeights weights(uint64_t key, const ExpertWeights & orig) const;
    /// Frees the copies of `key` (its weights were freed, e.g. the engine unloaded the model).
    void forget(uint64_t key) { copies_.erase(key); }
    /// Turns copies off for every plan with the reason (a config choice), before any prepare().
    void disable(const std::string & why) { not_copied_ = why; }
    const std::string & not_copied() const { return not_copied_; }
    /// Adds to the report's memory section: own_copy_bytes (held now), own_copy_bytes_max,
    /// own_copy_layers (copies made; a model loaded again makes new ones), own_copy_ms (copying and
    /// dropping), own_copy_dropped_bytes (mapped pages given to madvise) and
    /// own_copy_rss_dropped_bytes (the VmRSS they freed); own_copy_not_made (why no layer is
    /// copied), own_copy_layers_skipped and own_copy_skipped_why (layers refused for their own reason,
    /// e.g. memory), own_copy_layers_without_own (layers where this host owns no expert).
    void add_to(nlohmann::json & j) const;

private:
    struct Copy {
        const void * src[3] = {nullptr, nullptr, nullptr};  // gate, up, down data it was made from
        std::vector<bool> wanted;                            // [n_expert]: own, as asked for; all copied when bytes > 0

        AnonymousMemory mem[3];
        ggml_tensor tensor[3];
        uint64_t bytes = 0;  // copied (own experts x their slices); 0: decided against
    };
    /// Copies own experts of orig into c. False when this plan gets no copy: not_copied_ is set when
    /// the reason holds for every plan, else the plan is counted as skipped.
    bool make(Copy & c, const ExpertWeights & orig, const std::vector<bool> & own);
    /// The copies of `key` when made from orig's data, else null.
    const Copy * made_from(uint64_t key, const ExpertWeights & orig) const;
    /// Records why this plan gets no copy (the first reason is kept for the report).
    void skip(const std::string & why);
    /// A reason that holds for the model file: no copies for the run (not_copied_) while none was
    /// made, else skip(why) for this plan (a model split over files, one of them elsewhere).
    void refuse(const std::string & why);
    uint64_t bytes() const;

    const GgmlApi & api_;
    std::map<uint64_t, std::unique_ptr<Copy>> copies_;  // made, or decided against (bytes 0)
    std::string not_copied_, skipped_why_;
    uint64_t max_bytes_ = 0, layers_ = 0, skipped_ = 0, without_own_ = 0;
    double ms_ = 0;
    WeightReleaseTally dropped_;  // this process's mapped pages of the copied experts
};

} // namespace moezip
