#include "tools/moezip-worker/model/gguf_parts.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace moezip {

namespace {

/// "-00001-of-00003.gguf" for part k (0-based) of n: the suffix llama_split_path appends.
std::string part_suffix(int k, int n) {
    char buf[48];
    snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", k + 1, n);
    return buf;
}

} // namespace

/// The u16 value of `key` (-1 when absent, -2 when of another type).
int GgufParts::split_key(const gguf_context * g, const char * key) const {
    const int64_t id = api_.ggml->gguf_find_key(g, key);
    if (id < 0) return -1;
    if (api_.ggml->gguf_get_kv_type(g, id) != GGUF_TYPE_UINT16) return -2;
    return api_.ggml->gguf_get_val_u16(g, id);
}

/// The names of all n_split parts from the first one's path; "" entries when it is not named
/// by the convention.
std::vector<std::string> GgufParts::split_paths(const std::string & first, int n_split) const {
    std::vector<char> buf(first.size() + 64);
    const int32_t n = api_.split_prefix(buf.data(), buf.size(), first.c_str(), 0, n_split);
    if (n <= 0) return {};
    const std::string prefix(buf.data(), (size_t) n);
    std::vector<std::string> paths;
    for (int k = 0; k < n_split; ++k) {
        const int32_t m = api_.split_path(buf.data(), buf.size(), prefix.c_str(), k, n_split);
        paths.emplace_back(buf.data(), (size_t) std::max(m, 0));
    }
    return paths;
}

GgufParts::~GgufParts() {
    for (GgufPart & p : parts_) {
        if (p.gguf) api_.ggml->gguf_free(p.gguf);
        if (p.meta) api_.ggml->ggml_free(p.meta);
        if (p.fd >= 0) close(p.fd);
    }
}

Status GgufParts::open_part(const std::string & path, const std::string & what) {
    parts_.emplace_back();
    GgufPart & p = parts_.back();
    p.path = path;
    p.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (p.fd < 0) return Status::io_error(what + path + ": " + strerror(errno));
    struct stat st;
    if (fstat(p.fd, &st) != 0 || !S_ISREG(st.st_mode)) return Status::io_error(what + path + ": not a regular file");
    p.size = (uint64_t) st.st_size;
    gguf_init_params params = {/*no_alloc =*/ true, /*ctx =*/ &p.meta};
    p.gguf = api_.ggml->gguf_init_from_file(path.c_str(), params);
    if (p.gguf == nullptr) return Status::invalid_argument(what + path + ": not a GGUF file, or its header is malformed");
    for (int64_t id = 0; id < api_.ggml->gguf_get_n_tensors(p.gguf); ++id) {
        const char * name = api_.ggml->gguf_get_tensor_name(p.gguf, id);
        const uint64_t end = api_.ggml->gguf_get_data_offset(p.gguf) + api_.ggml->gguf_get_tensor_offset(p.gguf, id) + api_.ggml->gguf_get_tensor_size(p.gguf, id);
        if (end > p.size)
            return Status::io_error(what + path + ": " + name + " ends at byte " + std::to_string(end) +
                                    ", past the end of the file (" + std::to_string(p.size) + " bytes): truncated?");
    }
    return Status::ok();
}

Status GgufParts::check_parts(uint16_t n_split) {
    std::set<std::string> seen;
    int64_t n_tensors = 0;
    for (size_t k = 0; k < parts_.size(); ++k) {
        const GgufPart & p = parts_[k];
        if (split_key(p.gguf, "split.no") != (int) k)
            return Status::invalid_argument("model " + p.path + " should be part " + std::to_string(k + 1) + " of " +
                                            std::to_string(n_split) + " (split.no " + std::to_string(k) + ") but is not");
        for (int64_t id = 0; id < api_.ggml->gguf_get_n_tensors(p.gguf); ++id, ++n_tensors) {
            if (!seen.insert(api_.ggml->gguf_get_tensor_name(p.gguf, id)).second)
                return Status::invalid_argument("model " + p.path + ": tensor " + api_.ggml->gguf_get_tensor_name(p.gguf, id) +
                                                " is also in an earlier part");
        }
    }
    const int64_t id = api_.ggml->gguf_find_key(parts_[0].gguf, "split.tensors.count");
    if (id >= 0 && api_.ggml->gguf_get_kv_type(parts_[0].gguf, id) == GGUF_TYPE_INT32 && api_.ggml->gguf_get_val_i32(parts_[0].gguf, id) != n_tensors)
        return Status::invalid_argument("model " + parts_[0].path + ": split.tensors.count is " +
                                        std::to_string(api_.ggml->gguf_get_val_i32(parts_[0].gguf, id)) + " but its " +
                                        std::to_string(n_split) + " parts hold " + std::to_string(n_tensors) + " tensors");
    return Status::ok();
}

Status GgufParts::open(const std::string & path, const GgufReadApi & api) {
    if (api.ggml == nullptr || !api.ggml->base_bound || api.split_prefix == nullptr || api.split_path == nullptr)
        return Status::not_found("model " + path + ": the engine's gguf and split functions are not bound");
    api_ = api;
    Status st = open_part(path, "model ");
    if (!st) return st;
    const int n_split = split_key(parts_[0].gguf, "split.count");
    if (n_split <= 1) return Status::ok();  // an ordinary file (split.count absent, 0 or 1)
    const int no = split_key(parts_[0].gguf, "split.no");
    if (no != 0)
        return Status::invalid_argument("model " + path + " is part " + std::to_string(no + 1) + " of " + std::to_string(n_split) +
                                        " of a split model: give the first part (" + part_suffix(0, n_split) + "), as llama.cpp requires");
    const std::vector<std::string> paths = split_paths(path, n_split);
    if (paths.empty())
        return Status::invalid_argument("model " + path + " is the first of " + std::to_string(n_split) +
                                        " split files (split.count) but its name does not end in " + part_suffix(0, n_split) +
                                        ", so the other parts cannot be found");
    for (int k = 1; k < n_split; ++k) {
        st = open_part(paths[(size_t) k], "model " + path + ": split part " + std::to_string(k + 1) + " of " +
                                              std::to_string(n_split) + ", ");
        if (!st) return st;
    }
    return check_parts((uint16_t) n_split);
}

GgufTensorLoc GgufParts::find(const std::string & name) const {
    for (size_t k = 0; k < parts_.size(); ++k) {
        const GgufPart & p = parts_[k];
        const int64_t id = api_.ggml->gguf_find_tensor(p.gguf, name.c_str());
        if (id < 0) continue;
        GgufTensorLoc loc;
        loc.tensor = api_.ggml->ggml_get_tensor(p.meta, name.c_str());
        loc.part = (int) k;
        loc.offset = api_.ggml->gguf_get_data_offset(p.gguf) + api_.ggml->gguf_get_tensor_offset(p.gguf, id);
        return loc;
    }
    return GgufTensorLoc();
}

std::vector<GgufTensorLoc> GgufParts::tensors() const {
    std::vector<GgufTensorLoc> out;
    for (const GgufPart & p : parts_)
        for (int64_t id = 0; id < api_.ggml->gguf_get_n_tensors(p.gguf); ++id) out.push_back(find(api_.ggml->gguf_get_tensor_name(p.gguf, id)));
    return out;
}

} // namespace moezip
