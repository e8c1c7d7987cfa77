// moezip-worker: a GGUF model as its files — one file, or every part of a split model found from
// the first part's name, as the engine's loader finds them (src/llama-model-loader.cpp,
// llama_get_list_splits): the first file carries split.count, its name ends in
// "-00001-of-0000N.gguf", and llama_split_prefix / llama_split_path (include/llama.h) give the
// other names; each part carries split.no (u16) and the first split.tensors.count (i32).
// Each part has its own tensor table: a tensor's bytes lie at that part's gguf_get_data_offset +
// gguf_get_tensor_offset.
#pragma once

#include "coordinator/base/status.h"

#include "ggml.h"
#include "gguf.h"

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
    Status open(const std::string & path);

    const std::vector<GgufPart> & parts() const { return parts_; }
    /// The tensor named `name` in any part (tensor nullptr when absent).
    GgufTensorLoc find(const std::string & name) const;
    /// Every tensor of every part, in file order.
    std::vector<GgufTensorLoc> tensors() const;

private:
    Status open_part(const std::string & path, const std::string & what);
    Status check_parts(uint16_t n_split);

    std::vector<GgufPart> parts_;
};

} // namespace moezip
