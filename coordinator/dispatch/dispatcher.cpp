#include "coordinator/dispatch/dispatcher.h"

#include "coordinator/base/test_fault.h"
#include "coordinator/evidence/evidence.h"
#include "coordinator/base/log.h"
#include "coordinator/modes/split.h"

#include <algorithm>
#include <limits>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace moezip {

Dispatcher::Dispatcher(const Config & cfg, const GgmlApi & api, EngineIdentity self)
    : cfg_(cfg), api_(api), self_(std::move(self)), exec_(api, cfg.threads > 0 ? cfg.threads : 1), pid_(getpid()) {
    fault_corrupt_ = test_fault("corrupt_request");
    workers_.resize(cfg.workers.size());
    shard_shares_[1].assign(1, cfg.shard.local_share);
    for (const WorkerConfig & w : cfg.workers) shard_shares_[1].push_back(w.share);
    if (cfg.shard.auto_share) shard_shares_[1].assign(cfg.workers.size() + 1, 1.0 / (double) (cfg.workers.size() + 1));
    shard_shares_[0] = shard_shares_[1];
    for (size_t i = 0; i < workers_.size(); ++i) {
        Worker & w = workers_[i];
        w.cfg = &cfg.workers[i];
        w.trust = WorkerTrust(cfg.dispatch.verify_every);
        if (w.cfg->public_key.empty()) continue;
        // the key file is read once, here; a key that cannot be read refuses this worker (no plain fallback)
        w.keys.server_public = w.cfg->public_key;
        Status st = curve_available() ? curve_keypair_read(w.cfg->client_key, w.keys.client)
                                      : Status::unsupported("this libzmq has no CURVE support");
        if (!st) {
            w.refused = "worker " + w.cfg->endpoint + " refused: client_key: " + st.message();
            remember_refusal(w, w.refused);
            LOG_ERROR("%s", w.refused.c_str());
            pending_errors_.push_back(w.refused);
        }
    }
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

int Dispatcher::hello_wait_ms(const Worker & w, bool connected_again) const {
    const bool probe = w.backoff_ms > 0 || !w.refused.empty() || w.refused_instance != 0;
    if (!probe) return cfg_.dispatch.connect_timeout_ms;
    return std::min(cfg_.dispatch.connect_timeout_ms, connected_again ? 1000 : 250);
}

Status Dispatcher::hello(Worker & w, int wait_ms) {
    // Whatever was verified before belongs to the instance that answered then.
    w.said_hello = false;
    w.instance = 0;
    w.link->set_instance(0);
    w.plans_ok.clear();
    w.link->set_timeout_ms(wait_ms > 0 ? wait_ms : cfg_.dispatch.connect_timeout_ms);  // hello_wait_ms
    nlohmann::json me = {{"protocol", kProtocolVersion}, {"ggml_commit", self_.ggml_commit},
                         {"cpu_variant", self_.variant.name}, {"cpu_build_id", self_.variant.build_id},
                         {"plan", plan_json(&w - workers_.data())}};
    std::string text = me.dump();
    MsgHeader h = msg_header_make(MsgKind::hello);
    h.request_id = next_request_id();
    Status st = w.link->send(h, {{WireType::none, {text.data(), text.size()}}});
    w.hello_delivered = (bool) st;
    MsgHeader rh;
    zmq::message_t data;
    if (st) st = w.link->recv(h.request_id, rh, data);
    if (!st) return st;
    if (rh.kind != static_cast<uint16_t>(MsgKind::hello_ok)) return Status::corruption(w.cfg->endpoint + ": hello answered with " + msg_kind_name(rh.kind));
    w.identity = nlohmann::json::parse(static_cast<const char *>(data.data()), static_cast<const char *>(data.data()) + data.size(),
                                       nullptr, false);
    if (w.identity.is_discarded() || !w.identity.is_object()) return Status::corruption(w.cfg->endpoint + ": hello_ok is not JSON");
    const nlohmann::json * inst = w.identity.contains("instance") ? &w.identity["instance"] : nullptr;
    if (rh.instance == 0 || inst == nullptr || !inst->is_string() || inst->get<std::string>() != hex64(rh.instance))
        return Status::corruption(w.cfg->endpoint + ": hello_ok names no worker instance, or not the one in its header");
    w.instance = rh.instance;
    w.said_hello = true;
    w.reply_after_hello = true;
    w.link->set_timeout_ms(w.cfg->timeout_ms);  // per-request timeout from now on
    return Status::ok();
}

// What this host will ask of worker w (the worker refuses anything else: bad_plan).
nlohmann::json Dispatcher::plan_json(size_t w) const {
    if (cfg_.mode == ConfigMode::experts) return {{"mode", "experts"}, {"experts", expert_ranges_format(cfg_.workers[w].experts)}};
    if (cfg_.mode == ConfigMode::shard) {
        // slices in split order: this host first; decode calls' own split only when it differs
        nlohmann::json plan = {{"mode", "shard"}, {"shares", shard_shares_[1]}, {"slice", w + 1}};
        if (shard_shares_[0] != shard_shares_[1]) plan["decode_shares"] = shard_shares_[0];
        return plan;
    }
    return {{"mode", "rows"}};
}

// The link must accept the largest reply a request for region r can bring: per-slot outputs of
// every row, f32, rounded up to a power of two (at least WorkerLink::kDefaultMaxReplyBytes). The
// first link is opened with that room; a larger region later reopens it with more (hello again).
void Dispatcher::ensure_link(Worker & w, const MoeRegion & r) {
    const int64_t need = (int64_t) r.n_embd * 4 * std::max<int64_t>(1, r.n_used) * std::max<int64_t>(1, r.n_tokens);
    int64_t room = WorkerLink::kDefaultMaxReplyBytes;
    while (room < need) room *= 2;
    if (!ctx_) ctx_.reset(new zmq::context_t(1));
    if (!w.link) {
        w.link.reset(new WorkerLink(*ctx_, w.cfg->endpoint, cfg_.dispatch.connect_timeout_ms, w.keys, room));
        if (!w.keys.curve() && w.cfg->endpoint.rfind("tcp://", 0) == 0 && w.cfg->endpoint.rfind("tcp://127.", 0) != 0 &&
            w.cfg->endpoint.rfind("tcp://localhost:", 0) != 0 && w.cfg->endpoint.rfind("tcp://[::1]:", 0) != 0)
            LOG_WARN("worker %s has no public_key: its link is neither encrypted nor authenticated (docs/security.md)",
                     w.cfg->endpoint.c_str());
        return;
    }
    if (need <= w.link->max_reply_bytes_open()) return;
    w.link->set_max_reply_bytes(room);
    w.link->reset();
    w.said_hello = false;  // a new connection: the worker learns this host's plan again
}

std::vector<int> Dispatcher::assigned_experts(size_t w, int n_expert) const {
    std::vector<int> out;
    if (cfg_.mode == ConfigMode::rows || cfg_.mode == ConfigMode::shard) {
        for (int e = 0; e < n_expert; ++e) out.push_back(e);  // a row carries any expert
        return out;
    }
    // every expert the worker owns, replicas included (experts.replicas): any of them may be sent to it
    for (int e = 0; e < n_expert; ++e)
        if (expert_ranges_contains(cfg_.workers[w].experts, e)) out.push_back(e);
    return out;
}

namespace {

// hello_ok fields, read without ever throwing: a field of the wrong JSON type reads as absent.
std::string json_str(const nlohmann::json & j, const char * key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string("?");
}

int64_t json_int(const nlohmann::json & j, const char * key) {
    auto it = j.find(key);
    return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : INT64_MIN;
}

// A peer's value for a message: a whole number or a short string as it is, anything else by its
// type. Never dumped: a hostile hello_ok nested "protocol" 200000 deep, and the recursive dump
// crashed the host.
std::string peer_value_text(const nlohmann::json & j, const char * key) {
    auto it = j.find(key);
    if (it == j.end()) return "?";
    if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
    if (it->is_string() && it->get_ref<const std::string &>().size() <= 32) return "\"" + it->get<std::string>() + "\"";
    return std::string("(a JSON ") + it->type_name() + ")";
}

/// A peer's string for a message: at most 300 bytes, every byte outside printable ASCII as '?'.
std::string peer_text(const nlohmann::json & j, const char * key) {
    std::string v = json_str(j, key);
    if (v.size() > 300) v = v.substr(0, 300) + "...";
    for (char & ch : v)
        if (ch < 0x20 || ch > 0x7e) ch = '?';
    return v;
}

/// "; it serves the slice /w/s.gguf of m.gguf (experts 0-3, tensor table ...)" when the worker's
/// hello_ok names an expert slice (moezip-slice), else "": a refusal for content then names the
/// file the worker read and the model it was cut from.
std::string slice_note(const nlohmann::json & identity) {
    auto it = identity.find("slice");
    if (it == identity.end() || !it->is_object()) return "";
    return "; it serves the slice " + peer_text(*it, "file") + " of " + peer_text(*it, "source") + " (experts " +
           peer_text(*it, "experts") + ", tensor table " + peer_text(*it, "source_table") + "), cut from another model or damaged";
}

/// What a worker's hello_ok says it may use (`cpu`, docs/internals/protocol.md): an object of the known
/// numbers only (threads, affinity_cpus, quota_cores, cores; null where absent or not a number),
/// never the peer's JSON as it came; null when it said nothing. The one reader of that field.
nlohmann::json stated_cpu(const nlohmann::json & identity) {
    if (!identity.is_object()) return nullptr;
    auto it = identity.find("cpu");
    if (it == identity.end() || !it->is_object()) return nullptr;
    nlohmann::json cpu = nlohmann::json::object();
    for (const char * k : {"threads", "affinity_cpus", "quota_cores", "cores"}) {
        auto v = it->find(k);
        cpu[k] = v != it->end() && v->is_number() ? *v : nlohmann::json();
    }
    return cpu;
}

} // namespace

double stated_cores(const nlohmann::json & identity) {
    const nlohmann::json cpu = stated_cpu(identity);
    if (!cpu.is_object() || !cpu["cores"].is_number()) return 0;
    const double c = cpu["cores"].get<double>();
    if (!(c > 0 && c <= kMaxStatedCores)) return 0;  // a hostile value is no capacity, not a share
    // a worker states min(threads, affinity CPUs, quota): both counts must be there and bound it (a
    // hostile worker stated 1e6 cores beside 1 thread; another left the counts out and said 1024)
    for (const char * bound : {"threads", "affinity_cpus"})
        if (!cpu[bound].is_number() || !(cpu[bound].get<double>() > 0) || c > cpu[bound].get<double>()) return 0;
    if (cpu["quota_cores"].is_number() && c > cpu["quota_cores"].get<double>()) return 0;
    return c;
}

double Dispatcher::worker_cores(size_t wi) const { return stated_cores(workers_[wi].identity); }

bool Dispatcher::kernels_differ(const Worker & w) const {
    return json_str(w.identity, "cpu_variant") != self_.variant.name || json_str(w.identity, "cpu_build_id") != self_.variant.build_id;
}

Status Dispatcher::check_identity(const Worker & w) const {
    const nlohmann::json & id = w.identity;
    const std::string who = "worker " + w.cfg->endpoint + " refused: ";
    if (json_int(id, "protocol") != kProtocolVersion)
        return Status::mismatch(who + "protocol " + peer_value_text(id, "protocol") + ", this host speaks " +
                                std::to_string(kProtocolVersion));
    // The kernels' build-id first: it names a mix of builds (or of CPU variants) for what it is.
    if (kernels_differ(w) && cfg_.numerics == NumericsPolicy::exact)
        return Status::mismatch(who + "it computes with CPU variant " + json_str(id, "cpu_variant") + " (build-id " +
                                json_str(id, "cpu_build_id") + ", ggml " + json_str(id, "ggml_commit") + "), this host with " +
                                self_.variant.name + " (build-id " + self_.variant.build_id + ", ggml " + self_.ggml_commit +
                                "): different kernels give different bits, so results would not be bit-identical; run every "
                                "host on one llama.cpp build and like CPUs, or set numerics = \"approximate\" to accept it within "
                                "the verify tolerances");
    if (json_str(id, "ggml_commit") != self_.ggml_commit)
        return Status::mismatch(who + "it runs ggml " + json_str(id, "ggml_commit") + ", this host " + self_.ggml_commit);
    // Identity is the process, not the endpoint: two [[worker]] entries that reach one process
    // (tcp://127.0.0.1:P and tcp://localhost:P, a DNS alias) would compute both entries' parts on
    // one host while the report counted two.
    for (const Worker & o : workers_)
        if (&o != &w && o.said_hello && o.instance != 0 && o.instance == w.instance)
            return Status::mismatch(who + "it is the same worker process (instance " + hex64(w.instance) + ") as [[worker]] " +
                                    o.cfg->endpoint + ": give each [[worker]] entry its own moezip-worker");
    return Status::ok();
}

Status Dispatcher::check_layer(const Worker & w, const MoeRegion & r) {
    const std::string who = "worker " + w.cfg->endpoint + " refused for layer " + std::to_string(r.il) + ": ";
    const nlohmann::json * layer = nullptr;
    auto layers = w.identity.find("layers");
    if (layers != w.identity.end() && layers->is_array())
        for (const auto & l : *layers)
            if (l.is_object() && json_int(l, "il") == r.il) layer = &l;
    if (layer == nullptr) return Status::mismatch(who + "it does not serve this layer");
    if (json_int(*layer, "n_embd") != r.n_embd || json_int(*layer, "n_ff") != r.n_ff || json_int(*layer, "n_expert") != r.n_expert)
        return Status::mismatch(who + "dimensions differ (model file differs?)" + slice_note(w.identity));
    const ggml_tensor * mine[3] = {r.gate_exps, r.up_exps, r.down_exps};
    auto tensors = layer->find("tensors");
    if (tensors == layer->end() || !tensors->is_array() || tensors->size() != 3) return Status::mismatch(who + "malformed tensor list");
    for (int i = 0; i < 3; ++i) {
        const nlohmann::json & t = (*tensors)[i];
        if (!t.is_object()) return Status::mismatch(who + "malformed tensor list");
        auto ne = t.find("ne");
        bool same_shape = ne != t.end() && ne->is_array() && ne->size() == 3;
        for (size_t d = 0; same_shape && d < 3; ++d)
            same_shape = (*ne)[d].is_number_integer() && (*ne)[d].get<int64_t>() == mine[i]->ne[d];
        if (json_str(t, "name") != mine[i]->name || json_str(t, "type") != api_.ggml_type_name(mine[i]->type) || !same_shape)
            return Status::mismatch(who + "tensor " + json_str(t, "name") + " " + json_str(t, "type") + " differs from this host's " +
                                    mine[i]->name + " " + api_.ggml_type_name(mine[i]->type) + slice_note(w.identity));
    }
    // the layout decides the kernels: GGUF layout runs the generic MUL_MAT_ID, CPU_REPACK the repack one
    const std::string theirs_layout = layer->contains("layout") ? json_str(*layer, "layout") : std::string("gguf");
    const std::string mine_layout = r.repacked ? "repacked" : "gguf";
    if (theirs_layout != mine_layout)
        return Status::mismatch(who + "it holds the experts in " + theirs_layout + " layout, this host in " + mine_layout +
                                (r.repacked ? " (the engine repacked them, CPU_REPACK): the kernels and their bits would differ; "
                                              "start the worker with --repack, or set no_repack = true here"
                                            : ": the kernels and their bits would differ"));
    // per-expert biases (gpt-oss): the same tensors on both sides; their content is in the digests
    std::string mine_biases, theirs_biases;
    for (const ggml_tensor * b : {r.gate_b, r.up_b, r.down_b})
        if (b) mine_biases += std::string(mine_biases.empty() ? "" : ", ") + b->name;
    auto biases = layer->find("biases");
    if (biases != layer->end() && biases->is_array())
        for (const auto & b : *biases)
            theirs_biases += std::string(theirs_biases.empty() ? "" : ", ") + (b.is_string() ? b.get<std::string>() : "?");
    if (mine_biases != theirs_biases)
        return Status::mismatch(who + "its expert biases (" + (theirs_biases.empty() ? "none" : theirs_biases) + ") differ from this host's (" +
                                (mine_biases.empty() ? "none" : mine_biases) + ")");
    auto digests = layer->find("digests");
    if (digests == layer->end() || !digests->is_object()) return Status::mismatch(who + "no expert digests");
    const std::vector<int> experts = assigned_experts(&w - workers_.data(), (int) r.n_expert);
    for (int e : experts)
        if (json_str(*digests, std::to_string(e).c_str()) == "?")
            return Status::mismatch(who + "it does not serve expert " + std::to_string(e) + " assigned to it" +
                                    (w.identity.contains("slice") ? "; it serves a slice of experts " + peer_text(w.identity, "experts") : ""));
    // experts mode: what this host does not compute is read for the digest, then dropped again; so
    // are its own replicas of the worker's experts when it computes those from a copy
    // (experts.copy_local, coordinator/memory/own_expert_copies.h), else they would be held twice
    std::vector<int> drop_after;
    if (cfg_.mode == ConfigMode::experts) {
        const bool release = config_why_experts_resident(cfg_).empty();
        const bool copied_here = cfg_.experts.copy_local && cfg_.experts.shadow_every == 0;
        const std::vector<int> owners = expert_owners(cfg_, (int) r.n_expert);
        for (int e : experts)
            if (owners[(size_t) e] != -1 ? release : copied_here) drop_after.push_back(e);
    }
    const std::vector<uint64_t> here = digests_here_.digests(r, experts, drop_after);
    for (size_t i = 0; i < experts.size(); ++i)
        if (json_str(*digests, std::to_string(experts[i]).c_str()) != hex64(here[i]))
            return Status::mismatch(who + "expert " + std::to_string(experts[i]) +
                                    " weights differ from this host's (another model file, or a changed or damaged copy)" +
                                    slice_note(w.identity));
    return Status::ok();
}

// Refusal messages the report keeps per worker for the whole run (refusals_first).
constexpr size_t kRefusalsKept = 8;

void Dispatcher::remember_refusal(Worker & w, const std::string & why) {
    ++w.refusals;
    if (w.refusals_first.size() < kRefusalsKept)
        w.refusals_first.push_back((w.instance ? "instance " + hex64(w.instance) + ": " : std::string()) + why);
}

void Dispatcher::note_refusal(Worker & w, const std::string & why) {
    remember_refusal(w, why);
    w.refused_instance = w.instance;
    w.refused_handshakes_seen = w.link ? w.link->handshakes() : 0;
    w.refused_backoff_ms = 1000;
    w.refused_probe_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(w.refused_backoff_ms);
}

bool Dispatcher::replaced_since_refusal(Worker & w, const MoeRegion & r) {
    const auto now = std::chrono::steady_clock::now();
    // The refused process closed its connection (it exited, or was stopped to be replaced): what
    // answers next is another process, worth a hello at once rather than at the end of a back-off
    // that has doubled up to 30 s over a long run.
    const bool went_away = w.link && w.link->saw_disconnect();
    // A new connection completed its handshake: a process is bound at the endpoint and answers. The
    // probe when the refused one went away may have found the port empty while its successor loaded.
    const bool connected_again = w.link && w.link->handshakes() > w.refused_handshakes_seen;
    if (now < w.refused_probe_at && !went_away && !connected_again) return false;
    if (now >= w.refused_probe_at) {  // only the probes the back-off schedules double it
        w.refused_backoff_ms = std::min(std::max(w.refused_backoff_ms, 500) * 2, 30000);
        w.refused_probe_at = now + std::chrono::milliseconds(w.refused_backoff_ms);
    }
    ensure_link(w, r);
    Status st = hello(w, hello_wait_ms(w, connected_again));
    w.refused_handshakes_seen = w.link->handshakes();
    w.said_hello = false;  // a newcomer goes through the whole verification in usable()
    if (!st) return false;  // refused again at hello (same reason), or not reachable: the refusal stands
    if (w.instance == w.refused_instance) return false;  // the same process: its refusal stands
    LOG_INFO("worker %s: instance %s answers in place of the refused %s: verifying it from scratch", w.cfg->endpoint.c_str(),
             hex64(w.instance).c_str(), w.refused_instance ? hex64(w.refused_instance).c_str() : "(no hello_ok)");
    w.refused.clear();
    w.plans_refused.clear();
    w.refused_instance = 0;
    w.refused_backoff_ms = 0;
    ++w.replaced_after_refusal;
    return true;
}

namespace {

// Adds the time of a scope to *into once it is set (usable()'s hellos and checks).
struct UsableClock {
    double * into = nullptr;
    const std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~UsableClock() {
        if (into) *into += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
};

} // namespace

bool Dispatcher::usable(size_t wi, const MoeRegion & r) {
    Worker & w = workers_[wi];
    UsableClock clock;
    if (w.trust.untrusted()) return false;  // caught computing wrong results: never again this run
    if (!w.refused.empty() || w.plans_refused.count(r.plan_id)) {
        clock.into = &usable_time_.probe_ms;  // a hello, once per back-off
        if (!replaced_since_refusal(w, r)) return false;
    }
    auto now = std::chrono::steady_clock::now();
    bool connected_again = false;
    if (now < w.down_until) {
        // down, and its back-off runs: asked now only when a new connection to it completed its
        // handshake since (a process answers at the endpoint again); verified from hello as always
        if (!w.probe_on_connect || !w.link || w.link->handshakes() <= w.handshakes_seen) return false;
        connected_again = true;
        ++w.probes_on_connect;
        // capped: a worker that flaps (fails, reconnects, fails) would write these three lines per cycle
        LOG_CAPPED(LogLevel::info, "worker %s connected again: probing it now (its back-off had %lld ms to run)", w.cfg->endpoint.c_str(),
                 (long long) std::chrono::duration_cast<std::chrono::milliseconds>(w.down_until - now).count());
        w.down_until = {};  // the back-off ends here; a failed probe starts the next (mark_failed)
    }
    ensure_link(w, r);
    if (!w.said_hello) {
        // the first hello (and the wait for a connection) and identity check of the run: setup; one
        // after a failure probes a worker that was down: waiting for it
        if (clock.into == nullptr) clock.into = w.failures == 0 ? &usable_time_.setup_ms : &usable_time_.probe_ms;
        Status st = hello(w, hello_wait_ms(w, connected_again));
        if (st) st = check_identity(w);
        if (!st) {
            w.said_hello = false;
            if (st.code() == Status::Code::mismatch) {
                w.refused = st.message();
                note_refusal(w, st.message());
                LOG_ERROR("%s", st.message().c_str());
                if (pending_errors_.size() < 50) pending_errors_.push_back(st.message());
            } else {
                // the hello reached a connected worker that did not answer it in time: its next
                // connection is no sign that it is back (it never went away)
                const bool silent_while_connected = w.hello_delivered && st.code() == Status::Code::timeout;
                mark_failed(wi, st);
                if (silent_while_connected) w.probe_on_connect = false;
            }
            return false;
        }
        w.link->set_instance(w.instance);
        note_inexact(w);
        if (w.logged_down) LOG_CAPPED(LogLevel::info, "worker %s is back (instance %s)", w.cfg->endpoint.c_str(), hex64(w.instance).c_str());
        w.backoff_ms = 0;
        w.logged_down = false;
    }
    if (!w.plans_ok.count(r.plan_id)) {
        if (clock.into == nullptr) clock.into = &usable_time_.setup_ms;  // the plan's weights checked, digests made here
        Status st = check_layer(w, r);
        if (!st) {
            w.plans_refused[r.plan_id] = st.message();
            note_refusal(w, st.message());
            LOG_ERROR("%s", st.message().c_str());
            if (pending_errors_.size() < 50) pending_errors_.push_back(st.message());
            return false;
        }
        w.plans_ok.insert(r.plan_id);
    }
    return true;
}

// numerics = "approximate": a worker on other kernels is used, and the run says so once.
void Dispatcher::note_inexact(Worker & w) {
    const bool differ = kernels_differ(w);
    if (!differ) { w.inexact.clear(); return; }
    char tol[96];
    snprintf(tol, sizeof tol, "max abs %g, cosine %g", cfg_.dispatch.verify_max_abs, cfg_.dispatch.verify_min_cosine);
    const std::string why = "worker " + w.cfg->endpoint + " computes with CPU variant " + json_str(w.identity, "cpu_variant") +
                            " (build-id " + json_str(w.identity, "cpu_build_id") + "), this host with " + self_.variant.name +
                            " (build-id " + self_.variant.build_id + "): numerics = \"approximate\", its results are not "
                            "bit-exact; 1 in " + std::to_string(cfg_.dispatch.verify_every) + " is checked within " + tol;
    if (w.inexact == why) return;
    w.inexact = why;
    LOG_WARN("%s", why.c_str());
    if (pending_errors_.size() < 50) pending_errors_.push_back(why);
}

void Dispatcher::set_shard_shares(CallSize size, std::vector<double> shares) {
    shard_shares_[(int) size] = std::move(shares);
    for (Worker & w : workers_) w.said_hello = false;  // usable() says hello with the new plan first
}

void Dispatcher::record_verify(size_t wi, const PartComparison & c, const std::string & what) {
    Worker & w = workers_[wi];
    const bool was = w.trust.untrusted();
    char detail[160];
    snprintf(detail, sizeof detail, "max abs difference %.3g, cosine %.9f, first differing value %zu", c.max_abs, c.cosine, c.first_bad);
    w.trust.record(c, "worker " + w.cfg->endpoint + " returned a wrong result (" + what + ": " + detail +
                          "): its result was discarded and computed here; it gets no more work this run");
    if (was || !w.trust.untrusted()) return;
    LOG_ERROR("%s", w.trust.why_untrusted().c_str());
    if (pending_errors_.size() < 50) pending_errors_.push_back(w.trust.why_untrusted());
}

void Dispatcher::mark_failed(size_t wi, const Status & why) {
    Worker & w = workers_[wi];
    if (why.code() == Status::Code::invalid_argument) {
        // over_budget: the worker is fine and kept its connection; this request was too large for it
        ++w.over_budget;
        LOG_CAPPED(LogLevel::warn, "%s; computed here (raise the worker's budget, docs/worker.md, or use a smaller batch)",
                   why.message().c_str());
        if (pending_errors_.size() < 50) pending_errors_.push_back(why.message());
        return;
    }
    if (w.link && w.link->last_error() == ErrorCode::model_changed) {
        // its model file no longer holds the bytes it was verified with: it will not serve this run
        // (a restarted worker is a new instance: replaced_since_refusal takes it after its checks)
        w.refused = "worker " + w.cfg->endpoint + " refused: " + why.message();
        note_refusal(w, w.refused);
        LOG_ERROR("%s", w.refused.c_str());
        if (pending_errors_.size() < 50) pending_errors_.push_back(w.refused);
    } else if (why.message().find("worker error bad_plan") != std::string::npos && ++w.bad_plan_streak >= 2) {
        // refused again right after a hello that stated the plan: the worker will not take it
        w.refused = "worker " + w.cfg->endpoint + " refused: it does not accept this host's plan (" + why.message() + ")";
        note_refusal(w, w.refused);  // binds this instance: the same process is not taken for a new one at the next probe
        LOG_ERROR("%s", w.refused.c_str());
        if (pending_errors_.size() < 50) pending_errors_.push_back(w.refused);
    }
    w.said_hello = false;  // probe with a fresh hello (and every per-layer check) before any compute
    w.plans_ok.clear();
    if (w.link) w.link->reset();
    // connections from here on are new: one that completes its handshake brings the probe forward
    w.handshakes_seen = w.link ? w.link->handshakes() : 0;
    w.probe_on_connect = true;
    ++w.failures;
    w.last_failure = why.message();
    if (pending_errors_.size() < 50) pending_errors_.push_back("worker " + w.cfg->endpoint + " failed: " + why.message());
    if (why.code() == Status::Code::mismatch && !w.refused.empty()) return;  // refused above (model_changed): not a new instance
    if (why.code() == Status::Code::mismatch) {
        // another process answers on this endpoint: not down, but unknown until verified again
        ++w.reverifications;
        w.down_until = {};
        LOG_CAPPED(LogLevel::error, "worker %s: %s; verifying it again before it computes anything", w.cfg->endpoint.c_str(),
                   why.message().c_str());
        return;
    }
    w.backoff_ms = w.backoff_ms == 0 ? 1000 : std::min(w.backoff_ms * 2, 30000);
    w.down_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(w.backoff_ms);
    if (!w.logged_down) {
        const bool here = cfg_.dispatch.on_worker_error == WorkerErrorPolicy::local;
        if (here)
            LOG_CAPPED(LogLevel::error, "worker %s failed: %s; computing its part here, probing it again after %d ms (back-off doubling to 30 s)",
                      w.cfg->endpoint.c_str(), why.message().c_str(), w.backoff_ms);
        else
            LOG_CAPPED(LogLevel::error, "worker %s failed: %s; on_worker_error = \"abort\": every compute that needs it fails until it is back "
                      "(probed again after %d ms, or at once when it connects again), and the process will exit with status 4",
                      w.cfg->endpoint.c_str(), why.message().c_str(), w.backoff_ms);
        w.logged_down = true;
    }
}

void Dispatcher::forget_plans(const std::vector<uint64_t> & plans) {
    digests_here_.forget(plans);
    for (Worker & w : workers_)
        for (uint64_t p : plans) {
            w.plans_ok.erase(p);
            w.plans_refused.erase(p);
        }
}

// NaN for no sample: written as null in the report (0 would read as a measured time).
static double percentile(const LatencySamples & v, double p) { return v.percentile(p); }

nlohmann::json Dispatcher::stats_json() const {
    nlohmann::json arr = nlohmann::json::array();
    for (const Worker & w : workers_) {
        nlohmann::json j = {{"endpoint", w.cfg->endpoint}, {"refused", w.refused}, {"fallbacks", w.fallbacks_unlinked},
                            {"failures", w.failures}, {"last_failure", w.last_failure}};
        if (w.identity.is_object())
            j["identity"] = {{"cpu_variant", json_str(w.identity, "cpu_variant")}, {"experts", json_str(w.identity, "experts")},
                             {"ggml_commit", json_str(w.identity, "ggml_commit")}, {"instance", json_str(w.identity, "instance")}};
        const nlohmann::json cpu = stated_cpu(w.identity);  // what it said it may use: a first guess of its speed
        if (!cpu.is_null()) j["identity"]["cpu"] = cpu;
        j["reverifications"] = w.reverifications;
        j["replaced_after_refusal"] = w.replaced_after_refusal;
        j["probes_on_connect"] = w.probes_on_connect;
        j["curve"] = w.keys.curve();  // encrypted and authenticated (never the key itself)
        j["verify"] = w.trust.to_json();
        j["untrusted"] = w.trust.why_untrusted();
        j["over_budget"] = w.over_budget;
        j["numerics"] = w.inexact.empty() ? "exact" : "approximate";
        if (!w.inexact.empty()) j["inexact"] = w.inexact;  // which outputs are not bit-exact: all it computed
        j["refusals"] = w.refusals;  // every refusal of the run, also those dropped since
        j["refusals_first"] = w.refusals_first;  // [] when none: the key is always there
        if (!w.plans_refused.empty()) {
            nlohmann::json lr = nlohmann::json::object();
            for (const auto & kv : w.plans_refused) lr[std::to_string(kv.first)] = kv.second;
            j["plans_refused"] = lr;  // plan id -> why (the message names the layer)
        }
        if (w.link) {
            const WorkerStats & s = w.link->stats();
            j.update({{"requests", s.requests}, {"rows", s.rows}, {"slots", s.pairs}, {"bytes_out", s.bytes_out},
                      {"bytes_in", s.bytes_in}, {"rtt_ms_p50", percentile(s.rtt_ms, 0.5)},
                      {"rtt_ms_p99", percentile(s.rtt_ms, 0.99)}, {"one_row_requests", s.rtt_ms_one_row.size()},
                      {"rtt_ms_p50_one_row", percentile(s.rtt_ms_one_row, 0.5)}, {"rtt_ms_p99_one_row", percentile(s.rtt_ms_one_row, 0.99)},
                      {"service_ms_p50", percentile(s.service_ms, 0.5)},
                      {"service_ms_p99", percentile(s.service_ms, 0.99)}, {"service_ms_total", s.service_ms_total()},
                      {"setup_ms_total", s.setup_ms_total()},
                      {"rtt_minus_service_ms_p50", percentile(s.rtt_minus_service_ms, 0.5)}, {"rtt_minus_service_ms_p99", percentile(s.rtt_minus_service_ms, 0.99)},
                      {"hash_ok", s.hash_ok}, {"hash_failed", s.hash_failed},
                      {"errors", s.errors}, {"timeouts", s.timeouts}, {"fallbacks", s.fallbacks + w.fallbacks_unlinked}, {"stale_replies", s.stale},
                      {"reconnects", s.reconnects}, {"disconnects", s.disconnects}, {"handshakes", s.handshakes}, {"foreign_instance_replies", s.foreign_instance},
                      {"parts_dropped", s.parts_dropped}, {"prefix_sum_replies", s.prefix_sum_replies},
                      {"prefix_sum_rows", s.prefix_sum_rows}, {"prefix_sum_slots", s.prefix_sum_slots}, {"max_reply_bytes", w.link->max_reply_bytes_open()}});
        }
        arr.push_back(j);
    }
    return arr;
}

} // namespace moezip
