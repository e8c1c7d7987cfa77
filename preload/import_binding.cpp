#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "preload/import_binding.h"

#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

namespace moezip {

namespace {

struct Query {
    const char * prefix;
    const char * symbol;
    bool found_object = false;
    const void * slot_value = nullptr;
    ElfW(Addr) object_base = 0;
};

// glibc relocates the d_ptr entries of a shared object's dynamic section in place (elf/get-dynamic-info.h);
// an address below the load base was left as a file offset and needs the base added.
ElfW(Addr) dyn_ptr(ElfW(Addr) base, ElfW(Addr) p) { return p < base ? p + base : p; }

int find_slot(struct dl_phdr_info * info, size_t, void * data) {
    auto * q = static_cast<Query *>(data);
    const char * name = info->dlpi_name;
    if (name == nullptr || *name == 0) return 0;
    const char * file = strrchr(name, '/');
    file = file ? file + 1 : name;
    if (strncmp(file, q->prefix, strlen(q->prefix)) != 0) return 0;
    q->found_object = true;
    q->object_base = info->dlpi_addr;
    const ElfW(Dyn) * dyn = nullptr;
    for (int i = 0; i < info->dlpi_phnum; ++i)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn) *>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (dyn == nullptr) return 1;
    ElfW(Addr) strtab = 0, symtab = 0, jmprel = 0, rela = 0;
    size_t pltrelsz = 0, relasz = 0;
    for (const ElfW(Dyn) * d = dyn; d->d_tag != DT_NULL; ++d) {
        switch (d->d_tag) {
            case DT_STRTAB: strtab = dyn_ptr(info->dlpi_addr, d->d_un.d_ptr); break;
            case DT_SYMTAB: symtab = dyn_ptr(info->dlpi_addr, d->d_un.d_ptr); break;
            case DT_JMPREL: jmprel = dyn_ptr(info->dlpi_addr, d->d_un.d_ptr); break;
            case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
            case DT_RELA: rela = dyn_ptr(info->dlpi_addr, d->d_un.d_ptr); break;
            case DT_RELASZ: relasz = d->d_un.d_val; break;
            default: break;
        }
    }
    if (strtab == 0 || symtab == 0) return 1;
    const auto * syms = reinterpret_cast<const ElfW(Sym) *>(symtab);
    const char * strs = reinterpret_cast<const char *>(strtab);
    for (auto table : {std::make_pair(jmprel, pltrelsz), std::make_pair(rela, relasz)}) {
        const auto * r = reinterpret_cast<const ElfW(Rela) *>(table.first);
        for (size_t i = 0; table.first != 0 && i < table.second / sizeof(ElfW(Rela)); ++i) {
            const unsigned type = ELF64_R_TYPE(r[i].r_info);
            if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
            const ElfW(Sym) & s = syms[ELF64_R_SYM(r[i].r_info)];
            if (strcmp(strs + s.st_name, q->symbol) != 0) continue;
            q->slot_value = *reinterpret_cast<const void * const *>(info->dlpi_addr + r[i].r_offset);
            return 1;
        }
    }
    return 1;
}

} // namespace

std::string import_bound_to(const char * object_prefix, const char * symbol) {
    Query q{object_prefix, symbol};
    dl_iterate_phdr(find_slot, &q);
    if (!q.found_object || q.slot_value == nullptr) return "";
    Dl_info info;
    if (dladdr(q.slot_value, &info) == 0 || info.dli_fname == nullptr) return "";
    if (reinterpret_cast<ElfW(Addr)>(info.dli_fbase) == q.object_base) return "";  // its own PLT: not bound yet
    return info.dli_fname;
}

} // namespace moezip
