// moezip: the distributing region handlers.
//
// rows    — a region's token rows are split by share between this host and the workers; each host
//           computes whole rows (all their slots, slot-order sum), so every row is bit-identical to
//           the engine's. Regions with fewer than min_rows rows (decode) are computed here.
// experts — each host owns a set of experts; a worker receives only the rows that selected one of
//           its experts, with those slots' ids and weights (other slots -1). combine = "exact": it
//           returns weighted per-slot outputs and this host adds all slots in slot order (the
//           engine's order, bit-identical); combine = "partial": it returns per-row partial sums
//           (fewer bytes, not bit-identical; shadow_every = N recomputes every Nth call here and
//           records max-abs error and cosine). Decode (1 row) is distributed too.
// shard   — each host owns a slice of every expert's n_ff (whole quantization blocks of the down
//           weights); every host gets every row and returns per-row partial sums over its slice,
//           which this host adds in slice order. Not bit-identical to one node (the n_ff dot products
//           of down are split into partial sums): shadow_every = N measures the difference.
// In both, requests go out before the local part is computed (overlap), and a failed worker's part
// is computed here (on_worker_error = "local") or the compute fails ("abort").
// Untrusted results (docs/security.md): with verify_every = N one result in every N of each worker
// is also computed here before it is used, and compared bit for bit (rows, experts exact) or within
// dispatch.verify_max_abs / verify_min_cosine (shard, experts partial). A shadow call (shadow_every)
// verifies every worker's part the same way before it measures the whole region. A mismatch: this
// host's part is used, the worker is untrusted (Dispatcher::record_verify), a fallback is counted.
#pragma once

#include "coordinator/balance/expert_balance.h"
#include "coordinator/balance/share_balance.h"
#include "coordinator/balance/slice_change_gate.h"
#include "coordinator/compute/down_slice.h"
#include "coordinator/dispatch/dispatcher.h"
#include "coordinator/memory/own_expert_copies.h"
#include "coordinator/memory/weight_release.h"
#include "coordinator/modes/region_handler.h"
#include "coordinator/modes/split.h"

#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

namespace moezip {

/// Base: owns the dispatcher, the local executor and the report of workers.
class DispatchHandler : public RegionHandler {
public:
    DispatchHandler(const Config & cfg, const GgmlApi & api, EngineIdentity self)
        : cfg_(cfg), disp_(cfg, api, std::move(self)) {}
    void set_threads(int n_threads) override { disp_.executor().set_threads(n_threads); }
    void shutdown() override { disp_.shutdown(); }
    nlohmann::json workers_json() const override;
    std::vector<std::string> take_errors() override { return disp_.take_errors(); }
    void forget_plans(const std::vector<uint64_t> & plans) override { disp_.forget_plans(plans); }
    /// identity_digest_bytes / identity_digest_ms: expert slices read here for the workers'
    /// content digests (coordinator/dispatch/expert_digests_here.h) and the time it took.
    nlohmann::json memory_json() const override;
protected:
    /// ms this host has spent so far making workers usable (Dispatcher::usable_time: first hellos
    /// and the waits for a connection, identity and plan checks, the digests of the workers'
    /// experts; and probes of workers that were down).
    Dispatcher::UsableTime checks_ms() const { return disp_.usable_time(); }
    /// Moves the time usable() took since `before` (checks_ms() when the call began) out of
    /// c.ms_local: a worker's first verification into c.ms_setup, a probe of a worker that was down
    /// into c.ms_wait (waiting for a worker, which make bench keeps in the MoE time). Neither is
    /// compute here: without this, 1.5 s of waiting for a stopped worker's handshake showed as ms_local.
    void checks_time_to_setup(const Dispatcher::UsableTime & before, LayerCounters & c) const {
        const Dispatcher::UsableTime now = checks_ms();
        c.ms_local -= (now.setup_ms - before.setup_ms) + (now.probe_ms - before.probe_ms);
        c.ms_setup += now.setup_ms - before.setup_ms;
        c.ms_wait += now.probe_ms - before.probe_ms;
    }
    /// Computes rows [first, first+count) of r here from hidden_: all slots, slot-order sum into r.out.
    Status compute_rows_here(const MoeRegion & r, int64_t first, int64_t count);
    /// The same with weights `w` (e.g. an n_ff slice) and the slot-order sums written to out
    /// [n_embd, count] instead of r.out.
    Status compute_rows_into(const MoeRegion & r, const ExpertWeights & w, int64_t first, int64_t count, float * out);
    /// Copies the region's input into hidden_ (contiguous [n_embd, n_rows]) and its routing into
    /// ids_/weights_. Done first, before anything is written to r.out: the engine's allocator may
    /// place ffn_moe_out in the memory of the input (dead in the engine's order once up/gate ran),
    /// so the engine's input cannot be read after the output has been written.
    void gather_inputs(const MoeRegion & r);
    /// A compute request's header for region r: a new request id, the layer's dims, n_rows rows,
    /// the reply kind and the layer's activation. Frames are set by WorkerLink::send.
    MsgHeader request_header(const MoeRegion & r, int64_t n_rows, ReplyKind reply);
    /// Recomputes the whole region here (exact, slot order) and records the largest absolute
    /// difference and the smallest cosine against what r.out holds now; r.out is left unchanged.
    /// For combines that are not bit-identical (experts partial, shard).
    void shadow_check(const MoeRegion & r);
    /// Compares worker w's part `theirs` (n f32, possibly unaligned) with `here`, this host's
    /// computation of the same part: bit-exact or within the verify tolerances; records the verdict
    /// (a mismatch makes w untrusted). True when `theirs` may be used.
    bool accept_part(size_t w, const void * theirs, const float * here, size_t n, bool exact, const std::string & what);
    /// Worker w's reply to row-sums request `id` (rows and shard mode) into `data`: a result of
    /// n_rows rows, [n_embd, n_rows] f32. A reply that arrives feeds `bal`: the worker's service
    /// time for `units` of work, and one overhead sample whose transfer is `payload_rows` rows
    /// (worker_overhead.h). `sent` is when the request went out. Errors: the link's (timeout, hash,
    /// closed), or corruption naming the worker when the reply's kind, rows or size do not match.
    Status recv_row_sums(const MoeRegion & r, size_t w, uint64_t id, int64_t n_rows, ShareBalancer & bal, CallSize size,
                         double units, double payload_rows, std::chrono::steady_clock::time_point sent, zmq::message_t & data);

