// moezip: when a running host rewrites its report. A server computes graphs for days; its report is
// rewritten at most every `report_flush_ms` (docs/config.md) and only when something in it other
// than the memory sample changed, so an idle or slow server does not rewrite the same file.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>

namespace moezip {

/// Decides periodic report writes. Not thread-safe: the caller serialises (the preload's session calls it
/// from the graph compute hook, one compute at a time per decision).
class ReportFlushGate {
public:
    using Clock = std::chrono::steady_clock;

    /// `interval_ms` <= 0: never due (the report is written only at exit).
    explicit ReportFlushGate(int interval_ms = 0) : interval_ms_(interval_ms) {}
    void set_interval_ms(int interval_ms) { interval_ms_ = interval_ms; }

    /// Counts the first interval from `now` (without it the first due() is true at once).
    void start(Clock::time_point now) { started_ = true; last_ = now; }
    /// True at most once per interval: each call `interval_ms` after start() or the last call that
    /// returned true (one clock comparison: the graph compute hook calls it each graph).
    bool due(Clock::time_point now);
    /// True when `report` differs from the last report this gate let through, ignoring the keys
    /// that change without the run doing anything (`memory`: VmRSS samples; `complete`); then it
    /// becomes the last one. False counts one skipped write.
    bool changed(const nlohmann::json & report);
    /// Writes skipped because nothing changed.
    uint64_t skipped() const { return skipped_; }

private:
    int interval_ms_;
    bool started_ = false;
    Clock::time_point last_{};
    bool have_digest_ = false;
    uint64_t digest_ = 0;
    uint64_t skipped_ = 0;
};

/// XXH3-64 of `report` dumped without the keys ReportFlushGate::changed ignores.
uint64_t report_content_digest(const nlohmann::json & report);

} // namespace moezip
