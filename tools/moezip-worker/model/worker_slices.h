// moezip-worker: shard mode computes from packed copies of its n_ff slice of all three expert tensors.
//
// A shard request asks for units [first, first + count) of every expert's n_ff (request/worker_compute.h).
// Its part of ffn_gate_exps and ffn_up_exps ([n_embd, n_ff, n_expert]: row r of expert e at e*nb[2] +
// r*nb[1], ggml.h) is `count` whole rows per expert; its part of ffn_down_exps ([n_ff, n_embd,
// n_expert]) is a piece of every row (coordinator/compute/down_slice.h says why that is packed). Each
// is copied into a dense tensor of its own ([n_embd, count, n_expert] and [count, n_embd, n_expert],
// op_params[0..1] = first, count, which MoeExecutor checks), in memory asking for huge pages. The
// copies hold the same quantization blocks in the same order, so the results are the bits of the
// in-place views; and with them the originals need not stay in memory (slice_residency.h).
//
// Copies are made from the originals while they are held, else from the model file (pread; the file
// must be unchanged since load, WorkerModel::file_unchanged). Up to kPerLayer slices per layer are
// kept (coordinators with different slices do not replace each other's copies at every call); the
// least recently used one goes first. More slices in use than that make a copy at every request
// (100x slower decode was measured with three coordinators and two kept): counted, and said
// once in the log. A slice packed ahead of its requests (after a hello, request/worker_compute.h)
// only takes a free place or one whose copy holds no slice of a computing connection's plan: hellos
// alone (600 connections that never computed) otherwise pushed out the copies computing
// coordinators read.
#pragma once

#include "coordinator/memory/anonymous_memory.h"
#include "provider_map/status.h"
#include "tools/moezip-worker/model/worker_model.h"

#include "ggml.h"

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace moezip {

/// True when layer l's slices can be packed, and its originals given back (slice_residency.h): GGUF
/// layout in the model's memory (not --repack), no biases (an n_ff slice of biased experts is refused).
bool slice_packable(const WorkerLayer & l);

class WorkerSlices {
public:
    static constexpr int kPerLayer = 4;

    WorkerSlices(const WorkerModel & model, const GgmlApi & api) : model_(model), api_(api) {}

    /// The packed gate, up and down of one slice of one layer.
    struct Packed {
        ggml_tensor gate{}, up{}, down{};
    };

    /// Who asks for a slice: a request that computes from it, or the packing ahead after a hello.
    enum class Use { request, ahead };
    /// Units [first, count) of a layer's n_ff that a computing connection's plan names.
    using SlicesInUse = std::vector<std::pair<int64_t, int64_t>>;
    /// Copies holding layer l's units [first, first + count): a held copy of that slice or of one
    /// that contains it (the smallest; MoeExecutor reads a view of it: a worker's slices of the
    /// decode and the prefill split end at the same unit, so the larger serves both), else copies of
    /// exactly the slice made now (from the originals when `from_memory`, else from the file). With
    /// kPerLayer held, a request's copy replaces the least recently used one; a copy made `ahead`
    /// replaces the least recently used that holds none of `in_use`, and when every one holds some,
    /// nothing is made (ok, out = null; counted in ahead_skipped). `first` and `count` were checked
    /// against n_ff and the block size (request_check). Errors: io_error (no memory for the copies,
    /// the file unreadable or changed since load; nothing is kept then).
    Status get(const WorkerLayer & l, int64_t first, int64_t count, bool from_memory, const Packed *& out, Use use = Use::request,
               const SlicesInUse & in_use = {});
    /// True when copies holding that slice are held (of it, or of one that contains it).
    bool holds(int il, int64_t first, int64_t count) const;
    /// Drops the copies of that slice (made while the model file changed: their bytes are not known).
    void drop(int il, int64_t first, int64_t count) { copies_.erase(Key{il, {first, count}}); }
    /// True when a copy of any slice of layer il is held.
    bool holds_any(int il) const;
    /// Bytes of every copy held now, and the most held at once.
    uint64_t bytes() const;
    uint64_t max_bytes() const { return max_bytes_; }
    /// Copies dropped to make room for another slice of the same layer.
    uint64_t evicted() const { return evicted_; }
    /// Slices not packed ahead because every place of their layer held a slice in use.
    uint64_t ahead_skipped() const { return ahead_skipped_; }

private:
    using Buffer = AnonymousMemory;  // a mapping of its own per tensor: freed whole when the copy goes
    struct Copy {
        Packed packed;
        Buffer gate, up, down;
        uint64_t last_use = 0;
    };
    using Key = std::pair<int, std::pair<int64_t, int64_t>>;  // layer, (first, count)

    Status make(const WorkerLayer & l, int64_t first, int64_t count, bool from_memory, Copy & c) const;
    /// The smallest held copy of layer il holding units [first, first + count); end() when none.
    std::map<Key, std::unique_ptr<Copy>>::const_iterator holder(int il, int64_t first, int64_t count) const;
    Status pack_rows(const ggml_tensor * src, int64_t first, int64_t count, bool from_memory, Buffer & b, ggml_tensor & t) const;
    Status pack_down(const ggml_tensor * src, int64_t first, int64_t count, bool from_memory, Buffer & b, ggml_tensor & t) const;

    const WorkerModel & model_;
    const GgmlApi & api_;
    std::map<Key, std::unique_ptr<Copy>> copies_;
    uint64_t clock_ = 0, max_bytes_ = 0, evicted_ = 0, ahead_skipped_ = 0;
};

} // namespace moezip
