// moezip: run one engine graph with its MoE regions handled by moezip.
//
// The engine's CPU backend hands us (cgraph, cplan). We find the MoE regions, check each against
// its provider plan (provider_map/provider_map.h), then compute the graph in pieces with the
// engine's real ggml_graph_compute:
//   [0, region_1.first) -> handler(region_1) -> (region_1.last, region_2.first) -> ... -> rest.
// Pieces are views of the engine's own node array (ggml_graph_view): the graph is never modified.
// The router nodes of a region always lie before its first node, so the selected experts exist when
// the handler runs. A region the handler fails on is recomputed by the engine's own nodes (policy
// "local") or the compute fails with GGML_STATUS_FAILED (policy "abort"), which llama_decode reports
// as an error: the host never receives a partly written output as if it were complete.
//
// Plans belong to a model epoch: weights_released() retires every plan whose weights lie in memory
// the engine frees, and the handler forgets what it verified for them (workers are checked again,
// by content, for the weights that come next).
#pragma once

#include "coordinator/evidence/evidence.h"
#include "coordinator/memory/model_files.h"
#include "coordinator/modes/region_handler.h"
#include "provider_map/engine_api.h"

#include <atomic>
#include <mutex>

namespace moezip {

/// How the runner treats regions.
struct RunnerOptions {
    bool handle_regions = false;         ///< false: observe only (the engine computes every region)
    bool abort_on_mismatch = false;      ///< provider identity mismatch: fail the compute instead of passthrough
    bool abort_on_handler_error = false; ///< handler error: fail the compute instead of the engine's recompute
    /// require_intercept: a MoE region not handled as configured (not dispatchable, identity
    /// mismatch, a worker part computed here) fails the compute, so the request that needed it
    /// fails visibly instead of being answered by an undistributed run.
    bool require_intercept = false;
    /// The model files mapped in the process; regions whose weights lie in another model's file than
    /// the distributed one are left to the engine and counted in Evidence::other_models. nullptr:
    /// every region is this run's model (tests, tools).
    const ModelFiles * model_files = nullptr;
    /// model_file_identity of the config's `model`; "" = the oldest model file mapped.
    std::string model_identity;
};

class GraphRunner {
public:
    /// `variant` describes the CPU backend whose real ggml_graph_compute is bound in `api`.
    /// `ev` and `mu` are shared with the preload's session (the runner locks `mu` around evidence updates).
    GraphRunner(const GgmlApi & api, const BackendVariant & variant, Evidence & ev, std::mutex & mu,
                RegionHandler * handler, RunnerOptions opt)
        : api_(api), variant_(variant), ev_(ev), mu_(mu), handler_(handler), opt_(opt) {}

    /// Computes the graph as ggml_graph_compute would, with regions handled per the options.
    /// `sched` is the engine context's scheduler that asked for it (its logits stream), or nullptr.
    /// Returns the engine's status, or GGML_STATUS_FAILED after a fatal moezip error (logged).
    /// Never throws: an exception inside moezip is a handler error under the configured policy.
    ggml_status compute(ggml_cgraph * gf, ggml_cplan * cplan, const void * sched = nullptr);

    /// The engine frees (or unmaps) [base, base + size): every plan with weights there is retired
    /// (a new model epoch starts if any was) and the handler drops what it verified for them.
    /// `why` names the event for the report. Cheap when nothing overlaps.
    void weights_released(const void * base, size_t size, const char * why);

    /// The handler's per-worker evidence (locks the handler against a concurrent compute).
    nlohmann::json workers_json();
    /// The handler's balance section (RegionHandler::balance_json); null when none or busy.
    nlohmann::json balance_json();
    /// The handler's memory evidence (weights released), {} without a handler.
    nlohmann::json memory_json();
    /// At exit, after transport_stop_waiting(): waits up to `ms` for every compute in progress on
    /// other threads to stop (they stop at the next piece of their graph, or when their worker wait
    /// ends), so that no thread runs the engine's kernels while exit tears the engine's statics
    /// down. True when none is left.
    bool quiesce(int ms);
    /// Shuts the handler down (sockets, context), unless a compute is still in it (then the process
    /// is exiting and another thread still uses it: the handler is left to the OS). Once.
    void shutdown();

    /// Graph computes this runner failed because of the configured policy (on_worker_error =
    /// "abort", require_intercept): each one failed the host's request that needed it (llama_decode
    /// returned an error). A long-running host (a server) goes on after them; the preload makes its
    /// exit status 4 when it stops.
    uint64_t failed_computes() const { return failed_computes_.load(); }
    /// Why the first of them failed, naming the policy ("layer 3: io error: worker ... unavailable and
    /// on_worker_error = \"abort\""); "" when none.
    std::string first_failed_compute() const;

private:
    ggml_status compute_range(ggml_cgraph * gf, ggml_cplan * cplan, int i0, int i1);
    /// Checks each region against its plan (making one for weights seen the first time); sets
    /// r.plan_id. Returns false when the compute must fail (mismatch + abort, or require_intercept).
    bool check_providers(std::vector<MoeRegion> & regions, std::vector<bool> & handle);
    /// True when r's weights lie in another model's file than the distributed one (caller holds
    /// mu_): counted in ev_.other_models, logged once per file.
    bool other_model_locked(const MoeRegion & r);
    /// Retires plan `it` (caller holds mu_) and returns its id.
    uint64_t retire_locked(std::map<uint64_t, ProviderEntry>::iterator it, const std::string & why);
    void note_epoch_locked(const std::string & why, const std::vector<uint64_t> & plans);
    void forget_plans(const std::vector<uint64_t> & plans);
    /// Runs the handler on one region; any exception becomes an error Status.
    Status handle_region(const MoeRegion & r, LayerCounters & delta, std::vector<std::string> & recovered);
    void record_logits(ggml_cgraph * gf, const void * sched);
    std::string buffer_type_name(const ggml_tensor * t) const;

    const GgmlApi & api_;
    BackendVariant variant_;
    Evidence & ev_;
    std::mutex & mu_;
    RegionHandler * handler_;
    RunnerOptions opt_;
    std::timed_mutex handler_mu_;  // handlers are not thread-safe; node may decode from two threads
    bool shut_down_ = false;       // under handler_mu_
    std::atomic<int> in_flight_{0};  // threads inside compute()
    /// Counts one compute failed by the policy, logs it (the first one in full, then capped) and
    /// keeps the first reason; returns GGML_STATUS_FAILED.
    ggml_status fail_compute(const std::string & why);
    std::atomic<uint64_t> failed_computes_{0};
    mutable std::mutex failed_mu_;
    std::string first_failed_;  // under failed_mu_
};

} // namespace moezip
