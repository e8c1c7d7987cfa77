// moezip-run: bringing up the engine the way an ordinary host does (node-llama-cpp does the same):
// route its logging, load the CPU backend variants next to libllama, load a model, make a context.
#pragma once

#include "provider_map/status.h"
#include "tools/moezip-run/run_options.h"

#include <llama.h>

#include <cstdint>
#include <string>

namespace moezip_run {

/// Routes llama.cpp and ggml logging (llama_log_set also sets ggml's logger, src/llama-impl.cpp).
/// verbose: every line goes to stderr. Otherwise nothing is printed and the first error lines are
/// kept for engine_errors(). Call before anything else in the engine.
void engine_log_init(bool verbose);

/// The first (at most 3) error-level lines the engine logged since engine_log_init, joined with
/// "; " ("" if none).
std::string engine_errors();

/// Loads every backend library found in the directory of the loaded libllama
/// (ggml_backend_load_all_from_path; this is a GGML_BACKEND_DL build, so no CPU backend is linked),
/// then llama_backend_init(). dir_out (optional) receives that directory.
/// Errors: not_found when libllama cannot be located or no backend device was loaded.
moezip::Status engine_load_backends(std::string * dir_out);

/// Cheap checks that a file is a complete GGUF model, done before llama.cpp sees it so that the
/// common bad inputs get a clear message: the file exists and is a regular, readable file, starts
/// with the magic "GGUF", its header parses (gguf_init_from_file, metadata only), and the data of
/// every tensor lies inside the file (offsets per ggml/src/gguf.cpp: data section at
/// gguf_get_data_offset, each tensor at gguf_get_tensor_offset, gguf_get_tensor_size bytes).
/// n_bytes_out (optional) receives the file size in bytes.
/// Errors: not_found (missing), invalid_argument (not a regular file, unreadable, not GGUF),
/// corruption (header does not parse, truncated tensor data). Messages name the file.
moezip::Status model_file_check(const std::string & path, uint64_t * n_bytes_out);

/// Loads the model with opts.use_mmap (LLAMA_LOAD_MODE_MMAP or _NONE) and opts.no_repack
/// (use_extra_bufts = false). Errors: io_error naming the file and the engine's error lines.
moezip::Status engine_load_model(const run_options & opts, llama_model ** model_out);

/// Makes a context of n_ctx tokens, one sequence, n_batch = n_ubatch = opts.n_ubatch,
/// n_threads = n_threads_batch = opts.n_threads. Errors: io_error with the engine's error lines.
moezip::Status engine_init_context(llama_model * model, const run_options & opts, uint32_t n_ctx,
                                   llama_context ** ctx_out);

} // namespace moezip_run
