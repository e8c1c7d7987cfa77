// Config texts that toml++ 3.3.0 could not survive, given to the real programs: the unmodified host
// (moezip-run) under LD_PRELOAD=libmoezip.so, and moezip-worker --config. Each must end with the
// documented policy and a message naming file, line and key: passthrough (exit 0), or exit 3 with
// strict = true; the worker exits 2. Before the precheck they aborted (exit 134).
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

using namespace moezip_test;

namespace {

std::string write_file(const std::string & path, const std::string & text) {
    std::ofstream(path) << text;
    return path;
}

std::string tiny_model() { return fixture_model({"--preset", "tiny", "--type", "q8_0"}); }

// moezip-run on the tiny fixture model (a few decode steps) under the preload with `config`.
CommandResult run_host(const std::string & config) {
    return run_command({bin_path("moezip-run"), "-m", tiny_model(), "--fixture", "16", "-n", "2", "--quiet"},
                       {{"LD_PRELOAD", preload_env()}, {"MOEZIP_CONFIG", config}});
}

} // namespace

TEST(ConfigHost, ClosingBraceInAnArrayRunsPassthroughWithANamedError) {
    std::string dir = test_dir("config_host_brace");
    std::string cfg = write_file(dir + "/c10.toml", "report = \"" + dir + "/r.%p.json\"\nmode = [}\n");
    CommandResult r = run_host(cfg);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("bad config " + cfg + ":2:9: mode: not valid TOML (expected a value or ']' in the array, saw '}')"),
              std::string::npos) << r.err;
    EXPECT_NE(r.err.find("running passthrough"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("Assertion"), std::string::npos) << r.err;
}

TEST(ConfigHost, StrictWrittenAboveASyntaxErrorExitsWithStatus3) {
    std::string dir = test_dir("config_host_strict");
    std::string cfg = write_file(dir + "/c10.toml", "strict = true\nreport = \"" + dir + "/r.%p.json\"\nmode = [}\n");
    CommandResult r = run_host(cfg);
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find(cfg + ":3:9: mode: not valid TOML"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("strict = true: exiting (status 3)"), std::string::npos) << r.err;
}

TEST(ConfigHost, NonAsciiLetterOutsideAStringRunsPassthroughWithANamedError) {
    std::string dir = test_dir("config_host_non_ascii");
    std::string cfg = write_file(dir + "/c10.toml", "report = \"" + dir + "/r.%p.json\"\nmod\xc3\xa9 = \"local\"\n");
    CommandResult r = run_host(cfg);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(cfg + ":2:4: mod\xc3\xa9: not valid TOML ('\xc3\xa9' (U+00E9) outside a string or comment"),
              std::string::npos) << r.err;
    EXPECT_NE(r.err.find("running passthrough"), std::string::npos) << r.err;
}

TEST(ConfigHost, WorkerWithSuchAConfigExitsTwoNamingTheLine) {
    std::string dir = test_dir("config_host_worker");
    const struct {
        const char * text;
        const char * message;
    } cases[] = {
        {"[worker_server]\nthreads = 1\nbind = [}\n", ":3:9: worker_server.bind: not valid TOML (expected a value or ']'"},
        {"[worker_server]\nthr\xc3\xa9\x61\x64s = 1\n", ":2:4: worker_server.thr\xc3\xa9\x61\x64s: not valid TOML"},
        {"[}\n", ":1:2: not valid TOML (a table header needs a name"},
        {"[worker_server]\nbind = \"ipc:///tmp/\" \"x\"\n", ":2:"},  // toml++'s own error, for comparison
    };
    int n = 0;
    for (const auto & c : cases) {
        std::string cfg = write_file(dir + "/w" + std::to_string(n++) + ".toml", c.text);
        CommandResult r = run_command({bin_path("moezip-worker"), "--config", cfg, "--model", tiny_model()}, {}, 60);
        EXPECT_EQ(r.exit_code, 2) << c.text << "\n" << r.err;
        EXPECT_NE(r.err.find("moezip-worker: " + cfg + c.message), std::string::npos) << r.err;
        EXPECT_EQ(r.out.find("serving"), std::string::npos) << r.out;
    }
}

TEST(ConfigHost, WorkerBindTooLongForAUnixSocketIsRefusedBeforeLoading) {
    std::string dir = test_dir("config_host_bind");
    const std::string bind = "ipc://" + dir + "/" + std::string(120, 's') + ".sock";
    const size_t path_bytes = bind.size() - 6;
    CommandResult r = run_command({bin_path("moezip-worker"), "--model", tiny_model(), "--bind", bind}, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--bind " + bind + ": ipc path is " + std::to_string(path_bytes) +
                         " bytes; a Unix socket path holds at most 107"), std::string::npos) << r.err;
    std::string cfg = write_file(dir + "/w.toml", "[worker_server]\nbind = \"" + bind + "\"\n");
    r = run_command({bin_path("moezip-worker"), "--config", cfg, "--model", tiny_model()}, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(cfg + ":2: worker_server.bind: expected \"tcp://host:port\" or \"ipc:///path\""), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("bytes; a Unix socket path holds at most 107"), std::string::npos) << r.err;
}
