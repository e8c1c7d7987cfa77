// moezip: packed copies of one n_ff slice of the experts' down weights, for shard mode.
//
// ffn_down_exps is [n_ff, n_embd, n_expert] (ggml: ne[0] = n_ff is the row): a host's slice
// [ff_first, ff_first + ff_count) of n_ff is a part of every one of its n_embd rows. Read through a
// strided view, the memory traffic is nearly that of whole rows (what lies between the parts is
// fetched too), so a host computing half of n_ff took 91% of the whole layer's time
// (docs/history/bench-runs.md, shard1). A copy with the parts packed row after row makes the reads
// proportional to the slice. It holds the same quantization blocks in the same order, so the
// kernel's dot products, and the results, are bit-identical to the strided view's.
//
// Up to kPerKey copies per key (a plan): the slices of decode and prefill calls, which automatic
// shares may set apart; asking for a third slice of the same key replaces the least recently used.
// The gate and up slices need no copy: they are whole rows (ne[1]).
#pragma once

#include "coordinator/memory/anonymous_memory.h"
#include "provider_map/engine_api.h"

#include "ggml.h"

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace moezip {

/// True when t is [.., .., n_expert] with data in the dense GGUF layout ggml gives a new tensor of
/// its type (nb[1] = row size, nb[2] = nb[1] * ne[1], ...) and nothing the CPU backend attached (a
/// repacked tensor's extra): what a copy may index by expert, row and block.
bool gguf_dense_layout(const GgmlApi & api, const ggml_tensor * t);

/// Copies bytes [at, at + part) of each of n_rows rows of `row` bytes from src into dst, packed
/// row after row (down's units of an n_ff slice: every row holds a piece of it).
void pack_row_parts(const uint8_t * src, size_t row, size_t at, size_t part, int64_t n_rows, uint8_t * dst);

/// True when n_ff units [first, first + count) hold [ff_first, ff_first + ff_count): a packed copy
/// of the first range serves the second through a view (MoeExecutor; a host's slices of the decode
/// and the prefill split share the larger copy).
inline bool ff_range_holds(int64_t first, int64_t count, int64_t ff_first, int64_t ff_count) {
    return first <= ff_first && ff_first + ff_count <= first + count;
}

/// Sets `t` to a dense tensor [ne0, ne1, ne2] of like's type over `data` (rows of row_bytes), named
/// like `like`, with op_params[0..1] = ff_first and ff_count: the n_ff slice it holds, which
/// MoeExecutor checks against the weights' slice (a leaf's op_params are otherwise unused).
void describe_packed_slice(ggml_tensor & t, const ggml_tensor * like, int64_t ne0, int64_t ne1, int64_t ne2, size_t row_bytes,
                           void * data, int64_t ff_first, int64_t ff_count);

class DownSliceCopies {
public:
    /// Copies kept per key: the slices of decode and prefill calls (ShardHandler keeps them apart).
    static constexpr size_t kPerKey = 2;

    explicit DownSliceCopies(const GgmlApi & api) : api_(api) {}

    /// A tensor [C, n_embd, n_expert] of down's type holding units [F, F + C) of every row of
    /// `down`, packed (dense strides; op_params[0..1] = F and C, which MoeExecutor checks against
    /// the weights' slice), with [F, F + C) holding [ff_first, ff_first + ff_count): a copy held
    /// for `key` that holds the slice (the executor reads a view of it: a host's slices of the
    /// decode and the prefill split start at the same unit, so the larger serves both), else one made
    /// now of exactly the slice. Kept while it is among the kPerKey copies of `key` used last (the
    /// least recently used copy is freed before a new one is made), or until forget(key).
    /// Null when `down` is not in the dense GGUF layout (repacked: extra set, or other strides) or
    /// the slice is not whole blocks inside n_ff (the executor then reports the error), or no memory
    /// could be reserved for the copy (the strided view of `down` serves instead).
    const ggml_tensor * get(uint64_t key, const ggml_tensor * down, int64_t ff_first, int64_t ff_count);
    /// Drops the copy of this slice of `down` under `key`, if held.
    void drop(uint64_t key, const ggml_tensor * down, int64_t ff_first, int64_t ff_count);
    /// True when `key` holds a copy that holds this slice of `down` (nothing is made).
    bool holds(uint64_t key, const ggml_tensor * down, int64_t ff_first, int64_t ff_count) const;
    /// Drops the copies of `key` (its weights were freed, e.g. the engine unloaded the model).
    void forget(uint64_t key) {
        copies_.erase(key);
        made_per_key_.erase(key);
    }
    /// Bytes held by every copy now, and the most held at once since the start (the report is
    /// written after the engine freed its model, when every copy is gone).
    uint64_t bytes() const;
    uint64_t max_bytes() const { return max_bytes_; }
    /// Copies made since the start (a call that made one spent its time packing: LayerCounters::ms_setup).
    uint64_t made() const { return made_; }
    /// Copies made for `key` since the start (each read all of its down weights again).
    uint64_t made(uint64_t key) const {
        auto it = made_per_key_.find(key);
        return it == made_per_key_.end() ? 0 : it->second;
    }

private:
    struct Copy {
        const void * src = nullptr;    // down->data it was made from
        int64_t ff_first = 0, ff_count = 0;
        AnonymousMemory data;  // huge pages where the kernel gives them: the kernels stream it
        ggml_tensor tensor{};
    };
    const GgmlApi & api_;
    std::map<uint64_t, std::vector<std::unique_ptr<Copy>>> copies_;  // per key, the most recently used first
    uint64_t max_bytes_ = 0;
    uint64_t made_ = 0;
    std::map<uint64_t, uint64_t> made_per_key_;
    bool reserve_failed_ = false;  // logged once
};

} // namespace moezip
