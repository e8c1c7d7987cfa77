// moezip-worker: a GGUF model as its files — one file, or every part of a split model found from
// the first part's name, as the engine's loader finds them (src/llama-model-loader.cpp,
// llama_get_list_splits): the first file carries split.count, its name ends in
// "-00001-of-0000N.gguf", and llama_split_prefix / llama_split_path (include/llama.h) give the
// other names; each part carries split.no (u16) and the first split.tensors.count (i32).
// Each part has its own tensor table: a tensor's bytes lie at that part's gguf_get_data_offset +
// gguf_get_tensor_offset.
#pragma once

#include "provider_map/status.h"
#include "provider_map/engine_api.h"

#include "ggml.h"
#include "gguf.h"
#include "llama.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moezip {

/// One file of the model, open for reading.
struct GgufPart {
    std::string path;
    int fd = -1;
    uint64_t size = 0;               ///< bytes of the file
    gguf_context * gguf = nullptr;   ///< its metadata and tensor table
    ggml_context * meta = nullptr;   ///< descriptions of its tensors (no data)
};

/// Where one tensor's bytes are.
struct GgufTensorLoc {
    ggml_tensor * tensor = nullptr;  ///< description (type, ne, nb); data unset
    int part = -1;                   ///< index into GgufParts::parts()
    uint64_t offset = 0;             ///< first byte in that part's file
};

/// The engine functions a model's files are read with, bound at run time from the host's engine
/// (tools/moezip-worker/worker_engine.h): the worker links no engine library.
struct GgufReadApi {
    const GgmlApi * ggml = nullptr;                          ///< gguf_* and ggml_get_tensor/ggml_free (libggml-base)
    decltype(&::llama_split_prefix) split_prefix = nullptr;  ///< libllama: the split model's name convention
    decltype(&::llama_split_path) split_path = nullptr;
    /// libggml-base's key readers for an expert slice's keys (slice_keys.h); null: slices not read
    decltype(&::gguf_get_val_u32) get_val_u32 = nullptr;
    decltype(&::gguf_get_val_u64) get_val_u64 = nullptr;
    decltype(&::gguf_get_val_str) get_val_str = nullptr;
};

class GgufParts {
public:
    GgufParts() = default;
    ~GgufParts();
    GgufParts(const GgufParts &) = delete;
    GgufParts & operator=(const GgufParts &) = delete;

    /// Opens `path` and, when it is the first part of a split model, every other part. Errors,
    /// each naming the file: io_error (cannot open; a missing part names its path and says which
    /// part of how many it is), invalid_argument (not GGUF; a later part given instead of the first;
    /// a name outside the split convention; split.no, split.count or split.tensors.count that do not
    /// match; a tensor in two parts; a tensor's data past the end of its file).
    /// Everything is read through `api`, which must outlive this object.
    Status open(const std::string & path, const GgufReadApi & api);

    const std::vector<GgufPart> & parts() const { return parts_; }
    /// The tensor named `name` in any part (tensor nullptr when absent).
    GgufTensorLoc find(const std::string & name) const;
    /// Every tensor of every part, in file order.
    std::vector<GgufTensorLoc> tensors() const;

private:
    Status open_part(const std::string & path, const std::string & what);
    Status check_parts(uint16_t n_split);

    std::vector<std::string> split_paths(const std::string & first, int n_split) const;
    int split_key(const gguf_context * g, const char * key) const;

    GgufReadApi api_;
    std::vector<GgufPart> parts_;
};

} // namespace moezip
