// moezip-worker: the host's ggml, loaded at run time from the engine's folder.
//
// The worker links no ggml library: it dlopens libggml-base, libggml and libllama (for the split
// model's file names only) from one engine folder
// (--engine, default the engine moezip was built for, engine_pin.h), binds the GgmlApi from them
// and checks them with the ABI guard, exactly as the preload does in the host. The CPU backend is
// then loaded as the engine loads it, ggml_backend_load_all_from_path(<folder>):
//   - a backend-DL build (node-llama-cpp, -DGGML_BACKEND_DL=ON) dlopens every libggml-cpu-<isa>.so
//     there and keeps the one with the best ggml_backend_score for this CPU (ggml_backend_load_best,
//     ggml/src/ggml-backend-reg.cpp);
//   - a default build links its single libggml-cpu.so into libggml, registered when libggml loads.
// Either way the kernels are the object that holds the registered "CPU" backend. On the same
// machine type and the same build, host and worker run the same kernels, which is what makes
// results bit-identical; the coordinator compares the kernels' GNU build-id in the handshake.
#pragma once

#include "provider_map/status.h"
#include "provider_map/engine_api.h"
#include "tools/moezip-worker/model/gguf_parts.h"
#include "tools/moezip-worker/model/worker_repack.h"

#include <string>

namespace moezip {

/// The bound engine and what identifies it in hello_ok.
struct WorkerEngine {
    GgmlApi api;               ///< libggml-base + the CPU library's graph_plan/compute
    std::string lib_dir;       ///< folder the ggml libraries were loaded from
    std::string ggml_version;  ///< ggml_version(), e.g. "0.23.0"
    std::string ggml_commit;   ///< ggml_commit(), e.g. "5b4ebc5"
    std::string cpu_variant;   ///< "zen4" for libggml-cpu-zen4.so, "default" for a default build's libggml-cpu.so
    std::string cpu_path;      ///< path of the CPU library
    std::string cpu_build_id;  ///< its GNU build-id, lowercase hex
    decltype(&::llama_split_prefix) llama_split_prefix = nullptr;  ///< from the engine's libllama
    decltype(&::llama_split_path) llama_split_path = nullptr;
    decltype(&::gguf_get_val_u32) gguf_get_val_u32 = nullptr;  ///< from libggml-base: an expert slice's keys
    decltype(&::gguf_get_val_u64) gguf_get_val_u64 = nullptr;
    decltype(&::gguf_get_val_str) gguf_get_val_str = nullptr;
    WorkerRepackApi repack;    ///< the CPU backend's CPU_REPACK buffer type (buft null: none) and what places tensors in it

    /// What the model's files are read with (valid while this object lives).
    GgufReadApi read_api() const {
        return {&api, llama_split_prefix, llama_split_path, gguf_get_val_u32, gguf_get_val_u64, gguf_get_val_str};
    }
};

/// The folder holding libggml-base.so for `engine`: `engine` itself, its bin/ (a llama.cpp CMake
/// build folder) or node_modules/@node-llama-cpp/linux-x64/bins/linux-x64 (a node-llama-cpp
/// install); "" when none has it.
std::string worker_engine_lib_dir(const std::string & engine);

/// Loads the engine's ggml (and libllama's llama_split_prefix/llama_split_path) from `engine` ("" =
/// the engine moezip was built for), checks it with the
/// ABI guard, loads its CPU backend, checks that exactly one libggml-cpu* object is loaded and that it
/// holds the registered "CPU" backend, and binds the GgmlApi. Errors: not_found (no libggml-base or
/// libggml in the folder, no CPU library could be loaded), mismatch (the ABI guard refused the engine,
/// or the registered CPU backend lives in another object), io_error (dlopen failed: its message).
Status worker_engine_load(WorkerEngine & out, const std::string & engine);

} // namespace moezip
