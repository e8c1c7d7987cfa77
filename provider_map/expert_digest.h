// moezip: content identity of one expert's weights, cheap enough to compute on the coordinator.
//
// A worker must compute with the same weights as the coordinator's engine. Hashing every expert in
// full would fault in every page of the (memory-mapped) model on the coordinator, defeating the
// point of leaving experts to workers. So the digest of an expert slice (bytes [e*nb2, (e+1)*nb2) of
// a `blk.N.ffn_*_exps.weight` tensor, ggml layout) is sampled: XXH3-64 over the slice length and
// its first and last 256 bytes (two pages touched). It catches another model file, another seed or
// another quantization with the same shapes; it cannot catch a change confined to the middle of a
// slice (a file corrupted in place) — the GGUF file itself should be checked for that (sha256).
#pragma once

#include "ggml.h"

#include <cstddef>
#include <cstdint>

namespace moezip {

/// Sampled XXH3-64 of one expert slice (see above). `slice` points at `bytes` bytes.
uint64_t expert_slice_digest(const void * slice, size_t bytes);

/// One digest per expert from its gate, up and down slice digests:
/// gate ^ rotl(up, 1) ^ rotl(down, 2).
uint64_t expert_identity_digest(uint64_t gate, uint64_t up, uint64_t down);

/// The identity digest of expert `e` of a layer, from its three expert tensors
/// (gate/up [n_embd, n_ff, n_expert], down [n_ff, n_embd, n_expert]; slice e at e*nb[2]).
uint64_t expert_identity_digest_of(const ggml_tensor * gate_exps, const ggml_tensor * up_exps,
                                   const ggml_tensor * down_exps, int64_t e);

} // namespace moezip
