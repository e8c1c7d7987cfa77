// moezip: the preload's one session per process — lazy init at the first graph, the bound engine
// API, the config, the evidence, and teardown at exit. The extern "C" shims in hooks.cpp call only
// these functions.
//
// Life cycle: nothing is created when the library is loaded (with MOEZIP_CONFIG set, an exit
// handler is registered, nothing else). The first ggml_graph_compute call
// reads MOEZIP_CONFIG, binds the engine, runs the ABI guard and builds the handler for the mode.
// Without MOEZIP_CONFIG the session is inert (one line on stderr). A failed init leaves it
// passthrough. At exit the final report is written (only by the process that created the session,
// never by a forked child) and require_intercept is enforced.
#pragma once

#include "ggml.h"
#include "ggml-cpu.h"
#include "ggml-backend.h"

namespace moezip {

/// Handles one ggml_graph_compute call from the engine. `caller` is the return address of the
/// hook (inside the CPU backend variant that called it).
ggml_status session_graph_compute(ggml_cgraph * gf, ggml_cplan * cplan, const void * caller, const void * self_fn);

/// true when the config asks to hide the CPU extra buffer types (no_repack = true).
bool session_hide_extra_bufts();

/// Counts one graph computed by the engine's scheduler (ggml_backend_sched_graph_compute_async).
void session_count_sched_graph();

/// true when a read-only mapping of `fd` asked with MAP_POPULATE should be made without it: the
/// config is valid, mode = "experts" with experts.release_unowned, and fd is a GGUF file (magic
/// "GGUF") of the distributed model (config `model`, else no other model file is mapped now).
/// Then the engine's load (llama-mmap.cpp: MAP_SHARED | MAP_POPULATE) does not make every
/// expert resident here; pages come in on first use, and the experts workers serve never do.
/// Never throws; false when called again from inside itself (config reading).
bool session_map_model_lazily(int fd);

/// After a read-only mapping of `fd` from file offset `offset` (any flags): when fd is a GGUF file
/// (magic "GGUF") and MOEZIP_CONFIG is set, records [addr, addr + len) as that file's mapping, so a
/// layer's weights tell which model they belong to, and their canaries are read from the file
/// (coordinator/memory/model_files.h). Never throws.
void session_note_file_map(const void * addr, size_t len, int fd, uint64_t offset);

/// After a mapping that session_map_model_lazily made without MAP_POPULATE: makes resident now
/// (MADV_POPULATE_READ) every page this host will read, i.e. all but whole pages of the experts
/// workers own (read from the file's GGUF tensor table), which come in only when read (the identity
/// digests read them once and drop them again: coordinator/dispatch/expert_digests_here.h). So
/// loading costs what the engine's own MAP_POPULATE costs, minus the workers' experts. Records the
/// bytes for the report.
void session_note_lazy_map(void * addr, size_t len, int fd, long offset);

/// Resolves a libggml-base function for the shims (nullptr when libggml-base is not loaded).
void * session_base_symbol(const char * name);

/// The engine context's scheduler `sched` starts computing a graph on this thread (logits are
/// recorded per scheduler: one stream per context). Returns the previous one for session_sched_leave.
const void * session_sched_enter(const void * sched);
void session_sched_leave(const void * prev);
/// After the engine's scheduler computed `graph` with status `st`: where each MoE layer's experts ran
/// (preload/hybrid_watch.h). Returns st, or GGML_STATUS_FAILED when require_intercept is set and a
/// layer's experts were computed on an accelerator in experts mode (op offload).
ggml_status session_sched_computed(ggml_backend_sched_t sched, ggml_cgraph * graph, ggml_status st);
/// The scheduler is freed (its context is gone): its logits stream ends.
void session_sched_freed(const void * sched);

/// The engine frees [base, base + size) (a ggml backend buffer: a model's weights when the model
/// is freed). Plans whose weights lie there are retired: a new model epoch (graph_runner.h).
/// Cheap when moezip is not active or nothing overlaps; never throws.
void session_memory_released(const void * base, size_t size, const char * why);

/// Called once when libmoezip.so is loaded: with MOEZIP_CONFIG set, registers the exit check that
/// tells a host whose engine never reached the hooks (creates nothing else).
void session_preload_loaded();

} // namespace moezip
