// moezip: the evidence a run collects (counters, checks, hashes) and its JSON report.
//
// The report (schema "moezip-report/1", docs/report.md) is what makes a run auditable and two runs
// comparable: engine identity, config digest, provider map, per-layer counters, identity checks,
// and the XXH3-64 of every graph's logits output (`result_output`) chained over the whole run.
// Bounded for servers that run for days: every logits output is counted and chained, but only the
// first kLogitsFirst and the last kLogitsRecent are listed one by one; errors likewise (docs/report.md
// gives the report's size bound).
#pragma once

#include "coordinator/base/hex.h"
#include "coordinator/evidence/bounded_ring.h"
#include "provider_map/status.h"
#include "provider_map/provider_map.h"

#include "ggml.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace moezip {

/// Per-layer counters. Times in ms.
struct LayerCounters {
    uint64_t calls = 0;          ///< regions handled by moezip (one per graph containing the layer)
    uint64_t rows = 0;           ///< rows (tokens) over all handled calls
    uint64_t slots = 0;          ///< (row, expert) pairs over all handled calls
    uint64_t local_rows = 0, remote_rows = 0;    ///< rows mode
    uint64_t local_slots = 0, remote_slots = 0;  ///< experts mode
    uint64_t passthrough = 0;    ///< regions left to the engine (not dispatchable, mismatch, ...)
    uint64_t fallbacks = 0;      ///< remote parts computed here after a worker error
    double ms = 0;               ///< wall time in moezip's handling of this layer
    double ms_local = 0;         ///< of which computing here
    double ms_wait = 0;          ///< of which waiting for workers after local work was done
    /// Of ms, not in ms_local: preparation at a plan's first call, this host's copies of its experts
    /// (experts.copy_local), its packed down slice (shard; again after a slice change of
    /// local_share = "auto") and the identity digests of the workers' experts (Dispatcher::check_layer).
    /// Not a cost of every call: the bench leaves it out of the MoE share of a step (tools/bench/phase.js).
    double ms_setup = 0;
    /// The first handled call with rows: its own times (ms, ms_local, ms_wait, ms_setup of that call
    /// alone), also counted in the sums above. A cold run's first call carries one-time work on both
    /// sides: this host's copies (in ms_setup) and a worker's first touch of its experts or the
    /// packing of its slices, which shows here only as waiting for its reply. A decode run's per-step
    /// MoE time is the sums without it (tools/bench/phase.js).
    struct CallTimes {
        bool   set = false;  ///< false until a call with rows was handled
        double ms = 0, ms_local = 0, ms_wait = 0, ms_setup = 0;
    } first;
};

/// How often each expert of one layer was routed to: one count per (row, slot) the layer's regions
/// summed, prefill and decode apart (a decode graph has no region of more than one row; in a
/// prefill graph the last layer may have one row: only the outputs asked for are computed). The input of expert
/// placement (which experts are hot, which host should hold them).
struct RoutingCounts {
    std::vector<uint64_t> prefill, decode;  ///< [n_expert]
};

/// One logits output.
struct LogitsRecord {
    uint64_t index = 0;   ///< graph ordinal among graphs that produced logits
    uint64_t stream = 0;  ///< the logits stream (one per engine context, i.e. per ggml_backend_sched), 1, 2, ...
    int64_t n_vocab = 0;
    int64_t rows = 0;     ///< logits rows in the output (tokens whose logits were requested)
    uint64_t xxh3 = 0;    ///< XXH3-64 of the rows*n_vocab f32 values
};

/// The logits of one engine context (one ggml_backend_sched), in the order it computed them. Two
/// contexts decoding at once interleave their graphs in any order; each stream's own sequence does
/// not depend on that, so runs are compared stream by stream (moezip-report compare).
struct LogitsStream {
    uint64_t id = 0;
    uint64_t count = 0;
    uint64_t chain = 0;   ///< chain = XXH3_64(xxh3_i, seed = chain) over this stream's outputs
    bool ended = false;   ///< its scheduler was freed (the context is gone)
};

/// The MoE regions of a model other than the distributed one (config `model`; a draft model, a
/// second model in the process): the engine computes them, no worker sees them, and they are not
/// counted against require_intercept nor in `layers` (their layer numbers are another model's).
struct OtherModel {
    std::string reason;      ///< "not the distributed model (<path>)"
    uint64_t regions = 0;    ///< regions computed by the engine alone
    std::set<int> layers;    ///< their layer numbers (il) in that model
};

