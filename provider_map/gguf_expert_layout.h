// moezip: where each routed-expert slice of a GGUF file lies, read from the file's tensor table
// before the engine has built anything (at the moment it maps the file).
//
// llama.cpp names the routed experts of layer N blk.N.ffn_{gate,up,down}_exps.weight, each
// [.., .., n_expert] with expert e in bytes [e*nb[2], (e+1)*nb[2]) of the tensor (ggml.h), and
// places tensor i at gguf_get_data_offset + gguf_get_tensor_offset(i) in the file (gguf.h).
#pragma once

#include "provider_map/status.h"
#include "provider_map/engine_api.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moezip {

/// One routed-expert tensor of a GGUF file.
struct GgufExpertTensor {
    std::string name;        ///< e.g. "blk.3.ffn_up_exps.weight"
    int il = -1;             ///< layer index N
    uint64_t offset = 0;     ///< first byte in the file
    uint64_t bytes = 0;      ///< whole tensor
    int64_t n_expert = 0;    ///< ne[2]; slice e = [offset + e*bytes/n_expert, offset + (e+1)*bytes/n_expert)
};

/// Reads the tensor table of `path` (metadata only, gguf_init_from_file with no_alloc) with the
/// engine's gguf API and lists its blk.N.ffn_{gate,up,down}_exps.weight tensors.
/// Errors: io_error when the file cannot be parsed as GGUF.
Status gguf_expert_tensors(const GgmlApi & api, const std::string & path, std::vector<GgufExpertTensor> & out);

} // namespace moezip
