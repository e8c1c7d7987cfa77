#include "coordinator/evidence/report_flush.h"

#include <xxhash.h>

#include <string>

namespace moezip {

bool ReportFlushGate::due(Clock::time_point now) {
    if (interval_ms_ <= 0) return false;
    if (started_ && now - last_ < std::chrono::milliseconds(interval_ms_)) return false;
    started_ = true;
    last_ = now;
    return true;
}

uint64_t report_content_digest(const nlohmann::json & report) {
    XXH3_state_t * st = XXH3_createState();
    if (st == nullptr) {  // no memory for the state: hash the whole dump (then memory samples count as changes)
        const std::string s = report.dump();
        return XXH3_64bits(s.data(), s.size());
    }
    XXH3_64bits_reset(st);
    if (report.is_object()) {
        for (auto it = report.begin(); it != report.end(); ++it) {
            if (it.key() == "memory" || it.key() == "complete") continue;
            const std::string v = it.value().dump();
            XXH3_64bits_update(st, it.key().data(), it.key().size() + 1);  // the key's NUL separates key and value
            XXH3_64bits_update(st, v.data(), v.size());
        }
    } else {
        const std::string s = report.dump();
        XXH3_64bits_update(st, s.data(), s.size());
    }
    const uint64_t d = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return d;
}

bool ReportFlushGate::changed(const nlohmann::json & report) {
    const uint64_t d = report_content_digest(report);
    if (have_digest_ && d == digest_) {
        ++skipped_;
        return false;
    }
    have_digest_ = true;
    digest_ = d;
    return true;
}

} // namespace moezip
