// moezip: what computes a MoE region in place of the engine (local executor, row split, expert
// dispatch). The graph runner calls one handler per region; the handler writes ffn_moe_out.
#pragma once

#include "coordinator/evidence/evidence.h"
#include "coordinator/compute/moe_exec.h"
#include "provider_map/status.h"
#include "provider_map/moe_region.h"

#include <chrono>
#include <cstdint>
#include <vector>

namespace moezip {

class RegionHandler {
public:
    virtual ~RegionHandler() = default;
    /// Computes r.out [n_embd, n_tokens] f32 from r.hidden, r.ids and r.weights and adds to the
    /// layer's counters; in the split form (r.slot_out) r.out [n_embd, n_used, n_tokens] gets each
    /// slot's own output, as the engine's node would hold it. On error r.out may be partly written: the caller recomputes the region
    /// with the engine's own nodes or stops the compute; it never hands a partial output on.
    virtual Status compute(const MoeRegion & r, LayerCounters & c) = 0;
    /// Why this mode cannot compute region r although the engine's pattern was recognised ("" when it
    /// can). The region is then left to the engine with that reason. Reads only r and the config.
    virtual std::string refuses(const MoeRegion & r) const { (void) r; return ""; }
    /// Threads for moezip's own compute (the engine's count unless the config sets `threads`).
    virtual void set_threads(int n_threads) { (void) n_threads; }
    /// Closes connections and joins threads; called once, early in exit, before any static teardown.
    virtual void shutdown() {}
    /// Per-worker evidence for the report (an empty array when there are no workers).
    virtual nlohmann::json workers_json() const { return nlohmann::json::array(); }
    /// Errors the handler met and recovered from since the last call (a worker failed and its part
    /// was computed here), for the report's errors.
    virtual std::vector<std::string> take_errors() { return {}; }
    /// What the handler did with this host's memory, for the report's `memory` section.
    virtual nlohmann::json memory_json() const { return nlohmann::json::object(); }
    /// How work was balanced between hosts (replicated experts, automatic shares), for the report's
    /// `balance` section; null when the mode does not balance.
    virtual nlohmann::json balance_json() const { return nullptr; }
    /// The engine freed the weights of these plans (MoeRegion::plan_id): whatever was verified or
    /// released for them must not carry over to the weights that come next.
    virtual void forget_plans(const std::vector<uint64_t> & plans) { (void) plans; }
};

/// The region's routing inputs copied into dense arrays: ids [n_used, n_tokens] i32 and weights
/// [n_used, n_tokens] f32, element (s, t) at t*n_used + s: the first n_used of each row's
/// n_used_ids routed slots (all of them except in a warmup graph). Weights are 1 where the region
/// has none (the split form that ends at ffn_moe_down). The engine's ids are a strided view of
/// the argsort result (ggml_argsort_top_k), so they are read through nb[].
void region_gather_routing(const MoeRegion & r, std::vector<int32_t> & ids, std::vector<float> & weights);

/// The split form (r.slot_out): writes the per-slot outputs `slots` [n_embd, n_used, n_tokens] f32
/// (row t's slot s at (t*n_used + s)*n_embd) into r.out, which has that dense layout.
void region_write_slots(const MoeRegion & r, const float * slots);

/// The expert weights of a region as the executor wants them.
ExpertWeights region_expert_weights(const MoeRegion & r);

/// The FfnFlag bits (coordinator/wire/protocol.h) of r's expert FFN form: weight before the FFN,
/// and which per-expert biases it adds. Sent with every compute request.
uint32_t region_ffn_flags(const MoeRegion & r);

/// The memory of the region's own intermediate nodes (up, gate, act, down) for the executor, when
/// each is dense f32 [n_ff or n_embd, n_used, n_tokens]: computing there touches no new memory
/// (first-touch is slow on some VMs, ~125 MB/s measured here) and needs none. Any batch of at most
/// n_tokens*n_used (row, slot) pairs fits. The executor runs the engine's ops in the engine's order,
/// so memory the engine's allocator let two of them share (in place, ggml/src/ggml-alloc.c) is used
/// the same way. The allocator may also have given ffn_moe_out memory of a dead intermediate: with
/// out_may_overlap = false the buffers are refused in that case, for handlers that write ffn_moe_out
/// before their last compute (rows mode writes its rows, then may compute a failed worker's rows).
bool region_engine_buffers(const MoeRegion & r, MoeBuffers & b, bool out_may_overlap);

/// True when byte ranges [a, a+na) and [b, b+nb) share a byte.
bool memory_overlaps(const void * a, size_t na, const void * b, size_t nb);

/// Milliseconds from a to b (steady clock), for the per-layer counters.
inline double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

/// Pointer to row t of the region's input [n_embd] f32 (rows are nb[2] bytes apart).
inline const float * region_hidden_row(const MoeRegion & r, int64_t t) {
    return reinterpret_cast<const float *>(static_cast<const char *>(r.hidden->data) + t * r.hidden->nb[2]);
}

} // namespace moezip
