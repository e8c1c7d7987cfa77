// moezip: the configuration, one TOML file (reference with every key: docs/config.md).
// Ordinary C++ without globals: the preload and moezip-worker load a file into a Config and keep it.
// Every key is optional, unknown keys are errors, every value is type- and range-checked, and every
// error names file, line and key path:
//   moezip.toml:12: worker[1].timeout_ms: expected integer 1..600000, got -5
// Nothing here throws (toml++ runs with exceptions disabled; the entry points also catch).
#pragma once

#include "coordinator/config/expert_range.h"
#include "coordinator/base/log.h"
#include "provider_map/status.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moezip {

/// What the preload does with the MoE regions it recognises.
enum class ConfigMode {
    observe,  ///< only watch and report; the engine computes everything (default)
    local,    ///< moezip computes the regions itself, here (checks the interception, no workers)
    rows,     ///< split each region's rows (tokens) between this host and the workers
    experts,  ///< split by expert ownership: each host computes the experts it owns
    shard,    ///< every host computes a slice of every expert's n_ff; partial row sums are reduced here
};

/// Provider identity mismatch (the engine's kernel is not the one the provider map expects).
enum class MismatchPolicy { passthrough, abort };
/// A worker fails or times out.
enum class WorkerErrorPolicy { local, abort };
/// Whether workers must compute with this host's very kernels (docs/internals/numerics.md).
enum class NumericsPolicy {
    exact,        ///< a worker on another CPU variant or build is refused: every result is the single-node bits
    approximate,  ///< such a worker is accepted; its results are checked by verify_every within the tolerances
};
/// How expert results from other hosts are combined (experts mode).
enum class ExpertCombine { exact, partial };

/// [rows]: mode = "rows".
struct RowsConfig {
    double local_share = 1.0;  ///< fraction of a region's rows computed here, 0..1; default 1
    int    min_rows    = 2;    ///< regions with fewer rows run locally (decode), 1..1000000; default 2
    /// local_share = "auto": every call's rows are split so that the hosts' expected times are equal,
    /// from their measured time per row (coordinator/balance/share_balance.h); default false
    bool auto_share = false;
};

/// [experts]: mode = "experts".
struct ExpertsConfig {
    std::vector<ExpertRange> local;            ///< experts the coordinator owns; default none
    ExpertCombine combine = ExpertCombine::exact;  ///< default exact (per-slot outputs, bit-identical)
    int shadow_every = 0;  ///< partial combine: recompute every Nth call here and report the error; 0 = never
    /// Drop this host's resident pages of the experts a worker serves, once that worker has served
    /// the layer (coordinator/memory/weight_release.h); default true. Only for memory-mapped weights.
    bool release_unowned = true;
    /// Compute this host's experts from a copy in anonymous memory with huge pages, and drop their
    /// pages of the engine's file mapping (coordinator/memory/own_expert_copies.h); default true in mode
    /// experts, false in mode local (the reader sets it). Only for memory-mapped weights that the CPU
    /// backend did not repack.
    bool copy_local = true;
    /// An expert may be owned by several hosts (replicas); each call's slots of such an expert go to
    /// the owner expected to finish first (coordinator/balance/expert_balance.h). Needs combine = exact,
    /// so the result does not depend on which owner computed a slot. Default false: owners are disjoint.
    bool replicas = false;
};

/// [shard]: mode = "shard".
struct ShardConfig {
    double local_share = 1.0;  ///< fraction of every expert's n_ff computed here, 0..1; default 1
    int shadow_every = 0;      ///< recompute every Nth call whole here and report the error; 0 = never
    /// local_share = "auto": the n_ff slices follow the hosts' measured speeds (set after the first
    /// calls, changed when the speeds drift; each change is a new plan said in hello); default false
    bool auto_share = false;
    /// Drop this host's resident pages of what its slice never reads (the other hosts' gate/up rows;
    /// all of down once its packed copy is made), after the first call every worker served for that
    /// slice (coordinator/memory/weight_release.h); default true. Only for memory-mapped weights.
    bool release_unowned = true;
};

