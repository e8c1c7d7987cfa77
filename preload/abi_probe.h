// moezip: layout probes. moezip reads ggml's structs (ggml_tensor, ggml_cgraph, op_params) as
// compiled from the headers of the engine it was built for. These probes ask the loaded engine,
// through its public API only, to build a few tensors and a graph of the kinds moezip reads, then
// read them back through moezip's compiled layout: a field at another offset, an enum value that
// names another op or a graph struct of another shape shows up as a difference.
#pragma once

#include "provider_map/status.h"
#include "provider_map/engine_api.h"

namespace moezip {

/// Runs every probe (about 10 us; allocates one small no_alloc ggml context and frees it).
/// Needs the base functions of `api` bound. Errors: mismatch naming the first probe that differs,
/// what the engine gave and what the compiled layout expected ("ggml_op_name(GGML_OP_MUL_MAT_ID)
/// is "GLU", expected "MUL_MAT_ID"").
/// Only calls that are valid in every ggml of the tested range are made, so an engine of another
/// layout fails a probe rather than an assert inside ggml.
Status abi_probe_layout(const GgmlApi & api);

} // namespace moezip
