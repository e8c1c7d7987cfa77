// moezip: the ABI guard. moezip reads engine structs (struct ggml_cgraph from ggml-impl.h,
// struct ggml_tensor, op_params layouts) as compiled from the headers of one ggml build. At run
// time the loaded ggml must be that build; otherwise moezip stays passthrough and says so once.
// It never guesses a layout.
#pragma once

#include "coordinator/base/status.h"
#include "preload/engine_api.h"

namespace moezip {

/// The ggml build moezip is compiled for: node-llama-cpp 3.21.1 (llama.cpp tag v0.4.0), whose
/// libggml-base reports ggml_version() "0.23.0" and ggml_commit() "5b4ebc5".
constexpr const char * kPinnedGgmlVersion = "0.23.0";
constexpr const char * kPinnedGgmlCommit = "5b4ebc5";

/// Checks the loaded ggml against the pin. Errors: mismatch naming found and expected values.
/// MOEZIP_TEST_GGML_COMMIT (tests only) replaces the expected commit to exercise the mismatch path.
Status abi_guard_check(const GgmlApi & api);

} // namespace moezip
