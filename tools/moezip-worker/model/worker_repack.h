// moezip-worker: the CPU backend's repacked weight layout (--repack), as the engine uses it.
//
// On CPUs with AVX2/AVX-512 (and NEON), llama.cpp loads Q4_0, IQ4_NL, Q4_K, ... matmul weights into
// the CPU backend's extra buffer type "CPU_REPACK" by default (src/llama-model.cpp picks the first
// extra buffer type whose supports_op accepts the tensor). That buffer's init_tensor attaches the
// tensor traits of the interleaved layout chosen for the tensor's type and shape, and set_tensor
// rewrites the GGUF blocks into it (ggml/src/ggml-cpu/repack.cpp,
// ggml_repack_get_optimal_repack_type); the CPU backend then runs the repack kernels for any
// MUL_MAT_ID whose weights carry those traits. A worker that loads its experts the same way, from
// the same CPU library, holds the same bytes and runs the same kernels as the host, so its results
// are bit-identical to the host's repacked single node.
//
// The repack buffer takes a whole tensor at once (set_tensor asserts offset 0 and the full size),
// so a worker that serves some experts repacks a tensor of only those: [ne0, ne1, n_served], expert
// e at local index local_of[e]. Interleaving groups rows within one expert's matrix (ne1 is a
// multiple of the group), so expert e's repacked bytes are those of the host's tensor at index e.
#pragma once

#include "provider_map/status.h"
#include "provider_map/engine_api.h"

#include "ggml-backend.h"

#include <cstddef>
#include <string>

namespace moezip {

/// The functions and the buffer type repacking needs, from the engine's libggml-base and its CPU
/// backend. buft is null when the CPU backend has no CPU_REPACK buffer type (a build or CPU without
/// repack kernels).
struct WorkerRepackApi {
    ggml_backend_buffer_type_t buft = nullptr;
    decltype(&::ggml_backend_buft_alloc_buffer) buft_alloc_buffer = nullptr;
    decltype(&::ggml_backend_buft_get_alloc_size) buft_get_alloc_size = nullptr;
    decltype(&::ggml_backend_buffer_get_base) buffer_get_base = nullptr;
    decltype(&::ggml_backend_buffer_free) buffer_free = nullptr;
    decltype(&::ggml_backend_tensor_alloc) tensor_alloc = nullptr;
    decltype(&::ggml_backend_tensor_set) tensor_set = nullptr;
};

/// Binds the functions from the engine's libggml-base (`base_handle`, a dlopen handle) and finds the
/// CPU backend's "CPU_REPACK" buffer type through its ggml_backend_dev_get_extra_bufts (the proc
/// address the engine itself asks for). Errors: not_found (a function missing from libggml-base).
/// A CPU backend without CPU_REPACK is not an error: buft stays null.
Status worker_repack_bind(void * base_handle, ggml_backend_reg_t cpu_reg, const GgmlApi & api, WorkerRepackApi & out);

/// A tensor allocated in a CPU_REPACK buffer, or a plain copy when the backend has no repacked
/// layout for its type and shape (as the engine, which keeps such tensors in the plain CPU buffer).
struct RepackedTensor {
    ggml_backend_buffer_t buffer = nullptr;  ///< the repack buffer, null for a plain copy
    bool repacked = false;                   ///< true when the tensor carries repack traits (extra)
};

/// Places `t` (created no_alloc, type and ne set) and its GGUF-layout content `data`
/// (`bytes` = ggml_nbytes(t)) into a CPU_REPACK buffer when the backend repacks it: allocates the
/// buffer, lets its init_tensor choose the layout and its set_tensor rewrite the data. When init_tensor
/// chooses no layout, the buffer is freed and nothing is done (out.repacked false; the caller keeps a
/// plain copy). Errors: out_of_memory-like io_error when the buffer cannot be allocated.
Status worker_repack_tensor(const WorkerRepackApi & api, ggml_tensor * t, const void * data, size_t bytes, RepackedTensor & out);

} // namespace moezip
