#include "coordinator/modes/local_handler.h"

#include <chrono>

namespace moezip {

LocalHandler::LocalHandler(const GgmlApi & api, int n_threads, bool copy_local)
    : exec_(api, n_threads), copies_(api), copy_local_(copy_local) {
    if (!copy_local) copies_.disable("experts.copy_local = false (the default in mode local)");
}

Status LocalHandler::compute(const MoeRegion & r, LayerCounters & c) {
    const ExpertWeights mapped = region_expert_weights(r);
    const auto t_setup = std::chrono::steady_clock::now();
    if (copy_local_) {
        all_.assign((size_t) r.n_expert, true);
        copies_.prepare(r.plan_id, mapped, all_);  // once per plan, before ms_local's clock starts
    }
    const bool from_copy = copies_.held(r.plan_id, mapped) != nullptr;  // every expert, or none
    auto t0 = std::chrono::steady_clock::now();
    c.ms_setup += ms_between(t_setup, t0);
    region_gather_routing(r, ids_, weights_);
    MoeBuffers bufs;
    float * slots = nullptr;
    // The region is computed in its own node memory (region_engine_buffers); ffn_moe_out is written
    // last, so it may share memory with the intermediates as the engine's allocator allows.
    bool in_engine = region_engine_buffers(r, bufs, /*out_may_overlap =*/ true);  // never in the split form
    if (in_engine) {
        const size_t slots_bytes = (size_t) (r.n_embd * r.n_used * r.n_tokens) * sizeof(float);
        const size_t out_bytes = (size_t) (r.n_embd * r.n_tokens) * sizeof(float);
        // moe_sum_slots may write out over the slots only from the same address (a CONT in place, n_used = 1)
        in_engine = r.out->data == r.weighted->data || !memory_overlaps(r.out->data, out_bytes, r.weighted->data, slots_bytes);
        slots = static_cast<float *>(r.weighted->data);
    }
    if (!in_engine) {
        slots_.resize((size_t) (r.n_embd * r.n_used * r.n_tokens));
        slots = slots_.data();
    }
    SlotBatch b;
    b.n_rows = r.n_tokens;
    b.k = r.n_used;
    b.hidden = region_hidden_row(r, 0);
    b.hidden_stride = r.hidden->nb[2];
    b.ids = ids_.data();
    b.weights = weights_.data();
    Status st = exec_.compute_slots(from_copy ? copies_.weights(r.plan_id, mapped) : mapped, b, slots, in_engine ? &bufs : nullptr);
    if (!st) return st;
    if (from_copy) slots_from_copy_ += (uint64_t) (r.n_tokens * r.n_used);
    if (r.slot_out) region_write_slots(r, slots);  // the split form: the sum is another backend's
    else moe_sum_slots(slots, r.n_embd, r.n_used, r.n_tokens, static_cast<float *>(r.out->data));
    c.local_rows += r.n_tokens;
    c.local_slots += r.n_tokens * r.n_used;
    c.ms_local += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return Status::ok();
}

nlohmann::json LocalHandler::memory_json() const {
    nlohmann::json j = nlohmann::json::object();
    j["copy_local"] = copy_local_;
    j["own_copy_slots"] = slots_from_copy_;
    copies_.add_to(j);
    return j;
}

void LocalHandler::forget_plans(const std::vector<uint64_t> & plans) {
    for (uint64_t p : plans) copies_.forget(p);
}

} // namespace moezip