/// A model epoch boundary: plans retired because the engine freed (or changed) their weights.
struct EpochEvent {
    uint64_t graph = 0;   ///< CPU graph computes seen before the event
    std::string why;
    std::vector<uint64_t> plans;  ///< plan ids retired
};

/// Everything a run records. Owned by the preload's session; guarded by its mutex.
struct Evidence {
    std::string ggml_version, ggml_commit, abi_status = "unchecked";
    BackendVariant variant;
    std::string config_path, mode;
    uint64_t config_digest = 0;
    std::map<uint64_t, ProviderEntry> provider_map;  ///< current plans by plan_id
    static constexpr size_t kRetiredKept = 1024;
    std::vector<ProviderEntry> retired_plans;        ///< plans of earlier model epochs (the first kRetiredKept)
    uint64_t plans_made = 0, plans_retired = 0;
    std::vector<EpochEvent> epochs;                  ///< model epoch boundaries (first 64 kept)
    uint64_t epochs_total = 0;
    std::map<int, LayerCounters> layers;
    std::map<std::string, OtherModel> other_models;  ///< by the path of the file holding the weights
    uint64_t regions_other_model = 0;                ///< regions of other models, all files together
    std::map<int, RoutingCounts> routing;  ///< by layer, over the regions moezip handled
    /// Counts the experts region rows chose (ids [n_used_ids, n_tokens] i32 read through nb, the
    /// first n_used slots of each row) as prefill or decode. Ids outside [0, n_expert) are not counted.
    void add_routing(int il, const ggml_tensor * ids, int64_t n_used, int64_t n_expert, bool decode);
    uint64_t graphs = 0;            ///< CPU graph computes seen
    uint64_t moe_graphs = 0;        ///< of which with at least one MoE region
    uint64_t sched_graphs = 0;      ///< graphs the engine's scheduler computed
    uint64_t identity_passed = 0, identity_failed = 0;
    uint64_t regions_handled = 0, regions_passthrough = 0;
    /// Every output is counted and chained; the first kLogitsFirst are listed in `logits`, the last
    /// kLogitsRecent after those in `logits_recent`: memory and report size stay fixed however long
    /// the run (two runs compare by their chains, moezip-report compare).
    static constexpr size_t kLogitsFirst = 256;
    static constexpr size_t kLogitsRecent = 256;
    std::vector<LogitsRecord> logits;                         ///< the first kLogitsFirst outputs
    BoundedRing<LogitsRecord> logits_recent{kLogitsRecent};   ///< the last outputs after the first ones
    uint64_t logits_total = 0;
    uint64_t logits_chain = 0;      ///< chain = XXH3_64(xxh3_i, seed = chain) over all outputs
    std::map<uint64_t, LogitsStream> streams;        ///< by stream id
    std::map<const void *, uint64_t> stream_of;      ///< live scheduler -> its stream id
    /// Errors: all counted; the first kErrorsFirst messages and the last kErrorsRecent after them are
    /// kept, each cut to kErrorBytes (a long-running server's every failed compute is one more count).
    static constexpr size_t kErrorsFirst = 50;
    static constexpr size_t kErrorsRecent = 16;
    static constexpr size_t kErrorBytes = 1024;
    std::vector<std::string> errors;                       ///< the first kErrorsFirst messages
    BoundedRing<std::string> errors_recent{kErrorsRecent}; ///< the last messages after the first ones
    nlohmann::json workers = nlohmann::json::array();  ///< filled by the dispatcher
    /// where each engine call moezip interposes is bound ("moezip", "not bound yet", "bypassed: ..."),
    /// filled at exit (preload/import_binding.h)
    nlohmann::json hook_bindings = nlohmann::json::object();

    /// Adds one logits output to the list, the chain and the stream of `sched` (the engine context's
    /// scheduler that computed it; nullptr when unknown: one shared stream).
    void add_logits(const float * data, int64_t n_vocab, int64_t rows, const void * sched = nullptr);
    /// The scheduler was freed: its stream ends; a new scheduler at the same address starts another.
    void end_stream(const void * sched);
    /// Records an error message: counted; kept when among the first kErrorsFirst or the last
    /// kErrorsRecent, cut to kErrorBytes (the cut one ends "... (N bytes)").
    void add_error(const std::string & message);
    uint64_t errors_total = 0;
};

/// The report as JSON. `complete` is false for periodic flushes, true for the final write.
nlohmann::json evidence_to_json(const Evidence & ev, bool complete);
/// Writes JSON to path atomically (tmp file + rename). Errors: io_error naming the path.
Status report_write_atomic(const std::string & path, const nlohmann::json & j);

} // namespace moezip
