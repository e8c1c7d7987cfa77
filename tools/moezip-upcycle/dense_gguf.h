// moezip-upcycle: opening and validating the dense llama GGUF, reading its tensors.
// Uses the engine's gguf API (ggml/include/gguf.h, libggml-base): gguf_init_from_file with
// no_alloc, so only the header is held in memory; tensor bytes are read from the file on demand.
#pragma once

#include "provider_map/status.h"
#include "tools/moezip-upcycle/expert_split.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

struct gguf_context;
struct ggml_context;

namespace moezip_upcycle {

/// The FFN tensors of one dense layer (gguf tensor ids).
struct dense_layer_ids {
    int64_t gate = -1;  ///< blk.N.ffn_gate.weight [n_embd, n_ff]
    int64_t up   = -1;  ///< blk.N.ffn_up.weight   [n_embd, n_ff]
    int64_t down = -1;  ///< blk.N.ffn_down.weight [n_ff, n_embd]
};

/// An open, validated dense llama GGUF. Not copyable; closes everything on destruction.
class dense_gguf {
public:
    dense_gguf() = default;
    ~dense_gguf();
    dense_gguf(const dense_gguf &) = delete;
    dense_gguf & operator=(const dense_gguf &) = delete;

    /// Opens `path` and checks: GGUF magic, a header gguf can parse, every tensor's bytes inside
    /// the file, general.architecture == "llama", no llama.expert_count > 0, and for every layer
    /// blk.N.ffn_{gate,up,down}.weight with shapes [n_embd, n_ff], [n_embd, n_ff], [n_ff, n_embd],
    /// the same n_ff everywhere, a type that dequantizes to f32, no FFN bias, no blk.N.ffn_*_exps or
    /// ffn_gate_inp tensor already present.
    /// Errors (message starts with the path): io_error (unreadable), corruption (not GGUF,
    /// bad header, truncated), unsupported (not llama, already MoE, FFN missing or odd).
    moezip::Status open(const std::string & path);

    const std::string & path() const { return path_; }
    const gguf_context * gguf() const { return gguf_; }
    int64_t n_layer() const { return n_layer_; }
    int64_t n_embd() const { return n_embd_; }
    int64_t n_ff() const { return n_ff_; }
    const dense_layer_ids & layer(int64_t il) const { return layers_[(size_t) il]; }
    /// Layer index when tensor `id` is one of a layer's FFN weights, else -1.
    int64_t ffn_layer_of(int64_t id) const;

    /// The raw bytes of tensor `id` as stored in the file. Errors: io_error.
    moezip::Status read_raw(int64_t id, std::vector<uint8_t> & out) const;
    /// Tensor `id` dequantized to f32 (ggml type traits to_float). Errors: io_error.
    moezip::Status read_f32(int64_t id, std::vector<float> & out) const;
    /// Layer `il`'s FFN dequantized to f32 (ggml type traits to_float). Errors: io_error.
    moezip::Status read_ffn(int64_t il, dense_ffn & out) const;

private:
    moezip::Status check_file_magic() const;
    moezip::Status parse_header();
    moezip::Status check_tensor_extents(uint64_t file_size) const;
    moezip::Status check_architecture();
    moezip::Status find_ffn_layers();
    moezip::Status check_ffn_tensor(const char * name, int64_t id, int64_t ne0, int64_t ne1) const;
    std::string where() const { return path_ + ": "; }

    std::string path_;
    gguf_context * gguf_ = nullptr;
    ggml_context * meta_ = nullptr;
    FILE * file_ = nullptr;
    int64_t n_layer_ = 0;
    int64_t n_embd_ = 0;
    int64_t n_ff_ = 0;
    std::vector<dense_layer_ids> layers_;
};

/// Reads an integer-typed key (any of gguf's 8/16/32/64-bit integer types) into `out`.
/// False when the key is absent or not a non-negative integer.
bool gguf_get_uint(const gguf_context * ctx, const char * key, uint64_t & out);

} // namespace moezip_upcycle
