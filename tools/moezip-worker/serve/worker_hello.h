// moezip-worker: the hello_ok JSON, the worker's identity (coordinator/wire/protocol.h):
//   {"protocol": 4, "instance": "<16 hex digits>", "ggml_version", "ggml_commit", "cpu_variant", "cpu_build_id",
//    "experts": "<ranges served>", "n_expert": E, "budget": "<per-request limits, worker_budget.h>",
//    "cpu": {"threads", "affinity_cpus", "quota_cores" (null: no CPU quota), "cores"},
//    "layers": [{"il", "n_embd", "n_ff", "n_expert",
//                "tensors": [{"name", "type", "ne": [a, b, c]} for gate, up, down],
//                "digests": {"<expert>": "<16 hex digits of expert_identity_digest_of>"}}]}
// The coordinator compares it with its own engine and model (provider_map/expert_digest.h).
#pragma once

#include "coordinator/base/cpu_capacity.h"
#include "tools/moezip-worker/worker_engine.h"
#include "tools/moezip-worker/model/worker_model.h"

#include <cstdint>
#include <string>

namespace moezip {

/// The hello_ok frame's text (compact JSON). `instance`: this process's instance id; `budget`:
/// budget_describe of its per-request limits (informational). `cpu`, `threads`: what this process may
/// use (cpu_capacity.h) and its compute threads; "cores" is cpu.cores_for(threads), the first guess
/// of the automatic shares for prefill calls (docs/placement.md).
std::string worker_hello_json(const WorkerModel & model, const WorkerEngine & engine, uint64_t instance, const std::string & budget,
                              const CpuCapacity & cpu, int threads);

} // namespace moezip
