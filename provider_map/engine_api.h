// moezip: the engine's ggml API as a table of function pointers, bound at run time.
//
// Why a table: libmoezip.so must not have a link-time dependency on ggml (a process that never
// loads ggml must not load it because of us), and inside node every ggml library is loaded
// RTLD_LOCAL, so its symbols are not in the global scope either. The table is filled by dlsym on
// the handles of the libraries the host already loaded (see engine_locate.h). The worker, the
// tools and the tests fill the same table the same way, so all of them run one code path.
//
// The types come from the engine's own headers (ggml.h, ggml-cpu.h, ggml-backend.h of the bundled
// source of the engine moezip is built for, engine_pin.h): `decltype(&::f)` gives each pointer the exact signature
// without referencing the symbol.
#pragma once

#include "provider_map/status.h"

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-impl.h" // struct ggml_cgraph, ggml_graph_view (exported by libggml-base)
#include "gguf.h"

namespace moezip {

// Functions of libggml-base.so used by moezip.
#define MOEZIP_GGML_BASE_FUNCTIONS(X) \
    X(ggml_version) X(ggml_commit) \
    X(ggml_init) X(ggml_free) X(ggml_tensor_overhead) X(ggml_graph_overhead_custom) \
    X(ggml_new_tensor_1d) X(ggml_new_tensor_2d) X(ggml_new_tensor_3d) \
    X(ggml_view_2d) X(ggml_view_3d) X(ggml_reshape_3d) \
    X(ggml_mul_mat_id) X(ggml_glu_split) X(ggml_swiglu_oai) X(ggml_add_id) X(ggml_repeat_4d) \
    X(ggml_mul) X(ggml_add) X(ggml_cont) \
    X(ggml_new_graph_custom) X(ggml_build_forward_expand) X(ggml_graph_view) \
    X(ggml_graph_n_nodes) X(ggml_graph_node) \
    X(ggml_nbytes) X(ggml_row_size) X(ggml_type_size) X(ggml_blck_size) X(ggml_type_name) X(ggml_op_name) X(ggml_op_desc) \
    X(ggml_get_name) X(ggml_set_name) X(ggml_get_glu_op) X(ggml_is_contiguous) \
    X(ggml_backend_buffer_name) X(ggml_backend_buffer_get_type) X(ggml_backend_buft_name) \
    X(ggml_backend_reg_get_proc_address) X(ggml_get_tensor) \
    X(gguf_init_from_file) X(gguf_free) X(gguf_get_n_tensors) X(gguf_get_tensor_name) X(gguf_get_tensor_offset) \
    X(gguf_get_data_offset) X(gguf_get_tensor_size) X(gguf_find_tensor) X(ggml_log_set) \
    X(gguf_find_key) X(gguf_get_kv_type) X(gguf_get_val_u16) X(gguf_get_val_i32)

// Functions of the CPU backend variant (libggml-cpu-<isa>.so) the engine selected.
#define MOEZIP_GGML_CPU_FUNCTIONS(X) X(ggml_graph_plan) X(ggml_graph_compute)

/// The bound ggml API. Members are named after the ggml function they point to; all are non-null
/// once bind_*() returned ok.
struct GgmlApi {
#define MOEZIP_X(f) decltype(&::f) f = nullptr;
    MOEZIP_GGML_BASE_FUNCTIONS(MOEZIP_X)
    MOEZIP_GGML_CPU_FUNCTIONS(MOEZIP_X)
#undef MOEZIP_X
    bool base_bound = false;
    bool cpu_bound = false;
};

/// Binds the libggml-base functions from a dlopen handle. Errors: not_found naming the first
/// missing symbol.
Status ggml_api_bind_base(GgmlApi & api, void * base_handle);
/// Binds ggml_graph_plan/ggml_graph_compute from the CPU variant's dlopen handle. These are the
/// real functions: in a preloaded process, dlsym on the variant's own handle returns its
/// definitions, not our interposed ones.
Status ggml_api_bind_cpu(GgmlApi & api, void * cpu_handle);

} // namespace moezip
