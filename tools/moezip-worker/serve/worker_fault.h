// moezip-worker: fault switches for tests only. MOEZIP_WORKER_FAULT, read once at start, is a
// comma-separated list of:
//   corrupt_result   flip one byte of each result data frame after its hash was computed (the
//                    coordinator's hash check must catch it)
//   tamper_result    add 0.5 to one value of each non-empty result and hash the changed frame (a
//                    worker, or a man in the middle, that lies consistently: only the coordinator's
//                    verification, verify_every, can catch it)
//   nudge_result     the same with the smallest change: one value's last mantissa bit flipped (a
//                    check within tolerances lets it pass; an exact one must not)
//   exit_after=N     after answering N compute requests, _exit(1) on the next one without replying
//                    (a worker dying mid-run)
//   delay_ms=N       sleep N ms before each compute reply (timeouts)
//   delay_marker=PATH  with delay_ms: append the request id to PATH as the delay starts (a test
//                    then acts while the request is held, instead of sleeping and hoping); an
//                    error without delay_ms, and the worker refuses to start when PATH is not writable
//   slow=N           each compute takes N times as long: sleeps (N-1) x its compute time before
//                    replying (a host N times slower, for the automatic shares' tests)
//   slow_prefill=N   the same for requests of more than 8 rows only (a host throttled under
//                    sustained load, as a CPU quota does: full speed in decode, slow in prefill)
//   prepack_delay_ms=N  sleep N ms before packing a shard plan's slices at its hello (a slow pack:
//                    the request after the hello waits for it; a window to change the file in)
//   unsliced_keep_ms=N  shard mode keeps a slice's rows N ms after its last request instead of 10 s
//                    (model/slice_residency.h), so tests see rows given back and read again quickly
//   cpu_quota_pct=N  hello_ok states a CPU quota of N % of a core whatever the cgroup says (with
//                    slow_prefill: a host throttled by a quota, without root to make a cgroup)
//   signal_every_us=N  while serving, SIGALRM every N us (50..1000000) to a handler that does
//                    nothing, without SA_RESTART: every ZeroMQ call and wait sees EINTR (a profiler's
//                    timer, a user's signals; the serving loop must lose no request and no reply)
// Never set it in production: the worker then gives wrong answers or none on purpose.
#pragma once

#include "provider_map/status.h"

#include <cstdint>
#include <string>

namespace moezip {

/// Name of the environment variable.
constexpr const char * kWorkerFaultEnv = "MOEZIP_WORKER_FAULT";

struct WorkerFaults {
    bool corrupt_result = false;
    bool tamper_result = false;
    bool nudge_result = false;
    int64_t exit_after = -1;  ///< -1 = never
    int delay_ms = 0;         ///< 0..600000
    std::string delay_marker; ///< "" = none: the file a delayed request's id is appended to
    int slow = 1;             ///< 1..100: compute time multiplied by this
    int slow_prefill = 1;     ///< 1..100: the same for requests of more than 8 rows
    int prepack_delay_ms = 0; ///< 0..600000: before a shard hello's packing
    int unsliced_keep_ms = -1;  ///< -1 = SliceResidency::kKeepMs; 0..600000
    int cpu_quota_pct = 0;    ///< 0 = the cgroup's; 1..100000: the quota hello_ok states, % of a core
    int signal_every_us = 0;  ///< 0 = none; 50..1000000: SIGALRM period while serving, us
};

/// Parses the variable's text (nullptr or "" = no faults). Errors: invalid_argument naming the item.
/// Creates delay_marker's file (empty) to know it can be written: a test waiting for it then fails
/// at the worker's start, not at its own timeout.
Status worker_faults_parse(const char * text, WorkerFaults & out);

/// A fault's sleep (delay_ms, slow, prepack_delay_ms), us: the whole of it, through signals (usleep
/// ended at the first EINTR, so signal_every_us cancelled the other faults).
void fault_sleep_us(int64_t us);

/// signal_every_us: arms (every_us > 0) or disarms (0) the SIGALRM interval timer of the process.
void worker_fault_signal_timer(int every_us);

} // namespace moezip
