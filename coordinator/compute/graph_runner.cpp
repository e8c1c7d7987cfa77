#include "coordinator/compute/graph_runner.h"

#include "coordinator/base/log.h"
#include "coordinator/base/test_fault.h"
#include "coordinator/evidence/trace.h"
#include "coordinator/memory/page_presence.h"
#include "coordinator/wire/transport.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>

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

uint64_t GraphRunner::retire_locked(std::map<uint64_t, ProviderEntry>::iterator it, const std::string & why) {
    it->second.retired = why;
    ++ev_.plans_retired;
    if (ev_.retired_plans.size() < Evidence::kRetiredKept) ev_.retired_plans.push_back(it->second);
    const uint64_t id = it->first;
    ev_.provider_map.erase(it);
    return id;
}

void GraphRunner::note_epoch_locked(const std::string & why, const std::vector<uint64_t> & plans) {
    ++ev_.epochs_total;
    if (ev_.epochs.size() < 64) ev_.epochs.push_back({ev_.graphs, why, plans});
    LOG_INFO("new model epoch: %s; %zu plan(s) retired, their weights will be identified and verified again", why.c_str(), plans.size());
}

void GraphRunner::forget_plans(const std::vector<uint64_t> & plans) {
    if (handler_ == nullptr || plans.empty()) return;
    std::lock_guard<std::timed_mutex> hl(handler_mu_);
    if (!shut_down_) handler_->forget_plans(plans);
}

namespace {

// The address of a region's expert weights (the first expert tensor it has), nullptr when none.
const void * expert_weights_of(const MoeRegion & r) {
    for (const ggml_tensor * t : {r.gate_exps, r.up_exps, r.down_exps})
        if (t != nullptr && t->data != nullptr) return t->data;
    return nullptr;
}

} // namespace

bool GraphRunner::other_model_locked(const MoeRegion & r) {
    const void * weights = expert_weights_of(r);
    if (opt_.model_files == nullptr || weights == nullptr) return false;
    const ModelVerdict v = opt_.model_files->verdict(weights, opt_.model_identity);
    if (v.distributed) return false;
    OtherModel & m = ev_.other_models[v.path];
    if (m.regions == 0) LOG_INFO("layer %d: %s: the engine computes its MoE layers, no worker is asked", r.il, v.reason.c_str());
    m.reason = v.reason;
    ++m.regions;
    m.layers.insert(r.il);
    ++ev_.regions_other_model;
    return true;
}

