#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tools/moezip-worker/worker_engine.h"

#include "preload/abi_guard.h"
#include "preload/engine_locate.h"

#include <cstdio>
#include <cstring>
#include <link.h>
#include <vector>

namespace moezip {

namespace {

// ggml's log lines (backend loading etc.) at warn/error only, on stderr.
void quiet_ggml_log(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int collect_cpu_variants(struct dl_phdr_info * info, size_t, void * data) {
    auto * out = static_cast<std::vector<std::string> *>(data);
    const char * name = info->dlpi_name;
    if (name == nullptr || *name == 0) return 0;
    const char * base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, "libggml-cpu-", 12) == 0) out->push_back(name);
    return 0;
}

std::string variant_name(const std::string & path) {
    std::string file = path.substr(path.rfind('/') + 1);  // libggml-cpu-zen4.so
    size_t so = file.find(".so");
    return file.substr(12, so == std::string::npos ? std::string::npos : so - 12);
}

} // namespace

Status worker_engine_load(WorkerEngine & out) {
    ggml_log_set(quiet_ggml_log, nullptr);
    const std::string base = loaded_object_path("libggml-base");
    if (base.empty()) return Status::not_found("libggml-base is not loaded (the worker links it: broken install?)");
    Status st = ggml_api_bind_base(out.api, loaded_object_handle(base));
    if (!st) return st;
    st = abi_guard_check(out.api);
    if (!st) return st;
    out.ggml_version = out.api.ggml_version();
    out.ggml_commit = out.api.ggml_commit();

    const std::string dir = base.substr(0, base.rfind('/'));
    ggml_backend_load_all_from_path(dir.c_str());
    std::vector<std::string> variants;
    dl_iterate_phdr(collect_cpu_variants, &variants);
    if (variants.empty()) return Status::not_found("no libggml-cpu-*.so could be loaded from " + dir);
    if (variants.size() > 1)
        return Status::mismatch("more than one CPU backend variant stayed loaded (" + variants[0] + ", " + variants[1] +
                                "): cannot tell which one the engine would use");
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("CPU");
    if (reg == nullptr || object_path_of(reg) != variants[0])
        return Status::mismatch("the registered CPU backend is not " + variants[0]);
    st = ggml_api_bind_cpu(out.api, loaded_object_handle(variants[0]));
    if (!st) return st;
    out.cpu_path = variants[0];
    out.cpu_variant = variant_name(variants[0]);
    out.cpu_build_id = loaded_object_build_id(variants[0]);
    return Status::ok();
}

} // namespace moezip
