#include "provider_map/engine_api.h"

#include <dlfcn.h>

namespace moezip {

template <typename Fn>
static bool bind_one(Fn & slot, void * handle, const char * name) {
    void * sym = dlsym(handle, name);
    if (sym == nullptr) return false;
    slot = reinterpret_cast<Fn>(sym);
    return true;
}

Status ggml_api_bind_base(GgmlApi & api, void * base_handle) {
    if (base_handle == nullptr) return Status::not_found("libggml-base is not loaded");
#define MOEZIP_X(f) if (!bind_one(api.f, base_handle, #f)) return Status::not_found("libggml-base has no symbol " #f);
    MOEZIP_GGML_BASE_FUNCTIONS(MOEZIP_X)
#undef MOEZIP_X
    api.base_bound = true;
    return Status::ok();
}

Status ggml_api_bind_cpu(GgmlApi & api, void * cpu_handle) {
    if (cpu_handle == nullptr) return Status::not_found("no ggml CPU backend variant is loaded");
#define MOEZIP_X(f) if (!bind_one(api.f, cpu_handle, #f)) return Status::not_found("CPU backend has no symbol " #f);
    MOEZIP_GGML_CPU_FUNCTIONS(MOEZIP_X)
#undef MOEZIP_X
    api.cpu_bound = true;
    return Status::ok();
}

} // namespace moezip
