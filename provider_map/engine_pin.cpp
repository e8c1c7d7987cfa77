#include "provider_map/engine_pin.h"

#include "engine_pin.inc"  // <BUILD>/gen/, written by tools/engines/engine-config.sh

namespace moezip {

const EnginePin & engine_pin() {
    static const EnginePin pin = {MOEZIP_PIN_NAME,          MOEZIP_PIN_ENGINE_DIR,     MOEZIP_PIN_LIB_DIR,
                                  MOEZIP_PIN_GGML_VERSION,  MOEZIP_PIN_SOURCE_COMMIT,  MOEZIP_PIN_BINARY_COMMIT,
                                  MOEZIP_PIN_TENSOR_OVERHEAD, MOEZIP_PIN_GRAPH_OVERHEAD_2048};
    return pin;
}

} // namespace moezip
