#include "tools/moezip-run/prompt.h"

#include <climits>

namespace moezip_run {

using moezip::Status;

Status prompt_from_text(const llama_vocab * vocab, const std::string & text,
                        std::vector<llama_token> * tokens_out) {
    if (text.size() > (size_t) INT32_MAX / 2) return Status::invalid_argument("prompt is too long");
    const int32_t n_text = (int32_t) text.size();
    std::vector<llama_token> tokens((size_t) n_text + 2);
    int32_t n = llama_tokenize(vocab, text.data(), n_text, tokens.data(), (int32_t) tokens.size(), true, false);
    if (n < 0 && n != INT32_MIN) {  // a negative count is the size needed
        tokens.resize((size_t) -n);
        n = llama_tokenize(vocab, text.data(), n_text, tokens.data(), (int32_t) tokens.size(), true, false);
    }
    if (n < 0) return Status::invalid_argument("prompt could not be tokenized");
    if (n == 0) return Status::invalid_argument("prompt gives no token");
    tokens.resize((size_t) n);
    *tokens_out = std::move(tokens);
    return Status::ok();
}

// splitmix64 (Steele, Lea, Flood 2014): a tiny generator whose sequence is fixed by its seed.
static uint64_t splitmix64_next(uint64_t & state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

Status prompt_from_fixture(const llama_vocab * vocab, int32_t n_tokens, uint64_t seed,
                           std::vector<llama_token> * tokens_out) {
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    bool any_usable = false;
    for (llama_token t = 0; t < n_vocab && !any_usable; ++t) any_usable = !llama_vocab_is_control(vocab, t);
    if (!any_usable) return Status::invalid_argument("the model's vocab has only control tokens");
    std::vector<llama_token> tokens;
    tokens.reserve((size_t) n_tokens);
    uint64_t state = seed;
    while ((int32_t) tokens.size() < n_tokens) {
        const llama_token t = (llama_token) (splitmix64_next(state) % (uint64_t) n_vocab);
        if (!llama_vocab_is_control(vocab, t)) tokens.push_back(t);
    }
    *tokens_out = std::move(tokens);
    return Status::ok();
}

std::string tokens_to_text(const llama_vocab * vocab, const std::vector<llama_token> & tokens) {
    std::string text;
    std::vector<char> piece(64);
    for (llama_token t : tokens) {
        int32_t n = llama_token_to_piece(vocab, t, piece.data(), (int32_t) piece.size(), 0, false);
        if (n < 0) {  // a negative count is the size needed
            piece.resize((size_t) -n);
            n = llama_token_to_piece(vocab, t, piece.data(), (int32_t) piece.size(), 0, false);
        }
        if (n > 0) text.append(piece.data(), (size_t) n);
    }
    return text;
}

} // namespace moezip_run
