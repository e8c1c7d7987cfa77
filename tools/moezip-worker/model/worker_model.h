// moezip-worker: the routed-expert weights of a GGUF model, only the experts this worker serves.
//
// The model may be one file or a split model given by its first part: every part is opened
// (gguf_parts.h) and each tensor is read from the part that holds it.
//
// MoE layers are found by tensor name (llama.cpp's LLM_TENSOR_FFN_*_EXPS, src/llama-arch.cpp):
//   blk.N.ffn_gate_exps.weight  [n_embd, n_ff, n_expert]
//   blk.N.ffn_up_exps.weight    [n_embd, n_ff, n_expert]
//   blk.N.ffn_down_exps.weight  [n_ff, n_embd, n_expert]
// and, where the arch has them (gpt-oss: LLM_ARCH_OPENAI_MOE in src/llama-model.cpp), per-expert biases
//   blk.N.ffn_gate_exps.bias    f32 [n_ff, n_expert]
//   blk.N.ffn_up_exps.bias      f32 [n_ff, n_expert]
//   blk.N.ffn_down_exps.bias    f32 [n_embd, n_expert]
// which are small and read whole. Other expert layouts (fused ffn_gate_up_exps, up without gate,
// biases of another type or shape) are refused with a message naming the tensor.
//
// Memory: expert e of a tensor is bytes [e*nb[2], (e+1)*nb[2]) (GGUF layout, ggml.h). Default:
// each tensor gets an anonymous reservation of its full size (MAP_NORESERVE, MADV_HUGEPAGE) and
// only the served experts' slices are pread into it, so other experts' pages are never touched and
// never become resident (with transparent huge pages, residency is rounded to 2 MiB at the edges
// of served ranges). With `use_mmap` the file is mapped read-only instead and the tensors point
// into the mapping; again only served slices are ever read. With `repack` (worker_repack.h) every
// expert tensor is copied into a tensor of only the served experts, [.., n_served], placed in the
// CPU backend's CPU_REPACK buffer when the engine repacks that type (plain memory otherwise), and the
// file's slices are released: WorkerLayer::weights and local_of then say what compute uses.
//
// An expert slice (slice_keys.h, written by moezip-slice) holds only experts first..last: its
// tensors are described here as the full model's ([.., .., n_expert], n_expert from the slice's
// keys) and expert e is read from the slice's slot e - first, so everything above (memory, hello,
// digests, compute) sees the full model's expert ids and the same bytes.
#pragma once

#include "coordinator/compute/moe_exec.h"
#include "coordinator/config/expert_range.h"
#include "provider_map/status.h"
#include "tools/moezip-worker/model/gguf_parts.h"
#include "tools/moezip-worker/model/load_progress.h"
#include "tools/moezip-worker/model/slice_keys.h"
#include "tools/moezip-worker/model/worker_repack.h"

#include "ggml.h"
#include "gguf.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace moezip {

/// One MoE layer's expert tensors. The tensors are the GGUF's metadata (type, ne, nb) with data
/// pointing at the worker's memory; only served experts' slices hold the file's bytes.
struct WorkerLayer {
    int il = 0;                            ///< block index N of blk.N.*
    int64_t n_embd = 0, n_ff = 0, n_expert = 0;
    ggml_tensor * gate_exps = nullptr;     ///< [n_embd, n_ff, n_expert]
    ggml_tensor * up_exps = nullptr;       ///< [n_embd, n_ff, n_expert]
    ggml_tensor * down_exps = nullptr;     ///< [n_ff, n_embd, n_expert]
    /// Per-expert biases (gpt-oss), f32 [n_ff, n_expert] x2 and [n_embd, n_expert]; null when absent.
    ggml_tensor * gate_b = nullptr, * up_b = nullptr, * down_b = nullptr;
    std::map<int, uint64_t> digests;       ///< served expert -> expert_identity_digest_of(weights..., biases, its index)
    /// What compute uses (MoeExecutor's view; glu fields unset): the tensors above, or with repack
    /// copies that hold only the served experts, [.., n_served], indexed through local_of.
    ExpertWeights weights;
    std::vector<int32_t> local_of;         ///< [n_expert]: expert -> index in weights' tensors (-1: not served); empty: the same
    bool repacked = false;                 ///< an expert tensor of the layer is in the CPU_REPACK layout (hello_ok "layout")

    /// The FfnFlag bias bits (coordinator/wire/protocol.h) of the biases present.
    uint32_t bias_flags() const;
    /// The file's expert tensors in the order gate, up, down, gate_b, up_b, down_b (null = absent).
    std::array<ggml_tensor *, 6> file_tensors() const { return {gate_exps, up_exps, down_exps, gate_b, up_b, down_b}; }
    /// Points `weights` at six tensors in file_tensors()' order: the file's, or repacked copies.
    void use_tensors(const std::array<ggml_tensor *, 6> & t);
};

