// moezip-run: prefill a prompt, then greedy-decode, recording the ids, a hash of the logits that
// chose each id, and the time spent in the engine.
#pragma once

#include "provider_map/status.h"

#include <llama.h>

#include <cstdint>
#include <vector>

namespace moezip_run {

/// What one greedy run produced.
struct generate_result {
    std::vector<llama_token> tokens;       ///< generated ids, [n_generated]
    std::vector<uint64_t>    logits_xxh3;  ///< XXH3_64bits of the n_vocab f32 logits that chose tokens[i], [n_generated]
    int32_t n_prefill  = 0;    ///< prompt tokens evaluated
    double  prefill_ms = 0;    ///< wall time of the prefill's llama_decode calls and logits read, ms
    int32_t n_decode   = 0;    ///< single-token llama_decode calls (generated tokens fed back): n_generated - 1
    double  decode_ms  = 0;    ///< wall time of those calls and their logits reads, ms
    /// Wall time of each decode step (llama_decode of one token and its logits read), ms,
    /// [n_decode]; decode_ms is their sum. With their median beside the mean, a run slowed
    /// throughout can be told from one with a few stalled steps.
    std::vector<double> decode_step_ms;
};

/// Settings of generate_greedy.
struct generate_params {
    int32_t n_batch     = 512;    ///< prompt tokens per llama_decode call (the context's n_batch)
    int32_t n_predict   = 32;     ///< tokens to generate
    bool    stop_at_eog = false;  ///< stop after generating an end-of-generation token
};

/// Evaluates prompt [n_prompt] in sequence 0 from position 0 in chunks of n_batch tokens (logits
/// for the last prompt token only), then generates n_predict tokens by argmax over the logits
/// (ties: the lowest id), feeding each one back as a single-token batch except the last. So the
/// run uses n_prompt + n_predict - 1 positions and llama_decode is called n_predict - 1 times
/// after the prefill. Errors: invalid_argument for an empty prompt, io_error naming the failing
/// llama_decode call and its return code (llama.h: 1 = no KV slot, 2 = aborted, < 0 = error).
/// Untimed warm-up: evaluates the prompt as generate_greedy does plus one decode step (when
/// n_predict > 1), then clears the context's memory (llama_memory_clear, data too), so a following
/// generate_greedy starts from an empty KV cache and gives the same tokens and logits as without it.
/// It touches the engine's compute buffers and the weights a prompt uses, once. Errors: as
/// generate_greedy.
moezip::Status warm_up(llama_context * ctx, const std::vector<llama_token> & prompt, const generate_params & params);

moezip::Status generate_greedy(llama_context * ctx, const std::vector<llama_token> & prompt,
                               const generate_params & params, generate_result * result);

} // namespace moezip_run
