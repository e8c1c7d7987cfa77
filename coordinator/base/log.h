// moezip: logging. One family of printf-checked macros; every line is prefixed
// "moezip[<pid>] <level>:" and goes to stderr. The level comes from MOEZIP_LOG
// (error, warn, info, debug; default info), read once. Messages at error level are capped
// per call site (MOEZIP_LOG_ONCE) so a failing hook cannot flood the host's terminal.
#pragma once

namespace moezip {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

/// Current level: MOEZIP_LOG (read on first use) if set, else what log_set_default() gave, else info.
LogLevel log_level();
/// Sets the level used when MOEZIP_LOG is not set (the config's `log` key).
void log_set_default(LogLevel level);
/// Writes one line; used by the macros below.
void log_write(LogLevel level, const char * fmt, ...) __attribute__((format(printf, 2, 3)));

} // namespace moezip

#define MOEZIP_LOG(level, ...) \
    do { if (static_cast<int>(level) <= static_cast<int>(::moezip::log_level())) ::moezip::log_write(level, __VA_ARGS__); } while (0)
#define LOG_ERROR(...) MOEZIP_LOG(::moezip::LogLevel::error, __VA_ARGS__)
#define LOG_WARN(...)  MOEZIP_LOG(::moezip::LogLevel::warn, __VA_ARGS__)
#define LOG_INFO(...)  MOEZIP_LOG(::moezip::LogLevel::info, __VA_ARGS__)
#define LOG_DEBUG(...) MOEZIP_LOG(::moezip::LogLevel::debug, __VA_ARGS__)
/// Logs at most 5 times from this call site (a hook that fails on every graph says so a few times, then counts).
#define LOG_CAPPED(level, ...) \
    do { static int moezip_log_n_ = 0; if (moezip_log_n_ < 5) { ++moezip_log_n_; MOEZIP_LOG(level, __VA_ARGS__); } } while (0)
