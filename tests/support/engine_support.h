// moezip tests: the other engines `make test` built moezip for (make engines: tools/engines/prepare.sh
// writes <build>/engines.json), and running a host of one of them against workers.
#pragma once

#include "tests/support/test_support.h"

#include <map>
#include <string>
#include <vector>

namespace moezip_test {

/// One engine of TEST_ENGINES and the moezip build made for it.
struct TestEngine {
    std::string spec;           ///< "npm:3.22.1", "llama.cpp:pinned"
    std::string name;           ///< "npm-3.22.1", "llama.cpp-80fb11ac73e6-default"
    std::string build;          ///< moezip build folder for it: libmoezip.so, bin/moezip-run, bin/moezip-worker
    std::string engine_name;    ///< "node-llama-cpp 3.22.1", "llama.cpp 80fb11ac73e6" (engine_pin.h)
    std::string kind;           ///< "npm" or "llama.cpp"
    std::string engine;         ///< the folder given as ENGINE
    std::string bin;            ///< its libraries (and for llama.cpp its programs: llama-server ...)
    std::string ggml_version, source_commit, binary_commit;

    std::string tool(const std::string & n) const { return build + "/bin/" + n; }
    /// Its libmoezip.so, and the LD_PRELOAD value for it (after the sanitizer runtimes of `make SANITIZE=...`).
    std::string library() const { return build + "/libmoezip.so"; }
    std::string preload() const { return preload_env_for(library()); }
    std::string program(const std::string & n) const { return bin + "/" + n; }
};

/// The engine built for `spec`, or nullptr (with the reason in *why) when this run has none, e.g.
/// `make test TEST_ENGINES=` or the test binary run without `make engines`.
const TestEngine * test_engine(const std::string & spec, std::string * why);

/// The engine built for `spec` when this test binary's own build (build/) is for the pinned
/// node-llama-cpp 3.21.1, as the tests that pair the two assume; nullptr with the reason otherwise.
const TestEngine * test_engine_beside_pinned(const std::string & spec, std::string * why);

/// Runs `host` (a moezip-run) on `model` under `preload` with `config_body` (no_repack and the report
/// <dir>/<name>.json are added) and writes <dir>/<name>-run.json; 32 tokens after a 128-token prompt.
CommandResult run_engine_host(const std::string & host, const std::string & preload, const std::string & dir,
                              const std::string & name, const std::string & model, const std::string & config_body,
                              const std::map<std::string, std::string> & env = {});

/// `moezip-report compare` of <dir>/<a>.json and <dir>/<b>.json is "equal" and the runs' tokens
/// (<dir>/<x>-run.json) are the same; failures are reported with both names.
void expect_same_run(const std::string & dir, const std::string & a, const std::string & b);

/// Config text (without report) of experts mode over `endpoints`, the 8 experts split in equal
/// parts, with or without require_intercept.
std::string experts_config(const std::vector<std::string> & endpoints, bool require_intercept = true);

} // namespace moezip_test
