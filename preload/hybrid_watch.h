// moezip: a hybrid run (an accelerator plus CPU-resident experts: llama.cpp --cpu-moe,
// --n-cpu-moe N, -ot exps=CPU) seen from the engine's scheduler.
//
// Op offload. A CUDA or Vulkan device takes ops whose weights lie in host memory when the batch has
// at least GGML_OP_OFFLOAD_MIN_BATCH rows (default 32): the experts the batch uses are copied to it
// and computed there, so moezip never sees those regions, and in experts mode the workers' experts,
// which this host never made resident, are read from the model file. ggml reads the variable once,
// when the backend registers its devices (ggml/src/ggml-cuda/ggml-cuda.cu ggml_backend_cuda_reg,
// ggml/src/ggml-vulkan/ggml-vulkan.cpp ggml_backend_vk_reg), which is after the preload's constructor
// ran. So in experts mode the constructor sets it to kOpOffloadOff (never reached) unless the user
// set it: every batch of the CPU-resident layers stays on the CPU split that moezip distributes.
// llama.cpp's --no-op-offload does the same for the whole scheduler. In rows and shard modes this
// host holds every expert, and op offload is left as it is: prefill may go to the accelerator.
//
// Placement. After every scheduled graph, each MoE layer is classed (provider_map/expert_placement.h):
// on the CPU, on the accelerator (left to the engine, named in the report), or offloaded. An offloaded
// layer in experts mode is an error on stderr and in the report, and with require_intercept the
// compute fails.
#pragma once

#include "coordinator/config/config.h"
#include "ggml-backend.h"

#include <nlohmann/json.hpp>
#include <string>

namespace moezip {

/// What the preload's constructor sets GGML_OP_OFFLOAD_MIN_BATCH to in experts mode.
constexpr const char * kOpOffloadOff = "2147483647";
/// Set beside it to the same value, so that a process under the preload started by another one
/// (a wrapper: `timeout`, `sh -c`, a launcher) knows the inherited value as moezip's, not the user's.
constexpr const char * kOpOffloadMarkerEnv = "MOEZIP_OP_OFFLOAD_SET";

/// From the preload's constructor: reads the config at `config_path` (silently: the preload's Session reports
/// its errors later) and, in experts mode, sets GGML_OP_OFFLOAD_MIN_BATCH = kOpOffloadOff unless
/// the environment has it. Records what it did for the report.
void hybrid_op_offload_default(const char * config_path);

/// Once moezip is active: says on stderr what hybrid_op_offload_default did (or that the user's value
/// of GGML_OP_OFFLOAD_MIN_BATCH stays, with what it means in experts mode). Silent when neither.
void hybrid_log_op_offload(const Config & cfg);

/// After the engine's scheduler `sched` computed `graph`: records where each MoE layer's experts
/// ran. Returns "" or, when a layer whose experts lie in host memory was computed on an accelerator
/// in experts mode, the error (the caller reports it and, with require_intercept, fails the compute).
/// Never throws.
std::string hybrid_after_sched(ggml_backend_sched_t sched, ggml_cgraph * graph, const Config & cfg);

/// The report's `hybrid` section: {"op_offload_min_batch": {"value", "set_by"}, "layers_cpu",
/// "layers_accelerator": [il...], "layers_offloaded": [il...], "offloaded_graphs", "backends"};
/// null when no scheduled graph had a MoE layer.
nlohmann::json hybrid_json();

/// require_intercept at exit: "" or why the run was not distributed as configured (layers offloaded
/// to an accelerator in experts mode).
std::string hybrid_failure(const Config & cfg);

} // namespace moezip
