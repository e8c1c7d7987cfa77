// moezip: the GGUF keys that make a file an expert slice (tools/moezip-slice) and their reader.
//
// A slice is a GGUF file holding all metadata keys of its source model and, of every MoE layer,
// the tensors blk.N.ffn_{gate,up,down}_exps.weight (and .bias where the source has them) cut to
// the experts first..last: shape [.., .., n_owned] (biases [.., n_owned]), slot s holding expert
// first + s byte for byte. These keys say so:
//   moezip.slice.version       u32  kSliceVersion
//   moezip.slice.experts       str  "first-last" of the full model's experts
//   moezip.slice.n_expert      u32  experts of the full model
//   moezip.slice.source        str  the source's file name (its first part for a split model)
//   moezip.slice.source_bytes  u64  the source's size in bytes, all parts together
//   moezip.slice.source_table  str  16 hex digits: slice_table_digest of the source's tensor table
#pragma once

#include "tools/moezip-worker/model/gguf_parts.h"
#include "provider_map/status.h"

#include "gguf.h"

#include <cstdint>
#include <string>

namespace moezip {

constexpr uint32_t kSliceVersion = 1;
constexpr const char * kSliceKeyVersion = "moezip.slice.version";
constexpr const char * kSliceKeyExperts = "moezip.slice.experts";
constexpr const char * kSliceKeyNExpert = "moezip.slice.n_expert";
constexpr const char * kSliceKeySource = "moezip.slice.source";
constexpr const char * kSliceKeySourceBytes = "moezip.slice.source_bytes";
constexpr const char * kSliceKeySourceTable = "moezip.slice.source_table";

/// What a slice's keys say; is_slice false for any other GGUF file.
struct SliceInfo {
    bool is_slice = false;
    int first = 0, last = -1;         ///< experts held, inclusive, ids of the full model
    int64_t n_expert = 0;             ///< experts of the full model
    std::string source;               ///< the source's file name
    uint64_t source_bytes = 0;
    std::string source_table;         ///< 16 hex digits

    int n_owned() const { return last - first + 1; }
    /// "experts 2-5 of 8 of m.gguf (tensor table 0123456789abcdef)"
    std::string describe() const;
};

/// Reads the slice keys of `g` (the first part of a model) into `out` through `api`. A file without
/// moezip.slice.version is no slice (ok, is_slice false). Errors (invalid_argument naming `path`
/// and the key): a key missing or of another type, another version, a range that is not
/// 0 <= first <= last < n_expert, an n_expert other than the model's `<general.architecture>.expert_count`
/// (where the slice has that u32 key); unsupported when api's get_val_* are null.
Status slice_info_read(const GgufReadApi & api, const gguf_context * g, const std::string & path, SliceInfo & out);

/// XXH3-64 of a tensor table, fed one tensor at a time (name, type, ne[0..3]) in file order over
/// every part: the source's identity without reading its data.
class SliceTableDigest {
public:
    SliceTableDigest();
    ~SliceTableDigest();
    SliceTableDigest(const SliceTableDigest &) = delete;
    SliceTableDigest & operator=(const SliceTableDigest &) = delete;
    void add(const ggml_tensor * t);
    /// 16 lower-case hex digits
    std::string hex() const;

private:
    void * state_;  // XXH3_state_t
};

} // namespace moezip
