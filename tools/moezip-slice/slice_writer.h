// moezip-slice: writes an expert slice of a GGUF MoE model (tools/moezip-worker/model/slice_keys.h):
// every metadata key of the source (split.* and general.alignment left out: the slice is one file
// with the default alignment), the slice keys, and of every MoE layer the tensors
// blk.N.ffn_{gate,up,down}_exps.weight (and .bias where present) cut to experts first..last.
// Expert e of a weight tensor is bytes [e*nb[2], (e+1)*nb[2]) and of a bias bytes [e*nb[1], ...)
// (GGUF layout, ggml.h), so each cut tensor is one contiguous run of the source's bytes, copied as
// they are: the slice's experts have the same content digests (provider_map/expert_digest.h).
#pragma once

#include "provider_map/status.h"

#include <cstdint>
#include <string>

namespace moezip {

/// What to cut.
struct SliceRequest {
    std::string model;   ///< GGUF file or the first part of a split model
    int first = 0;       ///< first expert kept (ids of the full model)
    int last = -1;       ///< last expert kept, inclusive; -1 with first 0 never (checked)
    std::string output;  ///< the slice; written to output + ".tmp" first, then renamed
};

/// What was written.
struct SliceResult {
    int64_t n_expert = 0;       ///< experts of the full model
    int n_layers = 0;           ///< MoE layers cut
    int n_tensors = 0;          ///< tensors in the slice
    uint64_t bytes = 0;         ///< size of the slice file
    uint64_t source_bytes = 0;  ///< all parts of the source together
    std::string source_table;   ///< 16 hex digits (slice_keys.h)
};

/// Cuts and writes the slice. Errors, each naming the file: io_error (cannot read the model or a
/// part, cannot write the output), invalid_argument (not a GGUF MoE model, a slice given as the
/// model, experts outside 0..n_expert-1 or first > last, expert tensors of unequal expert counts,
/// a fused or unknown expert tensor, an output or its .tmp that is the model's file or one of its
/// parts: a link or another path to it too).
Status slice_write(const SliceRequest & req, SliceResult & out);

} // namespace moezip
