// moezip tests: a set of moezip-worker processes and a host run under the preload, shared by the
// distributed tests (modes, faults, identity, exit), and what they read back (reports, host runs).
#pragma once

#include "tests/support/test_support.h"
#include "tests/support/worker_harness.h"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace moezip_test {

/// The JSON in a file (fails the test when it is not JSON; returns a discarded value then).
nlohmann::json load_json(const std::string & path);

/// The sum of one counter over a moezip report's layers (e.g. "fallbacks", "remote_slots").
uint64_t sum_layers(const nlohmann::json & report, const char * key);

/// The number after `label` in a moezip-worker counters line ("... key refused 2, ..." -> 2); 0 when
/// the label is absent.
uint64_t worker_counter(const std::string & text, const std::string & label);

/// True when one of the report's kept errors (`errors.first`, `errors.recent`) contains `text`.
bool errors_mention(const nlohmann::json & report, const std::string & text);

/// The runs of a moezip-test-host --json file (`runs`: per run its tokens and logits hashes).
nlohmann::json host_runs(const std::string & path);

/// Workers of one test, stopped (SIGKILL) when the cluster goes out of scope.
struct Cluster {
    std::string dir;
    std::vector<std::unique_ptr<WorkerProcess>> workers;

    /// Starts moezip-worker on `model` at `endpoint` ("" experts = all), one thread, plus
    /// `extra_args` (e.g. --key, --allow). Fails the test
    /// (EXPECT) and returns false when it does not come up.
    bool start_worker(const std::string & model, const std::string & endpoint, const std::string & experts,
                      const std::map<std::string, std::string> & env = {}, const std::vector<std::string> & extra_args = {});
};

/// [[worker]] tables for workers first, first+1, ... of the cluster: experts mode gives each its
/// experts (`experts[i]`, "" for none), rows and shard modes their shares (`shares[i]`, TOML text).
std::string worker_lines(const Cluster & c, const std::vector<std::string> & experts, const std::vector<std::string> & shares = {},
                         size_t first = 0);

/// Writes <dir>/<name>.toml: `no_repack = true`, `report = "<dir>/<name>.json"`, then `body`.
/// Returns its path.
std::string write_moezip_config(const std::string & dir, const std::string & name, const std::string & body);

/// Runs argv with LD_PRELOAD = the preload and MOEZIP_CONFIG = config (plus `env`).
CommandResult run_preloaded(const std::vector<std::string> & argv, const std::string & config,
                            std::map<std::string, std::string> env = {}, int timeout_s = 300);

/// The argv of moezip-test-host `scenario` (tests/hosts/scenario_host.cpp) on `models`, writing its
/// runs' tokens and logits hashes to `json_out`, plus `extra` flags.
std::vector<std::string> test_host(const std::string & scenario, const std::vector<std::string> & models, const std::string & json_out,
                                   const std::vector<std::string> & extra = {});

/// Starts the pause scenario host on `model` under the preload (config `cfg`) on a thread, its
/// result into `host`, and returns once it paused at `pause` (P.ready; at most 60 s): the caller
/// changes something (a worker restarted, a file rewritten), writes P.go, and joins.
std::thread start_paused_host(CommandResult & host, const std::string & model, const std::string & json_out, const std::string & pause,
                              const std::string & cfg);

} // namespace moezip_test
