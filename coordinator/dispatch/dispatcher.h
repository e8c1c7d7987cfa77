// moezip: the coordinator's side of distribution, shared by the rows and experts handlers —
// the worker links, the hello handshake and identity checks, liveness, and per-worker evidence.
//
// Nothing is created before the first region is dispatched: the ZeroMQ context and sockets
// appear at the first call (a process that never computes a MoE graph never opens a socket).
// A worker is used only after its hello_ok matched this host: same ggml commit, same CPU variant
// and build-id (the condition for bit-identical kernels), the experts it must serve, and, per layer
// at first use in a model epoch, the same expert tensors (name, type, shape) and expert content
// digests. The verification is bound to the worker's process instance (hello_ok and every reply
// header carry it): a reply from another instance means the worker restarted or was replaced, and
// the whole verification starts again before it gets any compute. A new model epoch (the engine
// freed the weights the plan was made for) clears every per-layer verification.
// A worker that fails is marked down and probed again after a back-off (1 s, doubling to 30 s), or
// at once when a new connection to it completes ZeroMQ's handshake (a process answers at its
// endpoint again: restarted, resumed after SIGSTOP, its link restored), so it returns to service
// within a call of answering, verified from hello again; meanwhile its work is computed here
// (policy "local") or the compute fails (policy "abort").
// Security (docs/security.md): a worker with a public_key is reached over CURVE with this host's
// key file (read when the dispatcher is made; a key that cannot be read refuses the worker); the
// hello states this host's plan for the worker (mode, experts, n_ff slice), and the worker computes
// nothing else; the link accepts replies up to the largest this host can expect for the region it
// sends (reopened, and hello said again, when a larger region comes); and verify_every samples
// results to recompute here (worker_trust.h): a worker caught lying is untrusted for the run.
#pragma once

#include "coordinator/balance/worker_overhead.h"
#include "coordinator/config/config.h"
#include "coordinator/dispatch/expert_digests_here.h"
#include "coordinator/dispatch/worker_trust.h"
#include "coordinator/compute/moe_exec.h"
#include "coordinator/wire/transport.h"
#include "provider_map/moe_region.h"
#include "provider_map/provider_map.h"

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <chrono>
#include <sched.h>
#include <memory>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace moezip {

/// What this host runs, for the handshake.
struct EngineIdentity {
    std::string ggml_commit;
    BackendVariant variant;
};

/// The cores a worker's hello_ok identity states it may use (`cpu.cores`, docs/internals/protocol.md), as a
/// first guess of its speed: 0 (unknown) unless a number in (0, kMaxStatedCores], stated beside
/// positive threads and affinity CPUs, and no more than those nor than a quota stated beside it (a
/// worker states min(threads, affinity CPUs, quota), coordinator/base/cpu_capacity.h: more is not a
/// state it can be in, and a statement without them is not one a worker makes). A worker may still
/// overstate within those bounds: that costs speed, never results, and the calls' measures correct
/// it once the saving pays for a repack (coordinator/balance/slice_change_gate.h).
double stated_cores(const nlohmann::json & identity);
constexpr double kMaxStatedCores = 1024;

class Dispatcher {
public:
    Dispatcher(const Config & cfg, const GgmlApi & api, EngineIdentity self);
    ~Dispatcher();

