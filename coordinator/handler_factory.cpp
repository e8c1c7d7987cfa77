#include "coordinator/handler_factory.h"

#include "coordinator/local_handler.h"

namespace moezip {

Status handler_make(const Config & cfg, const GgmlApi & api, std::unique_ptr<RegionHandler> & out) {
    const int threads = cfg.threads > 0 ? cfg.threads : 1;
    switch (cfg.mode) {
        case ConfigMode::observe:
            out.reset();
            return Status::ok();
        case ConfigMode::local:
            out.reset(new LocalHandler(api, threads));
            return Status::ok();
        default:
            return Status::unsupported(std::string("mode \"") + config_mode_name(cfg.mode) + "\" is not implemented yet");
    }
}

} // namespace moezip