    const Config & cfg_;
    Dispatcher disp_;
    std::vector<int32_t> ids_;
    std::vector<float> weights_;
    std::vector<float> hidden_;
    std::vector<float> slots_;
    // shadow checks of the combines that are not bit-identical
    std::vector<float> shadow_out_;
    uint64_t shadow_calls_ = 0, shadow_exceeded_ = 0;
    double shadow_max_abs_ = 0, shadow_min_cos_ = 1;
    std::vector<float> verify_buf_;  // this host's computation of a worker's part being verified
};

class RowsHandler : public DispatchHandler {
public:
    using DispatchHandler::DispatchHandler;
    Status compute(const MoeRegion & r, LayerCounters & c) override;
    /// local_share = "auto": the measured speeds and the shares over time (ShareBalancer); null otherwise.
    nlohmann::json balance_json() const override;

private:
    /// The row blocks of an n-row call: by the configured shares, or automatic ones.
    std::vector<RowBlock> row_blocks(int64_t n);
    ShareBalancer share_bal_{1 + cfg_.workers.size()};
    uint64_t split_calls_ = 0;
};

class ShardHandler : public DispatchHandler {
public:
    using DispatchHandler::DispatchHandler;
    Status compute(const MoeRegion & r, LayerCounters & c) override;
    /// Repacked experts (CPU_REPACK) interleave the rows of every expert: no n_ff slice of them exists.
    /// Expert biases (gpt-oss): the down bias belongs to the whole sum, not to each slice's part.
    std::string refuses(const MoeRegion & r) const override;

