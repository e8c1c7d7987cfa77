#include "tools/moezip-run/engine.h"

#include <ggml-backend.h>
#include <gguf.h>

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

namespace moezip_run {

using moezip::Status;

namespace {

// Error lines kept when not verbose: the first ones say why (later ones only that it failed).
constexpr size_t max_error_lines = 3;

struct log_state {
    bool                     verbose = false;
    std::mutex               mutex;
    std::vector<std::string> errors;    // error lines, oldest first, at most max_error_lines
    bool                     in_error = false;  // the current line (ggml may log it in pieces) is an error
};

log_state g_log;

// ggml_log_callback: GGML_LOG_LEVEL_CONT continues the previous line at its level (ggml.h).
void engine_log_callback(ggml_log_level level, const char * text, void * /*user_data*/) {
    if (g_log.verbose) {
        fputs(text, stderr);
        return;
    }
    std::lock_guard<std::mutex> lock(g_log.mutex);
    if (level != GGML_LOG_LEVEL_CONT) {
        g_log.in_error = level == GGML_LOG_LEVEL_ERROR && g_log.errors.size() < max_error_lines;
        if (g_log.in_error) g_log.errors.emplace_back();
    }
    if (g_log.in_error) g_log.errors.back() += text;
}

std::string with_engine_error(std::string message) {
    const std::string errors = engine_errors();
    if (!errors.empty()) message += " (engine: " + errors + ")";
    else message += " (run with --verbose for the engine's log)";
    return message;
}

} // namespace

void engine_log_init(bool verbose) {
    g_log.verbose = verbose;
    llama_log_set(engine_log_callback, nullptr);
}

std::string engine_errors() {
    std::lock_guard<std::mutex> lock(g_log.mutex);
    std::string joined;
    for (std::string line : g_log.errors) {
        while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
        if (line.empty()) continue;
        if (!joined.empty()) joined += "; ";
        joined += line;
    }
    return joined;
}

Status engine_load_backends(std::string * dir_out) {
    Dl_info info;
    if (dladdr(reinterpret_cast<void *>(&llama_backend_init), &info) == 0 || info.dli_fname == nullptr) {
        return Status::not_found("cannot locate the loaded libllama (dladdr failed)");
    }
    std::string dir = info.dli_fname;
    size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "." : dir.substr(0, slash);
    if (dir_out) *dir_out = dir;
    ggml_backend_load_all_from_path(dir.c_str());
    if (ggml_backend_dev_count() == 0) {
        return Status::not_found("no ggml backend could be loaded from " + dir +
                                 " (expected libggml-cpu-*.so there)");
    }
    llama_backend_init();
    return Status::ok();
}

static Status check_regular_file(const std::string & path, uint64_t * n_bytes) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return Status::not_found("model file " + path + " does not exist");
        return Status::invalid_argument("model file " + path + ": " + strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) return Status::invalid_argument("model file " + path + " is not a regular file");
    if (access(path.c_str(), R_OK) != 0) {
        return Status::invalid_argument("model file " + path + " is not readable: " + strerror(errno));
    }
    *n_bytes = (uint64_t) st.st_size;
    return Status::ok();
}

// GGUF header: magic "GGUF", u32 version, i64 n_tensors, i64 n_kv (ggml/src/gguf.cpp).
static constexpr uint64_t gguf_header_bytes = 4 + 4 + 8 + 8;

static Status check_gguf_magic(const std::string & path, uint64_t n_bytes) {
    FILE * f = fopen(path.c_str(), "rb");
    if (!f) return Status::invalid_argument("model file " + path + " cannot be opened: " + strerror(errno));
    char magic[4] = {0, 0, 0, 0};
    size_t n_read = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (n_read != sizeof magic || memcmp(magic, "GGUF", 4) != 0) {
        return Status::invalid_argument("model file " + path + " is not a GGUF file (no \"GGUF\" magic)");
    }
    if (n_bytes < gguf_header_bytes) {
        return Status::corruption("model file " + path + " is truncated (" + std::to_string(n_bytes) +
                                  " bytes, shorter than a GGUF header)");
    }
    return Status::ok();
}

static Status check_gguf_tensors(const std::string & path, uint64_t n_bytes) {
    gguf_init_params params = {/*no_alloc =*/ true, /*ctx =*/ nullptr};
    gguf_context * gguf = gguf_init_from_file(path.c_str(), params);
    if (!gguf) {
        return Status::corruption("model file " + path + " has a GGUF header that does not parse " +
                                  "(truncated or corrupt metadata, " + std::to_string(n_bytes) + " bytes)");
    }
    Status st = Status::ok();
    const uint64_t data_offset = gguf_get_data_offset(gguf);
    for (int64_t i = 0; i < gguf_get_n_tensors(gguf); ++i) {
        const uint64_t end = data_offset + gguf_get_tensor_offset(gguf, i) + gguf_get_tensor_size(gguf, i);
        if (end > n_bytes) {
            st = Status::corruption("model file " + path + " is truncated: tensor '" +
                                    gguf_get_tensor_name(gguf, i) + "' ends at byte " + std::to_string(end) +
                                    " but the file has " + std::to_string(n_bytes) + " bytes");
            break;
        }
    }
    gguf_free(gguf);
    return st;
}

Status model_file_check(const std::string & path, uint64_t * n_bytes_out) {
    uint64_t n_bytes = 0;
    Status st = check_regular_file(path, &n_bytes);
    if (st) st = check_gguf_magic(path, n_bytes);
    if (st) st = check_gguf_tensors(path, n_bytes);
    if (st && n_bytes_out) *n_bytes_out = n_bytes;
    return st;
}

Status engine_load_model(const run_options & opts, llama_model ** model_out) {
    llama_model_params mparams = llama_model_default_params();
    mparams.load_mode       = opts.use_mmap ? LLAMA_LOAD_MODE_MMAP : LLAMA_LOAD_MODE_NONE;
    mparams.use_extra_bufts = !opts.no_repack;
    llama_model * model = llama_model_load_from_file(opts.model_path.c_str(), mparams);
    if (!model) return Status::io_error(with_engine_error("llama.cpp could not load model file " + opts.model_path));
    *model_out = model;
    return Status::ok();
}

Status engine_init_context(llama_model * model, const run_options & opts, uint32_t n_ctx,
                           llama_context ** ctx_out) {
    llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx           = n_ctx;
    cparams.n_batch         = (uint32_t) opts.n_ubatch;
    cparams.n_ubatch        = (uint32_t) opts.n_ubatch;
    cparams.n_seq_max       = 1;
    cparams.n_threads       = opts.n_threads;
    cparams.n_threads_batch = opts.n_threads;
    llama_context * ctx = llama_init_from_model(model, cparams);
    if (!ctx) return Status::io_error(with_engine_error("llama.cpp could not create a context of " +
                                                        std::to_string(n_ctx) + " tokens"));
    *ctx_out = ctx;
    return Status::ok();
}

} // namespace moezip_run
