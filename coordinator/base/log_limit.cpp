#include "coordinator/base/log_limit.h"

#include "coordinator/base/log.h"

namespace moezip {

namespace {

// Sites that suppressed at least one line, newest first; entries are never removed (the limiters
// are statics that live as long as the process).
std::atomic<LogLimiter *> g_sites{nullptr};
std::atomic<uint64_t> g_total{0};

} // namespace

bool LogLimiter::admit(int64_t now_ms, int level, const char * fmt, uint64_t & suppressed) {
    suppressed = 0;
    fmt_.store(fmt, std::memory_order_relaxed);
    level_.store(level, std::memory_order_relaxed);
    lock();
    if (!started_ || now_ms - window_start_ms_ >= kWindowMs || now_ms < window_start_ms_) {
        started_ = true;
        window_start_ms_ = now_ms;
        in_window_ = 0;
    }
    const bool write = in_window_ < kBurst;
    if (write) {
        ++in_window_;
        suppressed = pending_.exchange(0, std::memory_order_relaxed);
    } else {
        pending_.fetch_add(1, std::memory_order_relaxed);
        total_.fetch_add(1, std::memory_order_relaxed);
        g_total.fetch_add(1, std::memory_order_relaxed);
    }
    unlock();
    if (!write && !listed_.exchange(true, std::memory_order_acq_rel)) {
        next_ = g_sites.load(std::memory_order_relaxed);
        while (!g_sites.compare_exchange_weak(next_, this, std::memory_order_release, std::memory_order_relaxed)) {}
    }
    return write;
}

uint64_t log_suppressed_total() { return g_total.load(std::memory_order_relaxed); }

void log_report_suppressed() {
    for (LogLimiter * l = g_sites.load(std::memory_order_acquire); l != nullptr; l = l->next_) {
        l->lock();
        const uint64_t n = l->pending_.exchange(0, std::memory_order_relaxed);
        l->unlock();
        if (n == 0) continue;
        const char * fmt = l->fmt_.load(std::memory_order_relaxed);
        const LogLevel level = static_cast<LogLevel>(l->level_.load(std::memory_order_relaxed));
        MOEZIP_LOG(level, "%llu more lines like \"%s\" (%s:%d) were suppressed", (unsigned long long) n,
                   fmt ? fmt : "", l->file_, l->line_);
    }
}

} // namespace moezip
