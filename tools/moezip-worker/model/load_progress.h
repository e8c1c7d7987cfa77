// moezip-worker: progress of loading the served experts, as lines on stderr.
//
// While the served experts' bytes are read (pread into memory, or faulted in from the mapping with
// --mmap) at most one line per interval (default 1 s, MOEZIP_WORKER_PROGRESS_MS) goes to stderr,
// the first only once the load has run an interval, so a load shorter than that prints none:
//   moezip-worker: loading 1073741824 of 2642411520 bytes (40.6%), 1.0 s, 1073.7 MB/s
// When any such line was printed, a last one states the total. Then summary() gives the line that
// states the whole load's time and rate and its phases (reading, digests, repack).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace moezip {

/// Environment variable: the progress interval in milliseconds, 0..3600000 (0: a line after every
/// read chunk, for tests). Unset: 1000.
constexpr const char * kWorkerProgressEnv = "MOEZIP_WORKER_PROGRESS_MS";
constexpr int kWorkerProgressDefaultMs = 1000;

/// Parses MOEZIP_WORKER_PROGRESS_MS's value (null = unset: the default). False with `why` naming the
/// variable and the accepted range when it is not an integer in 0..3600000.
bool load_progress_interval_parse(const char * text, int & interval_ms, std::string & why);

/// The phases after reading whose times the summary names (reading's own time is finish_reading's).
enum class LoadPhase { digests, repack };

/// Counts the bytes read while loading and prints progress lines (thread-safe: add() may be called
/// from several reading threads).
class LoadProgress {
public:
    /// `total`: bytes that will be read (the served experts' bytes); `out`: where lines go (stderr),
    /// null for none.
    LoadProgress(uint64_t total, int interval_ms, FILE * out);

    /// `bytes` more were read; prints a line when the interval has passed since the start and since
    /// the last line.
    void add(uint64_t bytes);
    /// Reading is over: prints the final line (the total) when a progress line was printed before.
    void finish_reading();
    /// Adds `seconds` to phase p's time (the reading phase is timed by finish_reading()).
    void add_phase(LoadPhase p, double seconds);
    /// "loaded 2520.0 MiB of expert weights in 3.41 s (775.1 MB/s; reading 3.02 s, digests 0.39 s)",
    /// from the start to now; repack only when it took time.
    std::string summary() const;

    uint64_t done() const { return done_.load(); }
    uint64_t total() const { return total_; }
    /// Seconds since construction.
    double seconds() const;
    /// Progress lines printed so far (the final one included).
    int lines() const { return lines_; }

private:
    void print_locked(uint64_t done, double seconds);

    using clock = std::chrono::steady_clock;
    const uint64_t total_;
    const clock::duration interval_;
    FILE * const out_;
    const clock::time_point start_;
    std::atomic<uint64_t> done_{0};
    std::mutex mu_;                  // guards what follows and the output
    clock::time_point last_;
    uint64_t last_done_ = 0;         // the byte count of the last line printed
    int lines_ = 0;
    double read_s_ = -1, digests_s_ = 0, repack_s_ = 0;
};

} // namespace moezip
