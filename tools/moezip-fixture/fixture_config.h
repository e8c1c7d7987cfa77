// moezip-fixture: the shape of a synthetic MoE model (presets, overrides, weight type, arch, split)
// and its validation. The field names follow llama.cpp's hparams (src/llama-hparams.h) and the GGUF
// keys they are written to (src/llama-arch.cpp, LLM_KV_*).
#pragma once

#include "provider_map/status.h"

#include "ggml.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moezip {

/// Shape of a model (the presets are qwen3moe shapes, src/models/qwen3moe.cpp; other archs derive
/// their extra widths from it: fixture_arch.h). All counts are > 0 once validated.
struct fixture_hparams {
    int64_t n_embd        = 0; ///< embedding_length: width of the residual stream
    int64_t n_layer       = 0; ///< block_count
    int64_t n_expert      = 0; ///< expert_count
    int64_t n_expert_used = 0; ///< expert_used_count (top-k of the router); layer 0's when per layer
    int64_t n_ff_exp      = 0; ///< expert_feed_forward_length: hidden width of one expert
    int64_t n_head        = 0; ///< attention.head_count (query heads)
    int64_t n_head_kv     = 0; ///< attention.head_count_kv; divides n_head
    int64_t head_dim      = 0; ///< attention.key_length = value_length = rope dimension; even
    int64_t n_ctx_train   = 0; ///< context_length (tokens)
    int64_t n_vocab       = 0; ///< tokens in the vocab; 0 = the built-in vocab's size
    /// expert_used_count per layer (written as an array, read by llama_model_loader::get_key_or_arr);
    /// empty = the scalar n_expert_used for every layer.
    std::vector<int64_t> n_expert_used_layers;
};

/// Everything that decides the bytes of one fixture file.
struct fixture_config {
    std::string     preset;                     ///< name the shape came from ("tiny", ...)
    fixture_hparams hp;
    ggml_type       weight_type = GGML_TYPE_F32; ///< experts, attention, token_embd and output
    uint64_t        seed        = 1;             ///< PRNG seed; same seed -> same bytes
    std::string     arch        = "qwen3moe";    ///< general.architecture: a row of fixture_arch.h
    int64_t         n_split     = 1;             ///< files to write (llama.cpp's split convention); 1 = one file
    /// q4_K and q8_0 tensors drawn directly as random valid blocks (fixture_fast_quant.h) instead of
    /// quantizing f32 values: other bytes than without it, minutes instead of hours for large models.
    bool            fast_quant  = false;
};

/// Names of the presets, in the order --help lists them.
std::vector<std::string> fixture_preset_names();

/// Fills `hp` from a preset name. Errors: invalid_argument naming the preset and the known ones.
Status fixture_preset_lookup(const std::string & name, fixture_hparams & hp);

/// Names accepted by --type, ggml spelling (ggml_type_name): f32, f16, bf16, q8_0, q4_K ...
std::vector<std::string> fixture_type_names();

/// Parses a --type name (case-insensitive). Errors: invalid_argument naming the type and the
/// supported ones.
Status fixture_type_lookup(const std::string & name, ggml_type & type);

/// Parses --n-expert-used: one count (every layer) or a comma-separated list, one count per layer
/// (then n_expert_used is layer 0's count, the one the engine's graph routes: src/llama-graph.cpp).
/// Ranges are checked later (fixture_hparams_validate, fixture_arch_resolve). Errors:
/// invalid_argument quoting the text.
Status fixture_expert_used_parse(const std::string & text, fixture_hparams & hp);

/// Checks the shape the engine will accept: every count > 0 and below a sane bound,
/// n_expert_used <= n_expert <= 1024 (LLAMA_MAX_EXPERTS), n_layer <= 512 (LLAMA_MAX_LAYERS),
/// n_head % n_head_kv == 0, head_dim even (RoPE rotates pairs). `n_vocab_min` is the size of the
/// built-in vocab, the least --vocab-size may be. Errors: invalid_argument naming the field.
Status fixture_hparams_validate(const fixture_hparams & hp, int64_t n_vocab_min);

} // namespace moezip
