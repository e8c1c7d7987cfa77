#include "coordinator/dispatch/dispatcher.h"

#include "coordinator/evidence/evidence.h"
#include "coordinator/base/log.h"
#include "coordinator/modes/split.h"
#include "provider_map/expert_digest.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace moezip {

Dispatcher::Dispatcher(const Config & cfg, const GgmlApi & api, EngineIdentity self)
    : cfg_(cfg), api_(api), self_(std::move(self)), exec_(api, cfg.threads > 0 ? cfg.threads : 1), pid_(getpid()) {
    const char * fault = getenv("MOEZIP_TEST_FAULT");
    fault_corrupt_ = fault != nullptr && strcmp(fault, "corrupt_request") == 0;
    workers_.resize(cfg.workers.size());
    for (size_t i = 0; i < workers_.size(); ++i) workers_[i].cfg = &cfg.workers[i];
}

Dispatcher::~Dispatcher() { shutdown(); }

void Dispatcher::shutdown() {
    if (getpid() != pid_) {
        // A forked child must not touch the parent's ZeroMQ context (libzmq asserts): drop it.
        for (Worker & w : workers_) (void) w.link.release();
        (void) ctx_.release();
        return;
    }
    for (Worker & w : workers_) w.link.reset();  // sockets first (linger 0) ...
    if (ctx_) {
        ctx_->close();  // ... then the context
        ctx_.reset();
    }
}

Status Dispatcher::hello(Worker & w) {
    if (!ctx_) ctx_.reset(new zmq::context_t(1));
    if (!w.link) w.link.reset(new WorkerLink(*ctx_, w.cfg->endpoint, cfg_.dispatch.connect_timeout_ms));
    // The first hello may wait for a worker still starting; a re-probe of a worker that failed waits
    // at most 250 ms, so a dead worker costs the engine a short stall per back-off period, not seconds.
    w.link->set_timeout_ms(w.backoff_ms > 0 ? std::min(cfg_.dispatch.connect_timeout_ms, 250) : cfg_.dispatch.connect_timeout_ms);
    nlohmann::json me = {{"protocol", kProtocolVersion}, {"ggml_commit", self_.ggml_commit},
                         {"cpu_variant", self_.variant.name}, {"cpu_build_id", self_.variant.build_id}};
    std::string text = me.dump();
    MsgHeader h = msg_header_make(MsgKind::hello);
    h.request_id = next_request_id();
    Status st = w.link->send(h, {{WireType::none, {text.data(), text.size()}}});
    MsgHeader rh;
    zmq::message_t data;
    if (st) st = w.link->recv(h.request_id, rh, data);
    if (!st) return st;
    if (rh.kind != static_cast<uint16_t>(MsgKind::hello_ok)) return Status::corruption(w.cfg->endpoint + ": hello answered with " + msg_kind_name(rh.kind));
    w.identity = nlohmann::json::parse(static_cast<const char *>(data.data()), static_cast<const char *>(data.data()) + data.size(),
                                       nullptr, false);
    if (w.identity.is_discarded() || !w.identity.is_object()) return Status::corruption(w.cfg->endpoint + ": hello_ok is not JSON");
    w.said_hello = true;
    w.link->set_timeout_ms(w.cfg->timeout_ms);  // per-request timeout from now on
    return Status::ok();
}

std::vector<int> Dispatcher::assigned_experts(size_t w, int n_expert) const {
    std::vector<int> out;
    if (cfg_.mode == ConfigMode::rows || cfg_.mode == ConfigMode::shard) {
        for (int e = 0; e < n_expert; ++e) out.push_back(e);  // a row carries any expert
        return out;
    }
    std::vector<int> owners = expert_owners(cfg_, n_expert);
    for (int e = 0; e < n_expert; ++e)
        if (owners[e] == (int) w) out.push_back(e);
    return out;
}

