// moezip-run: the settings of one run, as parsed from the command line (main.cpp).
// moezip-run is an ordinary host of the engine: nothing here knows about libmoezip.
#pragma once

#include <cstdint>
#include <string>

namespace moezip_run {

/// Exit codes of moezip-run (also listed in --help and docs/internals/moezip-run.md).
enum exit_code : int {
    exit_ok      = 0,  ///< the run finished
    exit_runtime = 1,  ///< bad model file, prompt too long, engine error, cannot write --json
    exit_usage   = 2,  ///< bad or missing flags
};

/// One run's settings. Defaults are those of the command line.
struct run_options {
    std::string model_path;          ///< -m: GGUF model file
    std::string prompt;              ///< -p: prompt text (tokenized with BOS as the model asks; may be empty)
    int32_t     n_fixture  = 0;      ///< --fixture N: N pseudo-random token ids instead of -p (0 = unused)
    uint64_t    seed       = 1;      ///< --seed: seed of the fixture generator
    int32_t     n_predict  = 32;     ///< -n: greedy steps (generated tokens)
    bool        warmup     = false;  ///< --warmup: one untimed prefill + decode step first, then the KV cache is cleared
    bool        stop_at_eog = false; ///< --stop-at-eog: stop early at an end-of-generation token
    int32_t     n_threads  = 1;      ///< -t: n_threads and n_threads_batch
    int32_t     n_ubatch   = 512;    ///< -b: n_ubatch and n_batch (tokens per llama_decode call in prefill)
    int32_t     n_ctx      = 0;      ///< -c: context size in tokens; 0 = prompt + n_predict rounded up to 256
    bool        no_repack  = false;  ///< --no-repack: llama_model_params.use_extra_bufts = false
    bool        use_mmap   = true;   ///< false with --no-mmap (LLAMA_LOAD_MODE_NONE)
    std::string json_path;           ///< --json: report file ("" = none)
    bool        quiet      = false;  ///< --quiet: nothing on stdout
    bool        verbose    = false;  ///< --verbose: let llama.cpp/ggml log to stderr
};

} // namespace moezip_run
