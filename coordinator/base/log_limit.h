// moezip: rate limits for log lines that can repeat once per graph (a worker outage in abort mode
// fails every compute: one line each would flood the host's stderr). Each call site of LOG_CAPPED
// owns a LogLimiter: at most kBurst lines per kWindowMs; the lines held back are counted, the next
// line written says how many, and log_report_suppressed() (at exit) states what is still untold.
#pragma once

#include <atomic>
#include <cstdint>

namespace moezip {

/// The rate limit of one call site. Constant-initialised and trivially destructible, so a
/// function-local static of it is safe to use from exit handlers and any thread. It must have static
/// storage duration: once it suppressed a line it is listed for log_report_suppressed() for good.
class LogLimiter {
public:
    static constexpr uint32_t kBurst = 5;        ///< lines written per window
    static constexpr int64_t kWindowMs = 60000;  ///< window length, ms (steady clock)

    constexpr LogLimiter(const char * file, int line) : file_(file), line_(line) {}

    /// True when a line from this site may be written at `now_ms` (steady ms); then `suppressed`
    /// is the number of lines held back since the last one written (0 if none), now told. False:
    /// the line is counted as suppressed. `level` and `fmt` (a string literal) name the site in
    /// the exit summary.
    bool admit(int64_t now_ms, int level, const char * fmt, uint64_t & suppressed);
    /// Lines held back since the last one written (not yet told).
    uint64_t pending() const { return pending_.load(std::memory_order_relaxed); }
    /// Lines held back over the whole run.
    uint64_t total_suppressed() const { return total_.load(std::memory_order_relaxed); }

private:
    friend void log_report_suppressed();
    void lock() const { while (busy_.test_and_set(std::memory_order_acquire)) {} }
    void unlock() const { busy_.clear(std::memory_order_release); }

    const char * file_;
    int line_;
    std::atomic<const char *> fmt_{nullptr};
    std::atomic<int> level_{0};
    mutable std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
    bool started_ = false;
    int64_t window_start_ms_ = 0;
    uint32_t in_window_ = 0;
    std::atomic<uint64_t> pending_{0};
    std::atomic<uint64_t> total_{0};
    std::atomic<bool> listed_{false};
    LogLimiter * next_ = nullptr;  // in the list of sites that suppressed something (log_report_suppressed)
};

/// Lines suppressed by every LogLimiter of the process, over the run.
uint64_t log_suppressed_total();
/// Writes one line per call site whose suppressed lines were not yet told (`N more lines like
/// "<format>" (<file>:<line>) were suppressed`), at the level that site logs at; called at exit.
void log_report_suppressed();

} // namespace moezip