Status Dispatcher::check_identity(const Worker & w) const {
    const nlohmann::json & id = w.identity;
    const std::string who = "worker " + w.cfg->endpoint + " refused: ";
    auto str = [&](const char * key) { return id.contains(key) && id[key].is_string() ? id[key].get<std::string>() : std::string("?"); };
    if (!id.contains("protocol") || id["protocol"] != kProtocolVersion)
        return Status::mismatch(who + "protocol " + (id.contains("protocol") ? id["protocol"].dump() : "?") + ", this host speaks 1");
    // The kernels' build-id first: it names a mix of builds (or of CPU variants) for what it is.
    if (str("cpu_variant") != self_.variant.name || str("cpu_build_id") != self_.variant.build_id)
        return Status::mismatch(who + "it computes with CPU variant " + str("cpu_variant") + " (build-id " + str("cpu_build_id") +
                                ", ggml " + str("ggml_commit") + "), this host with " + self_.variant.name + " (build-id " +
                                self_.variant.build_id + ", ggml " + self_.ggml_commit + "): different kernels give different "
                                "bits, so results would not be bit-identical; run every host on one llama.cpp build and like CPUs");
    if (str("ggml_commit") != self_.ggml_commit)
        return Status::mismatch(who + "it runs ggml " + str("ggml_commit") + ", this host " + self_.ggml_commit);
    return Status::ok();
}

Status Dispatcher::check_layer(const Worker & w, const MoeRegion & r) const {
    const std::string who = "worker " + w.cfg->endpoint + " refused for layer " + std::to_string(r.il) + ": ";
    const nlohmann::json * layer = nullptr;
    if (w.identity.contains("layers") && w.identity["layers"].is_array())
        for (const auto & l : w.identity["layers"])
            if (l.value("il", -1) == r.il) layer = &l;
    if (layer == nullptr) return Status::mismatch(who + "it does not serve this layer");
    if (layer->value("n_embd", -1) != r.n_embd || layer->value("n_ff", -1) != r.n_ff || layer->value("n_expert", -1) != r.n_expert)
        return Status::mismatch(who + "dimensions differ (model file differs?)");
    const ggml_tensor * mine[3] = {r.gate_exps, r.up_exps, r.down_exps};
    const nlohmann::json & tensors = (*layer)["tensors"];
    for (int i = 0; i < 3; ++i) {
        if (!tensors.is_array() || tensors.size() != 3) return Status::mismatch(who + "malformed tensor list");
        const nlohmann::json & t = tensors[i];
        std::vector<int64_t> ne = t.value("ne", std::vector<int64_t>{});
        if (t.value("name", std::string()) != mine[i]->name || t.value("type", std::string()) != api_.ggml_type_name(mine[i]->type) ||
            ne.size() != 3 || ne[0] != mine[i]->ne[0] || ne[1] != mine[i]->ne[1] || ne[2] != mine[i]->ne[2])
            return Status::mismatch(who + "tensor " + t.value("name", std::string("?")) + " " + t.value("type", std::string("?")) +
                                    " differs from this host's " + mine[i]->name + " " + api_.ggml_type_name(mine[i]->type));
    }
    const nlohmann::json & digests = (*layer)["digests"];
    for (int e : assigned_experts(&w - workers_.data(), (int) r.n_expert)) {
        std::string key = std::to_string(e);
        if (!digests.is_object() || !digests.contains(key))
            return Status::mismatch(who + "it does not serve expert " + key + " assigned to it");
        uint64_t here = expert_identity_digest_of(r.gate_exps, r.up_exps, r.down_exps, e);
        if (digests[key].get<std::string>() != hex64(here))
            return Status::mismatch(who + "expert " + key + " weights differ from this host's (another model file?)");
    }
    return Status::ok();
}