/// One file of the model and the MoE layers whose expert tensors it holds.
struct WorkerFile {
    std::string path;
    std::vector<int> layers;           ///< block indices, ascending (a layer may span two files)
};

/// What to load.
struct WorkerModelOptions {
    std::string path;                  ///< GGUF file, or the first part of a split model
    std::vector<ExpertRange> experts;  ///< experts to serve; empty = all
    bool use_mmap = false;             ///< map the file instead of reading into anonymous memory
    /// Non-null: place the served experts as the engine does on this CPU (CPU_REPACK where it
    /// repacks); needs use_mmap false and api->buft non-null.
    const WorkerRepackApi * repack = nullptr;
    /// Progress lines while the served experts are read (load_progress.h): where they go (null:
    /// none) and the least time between two, ms.
    FILE * progress_out = nullptr;
    int progress_interval_ms = kWorkerProgressDefaultMs;
};

class WorkerModel {
public:
    WorkerModel() = default;
    ~WorkerModel();
    WorkerModel(const WorkerModel &) = delete;
    WorkerModel & operator=(const WorkerModel &) = delete;

    /// Reads the metadata of every file, finds the MoE layers and loads the served experts. Errors:
    /// io_error (open/read/map failed, a split part missing, file shorter than its tensors),
    /// invalid_argument (not a GGUF, a split model's later part, no MoE layer, shapes disagree,
    /// experts outside [0, n_expert), biases not f32 [n_ff or n_embd, n_expert], repack with use_mmap),
    /// unsupported (a fused gate+up tensor, another expert tensor, repack without a CPU_REPACK buffer
    /// type). Every message
    /// names the file and, where one is at fault, the tensor. Files are read through `api` (the
    /// engine bound at run time), which must outlive this object.
    Status load(const WorkerModelOptions & opt, const GgufReadApi & api);

    /// The MoE layer with block index il, or nullptr.
    const WorkerLayer * layer(int il) const;
    const std::vector<WorkerLayer> & layers() const { return layers_; }
    /// True when expert e is served (0 <= e < n_expert and inside the ranges).
    bool serves(int64_t e) const { return e >= 0 && e < n_expert_ && e < (int64_t) served_mask_.size() && served_mask_[e]; }
    int64_t n_expert() const { return n_expert_; }
    const std::vector<ExpertRange> & served() const { return served_; }
    /// What the model's slice keys say (is_slice false for a whole model).
    const SliceInfo & slice() const { return slice_; }
    /// Bytes of the served experts' slices over all layers (what is read into memory).
    uint64_t served_bytes() const { return served_bytes_; }
    /// The model's files in part order, each with the MoE layers it holds expert tensors of.
    std::vector<WorkerFile> files() const;

    /// After load(): LoadProgress::summary() of it ("loaded 2520.0 MiB of expert weights in 3.41 s (...)").
    const std::string & load_summary() const { return load_summary_; }

