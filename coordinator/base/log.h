// moezip: logging. One family of printf-checked macros; every line is prefixed
// "moezip[<pid>] <level>:" and goes to stderr. The level comes from MOEZIP_LOG
// (error, warn, info, debug; default info), read once. Lines that can repeat once per graph go
// through LOG_CAPPED: rate-limited per call site (log_limit.h), with counts of what was held back,
// so a failing hook cannot flood the host's terminal.
#pragma once

#include "coordinator/base/log_limit.h"

namespace moezip {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

/// Current level: MOEZIP_LOG (read on first use) if set, else what log_set_default() gave, else info.
LogLevel log_level();
/// Sets the level used when MOEZIP_LOG is not set (the config's `log` key).
void log_set_default(LogLevel level);
/// Writes one line; used by the macros below.
void log_write(LogLevel level, const char * fmt, ...) __attribute__((format(printf, 2, 3)));
/// Writes one line if `limiter` admits it now; the first line after suppressed ones ends
/// " [N more lines like this suppressed]". Used by LOG_CAPPED.
void log_limited(LogLimiter & limiter, LogLevel level, const char * fmt, ...) __attribute__((format(printf, 3, 4)));

} // namespace moezip

#define MOEZIP_LOG(level, ...) \
    do { if (static_cast<int>(level) <= static_cast<int>(::moezip::log_level())) ::moezip::log_write(level, __VA_ARGS__); } while (0)
#define LOG_ERROR(...) MOEZIP_LOG(::moezip::LogLevel::error, __VA_ARGS__)
#define LOG_WARN(...)  MOEZIP_LOG(::moezip::LogLevel::warn, __VA_ARGS__)
#define LOG_INFO(...)  MOEZIP_LOG(::moezip::LogLevel::info, __VA_ARGS__)
#define LOG_DEBUG(...) MOEZIP_LOG(::moezip::LogLevel::debug, __VA_ARGS__)
/// Logs at most LogLimiter::kBurst lines per LogLimiter::kWindowMs from this call site and counts the
/// rest (a hook that fails on every graph says so a few times a minute, with how often it failed).
#define LOG_CAPPED(level, ...) \
    do { \
        static ::moezip::LogLimiter moezip_log_limiter_(__FILE__, __LINE__); \
        if (static_cast<int>(level) <= static_cast<int>(::moezip::log_level())) \
            ::moezip::log_limited(moezip_log_limiter_, level, __VA_ARGS__); \
    } while (0)
