// moezip-worker: the ZeroMQ server loop.
//
// One ROUTER socket serves any number of coordinators (DEALER peers): a peer sends
// [header, data...], we receive [identity, header, data...] and answer [identity, reply header,
// data...] (coordinator/wire/protocol.h). Requests are served one at a time in arrival order. Every bad
// message gets an `error` reply (header.status = ErrorCode, request_id echoed when the header was
// readable, one frame of text) and the loop keeps serving. Parts beyond kMaxMessageParts are read
// and dropped one by one, never kept (bad_frames). A hello must carry the coordinator's plan
// (request/worker_plan.h), kept per connection; compute outside it is refused (bad_plan). Each compute is
// checked against the per-request budget before anything is allocated (request/worker_budget.h); an
// allocation failure is an out_of_memory reply. With a key the socket is a CURVE server and a ZAP
// handler admits only allowed coordinator keys (worker_auth.h). SIGTERM/SIGINT end the loop within
// the poll timeout (100 ms); the socket is closed (linger 0) before the context.
#pragma once

#include "coordinator/wire/curve_keys.h"
#include "coordinator/wire/protocol.h"
#include "provider_map/status.h"
#include "tools/moezip-worker/serve/worker_auth.h"
#include "tools/moezip-worker/request/worker_budget.h"
#include "tools/moezip-worker/worker_engine.h"
#include "tools/moezip-worker/serve/worker_fault.h"
#include "tools/moezip-worker/model/worker_model.h"

#include <cstdint>
#include <functional>
#include <string>

namespace moezip {

/// What the server counted; printed to stderr at exit (worker_counters_text).
struct WorkerCounters {
    uint64_t requests = 0;  ///< messages received (any kind, also junk)
    uint64_t hello = 0, compute = 0, ping = 0;
    uint64_t rows = 0, pairs = 0;         ///< of answered compute requests
    uint64_t bytes_in = 0, bytes_out = 0; ///< header and data frames (identity frames not counted)
    uint64_t errors[16] = {};             ///< error replies by ErrorCode
    uint64_t parts_dropped = 0;           ///< message parts beyond kMaxMessageParts, read and dropped
    uint64_t trims = 0;                   ///< requests after which buffers were released (budget_release_heap)
    uint64_t plans_evicted_idle = 0;      ///< plans forgotten because the table was full (WorkerPlans): hello-only connections
    uint64_t plans_evicted_active = 0;    ///< ... connections that had computed
    uint64_t shard_packed_max = 0;        ///< shard mode: most bytes of packed slice copies held at once (model/worker_slices.h)
    uint64_t shard_evicted = 0;           ///< ... copies dropped to make room for another slice of their layer
    uint64_t shard_ahead_skipped = 0;     ///< ... slices not packed ahead: their layer's places held slices requests used
    uint64_t unsliced_released = 0;       ///< shard mode: bytes of the originals given back (model/slice_residency.h)
    uint64_t unsliced_reread = 0;         ///< ... and bytes read again from the file for requests that needed them
    AuthCounters auth;                    ///< handshakes and connections (worker_auth.h)
};

struct WorkerServerOptions {
    std::string bind;    ///< endpoint to bind
    int n_threads = 1;   ///< compute threads
    WorkerFaults faults; ///< test-only fault switches
    uint64_t instance = 0;  ///< this process's instance (worker_instance_new), in every reply header and hello_ok
    WorkerBudget budget;    ///< per-request limits
    CurveKeyPair key;       ///< this worker's CURVE key pair; empty = plain ZeroMQ
    std::vector<std::string> allow;  ///< coordinator public keys (Z85) the ZAP handler admits (CURVE only)
    int handshake_ms = 5000;         ///< ZMQ_HANDSHAKE_IVL (worker_socket.h)
    bool keep_unsliced = false;      ///< shard mode: keep the original expert tensors (model/slice_residency.h)
    int scratch_hold_ms = kScratchHoldMs;  ///< a large request's buffers kept this long after it (request/worker_budget.h)
};

/// A random non-zero 64-bit instance id for this worker process (getrandom; the clock and pid mixed
/// in if that fails): a restarted worker on the same endpoint is another instance, so a coordinator
/// never sends it compute before it has been verified again (coordinator/wire/protocol.h).
uint64_t worker_instance_new();

/// Installs SIGTERM/SIGINT handlers that make worker_serve return.
void worker_install_signal_handlers();

/// Binds, calls on_ready(bound endpoint) once the socket is bound (the real port for
/// "tcp://host:*"), serves until a signal, then closes everything. Errors: io_error when the bind
/// fails or the socket breaks; `counters` is filled either way.
Status worker_serve(const WorkerServerOptions & opt, const WorkerModel & model, const WorkerEngine & engine,
                    const std::function<void(const std::string &)> & on_ready, WorkerCounters & counters);

/// One line: "requests N (hello H, compute C, ping P), rows R, pairs Q, bytes in X out Y, errors E
/// (bad_magic 1, ...)", then "; handshakes: ...; connections: ..." when any were counted.
std::string worker_counters_text(const WorkerCounters & c);

} // namespace moezip
