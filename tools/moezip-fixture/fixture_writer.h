// moezip-fixture: writes a whole fixture file. The GGUF header comes from gguf_get_meta_data;
// then each tensor's data is generated, converted with the engine's ggml_quantize_chunk
// (ggml/src/ggml.c) a few rows at a time and appended, padded to the file's alignment
// (gguf_get_tensor_offset gives where each tensor starts). Peak memory is one chunk of rows
// (about 16 MiB of f32 plus its quantized copy), not one tensor and not the model.
#pragma once

#include "provider_map/status.h"
#include "tools/moezip-fixture/fixture_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moezip {

/// What a successful write produced.
struct fixture_write_result {
    int64_t n_tensors = 0;
    int64_t n_vocab   = 0;
    int64_t n_bytes   = 0; ///< size of the files together
    std::vector<std::string> paths; ///< the files written: the output, or its split parts in order
    double  seconds   = 0; ///< wall time of the write
};

/// Writes the fixture `cfg` describes to `path` (replaced if it exists), or with cfg.n_split > 1 to
/// the split files fixture_split_paths names. Prints progress lines to stderr once the write has
/// taken more than a second. Errors: invalid_argument for an unknown arch, a bad shape (naming the
/// flag), a type whose block size does not divide a tensor's row length (naming the tensor, its
/// ne0 and the type) or a bad --split-files; nothing is written then. io_error naming the path
/// when a file cannot be created or written (every file of this write is removed).
Status fixture_write(const fixture_config & cfg, const std::string & path, fixture_write_result & result);

} // namespace moezip
