#include "preload/abi_guard.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace moezip {

// Sizes of the structs whose layout moezip relies on, as compiled. A different ggml build with
// the same version string but another layout would still be caught by the commit check; these
// static_asserts document what is relied on and catch a header change at build time.
static_assert(sizeof(ggml_tensor) == 336, "struct ggml_tensor layout changed (ggml.h)");
static_assert(offsetof(ggml_cgraph, nodes) == 16, "struct ggml_cgraph layout changed (ggml-impl.h)");

Status abi_guard_check(const GgmlApi & api) {
    const char * version = api.ggml_version ? api.ggml_version() : nullptr;
    const char * commit = api.ggml_commit ? api.ggml_commit() : nullptr;
    const char * expect_commit = getenv("MOEZIP_TEST_GGML_COMMIT");
    if (expect_commit == nullptr || *expect_commit == 0) expect_commit = kPinnedGgmlCommit;
    if (version == nullptr || commit == nullptr)
        return Status::mismatch("the loaded ggml does not report its version/commit");
    if (strcmp(version, kPinnedGgmlVersion) != 0 || strcmp(commit, expect_commit) != 0) {
        return Status::mismatch(std::string("loaded ggml ") + version + " (" + commit + ") but moezip was built for ggml " +
                                kPinnedGgmlVersion + " (" + expect_commit + "), node-llama-cpp 3.21.1");
    }
    return Status::ok();
}

} // namespace moezip
