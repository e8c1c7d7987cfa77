#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "preload/engine_locate.h"

#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

namespace moezip {

std::string object_path_of(const void * addr) {
    Dl_info info;
    if (dladdr(addr, &info) == 0 || info.dli_fname == nullptr) return "";
    return info.dli_fname;
}

namespace {

struct FindByPrefix {
    const char * prefix;
    std::string path;
};

int find_by_prefix(struct dl_phdr_info * info, size_t, void * data) {
    auto * f = static_cast<FindByPrefix *>(data);
    const char * name = info->dlpi_name;
    if (name == nullptr || *name == 0) return 0;
    const char * base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, f->prefix, strlen(f->prefix)) != 0) return 0;
    f->path = name;
    return 1;
}

struct FindBuildId {
    const std::string * path;
    std::string hex;
};

int find_build_id(struct dl_phdr_info * info, size_t, void * data) {
    auto * f = static_cast<FindBuildId *>(data);
    if (info->dlpi_name == nullptr || *f->path != info->dlpi_name) return 0;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr) & ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_NOTE) continue;
        const char * p = reinterpret_cast<const char *>(info->dlpi_addr + ph.p_vaddr);
        const char * end = p + ph.p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto * nh = reinterpret_cast<const ElfW(Nhdr) *>(p);
            const char * name = p + sizeof(ElfW(Nhdr));
            const unsigned char * desc = reinterpret_cast<const unsigned char *>(name + ((nh->n_namesz + 3) & ~3u));
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                static const char digits[] = "0123456789abcdef";
                for (unsigned j = 0; j < nh->n_descsz; ++j) {
                    f->hex += digits[desc[j] >> 4];
                    f->hex += digits[desc[j] & 15];
                }
                return 1;
            }
            p = reinterpret_cast<const char *>(desc) + ((nh->n_descsz + 3) & ~3u);
        }
    }
    return 1;
}

} // namespace

std::string loaded_object_path(const char * prefix) {
    FindByPrefix f{prefix, ""};
    dl_iterate_phdr(find_by_prefix, &f);
    return f.path;
}

void * loaded_object_handle(const std::string & path) {
    if (path.empty()) return nullptr;
    return dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
}

std::string cpu_library_name(const std::string & path) {
    const std::string file = path.substr(path.rfind('/') + 1);
    if (file.rfind("libggml-cpu-", 0) == 0) return file.substr(12, file.find(".so") - 12);
    if (file == "libggml-cpu.so" || file.rfind("libggml-cpu.so.", 0) == 0) return "default";
    return file;
}

std::string loaded_object_build_id(const std::string & path) {
    FindBuildId f{&path, ""};
    dl_iterate_phdr(find_build_id, &f);
    return f.hex;
}

} // namespace moezip
