// moezip: the ABI guard. moezip reads engine structs (struct ggml_cgraph from ggml-impl.h,
// struct ggml_tensor, op_params layouts) as compiled from the headers of one engine's source, the
// one it was built for (make ENGINE=...; engine_pin.h). At run time the loaded ggml must be a build
// of that source; otherwise moezip stays passthrough and says so once, naming what differs and the
// command that builds moezip for the loaded engine. It never guesses a layout.
//
// What identifies an engine here, and nothing that depends on where its binary was built:
//   - ggml_version() equals the version of the source tree moezip compiled against;
//   - the engine names that source: ggml_commit() is a prefix of its git commit (any build from a
//     checkout of it) or the exact string the engine moezip was built against reports; or, for
//     node-llama-cpp's binaries (which report the node-llama-cpp build's own commit, e.g. "5b4ebc5"),
//     the source bundle their package ships beside them is that commit (engine_source.h);
//   - the layout probes: ggml_tensor_overhead() and ggml_graph_overhead_custom(2048) equal the
//     build-time engine's, and abi_probe_layout() reads back what the engine built as compiled.
#pragma once

#include "provider_map/status.h"
#include "provider_map/engine_api.h"
#include "provider_map/engine_pin.h"

#include <string>

namespace moezip {

/// Checks the loaded ggml (base functions of `api` bound) against `pin`. `loaded_from` is the path
/// of the loaded libggml-base, used to name the engine and the rebuild command in the message.
/// Errors: mismatch "loaded ggml V (C, PATH) is not the engine this moezip was built for (...):
/// <what differs, each named>. ... `make ENGINE=<dir> BUILD=<dir>` ...".
/// MOEZIP_TEST_GGML_COMMIT (tests only) replaces the pinned commits to exercise the mismatch path.
Status abi_guard_check(const GgmlApi & api, const std::string & loaded_from, const EnginePin & pin = engine_pin());

/// True when a run-time ggml_commit() string names the pinned engine's source: equal to
/// pin.binary_commit, or a git short hash (7..40 hex digits) that is a prefix of pin.source_commit.
bool abi_commit_names_source(const std::string & commit, const EnginePin & pin);

/// The ENGINE folder to give make for the engine whose libggml-base is at `lib_path`: the folder
/// holding node_modules/ for node-llama-cpp, the parent of bin/ for a llama.cpp CMake build,
/// else the library's folder.
std::string abi_engine_dir_of(const std::string & lib_path);

} // namespace moezip
