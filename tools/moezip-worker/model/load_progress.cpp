#include "tools/moezip-worker/model/load_progress.h"

#include <cerrno>
#include <cstdlib>

namespace moezip {

bool load_progress_interval_parse(const char * text, int & interval_ms, std::string & why) {
    interval_ms = kWorkerProgressDefaultMs;
    if (text == nullptr) return true;
    // digits only: strtol alone would take leading spaces and a sign (" 5", "+5") as a number
    bool digits = *text != '\0';
    for (const char * c = text; *c != '\0'; ++c) digits = digits && *c >= '0' && *c <= '9';
    char * end = nullptr;
    errno = 0;
    const long v = digits ? strtol(text, &end, 10) : -1;
    if (!digits || end == nullptr || *end != '\0' || errno != 0 || v < 0 || v > 3600000) {
        why = std::string(kWorkerProgressEnv) + "='" + text + "': expected milliseconds 0..3600000 between progress lines";
        return false;
    }
    interval_ms = (int) v;
    return true;
}

LoadProgress::LoadProgress(uint64_t total, int interval_ms, FILE * out)
    : total_(total), interval_(std::chrono::milliseconds(interval_ms)), out_(out), start_(clock::now()), last_(start_) {}

double LoadProgress::seconds() const { return std::chrono::duration<double>(clock::now() - start_).count(); }

void LoadProgress::print_locked(uint64_t done, double s) {
    last_done_ = done;
    ++lines_;
    if (out_ == nullptr) return;
    fprintf(out_, "moezip-worker: loading %llu of %llu bytes (%.1f%%), %.1f s, %.1f MB/s\n", (unsigned long long) done,
            (unsigned long long) total_, total_ ? 100.0 * (double) done / (double) total_ : 100.0, s,
            s > 0 ? (double) done / 1e6 / s : 0.0);
    fflush(out_);
}

void LoadProgress::add(uint64_t bytes) {
    done_ += bytes;
    const auto now = clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    if (now - start_ < interval_ || now - last_ < interval_) return;
    const uint64_t done = done_.load();  // read under the lock: the lines' counts only grow
    if (done <= last_done_) return;
    last_ = now;
    print_locked(done, std::chrono::duration<double>(now - start_).count());
}

void LoadProgress::finish_reading() {
    std::lock_guard<std::mutex> lock(mu_);
    read_s_ = seconds();
    const uint64_t done = done_.load();
    if (lines_ > 0 && done != last_done_) print_locked(done, read_s_);
}

void LoadProgress::add_phase(LoadPhase p, double s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (p == LoadPhase::digests) digests_s_ += s;
    if (p == LoadPhase::repack) repack_s_ += s;
}

std::string LoadProgress::summary() const {
    const double s = seconds();
    char text[256];
    int n = snprintf(text, sizeof text, "loaded %.1f MiB of expert weights in %.2f s (%.1f MB/s; reading %.2f s, digests %.2f s",
                     (double) done_.load() / (1 << 20), s, s > 0 ? (double) done_.load() / 1e6 / s : 0.0, read_s_ < 0 ? 0.0 : read_s_,
                     digests_s_);
    if (repack_s_ > 0 && n > 0 && (size_t) n < sizeof text)
        n += snprintf(text + n, sizeof text - (size_t) n, ", repack %.2f s", repack_s_);
    std::string out(text);
    return out + ")";
}

} // namespace moezip
