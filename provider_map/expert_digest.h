// moezip: a cheap identity digest of one expert's weights, computed the same way by a worker (from
// its own copy of the file) and by the coordinator (from the engine's tensors), so the coordinator
// can tell that both hold the same expert before sending it any work.
//
// Why sampled, not a full hash: the coordinator checks the digest of every expert a worker serves
// when it first talks to it. Hashing whole slices would fault in every page of every expert (the
// engine's weights are mmapped; a 30B MoE model has tens of GB of them) on the coordinator host,
// which is exactly the memory the distribution is meant to save. So the digest reads the slice's
// size and its first and last 256 bytes: at most two pages per slice.
//
// What it catches: another model file or another random seed with the same shapes (any change of
// the first or last quantization blocks, which hold scales and values of the first/last rows),
// another tensor type or shape (the size differs), experts swapped or renumbered.
// What it misses: a file that differs only in the middle of a slice (a fine-tune touching only
// some rows, bit rot in the middle). Those would give different results, not detected here; the
// engine version, CPU variant and tensor shapes are checked separately (hello_ok).
#pragma once

#include "ggml.h"

#include <cstddef>
#include <cstdint>

namespace moezip {

/// Bytes sampled at each end of a slice.
constexpr size_t kExpertDigestSample = 256;

/// XXH3-64 over (bytes as u64 little-endian, the first min(256, bytes) bytes, the last
/// min(256, bytes) bytes), concatenated in that order. Reads at most 512 bytes of `slice`.
/// `slice` may be null when bytes == 0.
uint64_t expert_slice_digest(const void * slice, size_t bytes);

/// Combines the slice digests of one expert's gate, up and down slices:
///   gate ^ rotl64(up, 1) ^ rotl64(down, 2).
/// The rotations keep the result order-dependent (gate and up swapped give another value).
uint64_t expert_identity_digest(uint64_t gate, uint64_t up, uint64_t down);

/// The identity digest of expert `e` of a layer from its three `*_exps` tensors in GGUF layout
/// (gate/up [n_embd, n_ff, n_expert], down [n_ff, n_embd, n_expert]); slice e is bytes
/// [e*nb[2], (e+1)*nb[2]) of each (ggml.h: nb[2] = nb[1]*ne[1]). Reads only data and nb[2], and at
/// most 512 bytes per tensor. A repacked tensor (CPU_REPACK) has other bytes and another digest.
/// The caller checks 0 <= e < ne[2].
uint64_t expert_identity_digest_of(const ggml_tensor * gate_exps, const ggml_tensor * up_exps,
                                   const ggml_tensor * down_exps, int64_t e);

/// The identity digest of expert `e` with its per-expert biases (gpt-oss: ffn_{gate,up,down}_exps.bias,
/// f32 [n_ff or n_embd, n_expert], column e = bytes [e*nb[1], (e+1)*nb[1])): the digest above, XORed
/// with rotl64(XXH3-64 of the whole column, 3 + i) for each bias i present (gate 0, up 1, down 2). A bias
/// column is small (n_ff floats), so all of it is read. With every bias null, equal to the digest above.
uint64_t expert_identity_digest_of(const ggml_tensor * gate_exps, const ggml_tensor * up_exps, const ggml_tensor * down_exps,
                                   const ggml_tensor * gate_b, const ggml_tensor * up_b, const ggml_tensor * down_b, int64_t e);

} // namespace moezip
