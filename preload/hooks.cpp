// moezip: the extern "C" shims that libmoezip.so exports (and only these: preload/exports.map).
// Each one is a few lines that hand over to the preload's session; no exception crosses into the engine.
//
// Interposed entry points (all reached through the PLT of the engine's libraries, see
// docs/internals/interception.md):
//   ggml_graph_compute                       CPU variant's graph_compute -> here: MoE regions
//   ggml_backend_sched_graph_compute_async   libllama -> here: counts graphs the engine ran, and where
//                                             each MoE layer's experts ran (hybrid runs)
//   ggml_backend_reg_get_proc_address        libllama -> here: no_repack hides the extra buffer types
//   ggml_backend_sched_free                  libllama -> here: a context's logits stream ends
//   ggml_backend_buffer_free                 libllama, libggml-base -> here: freed weights end their plans
//   mmap (libc)                               libllama's model load -> here: experts mode maps the
//                                             GGUF without MAP_POPULATE (preload/session.h); every
//                                             GGUF mapping is recorded: which model a weight is in
#include "coordinator/base/log.h"
#include "preload/session.h"

#include <cerrno>
#include <cstring>
#include <exception>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MOEZIP_EXPORT extern "C" __attribute__((visibility("default")))

MOEZIP_EXPORT enum ggml_status ggml_graph_compute(struct ggml_cgraph * cgraph, struct ggml_cplan * cplan) {
    try {
        return moezip::session_graph_compute(cgraph, cplan, __builtin_return_address(0),
                                             reinterpret_cast<const void *>(&ggml_graph_compute));
    } catch (const std::exception & e) {
        LOG_CAPPED(moezip::LogLevel::error, "ggml_graph_compute hook: %s; failing this compute", e.what());
    } catch (...) {
        LOG_CAPPED(moezip::LogLevel::error, "ggml_graph_compute hook: unknown exception; failing this compute");
    }
    return GGML_STATUS_FAILED;
}

MOEZIP_EXPORT enum ggml_status ggml_backend_sched_graph_compute_async(ggml_backend_sched_t sched, struct ggml_cgraph * graph) {
    using Fn = enum ggml_status (*)(ggml_backend_sched_t, struct ggml_cgraph *);
    static Fn real = reinterpret_cast<Fn>(moezip::session_base_symbol("ggml_backend_sched_graph_compute_async"));
    if (real == nullptr) return GGML_STATUS_FAILED;
    try {
        moezip::session_count_sched_graph();
    } catch (...) {
    }
    const void * prev = moezip::session_sched_enter(sched);  // the CPU graph computes run on this thread, inside
    enum ggml_status st = real(sched, graph);
    moezip::session_sched_leave(prev);
    try {
        st = moezip::session_sched_computed(sched, graph, st);  // where the experts ran (hybrid runs)
    } catch (...) {
    }
    return st;
}

MOEZIP_EXPORT void ggml_backend_sched_free(ggml_backend_sched_t sched) {
    using Fn = void (*)(ggml_backend_sched_t);
    static Fn real = nullptr;
    if (real == nullptr) real = reinterpret_cast<Fn>(moezip::session_base_symbol("ggml_backend_sched_free"));
    try {
        moezip::session_sched_freed(sched);
    } catch (...) {
    }
    if (real != nullptr) real(sched);
}

// Every buffer the engine frees, a model's weights among them (llama_model_free): plans for weights
// in it end there, so other weights later at the same address are identified again by content.
MOEZIP_EXPORT void ggml_backend_buffer_free(ggml_backend_buffer_t buffer) {
    using Fn = void (*)(ggml_backend_buffer_t);
    using BaseFn = void * (*)(ggml_backend_buffer_t);
    using SizeFn = size_t (*)(ggml_backend_buffer_t);
    static Fn real = nullptr;
    static BaseFn get_base = nullptr;
    static SizeFn get_size = nullptr;
    if (real == nullptr) {
        real = reinterpret_cast<Fn>(moezip::session_base_symbol("ggml_backend_buffer_free"));
        get_base = reinterpret_cast<BaseFn>(moezip::session_base_symbol("ggml_backend_buffer_get_base"));
        get_size = reinterpret_cast<SizeFn>(moezip::session_base_symbol("ggml_backend_buffer_get_size"));
    }
    if (buffer != nullptr && get_base != nullptr && get_size != nullptr) {
        try {
            const size_t size = get_size(buffer);
            if (size > 0) moezip::session_memory_released(get_base(buffer), size, "the engine freed the buffer holding these weights");
        } catch (...) {
        }
    }
    if (real != nullptr) real(buffer);
}

MOEZIP_EXPORT void * ggml_backend_reg_get_proc_address(ggml_backend_reg_t reg, const char * name) {
    using Fn = void * (*)(ggml_backend_reg_t, const char *);
    static Fn real = reinterpret_cast<Fn>(moezip::session_base_symbol("ggml_backend_reg_get_proc_address"));
    try {
        if (name != nullptr && strcmp(name, "ggml_backend_dev_get_extra_bufts") == 0 && moezip::session_hide_extra_bufts()) {
            LOG_CAPPED(moezip::LogLevel::info, "no_repack: hiding the CPU extra buffer types; expert weights stay in GGUF layout");
            return nullptr;
        }
    } catch (...) {
    }
    return real ? real(reg, name) : nullptr;
}

__attribute__((constructor)) static void moezip_preload_loaded() {
    try {
        moezip::session_preload_loaded();
    } catch (...) {
    }
}

// Every PLT call of mmap in the process comes here (glibc's own, e.g. malloc's, does not: it calls
// its internal alias). The kernel call is made directly (no recursion into this shim); after it, a
// read-only file mapping is checked for the GGUF magic and, when it is one, recorded (allocates a
// path string; malloc's own mmaps never come here).
MOEZIP_EXPORT void * mmap(void * addr, size_t len, int prot, int flags, int fd, off_t off) {
    bool lazy = false;
    const bool file_read_only = fd >= 0 && !(prot & PROT_WRITE);
    if ((flags & MAP_POPULATE) && file_read_only && moezip::session_map_model_lazily(fd)) {
        flags &= ~MAP_POPULATE;
        lazy = true;
    }
    void * p = reinterpret_cast<void *>(syscall(SYS_mmap, addr, len, prot, flags, fd, off));
    if (file_read_only && p != MAP_FAILED) {
        int saved = errno;
        try {
            if (lazy) moezip::session_note_lazy_map(p, len, fd, (long) off);
            moezip::session_note_file_map(p, len, fd, (uint64_t) off);  // which model file these addresses hold
        } catch (...) {
        }
        errno = saved;
    }
    return p;
}
