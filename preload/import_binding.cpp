#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "preload/import_binding.h"

#include <cstring>
#include <string>
#include <vector>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

namespace moezip {

namespace {

struct Found {
    std::string caller;
    ElfW(Addr) base = 0;
    const void * slot_value = nullptr;
    const void * own_definition = nullptr;  // the caller's own definition of the symbol, if it has one
};

struct Query {
    const char * prefix;
    const char * symbol;
    std::vector<Found> found;
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
    const ElfW(Dyn) * dyn = nullptr;
    for (int i = 0; i < info->dlpi_phnum; ++i)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = reinterpret_cast<const ElfW(Dyn) *>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (dyn == nullptr) return 0;
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
    if (strtab == 0 || symtab == 0) return 0;
    const auto * syms = reinterpret_cast<const ElfW(Sym) *>(symtab);
    const char * strs = reinterpret_cast<const char *>(strtab);
    for (auto table : {std::make_pair(jmprel, pltrelsz), std::make_pair(rela, relasz)}) {
        const auto * r = reinterpret_cast<const ElfW(Rela) *>(table.first);
        for (size_t i = 0; table.first != 0 && i < table.second / sizeof(ElfW(Rela)); ++i) {
            const unsigned type = ELF64_R_TYPE(r[i].r_info);
            if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
            const ElfW(Sym) & s = syms[ELF64_R_SYM(r[i].r_info)];
            if (strcmp(strs + s.st_name, q->symbol) != 0) continue;
            Found f;
            f.caller = name;
            f.base = info->dlpi_addr;
            f.slot_value = *reinterpret_cast<const void * const *>(info->dlpi_addr + r[i].r_offset);
            // an exported function the object defines and calls through its PLT (so that a preload
            // can interpose it): the relocation's symbol is the definition itself
            if (s.st_shndx != SHN_UNDEF && s.st_value != 0) f.own_definition = reinterpret_cast<const void *>(info->dlpi_addr + s.st_value);
            q->found.push_back(f);
            return 0;
        }
    }
    return 0;
}

} // namespace

std::vector<ImportBinding> import_bindings(const char * object_prefix, const char * symbol) {
    Query q{object_prefix, symbol, {}};
    dl_iterate_phdr(find_slot, &q);
    std::vector<ImportBinding> out;
    for (const Found & f : q.found) {
        ImportBinding b{f.caller, ""};
        Dl_info info;
        if (f.slot_value != nullptr && dladdr(f.slot_value, &info) != 0 && info.dli_fname != nullptr) {
            const bool inside = reinterpret_cast<ElfW(Addr)>(info.dli_fbase) == f.base;
            // inside the caller: its own definition (bound to itself), or its PLT (not bound yet)
            if (!inside || f.slot_value == f.own_definition) b.bound = inside ? f.caller : info.dli_fname;
        }
        out.push_back(b);
    }
    return out;
}

} // namespace moezip
