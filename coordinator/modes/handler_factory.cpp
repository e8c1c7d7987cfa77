#include "coordinator/modes/handler_factory.h"

#include "coordinator/modes/dispatch_handler.h"
#include "coordinator/modes/local_handler.h"

namespace moezip {

Status handler_make(const Config & cfg, const GgmlApi & api, const EngineIdentity & self, std::unique_ptr<RegionHandler> & out) {
    const int threads = cfg.threads > 0 ? cfg.threads : 1;
    switch (cfg.mode) {
        case ConfigMode::observe:
            out.reset();
            return Status::ok();
        case ConfigMode::local:
            out.reset(new LocalHandler(api, threads, cfg.experts.copy_local));
            return Status::ok();
        case ConfigMode::rows:
            out.reset(new RowsHandler(cfg, api, self));
            return Status::ok();
        case ConfigMode::experts:
            out.reset(new ExpertsHandler(cfg, api, self));
            return Status::ok();
        case ConfigMode::shard:
            out.reset(new ShardHandler(cfg, api, self));
            return Status::ok();
        default:
            return Status::unsupported(std::string("mode \"") + config_mode_name(cfg.mode) + "\" is not implemented yet");
    }
}

} // namespace moezip