    size_t n_workers() const { return workers_.size(); }
    /// The cores worker w stated in its last hello_ok ("cpu": {"cores"}: its threads under its CPU
    /// affinity and quota, coordinator/base/cpu_capacity.h); 0 before a hello_ok or from a worker
    /// that states none.
    double worker_cores(size_t w) const;
    /// True when worker w may take work for region r now (connects, says hello, and checks the
    /// region's weights — its plan — the first time; false while the worker is down or refused).
    bool usable(size_t w, const MoeRegion & r);
    /// ms spent so far in usable(), not computing: `setup_ms` making workers usable the first time
    /// (the first hello of a worker and the wait for its connection, identity and plan checks with
    /// the digests of its experts made here), `probe_ms` asking a worker that failed or was refused
    /// whether it is back (hellos after a back-off). The handlers move them from ms_local to
    /// ms_setup and ms_wait.
    struct UsableTime {
        double setup_ms = 0, probe_ms = 0;
    };
    UsableTime usable_time() const { return usable_time_; }
    WorkerLink & link(size_t w) { return *workers_[w].link; }
    /// Marks worker w down after a failed request (logs the reason once per failure streak). A
    /// reply from another worker instance (Status::Code::mismatch from WorkerLink::recv) is not a
    /// down worker: it is verified again from hello at its next use, without back-off.
    void mark_failed(size_t w, const Status & why);
    /// The engine freed the weights of these plans: what was checked or refused for them is dropped
    /// (weights seen later get new plans, checked again by content before any worker computes them).
    void forget_plans(const std::vector<uint64_t> & plans);
    uint64_t next_request_id() { return ++request_id_; }
    /// True once for worker w's first reply after a hello: a shard worker packs the slices of a new
    /// plan before it reads that request, so its round trip is no overhead sample (the balancer's
    /// cost per row of a prefill took a 7 s prepack for 15 ms a row and gave the worker nothing).
    bool take_first_after_hello(size_t w) {
        const bool first = workers_[w].reply_after_hello;
        workers_[w].reply_after_hello = false;
        return first;
    }
    /// Called once the requests of a call are queued, before this host computes its own part:
    /// gives the CPU to ZeroMQ's I/O thread so it puts them on the wire now. When the engine's
    /// threads fill every core (one pinned core in the bench), the I/O thread could otherwise wait
    /// for the scheduler's time slice (ms) and the workers would start late; measured on
    /// a3b-L4-q8_0 decode: waiting for the worker 0.39-0.50 ms per call with it, 0.48-1.37 without.
    void let_io_thread_send() const { sched_yield(); }
    /// Call once per result of worker w that arrived and matches its request: true when it is to
    /// be verified here before it is used (verify_every).
    bool verify_due(size_t w) {
        workers_[w].bad_plan_streak = 0;
        return workers_[w].trust.due();
    }
    /// Records the verification of one result of worker w (`what` names the part, e.g. "layer 3
    /// rows 0-63"); a mismatch marks the worker untrusted: logged, in the report, no more work.
    void record_verify(size_t w, const PartComparison & c, const std::string & what);
    /// True when worker w computes with other kernels than this host (another CPU variant or
    /// build-id, accepted by numerics = "approximate"): its results are compared within the verify
    /// tolerances, never bit for bit, and are not the single-node bits.
    bool inexact(size_t w) const { return !workers_[w].inexact.empty(); }
    /// Counts one request of worker w computed on this host instead.
    void count_fallback(size_t w) { if (workers_[w].link) ++workers_[w].link->stats().fallbacks; else ++workers_[w].fallbacks_unlinked; }
    /// Test-only fault switch MOEZIP_TEST_FAULT=corrupt_request: corrupt request frames after hashing.
    bool fault_corrupt_request() const { return fault_corrupt_; }
    /// Shard mode: the shares of n_ff (this host first, then the workers) of calls of `size` that
    /// the hellos state as the plan: the config's for every call, or with local_share = "auto" equal
    /// ones until set_shard_shares. Decode and prefill calls may have their own split (auto only).
    const std::vector<double> & shard_shares(CallSize size = CallSize::large) const { return shard_shares_[(int) size]; }
    /// New shard shares (sum 1) for calls of `size`: every worker says hello again with both splits
    /// before its next request, so it accepts only its slices of them (a changed slice is a new plan,
    /// docs/internals/protocol.md).
    void set_shard_shares(CallSize size, std::vector<double> shares);
    MoeExecutor & executor() { return exec_; }
    /// This host's content digests of the experts workers compute, and what reading them cost.
    const ExpertDigestsHere & digests_here() const { return digests_here_; }
    const Config & config() const { return cfg_; }
    const GgmlApi & api() const { return api_; }

    /// Moves out the failure messages since the last call (for the report's errors; capped at 50
    /// between calls).
    std::vector<std::string> take_errors() { std::vector<std::string> e; e.swap(pending_errors_); return e; }