bool GraphRunner::check_providers(std::vector<MoeRegion> & regions, std::vector<bool> & handle) {
    auto buft = [this](const ggml_tensor * t) { return buffer_type_name(t); };
    // A region's canary samples whose pages are not present here are read from the model file of
    // their recorded mapping: read through the mapping, a page dropped there (experts mode: a
    // worker's experts) was faulted back in at every graph, with up to 15 cached neighbours (the
    // kernel's fault-around). Present pages are read in memory: what the engine computes with, also
    // when a mapping replaced the recorded one unseen (a deep-bound libllama maps past the shim).
    ByteReaderFn canary_reader;
    if (opt_.model_files != nullptr)
        canary_reader = [this](const void * at, void * out, size_t n) {
            return !pages_touching_present(at, n) && opt_.model_files->read(at, out, n);
        };
    handle.assign(regions.size(), false);
    bool ok = true;
    std::vector<uint64_t> retired;
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (size_t i = 0; i < regions.size(); ++i) {
            MoeRegion & r = regions[i];
            if (other_model_locked(r)) continue;  // another model's weights: no plan, no worker, handle[i] stays false
            ProviderEntry now = provider_entry_make(r, variant_, api_.ggml_type_name, buft, canary_reader);
            auto it = ev_.provider_map.end();
            for (auto p = ev_.provider_map.begin(); p != ev_.provider_map.end(); ++p)
                if (p->second.il == r.il && p->second.gate.data == now.gate.data) { it = p; break; }
            if (it != ev_.provider_map.end()) {
                Status st = provider_check(it->second, now);
                if (!st) {
                    // Other weights than planned at the planned address (a model loaded where a freed
                    // one was, unseen): the old plan ends, these weights get their own, verified anew.
                    std::vector<uint64_t> ids = {retire_locked(it, st.message())};
                    note_epoch_locked(st.message(), ids);
                    retired.push_back(ids[0]);
                    it = ev_.provider_map.end();
                }
            }
            if (it == ev_.provider_map.end()) {
                now.plan_id = ++ev_.plans_made;  // first sight of these weights: they get a plan
                it = ev_.provider_map.emplace(now.plan_id, now).first;
                if (!r.dispatchable) LOG_WARN("layer %d is not dispatchable: %s", r.il, r.reason.c_str());
            }
            if (r.dispatchable && handler_ != nullptr && opt_.handle_regions) {
                std::string why = handler_->refuses(r);  // recognised, but not computable in this mode
                if (!why.empty()) {
                    r.dispatchable = false;
                    r.reason = why;
                }
            }
            ProviderEntry & p = it->second;
            p.dispatchable = r.dispatchable;
            p.reason = r.reason;
            p.pattern = r.pattern;
            p.n_used = r.n_used;
            ++p.patterns[r.pattern];
            r.plan_id = p.plan_id;
            ++ev_.identity_passed;
            handle[i] = opt_.handle_regions && r.dispatchable && handler_ != nullptr;
            if (!handle[i]) {
                ++ev_.layers[r.il].passthrough;
                ++ev_.regions_passthrough;
                if (opt_.require_intercept && opt_.handle_regions) {
                    ev_.add_error("require_intercept: layer " + std::to_string(r.il) + " not distributed: " +
                                  (r.dispatchable ? std::string("no handler") : r.reason));
                    ok = false;
                }
            }
        }
    }
    forget_plans(retired);
    return ok;
}

void GraphRunner::weights_released(const void * base, size_t size, const char * why) {
    std::vector<uint64_t> retired;
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto it = ev_.provider_map.begin(); it != ev_.provider_map.end();) {
            auto next = std::next(it);
            if (provider_weights_overlap(it->second, base, size)) retired.push_back(retire_locked(it, why));
            it = next;
        }
        if (!retired.empty()) note_epoch_locked(why, retired);
    }
    forget_plans(retired);
}

void GraphRunner::record_logits(ggml_cgraph * gf, const void * sched) {
    for (int i = gf->n_nodes - 1; i >= 0; --i) {
        ggml_tensor * t = gf->nodes[i];
        if (strcmp(t->name, "result_output") != 0) continue;
        if (t->type != GGML_TYPE_F32 || t->data == nullptr || t->nb[1] != t->ne[0] * sizeof(float)) return;
        std::lock_guard<std::mutex> lock(mu_);
        ev_.add_logits(static_cast<const float *>(t->data), t->ne[0], t->ne[1], sched);
        return;
    }
}

nlohmann::json GraphRunner::workers_json() {
    if (handler_ == nullptr) return nlohmann::json::array();
    std::unique_lock<std::timed_mutex> hl(handler_mu_, std::chrono::milliseconds(200));
    if (!hl.owns_lock()) return nlohmann::json::array();  // a compute holds it (a worker wait): next flush
    return handler_->workers_json();
}

nlohmann::json GraphRunner::balance_json() {
    if (handler_ == nullptr) return nullptr;
    std::unique_lock<std::timed_mutex> hl(handler_mu_, std::chrono::milliseconds(200));
    if (!hl.owns_lock()) return nullptr;  // a compute holds it: next flush
    return handler_->balance_json();
}

nlohmann::json GraphRunner::memory_json() {
    if (handler_ == nullptr) return nlohmann::json::object();
    std::unique_lock<std::timed_mutex> hl(handler_mu_, std::chrono::milliseconds(200));
    if (!hl.owns_lock()) return nlohmann::json::object();
    return handler_->memory_json();
}

