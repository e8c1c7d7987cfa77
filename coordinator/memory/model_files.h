// moezip: which model file a weight belongs to, when a process loads several models (a server's
// draft model for speculative decoding, a program holding two models).
//
// llama.cpp maps each GGUF file it loads (src/llama-mmap.cpp: PROT_READ, MAP_SHARED) and points the
// weight tensors into that mapping (ggml_backend_cpu_buffer_from_ptr), so the address of a layer's
// expert weights names its file. The preload's mmap shim records every read-only mapping of a GGUF
// file; a freed weight buffer, or a newer mapping over the same addresses, ends the record.
// Weights that lie in no recorded mapping (loaded with --no-mmap, or copied by the CPU backend's
// repack buffer type) have no known file: they are planned as before, and the workers' content
// digests decide (coordinator/dispatch/dispatcher.h).
//
// The distributed model is the config's `model` (a path; its realpath is compared), else the
// oldest model file still mapped. The parts of a split model (llama.cpp's llama_split_path:
// "<prefix>-%05d-of-%05d.gguf") are one model: a part after the first takes the identity of the
// split part mapped last before it with the same count (the engine maps a model's parts in order),
// so a part that is a link to another directory or name still belongs to its model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace moezip {

/// The identity of the model a GGUF path belongs to: its realpath (the path as given when it does
/// not resolve, e.g. a deleted file's "/proc/self/fd/N" link text), with a split part's
/// "-NNNNN-of-MMMMM.gguf" written as "-*-of-MMMMM.gguf" so every part of one model has one identity.
std::string model_file_identity(const std::string & path);

/// Whether a layer's weights belong to the distributed model.
struct ModelVerdict {
    bool distributed = true;  ///< false: another model; the engine computes its regions, no worker sees them
    std::string path;         ///< the mapped file holding the weights; "" when no recorded mapping does
    std::string reason;       ///< when not distributed: "not the distributed model (<path>)"
};

/// The GGUF files mapped into this process. Thread-safe; every call is a short scan of a few entries.
class ModelFiles {
public:
    /// A read-only mapping [addr, addr + len) of the GGUF file at `path` (as /proc/self/fd names it)
    /// was made. Records older than it that overlap it end (those addresses were unmapped first).
    /// `offset`: where in the file the mapping starts.
    void mapped(const void * addr, size_t len, const std::string & path, uint64_t offset = 0);
    /// [base, base + len) is freed (a weight buffer): every mapping record overlapping it ends.
    void released(const void * base, size_t len);
    /// Reads [addr, addr + n) of a recorded mapping from its file (pread) instead of the mapping, so
    /// no page of it enters this process's page tables. False when no recorded mapping holds the
    /// whole range or the file cannot be read whole there.
    bool read(const void * addr, void * out, size_t n) const;
    /// The file holding `addr` ("" when no recorded mapping does).
    std::string path_of(const void * addr) const;
    /// The identity (model_file_identity) of the oldest file still mapped; "" when none is.
    std::string oldest_identity() const;
    /// `configured`: the config's `model` (model_file_identity of it; "" when not set). Weights in
    /// no recorded mapping are distributed (their content is checked by the workers).
    ModelVerdict verdict(const void * weights, const std::string & configured) const;
    /// True when a new mapping of `path` would hold the distributed model: it is `configured`, or
    /// none is configured and no other model file is mapped now.
    bool would_distribute(const std::string & path, const std::string & configured) const;

private:
    struct Entry {
        const char * begin;
        const char * end;
        std::string path, identity;
        uint64_t seq;
        uint64_t offset;                // of begin in the file
        mutable std::shared_ptr<int> fd;       // opened at the first read, closed with the last copy of the entry
    };
    mutable std::mutex mu_;
    std::vector<Entry> entries_;
    uint64_t seq_ = 0;
};

} // namespace moezip
