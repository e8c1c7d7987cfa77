// moezip: the region handler for a configured mode.
#pragma once

#include "coordinator/config/config.h"
#include "coordinator/dispatch/dispatcher.h"
#include "coordinator/modes/region_handler.h"
#include "provider_map/engine_api.h"

#include <memory>

namespace moezip {

/// Makes the handler for cfg.mode: observe -> none (out = nullptr), local -> LocalHandler,
/// rows/experts -> the dispatching handlers. Errors: unsupported for a mode not implemented.
/// Creates no sockets or threads itself beyond what the mode needs.
/// `self` identifies this host to workers (ggml commit, CPU variant).
Status handler_make(const Config & cfg, const GgmlApi & api, const EngineIdentity & self, std::unique_ptr<RegionHandler> & out);

} // namespace moezip
