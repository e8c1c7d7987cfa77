// Runs each libFuzzer target (tests/fuzz/, built into <build>/fuzz/ by `make`) for a short bounded
// time from its committed seed corpus, so that `make test` counts them: the fuzzer must exit 0. A
// crash, a sanitizer report or a broken invariant fails the test with the crashing input's path.
// The time per target is FUZZ_TEST_SECONDS (default 15); `make fuzz` runs them longer (docs/internals/fuzzing.md).
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace moezip_test;

namespace {

int fuzz_seconds() {
    const char * v = getenv("FUZZ_TEST_SECONDS");
    int s = v != nullptr ? atoi(v) : 0;
    return s > 0 ? s : 15;
}

// The value after `key` in libFuzzer's output up to the end of its line ("" when absent).
std::string field(const std::string & out, const std::string & key) {
    size_t at = out.rfind(key);
    if (at == std::string::npos) return "";
    at += key.size();
    size_t end = out.find('\n', at);
    std::string v = out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    size_t b = v.find_first_not_of(" \t");
    return b == std::string::npos ? "" : v.substr(b);
}

// What one fuzzer run gave.
struct FuzzRun {
    int exit_code = -1;
    std::string runs;      ///< executions, from -print_final_stats
    std::string artifact;  ///< path of the crashing input, "" when none was written
    std::string log;       ///< the fuzzer's stderr
};

// Runs <build>/fuzz/<target>_fuzz for `seconds` on a fresh corpus directory seeded from `seeds`.
FuzzRun fuzz_run(const std::string & target, const std::string & seeds, int seconds, const std::vector<std::string> & extra) {
    FuzzRun run;
    const std::string bin = build_dir() + "/fuzz/" + target + "_fuzz";
    if (!file_exists(bin)) {
        ADD_FAILURE() << bin << " is missing: `make` builds it with clang-14 (`make deps` installs clang-14 and libclang-rt-14-dev)";
        return run;
    }
    const std::string dir = test_dir("fuzz_" + target);
    const std::string corpus = dir + "/corpus";
    if (mkdir(corpus.c_str(), 0755) != 0) {
        ADD_FAILURE() << "cannot create " << corpus;
        return run;
    }
    std::vector<std::string> argv = {bin, "-max_total_time=" + std::to_string(seconds), "-print_final_stats=1",
                                     "-timeout=10", "-rss_limit_mb=2048", "-max_len=8192", "-artifact_prefix=" + dir + "/"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(corpus);
    argv.push_back(seeds);
    CommandResult r = run_command(argv, {}, seconds + 120);
    run.exit_code = r.exit_code;
    run.runs = field(r.err, "stat::number_of_executed_units:");
    run.artifact = field(r.err, "Test unit written to ");
    run.log = r.err;
    printf("[   fuzz   ] %s: %s executions in %d s, %s new inputs, exit %d\n", target.c_str(),
           run.runs.empty() ? "?" : run.runs.c_str(), seconds, field(r.err, "stat::new_units_added:").c_str(), r.exit_code);
    return run;
}

// A target on its committed seeds (tests/fuzz/corpus/<target>) for FUZZ_TEST_SECONDS: it must exit 0.
void run_fuzzer(const std::string & target, const std::vector<std::string> & extra = {}) {
    const std::string bin = build_dir() + "/fuzz/" + target + "_fuzz";
    FuzzRun run = fuzz_run(target, repo_root() + "/tests/fuzz/corpus/" + target, fuzz_seconds(), extra);
    ::testing::Test::RecordProperty("executions", run.runs);
    EXPECT_EQ(run.exit_code, 0) << target << " fuzzer failed" << (run.artifact.empty() ? "" : "; crashing input: " + run.artifact)
                                << "\nreproduce: " << bin << " " << (run.artifact.empty() ? "<input>" : run.artifact) << "\n"
                                << run.log.substr(run.log.size() > 6000 ? run.log.size() - 6000 : 0);
    EXPECT_FALSE(run.runs.empty()) << "no execution count in the fuzzer's output:\n" << run.log;
}

} // namespace

TEST(Fuzz, ConfigLoader) { run_fuzzer("config", {"-dict=" + repo_root() + "/tests/fuzz/config.dict"}); }

TEST(Fuzz, WorkerRequestDecoder) { run_fuzzer("request"); }

TEST(Fuzz, CoordinatorReplyDecoder) { run_fuzzer("reply"); }

// The harness itself: a crash makes the run fail and names the crashing input (selftest_fuzz aborts
// on inputs starting with "CRASH", one of which is its seed).
TEST(Fuzz, ACrashFailsTheRunAndNamesTheInput) {
    const std::string seeds = test_dir("fuzz_selftest_seeds");
    FILE * f = fopen((seeds + "/crash").c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("CRASH here", f);
    fclose(f);
    FuzzRun run = fuzz_run("selftest", seeds, 5, {});
    EXPECT_NE(run.exit_code, 0) << run.log;
    ASSERT_FALSE(run.artifact.empty()) << run.log;
    EXPECT_NE(run.artifact.find("/fuzz_selftest/crash-"), std::string::npos) << run.artifact;
    EXPECT_EQ(read_file(run.artifact), "CRASH here");
}
