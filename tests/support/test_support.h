// moezip tests: paths, child processes and fixture models shared by the test files.
#pragma once

/// Set when the tests are built with AddressSanitizer (make SANITIZE=address,...): a few outcomes
/// cannot be observed under it and those tests skip, saying why — a library dlopened with
/// RTLD_DEEPBIND (the ASan runtime refuses it), an address-space limit (RLIMIT_AS: ASan reserves
/// terabytes of shadow memory at start), and resident memory after frees (ASan's quarantine keeps
/// freed blocks).
#if defined(__SANITIZE_ADDRESS__)
#define MOEZIP_TEST_ASAN 1
#else
#define MOEZIP_TEST_ASAN 0
#endif

#include <map>
#include <string>
#include <vector>

namespace moezip_test {

/// The repository root (two levels above build/bin/moezip-tests).
std::string repo_root();
/// The build folder this test binary lives in (<root>/build unless `make BUILD=...`).
std::string build_dir();
/// ../shared (or $MOEZIP_SHARED): the read-only real model and notes.
std::string shared_dir();
/// Path of one of our built programs: bin_path("moezip-run") -> <root>/build/bin/moezip-run.
std::string bin_path(const std::string & name);
/// <root>/build/libmoezip.so
std::string preload_path();
/// The value for LD_PRELOAD: preload_path(), after the sanitizer runtimes named in
/// $MOEZIP_TEST_PRELOAD_FIRST (set by tools/run-tests.sh for `make SANITIZE=... test`: an
/// instrumented libmoezip.so needs libasan first in the process).
std::string preload_env();
/// The same for another libmoezip.so (one built for another engine: tests/support/engine_support.h).
std::string preload_env_for(const std::string & library);
/// A fresh directory under <build>/test-out/ for one test (removed and recreated).
std::string test_dir(const std::string & name);

/// Exit status and captured output of a child process.
struct CommandResult {
    int exit_code = -1;   ///< exit status; 128+signal when killed by a signal
    std::string out;      ///< standard output
    std::string err;      ///< standard error
};

/// Runs argv[0] with argv, extra environment variables added to (or overriding) ours.
/// Waits at most timeout_s seconds, then kills the child (exit_code 128+SIGKILL).
CommandResult run_command(const std::vector<std::string> & argv,
                          const std::map<std::string, std::string> & env = {},
                          int timeout_s = 300);

/// In a forked child: adds `env` to the environment and execs argv[0] (searched in PATH when it has
/// no slash) with argv; on failure prints "exec <program>: <reason>" to stderr and exits 127.
[[noreturn]] void exec_child(const std::vector<std::string> & argv, const std::map<std::string, std::string> & env);

/// run_command of one of our built programs (bin_path(tool)) with `args`, waiting at most timeout_s.
CommandResult run_tool(const std::string & tool, const std::vector<std::string> & args, int timeout_s = 120);

/// True when `path` exists (stat succeeds).
bool file_exists(const std::string & path);

/// A synthetic MoE model from moezip-fixture, generated once into <build>/fixtures/ and reused.
/// `args` are extra moezip-fixture flags (for example {"--preset", "tiny", "--type", "q8_0"}).
/// Fails the calling test (ADD_FAILURE) and returns "" when generation fails.
std::string fixture_model(const std::vector<std::string> & args);

/// The same model written as `n_split` files (moezip-fixture --split-files), generated once into
/// <build>/fixtures/ and reused; returns the first part's path (<name>-00001-of-0000N.gguf), ""
/// after a failure recorded in the test.
std::string fixture_model_split(const std::vector<std::string> & args, int n_split);

/// The name of part `k` (0-based) of `n` for a split model whose first part is `first`
/// (llama.cpp's convention: <prefix>-%05d-of-%05d.gguf, numbered from 1).
std::string split_part_path(const std::string & first, int k, int n);

/// The real trained dense model ../shared/fixtures/stories260K.gguf after its sha256 was checked;
/// "" after a failure recorded in the test (missing or wrong copy).
std::string stories_model();

/// The real trained model ../shared/fixtures/stories260K.gguf (checked by sha256) turned into a MoE
/// model by moezip-upcycle (top-n_used routing over n_expert experts; `experts` "split": each expert
/// a part of its FFN, "replicate": each a copy, whose output is the dense model's English story),
/// made once into <build>/fixtures/.
std::string upcycled_stories(int n_expert, int n_used, const std::string & experts = "split");

/// Why this kernel cannot give `path` 2 MiB page-cache folios, "" when it should: transparent huge
/// pages "never", or ext4 before large folios (Linux 6.16). Tests of PMD-mapped file pages note it
/// and leave that check out.
std::string no_large_folios_here(const std::string & path);

/// Why page-cache pages may leave memory at any moment here, "" when only memory pressure takes
/// them: a DAMON daemon running a `pageout` scheme (proactive reclaim of pages it sees as cold, as
/// the development VM's kernel runs; /sys/kernel/mm/damon/admin). A page read with read(2) is not
/// seen as accessed, so a fill may lose a few pages before it is measured.
std::string proactive_reclaim_here();

/// sha256 of a file as lowercase hex ("" if unreadable).
std::string sha256_file(const std::string & path);

/// Reads a whole file ("" if unreadable).
std::string read_file(const std::string & path);

/// Waits until `path` exists and is not empty (a worker's delay_marker, a host's pause file),
/// polling every 5 ms; false after timeout_ms.
bool wait_for_file(const std::string & path, int timeout_ms);

} // namespace moezip_test
