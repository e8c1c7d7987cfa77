// moezip-upcycle: writes a GGUF file tensor by tensor, so a model never has to be held in memory
// whole. The header (metadata, tensor infos, padding) comes from the engine's gguf_get_meta_data;
// the data section follows the layout gguf_write_to_file produces (ggml/src/gguf.cpp,
// gguf_write_out): tensors in info order, each padded with zeros to gguf_get_alignment.
#pragma once

#include "provider_map/status.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

struct gguf_context;

namespace moezip_upcycle {

/// Fills `out` with the bytes of tensor `id` of the context being written; it must produce exactly
/// gguf_get_tensor_size(ctx, id) bytes.
using tensor_bytes_fn = std::function<moezip::Status(int64_t id, std::vector<uint8_t> & out)>;

/// Writes `ctx`'s header, then each tensor's bytes from `produce`, to `path` + ".tmp" and renames it
/// to `path` when everything was written. On any error the temporary file is removed.
/// `n_bytes` receives the file size. Errors: io_error naming the path; the producer's own error;
/// corruption if a producer returns the wrong number of bytes.
moezip::Status gguf_stream_write(const gguf_context * ctx, const std::string & path,
                                 const tensor_bytes_fn & produce, uint64_t & n_bytes);

} // namespace moezip_upcycle
