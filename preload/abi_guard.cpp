#include "preload/abi_guard.h"

#include "preload/abi_probe.h"
#include "preload/engine_source.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace moezip {

// Sizes of the structs whose layout moezip relies on, as compiled. They hold for every engine
// tested (docs/engines.md); a header that changes them fails the build here instead of running.
static_assert(sizeof(ggml_tensor) == 336, "struct ggml_tensor layout changed (ggml.h)");
static_assert(offsetof(ggml_cgraph, nodes) == 16, "struct ggml_cgraph layout changed (ggml-impl.h)");

bool abi_commit_names_source(const std::string & commit, const EnginePin & pin) {
    if (commit == pin.binary_commit) return true;
    if (commit.size() < 7 || commit.size() > 40) return false;
    for (char c : commit)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;  // "-dirty", "unknown" never match
    return strncmp(pin.source_commit, commit.c_str(), commit.size()) == 0;
}

std::string abi_engine_dir_of(const std::string & lib_path) {
    const std::string dir = lib_path.substr(0, lib_path.rfind('/'));
    size_t nm = dir.find("/node_modules/");
    if (nm != std::string::npos) return dir.substr(0, nm);
    if (dir.size() > 4 && dir.compare(dir.size() - 4, 4, "/bin") == 0) return dir.substr(0, dir.size() - 4);
    return dir;
}

namespace {

std::string short_commit(const char * c) { return std::string(c).substr(0, 12); }

// What the loaded engine differs in, "" when nothing.
std::string what_differs(const GgmlApi & api, const std::string & version, const std::string & commit,
                         const std::string & loaded_from, const EnginePin & pin) {
    std::string d;
    auto add = [&](const std::string & s) { d += (d.empty() ? "" : "; ") + s; };
    if (version != pin.ggml_version) add("its ggml version is " + version + ", not " + pin.ggml_version);
    // node-llama-cpp's binaries name their source by the bundle their package ships, not by ggml_commit()
    const std::string npm_source = abi_commit_names_source(commit, pin) ? "" : engine_npm_source_commit(loaded_from);
    if (!npm_source.empty() && npm_source != pin.source_commit)
        add("its node-llama-cpp package ships the source " + short_commit(npm_source.c_str()) + ", not " +
            short_commit(pin.source_commit));
    else if (npm_source.empty() && !abi_commit_names_source(commit, pin)) {
        const bool alias = strncmp(pin.source_commit, pin.binary_commit, strlen(pin.binary_commit)) != 0;
        add("its commit " + commit + " names another source than " + short_commit(pin.source_commit) +
            (alias ? std::string(" (whose ") + pin.name + " binaries report " + pin.binary_commit + ")" : std::string()));
    }
    const size_t to = api.ggml_tensor_overhead(), go = api.ggml_graph_overhead_custom(2048, false);
    if (to != pin.tensor_overhead) add("ggml_tensor_overhead() is " + std::to_string(to) + ", not " + std::to_string(pin.tensor_overhead));
    if (go != pin.graph_overhead_2048)
        add("ggml_graph_overhead_custom(2048) is " + std::to_string(go) + ", not " + std::to_string(pin.graph_overhead_2048));
    if (d.empty()) {  // the probes build tensors; only run them on an engine that passed the cheap checks
        Status st = abi_probe_layout(api);
        if (!st) add(st.message());
    }
    return d;
}

} // namespace

Status abi_guard_check(const GgmlApi & api, const std::string & loaded_from, const EnginePin & pin_in) {
    EnginePin pin = pin_in;
    const char * test_commit = getenv("MOEZIP_TEST_GGML_COMMIT");
    if (test_commit != nullptr && *test_commit != 0) pin.binary_commit = pin.source_commit = test_commit;
    const char * version = api.ggml_version ? api.ggml_version() : nullptr;
    const char * commit = api.ggml_commit ? api.ggml_commit() : nullptr;
    if (version == nullptr || commit == nullptr)
        return Status::mismatch("the loaded ggml (" + loaded_from + ") does not report its version/commit");
    const std::string differs = what_differs(api, version, commit, loaded_from, pin);
    if (differs.empty()) return Status::ok();
    const std::string engine_dir = abi_engine_dir_of(loaded_from);
    return Status::mismatch(std::string("loaded ggml ") + version + " (" + commit + ", " + loaded_from +
                            ") is not the engine this moezip was built for (" + pin.name + ": ggml " + pin.ggml_version +
                            " from llama.cpp " + short_commit(pin.source_commit) + "): " + differs +
                            ". moezip reads ggml's structs as compiled from the engine's headers and never guesses a layout: "
                            "build moezip for this engine with `make ENGINE=" + engine_dir + " BUILD=build-ggml-" + version +
                            "` and use that build's libmoezip.so and moezip-worker");
}

} // namespace moezip
