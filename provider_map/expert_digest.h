// moezip: the identity digest of one expert's weights, computed the same way by a worker (from its
// own copy of the file) and by the coordinator (from the engine's tensors), so that the coordinator
// sends a worker work only for experts whose bytes equal its own.
//
// Two digests live here:
// - the **content digest** (expert_identity_digest_of): XXH3-64 of every byte of each of the
//   expert's slices. It catches any difference: another file, seed, type or shape, swapped experts,
//   a fine-tune that touched a few rows, a download corrupted in the middle. Its cost is reading
//   the slices once: the worker reads its experts anyway when it loads them; the coordinator reads
//   the experts of a worker once per plan and worker (coordinator/dispatch/dispatcher.cpp drops the
//   pages of the experts it does not compute again right after hashing them, so its resident set
//   does not grow by a worker's share).
// - the **canary** (expert_slice_digest): size plus the first and last 256 bytes of a range. Cheap
//   enough for every call (provider_map.h: the weights a plan bound have not changed in place).
//
#pragma once

#include "ggml.h"

#include <cstddef>
#include <cstdint>

namespace moezip {

/// Bytes sampled at each end of a range by the canary.
constexpr size_t kExpertDigestSample = 256;

/// The canary: XXH3-64 over (bytes as u64 little-endian, the first min(256, bytes) bytes, the last
/// min(256, bytes) bytes), concatenated in that order. Reads at most 512 bytes of `slice`.
/// `slice` may be null when bytes == 0.
uint64_t expert_slice_digest(const void * slice, size_t bytes);

/// The same canary from its samples: `head` holds the first and `tail` the last min(256, bytes)
/// bytes of the range (read elsewhere, e.g. from the file). Equals expert_slice_digest of the range.
uint64_t expert_slice_digest_of_samples(size_t bytes, const void * head, const void * tail);

/// XXH3-64 of all `bytes` bytes of `slice` (XXH3 includes the length). `slice` may be null when
/// bytes == 0.
uint64_t expert_content_digest(const void * slice, size_t bytes);

/// Combines the slice digests of one expert's gate, up and down slices:
///   gate ^ rotl64(up, 1) ^ rotl64(down, 2).
/// The rotations keep the result order-dependent (gate and up swapped give another value).
uint64_t expert_identity_digest(uint64_t gate, uint64_t up, uint64_t down);

/// The identity digest of expert `e` of a layer from its three `*_exps` tensors in GGUF layout
/// (gate/up [n_embd, n_ff, n_expert], down [n_ff, n_embd, n_expert]); slice e is bytes
/// [e*nb[2], (e+1)*nb[2]) of each (ggml.h: nb[2] = nb[1]*ne[1]): expert_content_digest of each
/// slice, combined by expert_identity_digest. Reads only data and nb[2], and every byte of the
/// three slices. A repacked tensor (CPU_REPACK) has other bytes and another digest.
/// The caller checks 0 <= e < ne[2].
uint64_t expert_identity_digest_of(const ggml_tensor * gate_exps, const ggml_tensor * up_exps,
                                   const ggml_tensor * down_exps, int64_t e);

/// The identity digest of expert `e` with its per-expert biases (gpt-oss: ffn_{gate,up,down}_exps.bias,
/// f32 [n_ff or n_embd, n_expert], column e = bytes [e*nb[1], (e+1)*nb[1])): the digest above, XORed
/// with rotl64(XXH3-64 of the whole column, 3 + i) for each bias i present (gate 0, up 1, down 2). A bias
/// column is small (n_ff floats), so all of it is read. With every bias null, equal to the digest above.
uint64_t expert_identity_digest_of(const ggml_tensor * gate_exps, const ggml_tensor * up_exps, const ggml_tensor * down_exps,
                                   const ggml_tensor * gate_b, const ggml_tensor * up_b, const ggml_tensor * down_b, int64_t e);

/// The bias part of the digest above: `d` (expert_identity_digest of the three slices' content
/// digests) XORed with rotl64(XXH3-64 of column e, 3 + i) of each bias i present. For callers that
/// hashed the slices themselves (the worker hashes each tensor as it reads it).
uint64_t expert_identity_digest_with_biases(uint64_t d, const ggml_tensor * gate_b, const ggml_tensor * up_b,
                                            const ggml_tensor * down_b, int64_t e);

} // namespace moezip
