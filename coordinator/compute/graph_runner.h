// moezip: run one engine graph with its MoE regions handled by moezip.
//
// The engine's CPU backend hands us (cgraph, cplan). We find the MoE regions, check each against
// the provider map, then compute the graph in pieces with the engine's real ggml_graph_compute:
//   [0, region_1.first) -> handler(region_1) -> (region_1.last, region_2.first) -> ... -> rest.
// Pieces are views of the engine's own node array (ggml_graph_view): the graph is never modified.
// The router nodes of a region always lie before its first node, so the selected experts exist when
// the handler runs. A region the handler fails on is recomputed by the engine's own nodes (policy
// "local") or the compute fails with GGML_STATUS_FAILED (policy "abort"), which llama_decode reports
// as an error: the host never receives a partly written output as if it were complete.
#pragma once

#include "coordinator/evidence/evidence.h"
#include "coordinator/modes/region_handler.h"
#include "preload/engine_api.h"

#include <mutex>

namespace moezip {

/// How the runner treats regions.
struct RunnerOptions {
    bool handle_regions = false;         ///< false: observe only (the engine computes every region)
    bool abort_on_mismatch = false;      ///< provider identity mismatch: fail the compute instead of passthrough
    bool abort_on_handler_error = false; ///< handler error: fail the compute instead of the engine's recompute
};

class GraphRunner {
public:
    /// `variant` describes the CPU backend whose real ggml_graph_compute is bound in `api`.
    /// `ev` and `mu` are shared with the session (the runner locks `mu` around evidence updates).
    GraphRunner(const GgmlApi & api, const BackendVariant & variant, Evidence & ev, std::mutex & mu,
                RegionHandler * handler, RunnerOptions opt)
        : api_(api), variant_(variant), ev_(ev), mu_(mu), handler_(handler), opt_(opt) {}

    /// Computes the graph as ggml_graph_compute would, with regions handled per the options.
    /// Returns the engine's status, or GGML_STATUS_FAILED after a fatal moezip error (logged).
    ggml_status compute(ggml_cgraph * gf, ggml_cplan * cplan);

    /// The handler's per-worker evidence (locks the handler against a concurrent compute).
    nlohmann::json workers_json();
    /// The handler's memory evidence (weights released), {} without a handler.
    nlohmann::json memory_json();

private:
    ggml_status compute_range(ggml_cgraph * gf, ggml_cplan * cplan, int i0, int i1);
    /// Plans or checks each region; returns false when the compute must fail (mismatch + abort).
    bool check_providers(std::vector<MoeRegion> & regions, std::vector<bool> & handle);
    void record_logits(ggml_cgraph * gf);
    std::string buffer_type_name(const ggml_tensor * t) const;

    const GgmlApi & api_;
    BackendVariant variant_;
    Evidence & ev_;
    std::mutex & mu_;
    RegionHandler * handler_;
    RunnerOptions opt_;
    std::mutex handler_mu_;  // handlers are not thread-safe; node may decode from two threads
};

} // namespace moezip
