// libFuzzer target: the config loader, config_load_string (TOML text -> Config or a Status), as
// the preload and moezip-worker call it. Besides "no crash, no sanitizer report" (UBSan also stops on
// __builtin_unreachable, which toml++ 3.3.0 reaches on some non-ASCII input), it requires:
//   - toml++'s internal checks never fail: the guard in config.cpp would turn that into an error,
//     but config_precheck must keep every such input away from toml++ (a gap there is a finding);
//   - every line of an error names the file ("fuzz.toml:..."), as the messages promise;
//   - an accepted config describes itself and passes the expert coverage check without crashing.
#include "coordinator/config/config.h"
#include "coordinator/config/config_internal.h"  // config_toml_checks_failed

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace moezip;

namespace {

void require(bool ok, const char * what, const std::string & detail) {
    if (ok) return;
    fprintf(stderr, "fuzz invariant broken: %s\n%s\n", what, detail.c_str());
    abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    const std::string text(reinterpret_cast<const char *>(data), size);
    Config cfg;
    Status st = config_load_string(text, "fuzz.toml", cfg);
    require(config_toml_checks_failed() == 0, "a toml++ check failed (precheck gap)", st.message());
    if (!st) {
        const std::string & m = st.message();
        for (size_t at = 0; at <= m.size();) {
            size_t nl = m.find('\n', at);
            require(m.compare(at, 10, "fuzz.toml:") == 0, "an error line does not name the file", m);
            if (nl == std::string::npos) break;
            at = nl + 1;
        }
        return 0;
    }
    (void) config_digest(cfg);
    for (int n_expert : {1, 8, 128}) (void) config_check_expert_coverage(cfg, n_expert);
    (void) config_report_path(cfg, 4242);
    return 0;
}