/// [dispatch]: defaults for every worker.
struct DispatchConfig {
    int timeout_ms = 5000;  ///< per-request timeout, ms, 1..600000; default 5000
    WorkerErrorPolicy on_worker_error = WorkerErrorPolicy::local;  ///< default local
    int connect_timeout_ms = 5000;  ///< handshake timeout, ms, 1..600000; default 5000
    // -- security (docs/security.md) --
    /// Every Nth result of each worker is also computed here and compared (bit-exact in rows and
    /// experts exact; within verify_max_abs / verify_min_cosine in shard and experts partial); a
    /// mismatch discards the result and marks the worker untrusted. 0..1000000000; default 0 = never.
    /// Written top-level or in [dispatch] (not both).
    int verify_every = 0;
    /// Largest |worker - here| accepted where results are compared against tolerances, relative to
    /// the largest magnitude of the part computed here (at least 1). 0..1; default 1e-4.
    double verify_max_abs = 1e-4;
    /// Smallest cosine similarity accepted there, -1..1; default 0.99999.
    double verify_min_cosine = 0.99999;
    /// This host's CURVE key file (moezip-worker --keygen) for every worker with a public_key that
    /// does not name its own; default "" (none).
    std::string client_key;
};

/// One [[worker]] table, in file order.
struct WorkerConfig {
    std::string endpoint;              ///< "tcp://host:port" or "ipc:///path" (required)
    double share = 0.0;                ///< rows mode: its fraction of the rows; shard mode: of every expert's n_ff; 0..1; default 0
    std::vector<ExpertRange> experts;  ///< experts mode: experts this worker owns; default none
    int timeout_ms = 5000;             ///< resolved per-request timeout, ms (own value or dispatch.timeout_ms)
    bool has_share = false;            ///< `share` was written in the file
    bool share_auto = false;           ///< share = "auto" (with local_share = "auto")
    bool has_timeout = false;          ///< `timeout_ms` was written in the file (else dispatch's)
    int line = 0;                      ///< line of the [[worker]] header, for messages
    // -- security (docs/security.md) --
    std::string public_key;            ///< the worker's CURVE public key (Z85, 40 chars); "" = plain ZeroMQ
    std::string client_key;            ///< resolved key file of this host (own value or dispatch.client_key)
    bool has_client_key = false;       ///< `client_key` was written in this table
};

/// [worker_server]: what moezip-worker uses when it reads this file.
struct WorkerServerConfig {
    bool present = false;             ///< the table exists
    std::string bind;                 ///< endpoint to bind ("tcp://*:5601", "ipc:///path"); default ""
    std::string model;                ///< GGUF path; default ""
    std::vector<ExpertRange> experts; ///< experts to load; default none = all
    int threads = 1;                  ///< compute threads, 1..256; default 1
    bool mmap = false;                ///< map the weights instead of loading them into memory; default false
    bool repack = false;              ///< served experts in the CPU_REPACK layout (moezip-worker --repack); default false
    bool keep_unsliced = false;       ///< shard mode: keep the original expert tensors (moezip-worker --keep-unsliced); default false
    // -- security (docs/security.md; the same as moezip-worker's flags) --
    std::string key;                  ///< this worker's CURVE key file; default "" (plain)
    std::vector<std::string> allow;   ///< files of coordinator public keys admitted; default none
    bool insecure = false;            ///< allow a plain (keyless) bind on a non-loopback address
    int handshake_ms = 5000;          ///< ZMQ_HANDSHAKE_IVL, ms, 100..600000
    int max_rows = 4096;              ///< per-request budget, 1..1048576
    int max_slots = 32768;            ///< 1..268435456
    int max_in_mib = 128;             ///< 1..65536
    int max_out_mib = 256;            ///< 1..65536
    int max_scratch_mib = 1024;       ///< 1..1048576
    int scratch_hold_ms = 30000;      ///< a large request's buffers kept this long after it, ms, 0..86400000
};

