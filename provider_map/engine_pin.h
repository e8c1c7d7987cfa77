// moezip: the engine this build of moezip was compiled for (make ENGINE=..., default the pinned
// node-llama-cpp 3.21.1). tools/engines/engine-config.sh writes the values into
// <BUILD>/gen/engine_pin.inc when moezip is built; only provider_map/engine_pin.cpp includes that file,
// so switching engines recompiles one file besides the ones whose headers changed.
#pragma once

#include <cstddef>

namespace moezip {

/// Identity of the engine moezip's headers came from. The ABI guard (abi_guard.h) accepts a loaded
/// ggml only when it matches: same version, a commit string naming the same source, the same layout.
struct EnginePin {
    const char * name;            ///< "node-llama-cpp 3.21.1" or "llama.cpp 80fb11ac73e6"
    const char * engine_dir;      ///< ENGINE as given to make (absolute path)
    const char * lib_dir;         ///< folder of that engine's libggml-base (moezip-worker's default --engine)
    const char * ggml_version;    ///< "0.23.0": GGML_VERSION of the source tree (ggml/CMakeLists.txt)
    const char * source_commit;   ///< full git commit of the source tree whose headers moezip compiled against
    const char * binary_commit;   ///< what that engine's libggml-base reports from ggml_commit(): for a
                                  ///< self-built llama.cpp a prefix of source_commit; for the npm binaries
                                  ///< the node-llama-cpp build's own commit ("5b4ebc5" for 3.21.1)
    size_t tensor_overhead;       ///< ggml_tensor_overhead() of that build, bytes
    size_t graph_overhead_2048;   ///< ggml_graph_overhead_custom(2048, false) of that build, bytes
};

/// The pin compiled into this build.
const EnginePin & engine_pin();

} // namespace moezip
