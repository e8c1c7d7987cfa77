// moezip: the provider map — what the engine selected to compute each MoE layer.
//
// "Provider" = the code and weights that compute a layer's routed experts: the CPU backend
// variant (library path and GNU build-id, the address of its ggml_graph_compute), the kernel
// family (generic MUL_MAT_ID on GGUF-layout weights, or the repack kernels when the weights sit
// in CPU_REPACK), the expert weight tensors (name, type, shape, buffer, data address) and the
// region's node pattern. The map is built from the first graph that shows a layer and checked
// again at every call: a call whose provider differs from the plan is a mismatch, never a
// silent success.
#pragma once

#include "coordinator/base/status.h"
#include "provider_map/moe_region.h"

#include <cstdint>
#include <map>
#include <string>

namespace moezip {

/// The CPU backend variant that runs the engine's graphs.
struct BackendVariant {
    std::string path;                  ///< e.g. .../libggml-cpu-zen4.so
    std::string name;                  ///< e.g. "zen4" (from the file name)
    std::string build_id;              ///< GNU build-id, hex
    const void * compute_fn = nullptr; ///< address of its ggml_graph_compute
};

/// One expert weight tensor as the engine holds it.
struct WeightInfo {
    std::string name;         ///< e.g. "blk.0.ffn_gate_exps.weight"
    std::string type;         ///< ggml type name, e.g. "q8_0"
    std::string buffer_type;  ///< e.g. "CPU" (mmap or host memory) or "CPU_REPACK"
    int64_t ne[3] = {0, 0, 0};
    const void * data = nullptr;
    bool repacked = false;    ///< tensor->extra set or a repack buffer: not GGUF layout
};

/// The plan for one MoE layer.
struct ProviderEntry {
    int il = -1;
    bool dispatchable = false;
    std::string reason;       ///< why not dispatchable
    std::string pattern;      ///< node pattern, e.g. "up,gate,swiglu,down,weighted,sum8"
    int64_t n_embd = 0, n_ff = 0, n_expert = 0, n_used = 0;
    WeightInfo gate, up, down;
    uint64_t identity = 0;    ///< hash of everything above plus the variant; equal iff same provider
};

/// Builds the entry for a region found in a graph (names/types through the ggml API table given
/// as plain callbacks so this file stays free of run-time binding).
ProviderEntry provider_entry_make(const MoeRegion & r, const BackendVariant & variant,
                                  const char * (*type_name)(ggml_type), const BufferTypeNameFn & buft_name);

/// Compares a region seen now with the planned entry. Errors: mismatch naming the first field
/// that differs (variant, weight data/type/shape/buffer, pattern).
Status provider_check(const ProviderEntry & planned, const ProviderEntry & now);

} // namespace moezip
