// moezip-worker: the engine's ggml, loaded exactly as the engine loads it.
//
// libggml-base, libggml and libllama are linked (Makefile). The CPU backend is a run-time choice:
// ggml_backend_load_all_from_path(<dir of libggml-base>) dlopens every libggml-cpu-<isa>.so there,
// keeps the one with the best ggml_backend_score for this CPU and unloads the others
// (ggml_backend_load_best, ggml/src/ggml-backend-reg.cpp). The engine does the same, so on the same
// machine type both run the same kernels, which is what makes results bit-identical.
#pragma once

#include "coordinator/base/status.h"
#include "preload/engine_api.h"

#include <string>

namespace moezip {

/// The bound engine and what identifies it in hello_ok.
struct WorkerEngine {
    GgmlApi api;               ///< libggml-base + the selected CPU variant's graph_plan/compute
    std::string ggml_version;  ///< ggml_version(), e.g. "0.23.0"
    std::string ggml_commit;   ///< ggml_commit(), e.g. "5b4ebc5"
    std::string cpu_variant;   ///< "zen4" for libggml-cpu-zen4.so
    std::string cpu_path;      ///< path of the selected CPU variant
    std::string cpu_build_id;  ///< its GNU build-id, lowercase hex
};

/// Loads the CPU backend variants from libggml-base's directory, checks that exactly one
/// libggml-cpu-* object stays loaded and that it is the registered "CPU" backend, and binds the
/// GgmlApi from it. Errors: not_found (libggml-base or a CPU variant missing), mismatch (the ggml
/// build is not the pinned one, or the registered CPU backend lives in another object).
Status worker_engine_load(WorkerEngine & out);

} // namespace moezip
