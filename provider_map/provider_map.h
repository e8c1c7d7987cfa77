// moezip: the provider map — what the engine selected to compute each MoE layer.
//
// "Provider" = the code and weights that compute a layer's routed experts: the CPU backend
// variant (library path and GNU build-id, the address of its ggml_graph_compute), the kernel
// family (generic MUL_MAT_ID on GGUF-layout weights, or the repack kernels when the weights sit
// in CPU_REPACK), the expert weight tensors (name, type, shape, buffer, data address) and the
// region's node pattern.
//
// A plan is made for a layer's weights the first time a graph shows them, and every later region
// is checked against it: same CPU variant, and the same weights — name, type, shape, buffer type,
// address, and a content canary (XXH3 of the first and last 256 bytes of each tensor). Plans live
// for one model epoch: when the engine frees the memory a plan's weights live in (model freed or
// replaced), the plan is retired, and weights seen afterwards get a new plan, identified again by
// content (workers are checked against it: coordinator/dispatch/dispatcher.h). Weights whose
// content changed at the same address also get a new plan. The node pattern and the number of
// slots are properties of each graph (a warmup graph routes every expert), not of the plan.
#pragma once

#include "provider_map/status.h"
#include "provider_map/moe_region.h"

#include <cstdint>
#include <functional>
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
    uint64_t bytes = 0;       ///< ggml_nbytes: [data, data + bytes) is the tensor's memory
    uint64_t canary = 0;      ///< expert_slice_digest over the whole tensor: its first and last 256 bytes
    bool repacked = false;    ///< tensor->extra set or a repack buffer: not GGUF layout
};

/// The plan for one MoE layer's weights (one model epoch).
struct ProviderEntry {
    uint64_t plan_id = 0;     ///< unique in the process, never reused (1, 2, ...)
    int il = -1;
    bool dispatchable = false;
    std::string reason;       ///< why the last region seen was not dispatchable
    std::string pattern;      ///< node pattern of the last region seen, e.g. "up,gate,swiglu,down,weighted,sum8"
    std::map<std::string, uint64_t> patterns;  ///< every pattern seen with this plan -> regions
    int64_t n_embd = 0, n_ff = 0, n_expert = 0, n_used = 0;
    WeightInfo gate, up, down;
    uint64_t identity = 0;    ///< hash of variant, dims and weights (not the pattern); equal iff same provider
    std::string retired;      ///< why the plan ended ("" while current)
};

/// Reads `n` bytes at address `at` of the engine's memory into `out` without touching that memory
/// (e.g. from the file a read-only mapping holds); false when it cannot (then the memory is read).
using ByteReaderFn = std::function<bool(const void * at, void * out, size_t n)>;

/// Builds the entry for a region found in a graph (names/types through the ggml API table given
/// as plain callbacks so this file stays free of run-time binding). The canary's samples are read
/// with `read_bytes` when given and it succeeds, else from the tensors' memory.
ProviderEntry provider_entry_make(const MoeRegion & r, const BackendVariant & variant,
                                  const char * (*type_name)(ggml_type), const BufferTypeNameFn & buft_name,
                                  const ByteReaderFn & read_bytes = nullptr);

/// Compares a region seen now with the planned entry. Errors: mismatch naming the first field
/// that differs (dimensions, weight name/type/buffer/shape/address/content, CPU variant).
Status provider_check(const ProviderEntry & planned, const ProviderEntry & now);

/// True when any of the entry's weight tensors has a byte in [base, base + size).
bool provider_weights_overlap(const ProviderEntry & e, const void * base, size_t size);

} // namespace moezip
