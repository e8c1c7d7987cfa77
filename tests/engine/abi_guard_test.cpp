// The ABI guard and its layout probes, on the engine this test binary is linked against (the one
// moezip was built for), with faults injected by replacing functions of the bound API.
#include "preload/abi_guard.h"
#include "preload/abi_probe.h"
#include "preload/engine_locate.h"
#include "preload/engine_source.h"
#include "tests/support/test_support.h"
#include "tests/support/worker_harness.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

using namespace moezip;
using moezip_test::reference_api;

namespace {

std::string loaded_base() { return object_path_of(reinterpret_cast<const void *>(reference_api().ggml_version)); }

TEST(AbiGuard, AcceptsTheEngineMoezipWasBuiltFor) {
    ASSERT_TRUE(reference_api().base_bound);
    Status st = abi_guard_check(reference_api(), loaded_base());
    EXPECT_TRUE(st) << st.message();
}

TEST(AbiGuard, ACommitNamesTheSourceByPrefixOrTheBuiltAgainstBinaryString) {
    EnginePin pin = engine_pin();
    pin.source_commit = "80fb11ac73e66d89eae2c6a91d8a77428fa733ed";
    pin.binary_commit = "5b4ebc5";  // node-llama-cpp 3.21.1's binaries
    EXPECT_TRUE(abi_commit_names_source("80fb11a", pin)) << "a self-built llama.cpp of the same source";
    EXPECT_TRUE(abi_commit_names_source("80fb11ac73e6", pin)) << "a longer short hash";
    EXPECT_TRUE(abi_commit_names_source("5b4ebc5", pin)) << "the binaries moezip was built against";
    EXPECT_FALSE(abi_commit_names_source("80fb11a-dirty", pin)) << "a modified tree may have another layout";
    EXPECT_FALSE(abi_commit_names_source("unknown", pin)) << "built outside a git checkout";
    EXPECT_FALSE(abi_commit_names_source("80fb1", pin)) << "too short to name a commit";
    EXPECT_FALSE(abi_commit_names_source("0ad4a86", pin)) << "node-llama-cpp 3.22.1";
    EXPECT_FALSE(abi_commit_names_source("80FB11A", pin)) << "git prints lowercase";
}

TEST(AbiGuard, ARefusalNamesEveryDifferenceAndTheCommandToRebuild) {
    EnginePin pin = engine_pin();
    pin.ggml_version = "9.9.9";
    pin.tensor_overhead = 1;
    const std::string base = loaded_base();
    Status st = abi_guard_check(reference_api(), base, pin);
    ASSERT_FALSE(st);
    const std::string & m = st.message();
    const std::string v = reference_api().ggml_version();
    EXPECT_EQ(m.find("loaded ggml " + v + " (" + reference_api().ggml_commit() + ", " + base + ")"), 0u) << m;
    EXPECT_NE(m.find("its ggml version is " + v + ", not 9.9.9"), std::string::npos) << m;
    EXPECT_NE(m.find("ggml_tensor_overhead() is " + std::to_string(reference_api().ggml_tensor_overhead()) + ", not 1"), std::string::npos) << m;
    EXPECT_EQ(m.find("its commit"), std::string::npos) << "the commit is fine: " << m;
    EXPECT_NE(m.find("`make ENGINE=" + abi_engine_dir_of(base) + " BUILD=build-ggml-" + v + "`"), std::string::npos) << m;
}

TEST(AbiGuard, TheEngineFolderToRebuildForIsNamedFromTheLibraryPath) {
    EXPECT_EQ(abi_engine_dir_of("/p/app/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so"), "/p/app");
    EXPECT_EQ(abi_engine_dir_of("/home/u/llama.cpp/build/bin/libggml-base.so.0"), "/home/u/llama.cpp/build");
    EXPECT_EQ(abi_engine_dir_of("/usr/local/lib/libggml-base.so"), "/usr/local/lib");
}

// A node-llama-cpp install as npm lays it out, with `bins_version` for the binaries' package.
std::string fake_npm_install(const std::string & name, const std::string & bins_version) {
    const std::string root = moezip_test::test_dir(name), nm = root + "/node_modules";
    moezip_test::run_command({"/bin/mkdir", "-p", nm + "/node-llama-cpp/llama", nm + "/@node-llama-cpp/linux-x64/bins/linux-x64"});
    std::ofstream(nm + "/node-llama-cpp/package.json") << "{\n  \"name\": \"node-llama-cpp\",\n  \"version\": \"3.21.1\"\n}\n";
    std::ofstream(nm + "/@node-llama-cpp/linux-x64/package.json") << "{\"name\":\"@node-llama-cpp/linux-x64\",\"version\":\"" << bins_version << "\"}";
    std::ofstream(nm + "/node-llama-cpp/llama/gitRelease.bundle")
        << "# v2 git bundle\n80fb11ac73e66d89eae2c6a91d8a77428fa733ed HEAD\n\nPACK...";
    return nm + "/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so";
}

TEST(EngineSource, NodeLlamaCppBinariesNameTheSourceTheirPackageShips) {
    EXPECT_EQ(engine_npm_source_commit(fake_npm_install("engine_source_npm", "3.21.1")), "80fb11ac73e66d89eae2c6a91d8a77428fa733ed");
    EXPECT_EQ(engine_npm_source_commit(fake_npm_install("engine_source_npm_mixed", "3.22.1")), "")
        << "binaries of another release than the bundle's package";
    EXPECT_EQ(engine_npm_source_commit("/home/u/llama.cpp/build/bin/libggml-base.so.0"), "") << "not node-llama-cpp";
}

TEST(EngineSource, GitBundleHeads) {
    const std::string dir = moezip_test::test_dir("engine_source_bundles");
    std::ofstream(dir + "/v3.bundle") << "# v3 git bundle\n@object-format=sha1\n-1111111111111111111111111111111111111111 x\n"
                                         "2222222222222222222222222222222222222222 refs/heads/main\n"
                                         "3333333333333333333333333333333333333333 HEAD\n\nPACK";
    std::ofstream(dir + "/noise.bundle") << "PACK not a bundle";
    EXPECT_EQ(git_bundle_head(dir + "/v3.bundle"), "3333333333333333333333333333333333333333");
    EXPECT_EQ(git_bundle_head(dir + "/noise.bundle"), "");
    EXPECT_EQ(git_bundle_head(dir + "/absent.bundle"), "");
}

TEST(AbiProbe, PassesOnTheEngineItWasBuiltFor) {
    Status st = abi_probe_layout(reference_api());
    EXPECT_TRUE(st) << st.message();
}

// Stand-ins for engine functions that disagree with the compiled headers.
const char * op_name_off_by_one(ggml_op op) { return reference_api().ggml_op_name((ggml_op) (op + 1)); }
ggml_glu_op glu_op_swapped(const ggml_tensor * t) {
    ggml_glu_op op = reference_api().ggml_get_glu_op(t);
    return op == GGML_GLU_OP_SWIGLU ? GGML_GLU_OP_GEGLU : op;
}
size_t row_size_wrong(ggml_type type, int64_t ne) { return reference_api().ggml_row_size(type, ne) + 4; }
int graph_n_nodes_wrong(ggml_cgraph * g) { return reference_api().ggml_graph_n_nodes(g) + 1; }

TEST(AbiProbe, AnOpEnumThatNamesAnotherOpIsCaught) {
    GgmlApi api = reference_api();
    api.ggml_op_name = op_name_off_by_one;
    Status st = abi_probe_layout(api);
    ASSERT_FALSE(st);
    EXPECT_NE(st.message().find("ggml_op_name(GGML_OP_NONE = 0)"), std::string::npos) << st.message();
}

TEST(AbiProbe, AGluOpOfAnotherValueIsCaught) {
    GgmlApi api = reference_api();
    api.ggml_get_glu_op = glu_op_swapped;
    Status st = abi_probe_layout(api);
    ASSERT_FALSE(st);
    EXPECT_NE(st.message().find("GLU node of GGML_GLU_OP_SWIGLU"), std::string::npos) << st.message();
}

TEST(AbiProbe, TensorStridesOfAnotherLayoutAreCaught) {
    GgmlApi api = reference_api();
    api.ggml_row_size = row_size_wrong;
    Status st = abi_probe_layout(api);
    ASSERT_FALSE(st);
    EXPECT_NE(st.message().find("ggml_tensor nb of q8_0"), std::string::npos) << st.message();
}

TEST(AbiProbe, AGraphStructOfAnotherShapeIsCaught) {
    GgmlApi api = reference_api();
    api.ggml_graph_n_nodes = graph_n_nodes_wrong;
    Status st = abi_probe_layout(api);
    ASSERT_FALSE(st);
    EXPECT_NE(st.message().find("ggml_cgraph size/n_nodes"), std::string::npos) << st.message();
}

TEST(EngineLocate, CpuLibraryNames) {
    EXPECT_EQ(cpu_library_name("/x/libggml-cpu-zen4.so"), "zen4");
    EXPECT_EQ(cpu_library_name("/x/libggml-cpu-sapphirerapids.so"), "sapphirerapids");
    EXPECT_EQ(cpu_library_name("/x/build/bin/libggml-cpu.so.0"), "default");
    EXPECT_EQ(cpu_library_name("/x/libggml-cpu.so"), "default");
    EXPECT_EQ(cpu_library_name("/x/libfoo.so"), "libfoo.so");
}

} // namespace
