// moezip-worker's command line: mistakes are named and exit 2 before anything is loaded or bound.
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

using namespace moezip_test;

TEST(WorkerCli, BadBindEndpointsAreRejectedWithTheExpectedForm) {
    std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    for (const char * bind : {"tcp://127.0.0.1:99999", "127.0.0.1:5720", "udp://127.0.0.1:5"}) {
        CommandResult r = run_command({bin_path("moezip-worker"), "--model", model, "--bind", bind}, {}, 60);
        EXPECT_EQ(r.exit_code, 2) << bind << ": " << r.err;
        EXPECT_NE(r.err.find(std::string("--bind ") + bind), std::string::npos) << r.err;
        EXPECT_NE(r.err.find("expected tcp://HOST:PORT"), std::string::npos) << r.err;
        EXPECT_EQ(r.out.find("serving"), std::string::npos) << "must not start serving on another port: " << r.out;
    }
}

TEST(WorkerCli, UnknownFlagExitsTwo) {
    CommandResult r = run_command({bin_path("moezip-worker"), "--bogus"}, {}, 60);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--bogus"), std::string::npos) << r.err;
}

TEST(WorkerCli, AnEngineFolderWithoutGgmlIsNamedWithWhereItWasLookedFor) {
    std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    std::string dir = test_dir("worker_cli_engine");
    CommandResult r = run_command({bin_path("moezip-worker"), "--model", model, "--engine", dir}, {}, 60);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("--engine " + dir + ": no libggml-base.so there, in its bin/ or in its node_modules/"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find("serving"), std::string::npos) << r.out;
}

TEST(WorkerCli, LinksNoGgmlLibrary) {
    // it loads the host's engine at run time (--engine), so one worker serves any build of its source
    CommandResult dyn = run_command({"readelf", "-d", bin_path("moezip-worker")});
    ASSERT_EQ(dyn.exit_code, 0);
    EXPECT_EQ(dyn.out.find("ggml"), std::string::npos) << dyn.out;
    EXPECT_EQ(dyn.out.find("llama"), std::string::npos) << dyn.out;
}

TEST(WorkerCli, RepackWithMmapIsABadFlagCombinationNamedBeforeAnythingLoads) {
    CommandResult r = run_command({bin_path("moezip-worker"), "--model", "/nonexistent.gguf", "--repack", "--mmap"});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("does not apply"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("nonexistent"), std::string::npos) << "the flags are checked before the model is opened: " << r.err;
}