bool Dispatcher::usable(size_t wi, const MoeRegion & r) {
    Worker & w = workers_[wi];
    if (!w.refused.empty()) return false;
    auto now = std::chrono::steady_clock::now();
    if (now < w.down_until) return false;
    if (!w.said_hello) {
        Status st = hello(w);
        if (st) st = check_identity(w);
        if (!st) {
            if (st.code() == Status::Code::mismatch) {
                w.refused = st.message();
                LOG_ERROR("%s", st.message().c_str());
            } else {
                w.said_hello = false;
                mark_failed(wi, st);
            }
            return false;
        }
        if (w.logged_down) LOG_INFO("worker %s is back", w.cfg->endpoint.c_str());
        w.backoff_ms = 0;
        w.logged_down = false;
    }
    if (!w.layers_ok.count(r.il)) {
        Status st = check_layer(w, r);
        if (!st) {
            w.refused = st.message();
            LOG_ERROR("%s", st.message().c_str());
            return false;
        }
        w.layers_ok.insert(r.il);
    }
    return true;
}

void Dispatcher::mark_failed(size_t wi, const Status & why) {
    Worker & w = workers_[wi];
    w.backoff_ms = w.backoff_ms == 0 ? 1000 : std::min(w.backoff_ms * 2, 30000);
    w.down_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(w.backoff_ms);
    w.said_hello = false;  // probe with a fresh hello when the back-off ends
    if (w.link) w.link->reset();
    ++w.failures;
    w.last_failure = why.message();
    if (pending_errors_.size() < 50) pending_errors_.push_back("worker " + w.cfg->endpoint + " failed: " + why.message());
    if (!w.logged_down) {
        const bool here = cfg_.dispatch.on_worker_error == WorkerErrorPolicy::local;
        LOG_ERROR("worker %s failed: %s; %s, probing it again after %d ms (back-off doubling to 30 s)", w.cfg->endpoint.c_str(),
                  why.message().c_str(), here ? "computing its part here" : "on_worker_error = \"abort\"", w.backoff_ms);
        w.logged_down = true;
    }
}

static double percentile(std::vector<float> v, double p) {
    if (v.empty()) return 0;
    size_t k = (size_t) (p * (v.size() - 1) + 0.5);
    std::nth_element(v.begin(), v.begin() + k, v.end());
    return v[k];
}

nlohmann::json Dispatcher::stats_json() const {
    nlohmann::json arr = nlohmann::json::array();
    for (const Worker & w : workers_) {
        nlohmann::json j = {{"endpoint", w.cfg->endpoint}, {"refused", w.refused}, {"fallbacks", w.fallbacks_unlinked},
                            {"failures", w.failures}, {"last_failure", w.last_failure}};
        if (w.identity.is_object())
            j["identity"] = {{"cpu_variant", w.identity.value("cpu_variant", "")}, {"experts", w.identity.value("experts", "")},
                             {"ggml_commit", w.identity.value("ggml_commit", "")}};
        if (w.link) {
            const WorkerStats & s = w.link->stats();
            j.update({{"requests", s.requests}, {"rows", s.rows}, {"slots", s.pairs}, {"bytes_out", s.bytes_out},
                      {"bytes_in", s.bytes_in}, {"rtt_ms_p50", percentile(s.rtt_ms, 0.5)},
                      {"rtt_ms_p99", percentile(s.rtt_ms, 0.99)}, {"service_ms_p50", percentile(s.service_ms, 0.5)},
                      {"service_ms_p99", percentile(s.service_ms, 0.99)}, {"service_ms_total", s.service_ms_total},
                      {"rtt_minus_service_ms_p50", percentile(s.rtt_minus_service_ms, 0.5)}, {"rtt_minus_service_ms_p99", percentile(s.rtt_minus_service_ms, 0.99)},
                      {"hash_ok", s.hash_ok}, {"hash_failed", s.hash_failed},
                      {"errors", s.errors}, {"timeouts", s.timeouts}, {"fallbacks", s.fallbacks + w.fallbacks_unlinked}, {"stale_replies", s.stale},
                      {"reconnects", s.reconnects}});
        }
        arr.push_back(j);
    }
    return arr;
}

} // namespace moezip
