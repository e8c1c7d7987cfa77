#include "coordinator/compute/graph_runner.h"

#include "coordinator/base/log.h"

#include <chrono>
#include <cstring>

namespace moezip {

std::string GraphRunner::buffer_type_name(const ggml_tensor * t) const {
    if (t->buffer == nullptr) return "";
    std::string name = api_.ggml_backend_buffer_name(t->buffer);
    ggml_backend_buffer_type_t bt = api_.ggml_backend_buffer_get_type(t->buffer);
    std::string bt_name = bt ? api_.ggml_backend_buft_name(bt) : "";
    return bt_name.empty() || bt_name == name ? name : name + "/" + bt_name;
}

ggml_status GraphRunner::compute_range(ggml_cgraph * gf, ggml_cplan * cplan, int i0, int i1) {
    if (i1 <= i0) return GGML_STATUS_SUCCESS;
    if (i0 == 0 && i1 == gf->n_nodes) return api_.ggml_graph_compute(gf, cplan);
    ggml_cgraph view = api_.ggml_graph_view(gf, i0, i1);
    return api_.ggml_graph_compute(&view, cplan);
}

bool GraphRunner::check_providers(std::vector<MoeRegion> & regions, std::vector<bool> & handle) {
    auto buft = [this](const ggml_tensor * t) { return buffer_type_name(t); };
    handle.assign(regions.size(), false);
    bool ok = true;
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < regions.size(); ++i) {
        MoeRegion & r = regions[i];
        ProviderEntry now = provider_entry_make(r, variant_, api_.ggml_type_name, buft);
        auto it = ev_.provider_map.find(r.il);
        if (it == ev_.provider_map.end()) {
            ev_.provider_map[r.il] = now;  // first sight of this layer: it becomes the plan
            if (!r.dispatchable) LOG_WARN("layer %d is not dispatchable: %s", r.il, r.reason.c_str());
        } else {
            Status st = provider_check(it->second, now);
            if (!st) {
                ++ev_.identity_failed;
                ev_.add_error(st.message());
                LOG_CAPPED(LogLevel::error, "provider identity mismatch: %s", st.message().c_str());
                if (opt_.abort_on_mismatch) ok = false;
                ++ev_.layers[r.il].passthrough;
                ++ev_.regions_passthrough;
                continue;
            }
        }
        ++ev_.identity_passed;
        handle[i] = opt_.handle_regions && r.dispatchable && handler_ != nullptr;
        if (!handle[i]) {
            ++ev_.layers[r.il].passthrough;
            ++ev_.regions_passthrough;
        }
    }
    return ok;
}

void GraphRunner::record_logits(ggml_cgraph * gf) {
    for (int i = gf->n_nodes - 1; i >= 0; --i) {
        ggml_tensor * t = gf->nodes[i];
        if (strcmp(t->name, "result_output") != 0) continue;
        if (t->type != GGML_TYPE_F32 || t->data == nullptr || t->nb[1] != t->ne[0] * sizeof(float)) return;
        std::lock_guard<std::mutex> lock(mu_);
        ev_.add_logits(static_cast<const float *>(t->data), t->ne[0], t->ne[1]);
        return;
    }
}

nlohmann::json GraphRunner::workers_json() {
    if (handler_ == nullptr) return nlohmann::json::array();
    std::lock_guard<std::mutex> hl(handler_mu_);
    return handler_->workers_json();
}

nlohmann::json GraphRunner::memory_json() {
    if (handler_ == nullptr) return nlohmann::json::object();
    std::lock_guard<std::mutex> hl(handler_mu_);
    return handler_->memory_json();
}

ggml_status GraphRunner::compute(ggml_cgraph * gf, ggml_cplan * cplan) {
    auto buft = [this](const ggml_tensor * t) { return buffer_type_name(t); };
    std::vector<MoeRegion> regions = moe_regions_find(gf->nodes, gf->n_nodes, buft);
    std::vector<bool> handle;
    bool ok = check_providers(regions, handle);
    {
        std::lock_guard<std::mutex> lock(mu_);
        ++ev_.graphs;
        if (!regions.empty()) ++ev_.moe_graphs;
    }
    if (!ok) {
        LOG_ERROR("stopping this compute: provider identity mismatch and on_mismatch = \"abort\"");
        return GGML_STATUS_FAILED;
    }
    int pos = 0;
    for (size_t i = 0; i < regions.size(); ++i) {
        if (!handle[i]) continue;
        const MoeRegion & r = regions[i];
        ggml_status gs = compute_range(gf, cplan, pos, r.first_node);
        if (gs != GGML_STATUS_SUCCESS) return gs;
        auto t0 = std::chrono::steady_clock::now();
        LayerCounters delta;
        // A region can have no rows (the last layer of a ubatch whose outputs are not requested).
        Status st = Status::ok();
        std::vector<std::string> recovered;
        if (r.n_tokens > 0) {
            std::lock_guard<std::mutex> hl(handler_mu_);
            st = handler_->compute(r, delta);
            recovered = handler_->take_errors();
        }
        double ms = ms_between(t0, std::chrono::steady_clock::now());
        std::unique_lock<std::mutex> lock(mu_);
        LayerCounters & c = ev_.layers[r.il];
        for (const std::string & e : recovered) ev_.add_error("layer " + std::to_string(r.il) + ": " + e);
        if (!st) {
            ev_.add_error("layer " + std::to_string(r.il) + ": " + st.to_string());
            if (opt_.abort_on_handler_error) {
                lock.unlock();
                LOG_ERROR("layer %d: %s; stopping this compute", r.il, st.to_string().c_str());
                return GGML_STATUS_FAILED;
            }
            LOG_CAPPED(LogLevel::warn, "layer %d: %s; the engine recomputes this region", r.il, st.to_string().c_str());
            ++c.fallbacks;
            ++c.passthrough;
            ++ev_.regions_passthrough;
            lock.unlock();
            pos = r.first_node;  // the engine's own region nodes run in the next piece
            continue;
        }
        c.calls += 1;
        c.rows += r.n_tokens;
        c.slots += r.n_tokens * r.n_used;
        c.local_rows += delta.local_rows; c.remote_rows += delta.remote_rows;
        c.local_slots += delta.local_slots; c.remote_slots += delta.remote_slots;
        c.fallbacks += delta.fallbacks;
        c.ms += ms; c.ms_local += delta.ms_local; c.ms_wait += delta.ms_wait;
        ++ev_.regions_handled;
        lock.unlock();
        pos = r.last_node + 1;
    }
    ggml_status gs = compute_range(gf, cplan, pos, gf->n_nodes);
    if (gs == GGML_STATUS_SUCCESS) record_logits(gf);
    return gs;
}

} // namespace moezip
