// moezip-worker: the ZeroMQ server loop.
//
// One ROUTER socket serves any number of coordinators (DEALER peers): a peer sends
// [header, data...], we receive [identity, header, data...] and answer [identity, reply header,
// data...] (coordinator/wire/protocol.h). Requests are served one at a time in arrival order. Every bad
// message gets an `error` reply (header.status = ErrorCode, request_id echoed when the header was
// readable, one frame of text) and the loop keeps serving. SIGTERM/SIGINT end the loop within the
// poll timeout (100 ms); the socket is closed (linger 0) before the context.
#pragma once

#include "coordinator/wire/protocol.h"
#include "coordinator/base/status.h"
#include "tools/moezip-worker/worker_engine.h"
#include "tools/moezip-worker/worker_fault.h"
#include "tools/moezip-worker/worker_model.h"

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
};

struct WorkerServerOptions {
    std::string bind;    ///< endpoint to bind
    int n_threads = 1;   ///< compute threads
    WorkerFaults faults; ///< test-only fault switches
    uint64_t instance = 0;  ///< this process's instance (worker_instance_new), in every reply header and hello_ok
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

/// One line: "requests N (hello H, compute C, ping P), rows R, pairs Q, bytes in X out Y, errors E (bad_magic 1, ...)".
std::string worker_counters_text(const WorkerCounters & c);

/// True for ipc://, inproc:// and tcp:// endpoints on 127.x.x.x, localhost or [::1].
bool worker_endpoint_is_loopback(const std::string & endpoint);

} // namespace moezip