    /// local_share = "auto": the measured speeds and the slices over time (ShareBalancer). With fixed
    /// shares: {"mode", "shares", "no_slice": [{"host", "share", "layers", "reason"}]} when a host's
    /// share was too small for one block of n_ff in some layer (it computed nothing there); else null.
    nlohmann::json balance_json() const override;
    /// The base's keys, shard_down_copy_bytes_max (the most this host held at once in packed copies
    /// of its down slice) and, as experts mode's, release_unowned, advised_bytes, rss_dropped_bytes,
    /// released_parts (plan x slice) and not_released (why nothing was dropped).
    nlohmann::json memory_json() const override;
    /// Also drops the packed down slices of those plans.
    void forget_plans(const std::vector<uint64_t> & plans) override;

private:
    /// local_share = "auto": after the first calls, and every 64 calls after, moves the slices of
    /// decode calls and those of prefill calls each to the measured speeds in such calls, when that
    /// is expected to save at least 5% over the recent calls of that size (ShareBalancer::best_for_mix)
    /// and the saving so far pays for the repack (SliceChangeGate; a new plan: hello again). A host
    /// left without a slice for kShardProbeAdjustments adjustments gets one block, to be measured again.
    /// Returns the time spent packing this host's new slices (pack_own_slices), ms.
    double adjust_slices(int64_t n_blocks, int64_t n_rows);
    /// Before the first call with automatic shares: every host's cores (this one's, and each
    /// worker's from the hello_ok of the hello this makes), and, when they differ, a first split of
    /// prefill calls in proportion to them instead of an even one.
    void seed_prefill_split(const MoeRegion & r, int64_t n_blocks);
    /// After the split of `size` calls changed from `before`: packs this host's down slice of the
    /// new split for every plan seen since the last check, dropping the old one first unless the
    /// other split uses it. Returns the time spent, ms.
    double pack_own_slices(CallSize size, const std::vector<double> & before);
    /// Fixed shares: counts, and warns once per host, a layer where a host's share > 0 gave it no
    /// block of n_ff (split_ff rounds to whole blocks of the down weights' type).
    void note_empty_slices(const MoeRegion & r, int64_t block, const std::vector<RowBlock> & slices);
    /// Once per (plan, slice, packed copies made), after a call every worker served: drops this
    /// host's pages of what slice `own` (the union of its decode and prefill slices) never reads
    /// (weight_release.h), and of all of down once `down_packed` (both slices read packed copies).
    /// A fallback, a verification or a new slice reads them back from the file.
    void release_unowned(const MoeRegion & r, const RowBlock & own, bool down_packed);
    static constexpr uint64_t kShardCalibrationCalls = 4;  // calls at equal slices before the first adjustment
    static constexpr uint64_t kShardAdjustEvery = 64;      // calls between later adjustments
    static constexpr uint64_t kShardProbeAdjustments = 4;  // adjustments a host may stay without a slice
    CallMix mix_;  // the calls since the last adjustment, older ones at half weight
    ShareBalancer share_bal_{1 + cfg_.workers.size(), SharePayload::call_rows};  // every worker gets every row
    uint64_t calls_auto_ = 0, slice_changes_ = 0;
    bool prefill_seeded_ = false;  // seed_prefill_split chose the first prefill split
    uint64_t calls_since_check_[2] = {0, 0};  // by CallSize
    std::chrono::steady_clock::time_point split_since_[2];  // by CallSize: the split's first call or last change (probes' budget)
    SliceChangeGate change_gate_;  // a better split is taken once it pays for the repack a change costs
    DownSliceCopies down_copies_{disp_.api()};  // per plan: this host's down columns, packed
    std::map<uint64_t, const ggml_tensor *> downs_;  // per plan seen since the last check (local_share = "auto"): its down weights
    std::vector<std::vector<float>> parts_;  // per host (this one first): partial row sums
    std::vector<std::array<int32_t, 2>> ff_frames_;  // per worker: its slice as sent (frames are zero-copy)
    uint64_t calls_ = 0;
    struct NoSlice {
        std::set<int> layers;
        std::string reason;  // the first layer's: share, n_ff, block
    };
    std::map<size_t, NoSlice> no_slice_;  // per host (0 = here, 1 + w = worker w)
    std::set<std::array<int64_t, 4>> released_;  // (plan, ff_first, ff_count, copies made) whose pages were dropped
    WeightReleaseTally release_;
};

class ExpertsHandler : public DispatchHandler {
public:
    ExpertsHandler(const Config & cfg, const GgmlApi & api, EngineIdentity self);
    Status compute(const MoeRegion & r, LayerCounters & c) override;
    /// {"release_unowned", "advised_bytes" (given to madvise), "rss_dropped_bytes" (VmRSS decrease
    /// measured around the calls: the pages that really left), "released_parts" (layer x worker),
    /// "not_released"}, "copy_local", own_copy_slots (slots computed from the copies) and the own_copy_* keys
    /// (OwnExpertCopies::add_to); worker_experts_mapped_bytes and worker_experts_resident_bytes: of the
    /// experts this host does not own, in the weights of every current plan, the bytes of the whole pages they
    /// cover and of those in this process's page tables now, or when the engine last freed them
    /// (page_presence.h).
    nlohmann::json memory_json() const override;
    /// experts.replicas: the balancer's decisions and speed estimates (ExpertBalancer::to_json); null otherwise.
    nlohmann::json balance_json() const override;
    void forget_plans(const std::vector<uint64_t> & plans) override;

private:
    struct Part;  // one worker's request of one call
    /// Per expert of the model, the host that computes its slots in this call (0 = here, 1 + w =
    /// worker w): its only owner, or among usable replicas the balancer's choice.
    std::vector<int> assign_hosts(const MoeRegion & r, CallSize size);
    /// Feeds worker w's reply to part p into the balancer: service time per slot and overhead.
    void observe_reply(size_t w, CallSize size, const Part & p, const MsgHeader & rh, std::chrono::steady_clock::time_point t_wait);
    /// True when this host owns every expert of failed part p as well (experts.replicas): then it
    /// computes the part as a configured owner, not as a fallback.
    bool covered_here(const MoeRegion & r, const Part & p) const;
    /// Computes (row, slot) pairs here into slots_: this host's copied experts from the copies, the
    /// rest from the engine's mapping.
    Status compute_pairs_here(const MoeRegion & r, const std::vector<std::pair<int64_t, int64_t>> & pairs);
    /// Computes pairs with weights w into slots_, each pair as a batch row of one slot.
    Status compute_pairs_with(const MoeRegion & r, const ExpertWeights & w, const std::vector<std::pair<int64_t, int64_t>> & pairs);
    /// Exact combine into out [n_embd, n_rows]: every row's slots in the engine's slot order from
    /// slots_, or continued from a worker's sum of the row's first slots (Part::prefix_sums).
    void combine_exact(const MoeRegion & r, const std::vector<Part> & parts, float * out);
    Status merge_partial(const MoeRegion & r, std::vector<Part> & parts, bool shadow_call);
    bool verify_part(const MoeRegion & r, size_t w, const Part & p, bool exact, Status & st);
    /// Once per (plan, worker), after worker w served the region's weights: drop this host's pages
    /// of the experts w owns in that layer (coordinator/memory/weight_release.h).
    void release_unowned(const MoeRegion & r, size_t w);
    std::vector<int> owners_;                   // expert_owners: -1 when resident here
    std::vector<std::vector<int>> owner_sets_;  // expert_owner_sets: every owner
    std::vector<bool> own_;                     // [n_expert]: this host is an owner (computes it, not as a fallback)
    OwnExpertCopies own_copies_{disp_.api()};   // per plan: this host's experts in anonymous memory
    uint64_t slots_from_copy_ = 0;              // slots computed from own_copies_ (the rest: the mapping)
    std::vector<std::pair<int64_t, int64_t>> pairs_copied_, pairs_mapped_;  // compute_pairs_here's two batches
    std::vector<int64_t> expert_slots_;         // slots per expert in the current call
    ExpertBalancer balancer_{1 + cfg_.workers.size()};
    uint64_t partial_calls_ = 0;
    std::vector<float> pair_hidden_, pair_weights_, pair_out_;
    std::vector<int32_t> pair_ids_;
    std::vector<const char *> prefix_at_;  // combine_exact: per row, a worker's sum of its first slots
    std::vector<int64_t> prefix_len_;      // ... and how many slots it holds (0: none)
    std::set<std::pair<uint64_t, size_t>> released_;  // (plan, worker) pairs already handled
    WeightReleaseTally release_;                      // what left this host's memory, or why nothing did
    std::map<uint64_t, std::array<const ggml_tensor *, 3>> plan_weights_;  // per plan: gate, up, down (the engine's)
    /// The workers' experts in the current plans' weights: bytes of the whole pages they cover, and
    /// of those in this process's page tables (page_presence.h).
    struct WorkerExpertsPresence {
        bool measured = false;
        uint64_t pages = 0, present = 0;
    };
    WorkerExpertsPresence worker_experts_presence() const;
    WorkerExpertsPresence presence_at_free_;  // measured when the engine last freed planned weights
};

} // namespace moezip