    /// Per-worker evidence for the report.
    nlohmann::json stats_json() const;
    /// Closes every socket (linger 0) and the context. Idempotent.
    void shutdown();

private:
    struct Worker {
        const WorkerConfig * cfg = nullptr;
        std::unique_ptr<WorkerLink> link;
        bool said_hello = false;
        bool reply_after_hello = false;  // the next reply is the first since a hello (take_first_after_hello)
        std::string refused;                 // non-empty: engine identity or plan mismatch, not used while it lasts
        nlohmann::json identity;             // the worker's hello_ok
        uint64_t instance = 0;               // its process instance, from hello_ok
        std::set<uint64_t> plans_ok;         // plans (MoeRegion::plan_id) whose tensors and digests were checked (this instance)
        std::map<uint64_t, std::string> plans_refused;  // plan -> why the worker may not serve those weights
        uint64_t reverifications = 0;        // hellos after a reply from another instance
        std::chrono::steady_clock::time_point down_until{};
        int backoff_ms = 0;
        // Return to service: the link's handshakes (WorkerLink::handshakes) when it was last marked
        // down; one more means a process answers at its endpoint again, probed at once rather than at
        // the end of the back-off. Off after a probe whose hello reached a connected worker that did
        // not answer (busy, its compute stuck): its next connection would be no news, so it is probed
        // by back-off only until it fails some other way.
        uint64_t handshakes_seen = 0;
        bool probe_on_connect = true;
        uint64_t probes_on_connect = 0;      // probes made because it connected again (report)
        bool hello_delivered = false;        // the last hello was sent over a connection (hello())
        bool logged_down = false;
        uint64_t fallbacks_unlinked = 0;     // fallbacks before any link existed
        uint64_t failures = 0;               // times it was marked down
        std::string last_failure;            // why, the last time
        LinkKeys keys;                       // CURVE (public_key and this host's key pair), or plain
        WorkerTrust trust;                   // verify_every sampling and the verdict
        int bad_plan_streak = 0;             // bad_plan replies since the last result
        uint64_t over_budget = 0;            // requests the worker refused as over its budget
        std::string inexact;                 // numerics = "approximate": why its results are not bit-exact
        // A refusal (refused, plans_refused) binds the instance that was refused (0: it never said
        // hello_ok). A hello every refusal back-off (1 s doubling to 30 s) tells whether another
        // process answers now; then every refusal is dropped and the newcomer is verified from scratch.
        uint64_t refused_instance = 0;
        std::chrono::steady_clock::time_point refused_probe_at{};
        int refused_backoff_ms = 0;
        uint64_t refused_handshakes_seen = 0;  // the link's handshakes at the last probe of the refusal: one more is a newcomer to ask
        uint64_t replaced_after_refusal = 0;  // refusals dropped because a new instance answered
        // Every refusal of the run, kept for the report when the refusals themselves are dropped (a
        // replaced instance, or plans forgotten when the engine frees the model at exit): how many,
        // and the first kRefusalsKept messages, each with the instance it bound.
        uint64_t refusals = 0;
        std::vector<std::string> refusals_first;
    };

    /// Notes a refusal of worker w's current instance (the first back-off starts now) and keeps
    /// `why` for the report (remember_refusal).
    void note_refusal(Worker & w, const std::string & why);
    /// Counts a refusal of worker w and keeps the first ones' messages for the report's `refusals`
    /// and `refusals_first`, which outlive the refusal itself.
    static void remember_refusal(Worker & w, const std::string & why);
    /// Called while worker w is refused: says hello at most once per back-off, and besides that
    /// once when the refused process closed its connection and once each time a new connection
    /// completes its handshake (neither doubles the back-off: a process still loading behind the
    /// endpoint is asked again as soon as it is bound); true when another instance than the refused
    /// one answered (every refusal dropped: verify it as a new worker).
    bool replaced_since_refusal(Worker & w, const MoeRegion & r);
    /// Says hello and reads hello_ok, waiting at most wait_ms (0: the connect timeout) for it.
    Status hello(Worker & w, int wait_ms = 0);
    /// How long a hello waits for its answer (ms): the connect timeout for a worker not failed nor
    /// refused; for a probe of one that is, at most 1000 ms when it just connected again (its process
    /// answers: a resumed worker on a loaded host may take more than 250 ms to read the hello) and at
    /// most 250 ms at the end of a back-off, so a dead one costs the engine a short stall per period.
    int hello_wait_ms(const Worker & w, bool connected_again) const;
    nlohmann::json plan_json(size_t w) const;
    void ensure_link(Worker & w, const MoeRegion & r);
    Status check_identity(const Worker & w) const;
    bool kernels_differ(const Worker & w) const;
    void note_inexact(Worker & w);
    Status check_layer(const Worker & w, const MoeRegion & r);
    std::vector<int> assigned_experts(size_t w, int n_expert) const;

    const Config & cfg_;
    const GgmlApi & api_;
    EngineIdentity self_;
    std::unique_ptr<zmq::context_t> ctx_;
    std::vector<Worker> workers_;
    uint64_t request_id_ = 0;
    UsableTime usable_time_;  // usable(): see usable_time()
    std::vector<std::string> pending_errors_;
    bool fault_corrupt_ = false;
    MoeExecutor exec_;
    std::vector<double> shard_shares_[2];  // by CallSize
    int pid_ = 0;
    ExpertDigestsHere digests_here_;  // this host's content digests of the experts workers compute
};

} // namespace moezip
