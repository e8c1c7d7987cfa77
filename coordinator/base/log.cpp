#include "coordinator/base/log.h"

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace moezip {

static LogLevel parse_level(const char * s, LogLevel fallback) {
    if (s == nullptr || *s == 0) return fallback;
    if (strcmp(s, "error") == 0) return LogLevel::error;
    if (strcmp(s, "warn") == 0) return LogLevel::warn;
    if (strcmp(s, "debug") == 0) return LogLevel::debug;
    return LogLevel::info;
}

static std::atomic<int> g_default{static_cast<int>(LogLevel::info)};

LogLevel log_level() {
    static const char * env = getenv("MOEZIP_LOG");
    return parse_level(env, static_cast<LogLevel>(g_default.load(std::memory_order_relaxed)));
}

void log_set_default(LogLevel level) { g_default.store(static_cast<int>(level), std::memory_order_relaxed); }

void log_write(LogLevel level, const char * fmt, ...) {
    static const char * names[] = {"error", "warn", "info", "debug"};
    char line[2048];
    int n = snprintf(line, sizeof line, "moezip[%d] %s: ", (int) getpid(), names[static_cast<int>(level)]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t) n + (m < 0 ? 0 : (size_t) m);
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    // One write(2) per line: lines from several threads or processes do not interleave. A signal the
    // host handles without SA_RESTART makes it return EINTR before anything was written: write again,
    // or an error line would be lost.
    ssize_t w;
    do w = write(STDERR_FILENO, line, len); while (w < 0 && errno == EINTR);
}

} // namespace moezip
