#include "tools/moezip-upcycle/tensor_types.h"

#include "tools/model-common/writable_types.h"

#include <cstring>
#include <strings.h>

using moezip::Status;

namespace moezip_upcycle {

namespace {

bool ends_with(const std::string & s, const char * tail) {
    const size_t n = strlen(tail);
    return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

} // namespace

std::vector<std::string> type_choice_names() {
    std::vector<std::string> names = {"same"};
    for (const std::string & n : moezip::writable_type_names()) names.push_back(n);
    return names;
}

Status type_choice_parse(const std::string & name, type_choice & out) {
    if (strcasecmp(name.c_str(), "same") == 0) {
        out = type_choice();
        return Status::ok();
    }
    if (moezip::writable_type_lookup(name, out.type)) {
        out.same = false;
        return Status::ok();
    }
    std::string known;
    for (const auto & n : type_choice_names()) known += (known.empty() ? "" : ", ") + n;
    return Status::invalid_argument("--type '" + name + "' is not one of " + known);
}

std::string type_choice_name(const type_choice & c) { return c.same ? "same" : ggml_type_name(c.type); }

ggml_type type_choice_resolve(const type_choice & c, ggml_type src) { return c.same ? src : c.type; }

Status type_check_writable(const std::string & name, ggml_type type, int64_t ne0, const std::string & hint) {
    if (!moezip::is_writable_type(type))
        return Status::invalid_argument("tensor " + name + ": type " + ggml_type_name(type) +
                                        " cannot be written here (no reference quantizer without an importance matrix); " +
                                        hint);
    const int64_t blck = ggml_blck_size(type);
    if (ne0 % blck == 0) return Status::ok();
    return Status::invalid_argument("tensor " + name + ": row length ne0=" + std::to_string(ne0) + " is not a multiple of " +
                                    std::to_string(blck) + ", the block size of " + ggml_type_name(type) + "; " + hint);
}

ggml_type type_for_dense_tensor(const std::string & name, int n_dims, int64_t ne0, ggml_type src, ggml_type target) {
    if (n_dims < 2 || !ends_with(name, "weight") || name.find("_norm.weight") != std::string::npos ||
        name.find("ffn_gate_inp.weight") != std::string::npos)
        return src;
    return ne0 % ggml_blck_size(target) == 0 ? target : GGML_TYPE_F16;
}

void type_convert(const std::vector<float> & src, ggml_type type, int64_t ne0, std::vector<uint8_t> & out) {
    if (type == GGML_TYPE_F32) {
        out.resize(src.size() * sizeof(float));
        memcpy(out.data(), src.data(), out.size());
        return;
    }
    const int64_t n_rows = (int64_t) src.size() / ne0;
    out.resize(ggml_row_size(type, ne0) * (size_t) n_rows);
    ggml_quantize_chunk(type, src.data(), out.data(), 0, n_rows, ne0, nullptr);
}

} // namespace moezip_upcycle