    /// The model's first file, as the worker was started with it.
    const std::string & path() const { return path_; }
    /// True when the expert tensors point into a shared read-only mapping of the file (--mmap).
    bool mapped() const { return mapped_; }
    /// Gives back the pages wholly inside bytes [start, start + bytes) of expert tensor t's data
    /// (one of a layer's gate/up/down in the model's memory, not a repacked copy): madvise
    /// MADV_DONTNEED. The mapping then reads the file again by itself; anonymous memory reads zeros
    /// until read_again() (slice_residency.h tracks that). Returns the bytes given back. Const: what
    /// the tensors hold when computed on is the file's either way.
    uint64_t give_back(const ggml_tensor * t, uint64_t start, uint64_t bytes) const;
    /// Reads bytes [start, start + bytes) of expert tensor t from the file into its memory again
    /// (anonymous memory, huge pages asked for again; for the mapping only the check). Errors:
    /// io_error naming file and tensor, the file changed since load (file_unchanged), or its stamp
    /// moved while it was read (file_stamp_moved: what was read must not be used).
    Status read_again(const ggml_tensor * t, uint64_t start, uint64_t bytes) const;
    /// Reads bytes [start, start + bytes) of expert tensor t from the file into dst. Errors as read_again.
    Status read_file(const ggml_tensor * t, uint64_t start, uint64_t bytes, void * dst) const;
    /// Anonymous memory only: asks for no huge pages over all of t's memory (after its pages were
    /// given back: khugepaged would otherwise fill them again with zeroed huge pages).
    void no_huge_pages(const ggml_tensor * t) const;
    /// ok while the model's files hold the bytes hello_ok's digests name, so that they may be read
    /// (or, with --mmap, computed from: checked before every request). fstat on the open descriptors
    /// (a file replaced by rename keeps reading the old bytes): a changed size or modification time
    /// is an io_error naming the file, for this and every later call. When only the status-change
    /// time moved (which no user can set back: a rename, unlink, link or chmod, or a rewrite with the
    /// modification time set back) the served experts are hashed again from the file
    /// (file_digests_differ): equal, the new time is kept and serving goes on (logged with its cost);
    /// different, an io_error from then on.
    Status file_unchanged() const;
    /// True once file_unchanged() found the files changed (every later request and hello is refused).
    bool file_changed() const { return !file_changed_.empty(); }
    /// True when a file's size, modification or status-change time differs from what the last
    /// file_unchanged() accepted (fstat only, nothing hashed): a request computed from the mapping
    /// while this moved may have read bytes of another content, even one already written back.
    bool file_stamp_moved() const;

private:
    Status find_layers();
    Status check_layer(WorkerLayer & l);
    Status widen_slice_tensors(WorkerLayer & l);
    Status check_served_against_slice(const std::vector<ExpertRange> & asked) const;
    uint8_t * map_window(const ggml_tensor * t);
    /// Bytes of t's full-model layout that precede its first byte in the file (slice: first * slot size).
    uint64_t shift(const ggml_tensor * t) const;
    /// Bytes of t stored in the file (a slice's: only its owned experts).
    uint64_t stored_bytes(const ggml_tensor * t) const;
    Status place_mmap();
    Status place_anonymous();
    Status read_slices(ggml_tensor * t, uint8_t * base);
    Status read_range(const ggml_tensor * t, uint8_t * base, uint64_t start, uint64_t bytes) const;
    /// Bytes place_mmap() or place_anonymous() will read: the served slices, and with the latter the biases.
    uint64_t bytes_to_read(bool use_mmap) const;
    Status read_into(const ggml_tensor * t, uint64_t start, uint64_t bytes, uint8_t * dst) const;
    Status read_checked(Status st, const ggml_tensor * t) const;
    Status repack_layers(const WorkerRepackApi & rp);
    ggml_tensor * served_copy(const ggml_tensor * src, bool bias, int64_t n_served, std::vector<uint8_t> & bytes);
    Status place_plain(ggml_tensor * t, const std::vector<uint8_t> & bytes);
    void release_source(ggml_tensor * src);
    void compute_digests();
    /// Expert e's content digest of each served slice of t (load jobs, one tensor each: disjoint).
    void hash_served_slices(const ggml_tensor * t);
    /// Runs each of `jobs` (one expert tensor each) on load_jobs_threads() threads.
    Status run_load_jobs(const std::vector<std::function<Status()>> & jobs) const;
    /// The served experts' digests computed again from the files' bytes (each part mapped read-only
    /// for the check): the first (layer, expert) whose digest differs from hello_ok's, or why the
    /// file cannot vouch for it (a repacked layer), "" when every digest is the same.
    std::string file_digests_differ() const;

    const GgufTensorLoc & loc(const ggml_tensor * t) const { return locs_.at(t); }

    const GgmlApi * api_ = nullptr;    // the engine's libggml-base (ggml_nbytes)
    std::string path_;                 // as given: the first file
    GgufParts parts_;
    std::map<const ggml_tensor *, GgufTensorLoc> locs_;  // every expert tensor: its part and offset
    std::vector<WorkerLayer> layers_;
    int64_t n_expert_ = 0;
    std::vector<ExpertRange> served_;
    SliceInfo slice_;
    std::map<const ggml_tensor *, uint64_t> slot_bytes_;  // slice: every expert tensor's bytes per expert
    std::vector<bool> served_mask_;
    uint64_t served_bytes_ = 0;
    std::vector<std::pair<void *, size_t>> maps_;  // every mmap we own
    bool mapped_ = false;                          // expert tensors point into the file's mapping
    /// per part at load: what file_unchanged compares (mutable: file_unchanged renews ctime once the
    /// content is proven the same; the worker's compute path holds the model const)
    struct FileStamp {
        int64_t size = 0;
        struct timespec mtime {}, ctime {};
    };
    mutable std::vector<FileStamp> file_stamps_;
    mutable std::string file_changed_;     // set once a file is known changed: the reason, said from then on
    ggml_context * ctx_ = nullptr;                 // repack: metadata of the served-experts tensors
    const WorkerRepackApi * repack_ = nullptr;
    std::vector<ggml_backend_buffer_t> repack_buffers_;
    LoadProgress * progress_ = nullptr;            // during load() only: counts what read_into reads
    /// Without repack: each expert tensor -> [n_expert] content digests of its served slices, computed
    /// by the load's threads right after reading the tensor (compute_digests combines them); empty: unused.
    std::map<const ggml_tensor *, std::vector<uint64_t>> slice_digests_;
    std::string load_summary_;
};

} // namespace moezip
