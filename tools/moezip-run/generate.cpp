#include "tools/moezip-run/generate.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <string>

namespace moezip_run {

using moezip::Status;

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point start) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
}

// Owns a llama_batch from llama_batch_init.
struct batch_holder {
    llama_batch batch;
    explicit batch_holder(int32_t n_tokens) : batch(llama_batch_init(n_tokens, 0, 1)) {}
    ~batch_holder() { llama_batch_free(batch); }
    batch_holder(const batch_holder &) = delete;
    batch_holder & operator=(const batch_holder &) = delete;
};

// Puts tokens [first, first + n) of ids at positions pos0.. into batch; logits for the last one
// only when want_last.
void batch_fill(llama_batch & batch, const llama_token * ids, int32_t n, llama_pos pos0, bool want_last) {
    batch.n_tokens = n;
    for (int32_t i = 0; i < n; ++i) {
        batch.token[i]     = ids[i];
        batch.pos[i]       = pos0 + i;
        batch.n_seq_id[i]  = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i]    = want_last && i == n - 1;
    }
}

Status decode_checked(llama_context * ctx, const llama_batch & batch, const char * what, llama_pos pos0) {
    const int32_t ret = llama_decode(ctx, batch);
    if (ret == 0) return Status::ok();
    return Status::io_error(std::string("llama_decode failed in ") + what + " at position " +
                            std::to_string(pos0) + " (" + std::to_string(batch.n_tokens) +
                            " tokens): return code " + std::to_string(ret));
}

// Argmax of the last output's logits [n_vocab] and their hash; null logits are an error.
Status pick_greedy(llama_context * ctx, int32_t n_vocab, llama_token * token, uint64_t * hash) {
    const float * logits = llama_get_logits_ith(ctx, -1);
    if (!logits) return Status::io_error("llama.cpp returned no logits");
    llama_token best = 0;
    for (llama_token t = 1; t < n_vocab; ++t) {
        if (logits[t] > logits[best]) best = t;
    }
    *token = best;
    *hash  = XXH3_64bits(logits, (size_t) n_vocab * sizeof(float));
    return Status::ok();
}

} // namespace

Status warm_up(llama_context * ctx, const std::vector<llama_token> & prompt, const generate_params & params) {
    generate_params p = params;
    p.n_predict = std::min<int32_t>(params.n_predict, 2);
    p.stop_at_eog = false;
    generate_result ignored;
    Status st = generate_greedy(ctx, prompt, p, &ignored);
    llama_memory_clear(llama_get_memory(ctx), true);
    return st;
}

Status generate_greedy(llama_context * ctx, const std::vector<llama_token> & prompt,
                       const generate_params & params, generate_result * result) {
    if (prompt.empty()) return Status::invalid_argument("the prompt has no token");
    const llama_vocab * vocab = llama_model_get_vocab(llama_get_model(ctx));
    const int32_t n_vocab  = llama_vocab_n_tokens(vocab);
    const int32_t n_prompt = (int32_t) prompt.size();
    const int32_t n_batch  = params.n_batch;
    *result = generate_result();
    batch_holder holder(n_batch);
    llama_batch & batch = holder.batch;

    llama_token next = 0;
    uint64_t hash = 0;
    auto t0 = clock_type::now();
    for (int32_t i = 0; i < n_prompt; i += n_batch) {
        const int32_t n = std::min(n_batch, n_prompt - i);
        batch_fill(batch, prompt.data() + i, n, i, i + n == n_prompt);
        Status st = decode_checked(ctx, batch, "prefill", i);
        if (!st) return st;
    }
    llama_synchronize(ctx);
    Status st = params.n_predict > 0 ? pick_greedy(ctx, n_vocab, &next, &hash) : Status::ok();
    result->prefill_ms = ms_since(t0);
    result->n_prefill  = n_prompt;
    if (!st) return st;

    double decode_ms = 0;
    for (int32_t k = 0; k < params.n_predict; ++k) {
        if (k > 0) {
            const llama_pos pos = n_prompt + k - 1;
            batch_fill(batch, &result->tokens.back(), 1, pos, true);
            auto t1 = clock_type::now();
            st = decode_checked(ctx, batch, "decode", pos);
            if (st) st = pick_greedy(ctx, n_vocab, &next, &hash);
            const double step_ms = ms_since(t1);
            decode_ms += step_ms;
            if (!st) return st;
            result->decode_step_ms.push_back(step_ms);
            result->n_decode++;
        }
        result->tokens.push_back(next);
        result->logits_xxh3.push_back(hash);
        if (params.stop_at_eog && llama_vocab_is_eog(vocab, next)) break;
    }
    result->decode_ms = decode_ms;
    return Status::ok();
}

} // namespace moezip_run
