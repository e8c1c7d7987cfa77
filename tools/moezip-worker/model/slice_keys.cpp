#include "tools/moezip-worker/model/slice_keys.h"

#include "coordinator/base/hex.h"

#include <cstring>
#include <xxhash.h>

namespace moezip {

std::string SliceInfo::describe() const {
    return "experts " + std::to_string(first) + "-" + std::to_string(last) + " of " + std::to_string(n_expert) + " of " + source +
           " (tensor table " + source_table + ")";
}

namespace {

// The id of `key` when it is present with `type`; -1 absent, -2 another type.
int64_t key_of(const GgufReadApi & api, const gguf_context * g, const char * key, gguf_type type) {
    const int64_t id = api.ggml->gguf_find_key(g, key);
    if (id < 0) return -1;
    return api.ggml->gguf_get_kv_type(g, id) == type ? id : -2;
}

} // namespace

Status slice_info_read(const GgufReadApi & api, const gguf_context * g, const std::string & path, SliceInfo & out) {
    out = SliceInfo{};
    const int64_t version = key_of(api, g, kSliceKeyVersion, GGUF_TYPE_UINT32);
    if (version == -1) return Status::ok();
    const std::string where = "slice " + path + ": ";
    if (api.get_val_u32 == nullptr || api.get_val_u64 == nullptr || api.get_val_str == nullptr)
        return Status::unsupported(where + "its keys cannot be read: no gguf_get_val_u32/u64/str bound");
    auto need = [&](const char * key, gguf_type type, int64_t & id) -> Status {
        id = key_of(api, g, key, type);
        if (id >= 0) return Status::ok();
        return Status::invalid_argument(where + key + (id == -1 ? " is missing" : " has another type than " + std::string(type == GGUF_TYPE_STRING ? "string" : type == GGUF_TYPE_UINT64 ? "u64" : "u32")) +
                                        " (a damaged or hand-edited slice: write it again with moezip-slice)");
    };
    int64_t id_experts = 0, id_n = 0, id_src = 0, id_bytes = 0, id_table = 0, id_version = 0;
    Status st = need(kSliceKeyVersion, GGUF_TYPE_UINT32, id_version);
    if (st) st = need(kSliceKeyExperts, GGUF_TYPE_STRING, id_experts);
    if (st) st = need(kSliceKeyNExpert, GGUF_TYPE_UINT32, id_n);
    if (st) st = need(kSliceKeySource, GGUF_TYPE_STRING, id_src);
    if (st) st = need(kSliceKeySourceBytes, GGUF_TYPE_UINT64, id_bytes);
    if (st) st = need(kSliceKeySourceTable, GGUF_TYPE_STRING, id_table);
    if (!st) return st;
    const uint32_t v = api.get_val_u32(g, id_version);
    if (v != kSliceVersion)
        return Status::invalid_argument(where + kSliceKeyVersion + " is " + std::to_string(v) + ", this moezip reads version " +
                                        std::to_string(kSliceVersion));
    out.n_expert = api.get_val_u32(g, id_n);
    out.source = api.get_val_str(g, id_src);
    out.source_bytes = api.get_val_u64(g, id_bytes);
    out.source_table = api.get_val_str(g, id_table);
    const std::string experts = api.get_val_str(g, id_experts);
    int first = -1, last = -1, used = 0;
    if (sscanf(experts.c_str(), "%d-%d%n", &first, &last, &used) != 2 || (size_t) used != experts.size() || first < 0 || first > last ||
        (int64_t) last >= out.n_expert)
        return Status::invalid_argument(where + kSliceKeyExperts + " is \"" + experts + "\", expected FIRST-LAST within 0-" +
                                        std::to_string(out.n_expert - 1) + " (" + kSliceKeyNExpert + ")");
    // the source's own metadata, which the slice keeps, says how many experts the model has: a
    // moezip.slice.n_expert that differs is a damaged or edited slice (the worker would describe
    // tensors of another shape, and reserve memory for that many experts)
    const int64_t id_arch = key_of(api, g, "general.architecture", GGUF_TYPE_STRING);
    if (id_arch >= 0) {
        const std::string count_key = std::string(api.get_val_str(g, id_arch)) + ".expert_count";
        const int64_t id_count = key_of(api, g, count_key.c_str(), GGUF_TYPE_UINT32);
        if (id_count >= 0 && (int64_t) api.get_val_u32(g, id_count) != out.n_expert)
            return Status::invalid_argument(where + kSliceKeyNExpert + " is " + std::to_string(out.n_expert) + ", but " + count_key +
                                            " is " + std::to_string(api.get_val_u32(g, id_count)) +
                                            " (a damaged or hand-edited slice: write it again with moezip-slice)");
    }
    out.first = first;
    out.last = last;
    out.is_slice = true;
    return Status::ok();
}

SliceTableDigest::SliceTableDigest() : state_(XXH3_createState()) { XXH3_64bits_reset(static_cast<XXH3_state_t *>(state_)); }

SliceTableDigest::~SliceTableDigest() { XXH3_freeState(static_cast<XXH3_state_t *>(state_)); }

void SliceTableDigest::add(const ggml_tensor * t) {
    auto * s = static_cast<XXH3_state_t *>(state_);
    XXH3_64bits_update(s, t->name, strlen(t->name) + 1);  // the terminator keeps "ab"+"c" apart from "a"+"bc"
    const int64_t fields[5] = {(int64_t) t->type, t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
    XXH3_64bits_update(s, fields, sizeof fields);
}

std::string SliceTableDigest::hex() const { return hex64(XXH3_64bits_digest(static_cast<const XXH3_state_t *>(state_))); }

} // namespace moezip