bool GraphRunner::quiesce(int ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (in_flight_.load() == 0) return true;
    LOG_WARN("exit: another thread is still inside a graph compute after %d ms", ms);
    return false;
}

void GraphRunner::shutdown() {
    if (handler_ == nullptr) return;
    std::unique_lock<std::timed_mutex> hl(handler_mu_, std::chrono::milliseconds(100));
    if (!hl.owns_lock()) {
        LOG_WARN("exit: a MoE region is still being computed on another thread; leaving its connections to the OS");
        return;
    }
    if (!shut_down_) handler_->shutdown();
    shut_down_ = true;
}

Status GraphRunner::handle_region(const MoeRegion & r, LayerCounters & delta, std::vector<std::string> & recovered) {
    try {
        std::lock_guard<std::timed_mutex> hl(handler_mu_);
        if (shut_down_) return Status::io_error("the process is exiting: moezip no longer computes regions");
        static bool thrown = false;
        if (!thrown && test_fault("throw_in_region")) {
            thrown = true;
            throw std::runtime_error("test fault throw_in_region");
        }
        TraceSpan span("region", "region");
        if (span.on()) {
            span.rename("layer " + std::to_string(r.il) + " (" + std::to_string(r.n_tokens) + " rows)");
            span.args() = {{"layer", r.il}, {"rows", r.n_tokens}, {"n_used", r.n_used}, {"n_expert", r.n_expert}};
        }
        Status st = handler_->compute(r, delta);
        if (span.on() && !st) span.args()["error"] = st.message();
        recovered = handler_->take_errors();
        return st;
    } catch (const std::exception & e) {
        return Status::io_error(std::string("internal error while handling the region: ") + e.what());
    } catch (...) {
        return Status::io_error("internal error while handling the region (unknown exception)");
    }
}

std::string GraphRunner::first_failed_compute() const {
    std::lock_guard<std::mutex> lock(failed_mu_);
    return first_failed_;
}

ggml_status GraphRunner::fail_compute(const std::string & why) {
    const uint64_t n = ++failed_computes_;
    if (n == 1) {
        {
            std::lock_guard<std::mutex> lock(failed_mu_);
            first_failed_ = why;
        }
        // said once in full: the host goes on (a server answers the next request), this process does not succeed
        LOG_ERROR("%s: this compute fails, and so does the host's request that needed it; the process will exit with "
                  "status 4 when it ends", why.c_str());
    } else {
        LOG_CAPPED(LogLevel::error, "%s: this compute fails (%llu so far)", why.c_str(), (unsigned long long) n);
    }
    return GGML_STATUS_FAILED;
}

namespace {

// Counts a thread inside GraphRunner::compute for the span of a scope.
class InFlight {
public:
    explicit InFlight(std::atomic<int> & n) : n_(n) { ++n_; }
    ~InFlight() { --n_; }
    InFlight(const InFlight &) = delete;
    InFlight & operator=(const InFlight &) = delete;

private:
    std::atomic<int> & n_;
};

} // namespace

