// moezip-run: the prompt as token ids (from text, or a deterministic fixture) and token ids as text.
#pragma once

#include "provider_map/status.h"

#include <llama.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moezip_run {

/// Tokenizes text with the model's special tokens added (BOS when the vocab asks for it) and
/// special-token text left as plain text (llama_tokenize add_special = true, parse_special = false).
/// Errors: invalid_argument when the text gives no token at all.
moezip::Status prompt_from_text(const llama_vocab * vocab, const std::string & text,
                                std::vector<llama_token> * tokens_out);

/// n_tokens token ids drawn uniformly from [0, n_vocab) by a splitmix64 generator seeded with
/// seed, skipping control tokens (llama_vocab_is_control). The same model, n_tokens and seed give
/// the same ids on every machine. No BOS is added: the fixture is exactly n_tokens ids.
/// Errors: invalid_argument when the vocab has no non-control token.
moezip::Status prompt_from_fixture(const llama_vocab * vocab, int32_t n_tokens, uint64_t seed,
                                   std::vector<llama_token> * tokens_out);

/// The text of tokens: their pieces concatenated as they are (llama_token_to_piece, lstrip 0,
/// special tokens not rendered), so a continuation keeps its leading space.
std::string tokens_to_text(const llama_vocab * vocab, const std::vector<llama_token> & tokens);

} // namespace moezip_run
