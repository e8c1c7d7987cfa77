// moezip-worker: the checks of a `compute` request (coordinator/wire/protocol.h) against the model
// the worker serves, described by its shape alone (layers, dims, experts served), so that they run,
// are tested and are fuzzed (tests/fuzz/request_fuzz.cpp) without a GGUF file or the engine.
// WorkerCompute::validate (worker_compute.h) is this check against the loaded model's shape.
#pragma once

#include "provider_map/status.h"
#include "coordinator/config/expert_range.h"
#include "coordinator/wire/protocol.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moezip {

/// What a request is checked against: the served model's MoE layers and experts, without weights.
struct RequestShape {
    struct Layer {
        int il = 0;              ///< block index N of blk.N.*
        int64_t n_embd = 0;      ///< hidden size
        int64_t n_ff = 0;        ///< expert FFN size
        int64_t ff_block = 1;    ///< ggml_blck_size of the down weights' type: n_ff slices are whole blocks
        uint32_t biases = 0;     ///< FfnFlag bias bits of the expert biases the model has for this layer
    };
    std::vector<Layer> layers;           ///< the MoE layers
    int64_t n_expert = 0;                ///< experts per layer
    std::vector<ExpertRange> served;     ///< experts served here (for messages)
    std::vector<bool> served_mask;       ///< [n_expert]: expert e served here

    /// The MoE layer with block index il, or nullptr.
    const Layer * layer(int il) const;
    /// True when 0 <= e < n_expert and expert e is served here.
    bool serves(int64_t e) const { return e >= 0 && e < n_expert && e < (int64_t) served_mask.size() && served_mask[e]; }
};

/// Checks everything about a compute request before anything is allocated or computed: frame
/// count (3, or 4 with an n_ff slice: 8 bytes, reply row_sums, whole blocks inside n_ff), dtypes
/// (f32, i32, f32[, i32]), layer (a MoE layer of `shape`), n_embd and n_ff (the layer's),
/// 0 <= n_rows <= kMaxRows, 1 <= n_used <= kMaxUsed, reply kind, glu_op (SWIGLU, GEGLU, REGLU,
/// GEGLU_ERF, GEGLU_QUICK, SWIGLU_OAI with finite alpha and limit, others' alpha and limit 0),
/// ffn_flags (known bits; the bias bits equal the layer's biases; no n_ff slice with biases),
/// frame sizes against the dims, received frames against the header
/// (sizes, XXH3-64), every id in [-1, n_expert) and every id >= 0 served here. `frames`/`sizes` are
/// the n received data frames (any alignment). On error `code` is the reply's ErrorCode
/// (bad_frames, bad_hash, bad_layer, bad_shape, bad_kind, bad_expert) and the message names the field.
/// When it returns ok, frame 0 holds n_embd * n_rows floats, frames 1 and 2 n_used * n_rows values
/// each, and a 4th frame a slice [first, first + count) inside [0, n_ff).
Status request_check_compute(const RequestShape & shape, const MsgHeader & h, int n, const void * const * frames,
                             const size_t * sizes, ErrorCode & code);

/// The n_ff slice (first, count) of a 4th data frame of 8 bytes (any alignment).
void request_slice_of(const void * frame, int64_t & first, int64_t & count);

} // namespace moezip
