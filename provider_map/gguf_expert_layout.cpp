#include "provider_map/gguf_expert_layout.h"

#include <cstdio>
#include <cstring>

namespace moezip {

Status gguf_expert_tensors(const GgmlApi & api, const std::string & path, std::vector<GgufExpertTensor> & out) {
    out.clear();
    ggml_context * meta = nullptr;
    gguf_init_params params = {/*no_alloc =*/ true, /*ctx =*/ &meta};
    gguf_context * g = api.gguf_init_from_file(path.c_str(), params);
    if (g == nullptr) return Status::io_error(path + ": not readable as GGUF");
    const size_t data = api.gguf_get_data_offset(g);
    for (int64_t i = 0; i < api.gguf_get_n_tensors(g); ++i) {
        const char * name = api.gguf_get_tensor_name(g, i);
        int il = -1, used = 0;
        char what[16] = {0};
        if (sscanf(name, "blk.%d.ffn_%15[a-z]_exps.weight%n", &il, what, &used) != 2 || name[used] != 0) continue;
        if (strcmp(what, "gate") != 0 && strcmp(what, "up") != 0 && strcmp(what, "down") != 0) continue;
        const ggml_tensor * t = meta ? api.ggml_get_tensor(meta, name) : nullptr;
        if (t == nullptr || t->ne[2] < 1) continue;
        GgufExpertTensor e;
        e.name = name;
        e.il = il;
        e.offset = data + api.gguf_get_tensor_offset(g, i);
        e.bytes = api.gguf_get_tensor_size(g, i);
        e.n_expert = t->ne[2];
        out.push_back(e);
    }
    api.gguf_free(g);
    if (meta) api.ggml_free(meta);
    return Status::ok();
}

} // namespace moezip