ggml_status GraphRunner::compute(ggml_cgraph * gf, ggml_cplan * cplan, const void * sched) {
    InFlight in_flight(in_flight_);
    if (transport_stopping()) return GGML_STATUS_ABORTED;  // exit() began on another thread
    auto buft = [this](const ggml_tensor * t) { return buffer_type_name(t); };
    std::vector<MoeRegion> regions = moe_regions_find(gf->nodes, gf->n_nodes, buft);
    std::vector<bool> handle;
    bool ok = check_providers(regions, handle);
    {
        std::lock_guard<std::mutex> lock(mu_);
        ++ev_.graphs;
        if (!regions.empty()) ++ev_.moe_graphs;
    }
    if (!ok) return fail_compute("a MoE region cannot be distributed as configured (see the report's errors; require_intercept = true)");
    int64_t max_rows = 0;
    for (const MoeRegion & r : regions) max_rows = std::max(max_rows, r.n_tokens);
    const bool decode_graph = max_rows <= 1;
    int pos = 0;
    for (size_t i = 0; i < regions.size(); ++i) {
        if (!handle[i]) continue;
        const MoeRegion & r = regions[i];
        if (transport_stopping()) return GGML_STATUS_ABORTED;  // exit() began on another thread: stop between pieces
        ggml_status gs = compute_range(gf, cplan, pos, r.first_node);
        if (gs != GGML_STATUS_SUCCESS) return gs;
        auto t0 = std::chrono::steady_clock::now();
        LayerCounters delta;
        std::vector<std::string> recovered;
        if (r.n_tokens > 0) {  // the router ran: its choices are this region's ids (read before anything reuses them)
            std::lock_guard<std::mutex> lock(mu_);
            ev_.add_routing(r.il, r.ids, r.n_used, r.n_expert, decode_graph);
        }
        // A region can have no rows (the last layer of a ubatch whose outputs are not requested).
        Status st = r.n_tokens > 0 ? handle_region(r, delta, recovered) : Status::ok();
        double ms = ms_between(t0, std::chrono::steady_clock::now());
        std::unique_lock<std::mutex> lock(mu_);
        LayerCounters & c = ev_.layers[r.il];
        for (const std::string & e : recovered) ev_.add_error("layer " + std::to_string(r.il) + ": " + e);
        if (!st) {
            ev_.add_error("layer " + std::to_string(r.il) + ": " + st.to_string());
            if (opt_.abort_on_handler_error || opt_.require_intercept) {
                lock.unlock();
                const char * policy = opt_.abort_on_handler_error ? "on_worker_error = \"abort\"" : "require_intercept = true";
                std::string why = "layer " + std::to_string(r.il) + ": " + st.to_string();
                if (why.find(policy) == std::string::npos) why += std::string(" (") + policy + ")";  // named once
                return fail_compute(why);
            }
            LOG_CAPPED(LogLevel::warn, "layer %d: %s; the engine recomputes this region", r.il, st.to_string().c_str());
            // the whole region goes back to the engine: a passthrough, not a worker's part computed
            // here (`fallbacks`), so the two counters never count one region twice
            ++c.passthrough;
            ++ev_.regions_passthrough;
            lock.unlock();
            pos = r.first_node;  // the engine's own region nodes run in the next piece
            continue;
        }
        if (!c.first.set && r.n_tokens > 0) c.first = {true, ms, delta.ms_local, delta.ms_wait, delta.ms_setup};
        c.calls += 1;
        c.rows += r.n_tokens;
        c.slots += r.n_tokens * r.n_used;
        c.local_rows += delta.local_rows; c.remote_rows += delta.remote_rows;
        c.local_slots += delta.local_slots; c.remote_slots += delta.remote_slots;
        c.fallbacks += delta.fallbacks;
        c.ms += ms; c.ms_local += delta.ms_local; c.ms_wait += delta.ms_wait; c.ms_setup += delta.ms_setup;
        ++ev_.regions_handled;
        if (delta.fallbacks > 0 && opt_.require_intercept) {
            // the output is right, but not computed as configured: the request must not pass as distributed
            ev_.add_error("require_intercept: layer " + std::to_string(r.il) + ": a worker's part was computed here");
            lock.unlock();
            return fail_compute("layer " + std::to_string(r.il) + ": a worker's part was computed on this host (require_intercept = true)");
        }
        lock.unlock();
        pos = r.last_node + 1;
    }
    if (transport_stopping()) return GGML_STATUS_ABORTED;
    ggml_status gs = compute_range(gf, cplan, pos, gf->n_nodes);
    if (gs == GGML_STATUS_SUCCESS) record_logits(gf, sched);
    return gs;
}

} // namespace moezip
