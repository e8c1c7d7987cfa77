#include "tools/moezip-worker/model/worker_repack.h"

#include <cstring>
#include <dlfcn.h>

namespace moezip {

namespace {

template <typename Fn>
bool bind(void * handle, const char * name, Fn & out) {
    out = reinterpret_cast<Fn>(dlsym(handle, name));
    return out != nullptr;
}

using ExtraBuftsFn = ggml_backend_buffer_type_t * (*)(ggml_backend_dev_t);

} // namespace

Status worker_repack_bind(void * base_handle, ggml_backend_reg_t cpu_reg, const GgmlApi & api, WorkerRepackApi & out) {
    decltype(&::ggml_backend_reg_dev_get) reg_dev_get = nullptr;
    if (!bind(base_handle, "ggml_backend_buft_alloc_buffer", out.buft_alloc_buffer) ||
        !bind(base_handle, "ggml_backend_buft_get_alloc_size", out.buft_get_alloc_size) ||
        !bind(base_handle, "ggml_backend_buffer_get_base", out.buffer_get_base) ||
        !bind(base_handle, "ggml_backend_buffer_free", out.buffer_free) ||
        !bind(base_handle, "ggml_backend_tensor_alloc", out.tensor_alloc) ||
        !bind(base_handle, "ggml_backend_tensor_set", out.tensor_set) || !bind(base_handle, "ggml_backend_reg_dev_get", reg_dev_get))
        return Status::not_found("the engine's libggml-base lacks a ggml_backend_* function needed to repack experts");
    out.buft = nullptr;
    auto extra_bufts = reinterpret_cast<ExtraBuftsFn>(api.ggml_backend_reg_get_proc_address(cpu_reg, "ggml_backend_dev_get_extra_bufts"));
    if (extra_bufts == nullptr) return Status::ok();
    ggml_backend_dev_t dev = reg_dev_get(cpu_reg, 0);
    for (ggml_backend_buffer_type_t * b = extra_bufts(dev); b != nullptr && *b != nullptr; ++b)
        if (strcmp(api.ggml_backend_buft_name(*b), "CPU_REPACK") == 0) out.buft = *b;
    return Status::ok();
}

Status worker_repack_tensor(const WorkerRepackApi & api, ggml_tensor * t, const void * data, size_t bytes, RepackedTensor & out) {
    out = RepackedTensor{};
    const size_t size = api.buft_get_alloc_size(api.buft, t);
    ggml_backend_buffer_t buf = api.buft_alloc_buffer(api.buft, size);
    if (buf == nullptr)
        return Status::io_error("cannot allocate " + std::to_string(size) + " bytes of CPU_REPACK memory for " + t->name);
    if (api.tensor_alloc(buf, t, api.buffer_get_base(buf)) != GGML_STATUS_SUCCESS || t->extra == nullptr) {
        // no repacked layout for this type and shape: the engine keeps such a tensor plain too
        api.buffer_free(buf);
        t->buffer = nullptr;
        t->data = nullptr;
        t->extra = nullptr;
        return Status::ok();
    }
    api.tensor_set(t, data, 0, bytes);  // the repack (set_tensor takes the whole tensor)
    out.buffer = buf;
    out.repacked = true;
    return Status::ok();
}

} // namespace moezip
