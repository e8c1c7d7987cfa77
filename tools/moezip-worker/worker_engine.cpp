#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tools/moezip-worker/worker_engine.h"

#include "preload/abi_guard.h"
#include "preload/engine_locate.h"
#include "provider_map/engine_pin.h"

#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>
#include <vector>

namespace moezip {

namespace {

// ggml's log lines (backend loading etc.) at warn/error only, on stderr.
void quiet_ggml_log(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

bool is_file(const std::string & path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// <stem>.so (a CMake build: libggml.so) or <stem>.<tag>.so (node-llama-cpp: libggml.v0.4.0.so); "" when none.
std::string find_library(const std::string & dir, const std::string & stem) {
    if (is_file(dir + "/" + stem + ".so")) return dir + "/" + stem + ".so";
    std::string found;
    if (DIR * d = opendir(dir.c_str())) {
        while (dirent * e = readdir(d)) {
            const std::string n = e->d_name;
            if (n.rfind(stem + ".", 0) == 0 && n.size() > stem.size() + 4 && n.compare(n.size() - 3, 3, ".so") == 0)
                found = dir + "/" + n;
        }
        closedir(d);
    }
    return found;
}

int collect_cpu_libraries(struct dl_phdr_info * info, size_t, void * data) {
    auto * out = static_cast<std::vector<std::string> *>(data);
    const char * name = info->dlpi_name;
    if (name == nullptr || *name == 0) return 0;
    const char * base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, "libggml-cpu", 11) == 0) out->push_back(name);
    return 0;
}

using LoadAllFn = void (*)(const char *);
using RegByNameFn = ggml_backend_reg_t (*)(const char *);

Status open_engine(const std::string & dir, void *& base, void *& ggml) {
    const std::string ggml_path = find_library(dir, "libggml");
    if (ggml_path.empty()) return Status::not_found("no libggml.so or libggml.*.so in " + dir);
    base = dlopen((dir + "/libggml-base.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (base == nullptr) return Status::io_error(std::string("cannot load the engine's libggml-base: ") + dlerror());
    ggml = dlopen(ggml_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (ggml == nullptr) return Status::io_error(std::string("cannot load the engine's libggml: ") + dlerror());
    return Status::ok();
}

// llama_split_prefix/llama_split_path, the names of a split model's files, from the engine's libllama.
Status bind_split_names(WorkerEngine & out) {
    const std::string path = find_library(out.lib_dir, "libllama");
    if (path.empty()) return Status::not_found("no libllama.so or libllama.*.so in " + out.lib_dir);
    void * llama = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (llama == nullptr) return Status::io_error(std::string("cannot load the engine's libllama: ") + dlerror());
    out.llama_split_prefix = reinterpret_cast<decltype(out.llama_split_prefix)>(dlsym(llama, "llama_split_prefix"));
    out.llama_split_path = reinterpret_cast<decltype(out.llama_split_path)>(dlsym(llama, "llama_split_path"));
    if (out.llama_split_prefix == nullptr || out.llama_split_path == nullptr)
        return Status::not_found(path + " has no llama_split_prefix/llama_split_path");
    return Status::ok();
}

// The CPU backend as the engine loads it; the object holding the registered "CPU" backend.
Status load_cpu(WorkerEngine & out, void * base, void * ggml) {
    auto load_all = reinterpret_cast<LoadAllFn>(dlsym(ggml, "ggml_backend_load_all_from_path"));
    auto reg_by_name = reinterpret_cast<RegByNameFn>(dlsym(ggml, "ggml_backend_reg_by_name"));
    if (load_all == nullptr || reg_by_name == nullptr)
        return Status::not_found("the engine's libggml lacks ggml_backend_load_all_from_path/ggml_backend_reg_by_name");
    load_all(out.lib_dir.c_str());
    std::vector<std::string> cpus;
    dl_iterate_phdr(collect_cpu_libraries, &cpus);
    if (cpus.empty()) return Status::not_found("no CPU backend library (libggml-cpu*.so) could be loaded from " + out.lib_dir);
    if (cpus.size() > 1)
        return Status::mismatch("more than one CPU backend library stayed loaded (" + cpus[0] + ", " + cpus[1] +
                                "): cannot tell which one the engine would use");
    ggml_backend_reg_t reg = reg_by_name("CPU");
    if (reg == nullptr || object_path_of(reg) != cpus[0])
        return Status::mismatch("the registered CPU backend is not " + cpus[0]);
    Status st = ggml_api_bind_cpu(out.api, loaded_object_handle(cpus[0]));
    if (!st) return st;
    out.cpu_path = cpus[0];
    out.cpu_variant = cpu_library_name(cpus[0]);
    out.cpu_build_id = loaded_object_build_id(cpus[0]);
    return worker_repack_bind(base, reg, out.api, out.repack);
}

} // namespace

std::string worker_engine_lib_dir(const std::string & engine) {
    for (const char * sub : {"", "/bin", "/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"})
        if (is_file(engine + sub + "/libggml-base.so")) return engine + sub;
    return "";
}

Status worker_engine_load(WorkerEngine & out, const std::string & engine) {
    const std::string given = engine.empty() ? std::string(engine_pin().lib_dir) : engine;
    out.lib_dir = worker_engine_lib_dir(given);
    if (out.lib_dir.empty())
        return Status::not_found("--engine " + given + ": no libggml-base.so there, in its bin/ or in its node_modules/"
                                 "@node-llama-cpp/linux-x64/bins/linux-x64/");
    void * base = nullptr, * ggml = nullptr;
    Status st = open_engine(out.lib_dir, base, ggml);
    if (!st) return st;
    st = ggml_api_bind_base(out.api, base);
    if (!st) return st;
    out.api.ggml_log_set(quiet_ggml_log, nullptr);
    st = abi_guard_check(out.api, object_path_of(reinterpret_cast<const void *>(out.api.ggml_version)));
    if (!st) return st;
    out.ggml_version = out.api.ggml_version();
    out.ggml_commit = out.api.ggml_commit();
    out.gguf_get_val_u32 = reinterpret_cast<decltype(out.gguf_get_val_u32)>(dlsym(base, "gguf_get_val_u32"));
    out.gguf_get_val_u64 = reinterpret_cast<decltype(out.gguf_get_val_u64)>(dlsym(base, "gguf_get_val_u64"));
    out.gguf_get_val_str = reinterpret_cast<decltype(out.gguf_get_val_str)>(dlsym(base, "gguf_get_val_str"));
    if (out.gguf_get_val_u32 == nullptr || out.gguf_get_val_u64 == nullptr || out.gguf_get_val_str == nullptr)
        return Status::not_found(out.lib_dir + "/libggml-base.so has no gguf_get_val_u32/u64/str");
    st = load_cpu(out, base, ggml);
    if (!st) return st;
    return bind_split_names(out);
}

} // namespace moezip
