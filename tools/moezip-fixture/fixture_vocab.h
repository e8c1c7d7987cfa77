// moezip-fixture: the small SentencePiece-style vocab every fixture carries
// (tokenizer.ggml.model = "llama", read by llama_vocab::impl::load in src/llama-vocab.cpp).
//
// Layout: 0 `<unk>` (unknown), 1 `<s>` (bos, control), 2 `</s>` (eos, control), 3..258 the byte
// tokens `<0x00>`..`<0xFF>` (byte fallback: any UTF-8 text tokenizes), then pieces: "▁" alone,
// single letters, digits and punctuation, and "▁"+word for a few hundred common English words
// together with every prefix of them ("▁t", "▁th", "▁the"), because the SPM tokenizer only merges
// adjacent symbols whose concatenation is itself a token. Optional padding tokens `<extra_N>`
// (normal, never produced by the tokenizer) bring the vocab up to a requested size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moezip {

/// Parallel arrays for tokenizer.ggml.tokens / .scores / .token_type, one entry per token id.
struct fixture_vocab {
    std::vector<std::string> tokens;  ///< UTF-8 piece text
    std::vector<float>       scores;  ///< SPM merge priority: higher merges first (-id here)
    std::vector<int32_t>     types;   ///< llama_token_type (include/llama.h)
};

/// Token ids of the special tokens.
constexpr int32_t fixture_unk_id = 0;
constexpr int32_t fixture_bos_id = 1;
constexpr int32_t fixture_eos_id = 2;

/// The vocab with `n_vocab` tokens; 0 or the base size gives the base vocab, a larger number
/// appends padding tokens. The caller validates n_vocab >= fixture_vocab_base_size().
fixture_vocab fixture_vocab_build(int64_t n_vocab);

/// Number of tokens of the base vocab (specials, bytes and pieces).
int64_t fixture_vocab_base_size();

} // namespace moezip
