// Where the engine's calls that moezip interposes are bound now, read from each caller's GOT
// (preload/import_binding.h): the report's `hook_bindings`, and the reason a run whose calls bypass
// the preload (a libllama loaded with RTLD_DEEPBIND binds ggml in its own dependencies first) is
// told apart from one that never reached a MoE graph.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace moezip {

/// For ggml_graph_compute (called from libggml-cpu), ggml_backend_sched_graph_compute_async and
/// ggml_backend_buffer_free (from libllama): "moezip", "not bound yet" (lazy binding, never called)
/// or "bypassed: bound to <object path>" (with " (its own definition)" for a CPU variant deep-bound
/// to itself), keyed "<object>:<symbol>"; with several callers loaded (CPU variants) one bypassed
/// is enough, unless the variant in use is known. Each bypassed caller also appends to `bypassed` a sentence naming the objects and
/// what moezip cannot do without that call.
/// `cpu_variant_in_use`: the path of the CPU variant whose graphs moezip handled ("" before any):
/// then only that variant's call is read, not those of variants loaded but never used.
nlohmann::json hook_bindings(std::vector<std::string> & bypassed, const std::string & cpu_variant_in_use = "");

} // namespace moezip