/// The whole configuration with its defaults (a default-constructed Config is valid: observe mode).
struct Config {
    ConfigMode mode = ConfigMode::observe;       ///< default observe
    std::string report = "moezip-report.%p.json";  ///< report path; "%p" = pid (config_report_path)
    int report_flush_ms = 5000;       ///< periodic report flush, ms (at most this often, only when changed), 0 = only at exit; 0..3600000
    /// Per-call timeline (Chrome trace events, coordinator/evidence/trace.h), written at exit; "%p" =
    /// pid (config_trace_path); default "" = no trace.
    std::string trace;
    int trace_max_events = 100000;    ///< events kept in the trace, 1..10000000; more are counted as dropped
    bool require_intercept = false;   ///< a MoE region not handled as configured fails the run loudly
    MismatchPolicy on_mismatch = MismatchPolicy::passthrough;  ///< default passthrough
    bool strict = false;              ///< a bad config makes the host exit (status 3) instead of passthrough
    bool no_repack = false;           ///< hide the CPU "extra" (repack) buffer types (weights stay GGUF layout)
    int threads = 0;                  ///< threads for moezip's own compute, 0 = the engine's count; 0..256
    LogLevel log = LogLevel::info;    ///< default info
    /// "approximate": accept workers whose CPU variant or kernel build-id differs (not bit-exact;
    /// needs dispatch.verify_every, results compared within verify_max_abs / verify_min_cosine); default exact
    NumericsPolicy numerics = NumericsPolicy::exact;
    /// The GGUF file whose MoE layers are distributed (a path, relative to the host's working
    /// directory; compared by realpath, a split model by any of its parts). Any other model the
    /// process loads (a draft model, a second model) runs in the engine alone, named in the report
    /// and not counted against require_intercept (coordinator/memory/model_files.h). Default "" =
    /// the oldest model file the process has mapped.
    std::string model;

    RowsConfig rows;
    ExpertsConfig experts;
    ShardConfig shard;
    DispatchConfig dispatch;
    std::vector<WorkerConfig> workers;
    WorkerServerConfig worker_server;

    std::string source = "<defaults>";  ///< file name used in messages
    std::map<std::string, int> lines;   ///< key path ("rows.local_share", "worker[1].share") -> line
};

/// Reads and validates `path`. Errors: io_error naming the path (missing, unreadable, > 1 MiB);
/// invalid_argument "FILE:LINE: KEY: expected ..., got ..." (one line per problem, in file order;
/// syntax errors as "FILE:LINE:COL: ..."; any bytes give a Status, never an abort: texts toml++
/// 3.3.0 cannot survive are refused first, config_precheck.cpp). On error `out` is reset to defaults
/// except `strict`, `log`, `require_intercept` and `report`, which keep the file's value when that
/// key itself was valid (after a syntax error: when written at top level above the error's line), so
/// the caller can still apply the strict and require_intercept policies, the log level and the
/// report path.
Status config_load_file(const std::string & path, Config & out);

/// As config_load_file for TOML text; `name_for_messages` stands for FILE in messages.
Status config_load_string(const std::string & text, const std::string & name_for_messages, Config & out);

/// The resolved configuration, one "key = value" per line in a fixed order (verbose mode),
/// for example `dispatch.timeout_ms = 5000` and `worker[0].endpoint = "tcp://127.0.0.1:5601"`.
/// Independent of the file's name, layout, comments and key order.
std::string config_describe(const Config & cfg);

/// XXH3-64 of config_describe(cfg): equal resolved configs have equal digests (for the report).
uint64_t config_digest(const Config & cfg);

/// Experts mode: checks that every expert 0..n_expert-1 has an owner (the coordinator or a worker)
/// and that no owner names an expert >= n_expert. Errors (invalid_argument) name the first unowned
/// expert, or the owner and the out-of-range expert, with file and line. ok in other modes.
Status config_check_expert_coverage(const Config & cfg, int n_expert);

/// The config's `model` file: exists, is a regular file, starts with the GGUF magic. Errors
/// (invalid_argument) read "FILE:LINE: model: ..." with the reason. ok when `model` is not set.
Status config_check_model_file(const Config & cfg);

/// The report path with every "%p" replaced by `pid`.
std::string config_report_path(const Config & cfg, int pid);

/// The trace path with every "%p" replaced by `pid` ("" when no trace is configured).
std::string config_trace_path(const Config & cfg, int pid);

/// Why this host keeps the workers' experts resident: "" when it does not (mode "experts" with
/// workers, experts.release_unowned, no shadow checks), else the reason for the report.
std::string config_why_experts_resident(const Config & cfg);
/// Shard mode's counterpart: "" when this host drops what its n_ff slice does not read (mode
/// "shard" with workers, shard.release_unowned, no shadow checks), else the reason for the report.
std::string config_why_shard_resident(const Config & cfg);

/// Names of the enums as written in the file ("observe", "passthrough", ...).
const char * config_mode_name(ConfigMode m);
const char * config_mismatch_name(MismatchPolicy p);
const char * config_worker_error_name(WorkerErrorPolicy p);
const char * config_combine_name(ExpertCombine c);
const char * config_log_name(LogLevel l);

} // namespace moezip
