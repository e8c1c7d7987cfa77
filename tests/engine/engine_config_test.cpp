// tools/engines/engine-config.sh (make ENGINE=...): what it accepts and how it names what it refuses,
// on fake folders (the real engines are exercised by tests/engine/engines_test.cpp).
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <fstream>

using namespace moezip_test;

namespace {

CommandResult engine_config(const std::string & engine, const std::string & dir) {
    return run_command({repo_root() + "/tools/engines/engine-config.sh", engine, dir + "/out"}, {}, 60);
}

TEST(EngineConfig, AFolderOfNeitherKindIsNamed) {
    const std::string dir = test_dir("engine_config_neither");
    CommandResult r = engine_config(dir, dir);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("ENGINE=" + dir + ": neither a llama.cpp CMake build folder"), std::string::npos) << r.err;
}

TEST(EngineConfig, ASourceTreeIsPointedToItsBuildFolder) {
    const std::string dir = test_dir("engine_config_source_tree");
    run_command({"/bin/mkdir", "-p", dir + "/llama.cpp/build"});
    std::ofstream(dir + "/llama.cpp/build/CMakeCache.txt") << "BUILD_SHARED_LIBS:BOOL=ON\n";
    CommandResult r = engine_config(dir + "/llama.cpp", dir);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("give its CMake build folder, ENGINE=" + dir + "/llama.cpp/build"), std::string::npos) << r.err;
}

TEST(EngineConfig, AStaticBuildIsRefusedWithTheReason) {
    const std::string dir = test_dir("engine_config_static");
    std::ofstream(dir + "/CMakeCache.txt") << "CMAKE_HOME_DIRECTORY:INTERNAL=/nowhere\nBUILD_SHARED_LIBS:BOOL=OFF\n";
    CommandResult r = engine_config(dir, dir);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("BUILD_SHARED_LIBS=OFF: ggml is linked into each program and no preload can reach it"), std::string::npos)
        << r.err;
}

TEST(EngineConfig, ABuildWithoutLibrariesIsNamed) {
    const std::string dir = test_dir("engine_config_unbuilt");
    std::ofstream(dir + "/CMakeCache.txt") << "CMAKE_HOME_DIRECTORY:INTERNAL=/nowhere\nBUILD_SHARED_LIBS:BOOL=ON\n";
    CommandResult r = engine_config(dir, dir);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("no " + dir + "/bin/libggml-base.so: build llama.cpp first"), std::string::npos) << r.err;
}

} // namespace
