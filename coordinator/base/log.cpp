#include "coordinator/base/log.h"

#include <algorithm>
#include <atomic>
#include <chrono>
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

// Formats "moezip[pid] level: <fmt...><suffix>\n" and writes it with one write(2).
static void log_vwrite(LogLevel level, const char * suffix, const char * fmt, va_list ap) {
    static const char * names[] = {"error", "warn", "info", "debug"};
    char line[2048];
    int n = snprintf(line, sizeof line, "moezip[%d] %s: ", (int) getpid(), names[static_cast<int>(level)]);
    int m = vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
    size_t len = (size_t) n + (m < 0 ? 0 : (size_t) m);
    if (len > sizeof line - 2) len = sizeof line - 2;
    if (suffix != nullptr) {
        const size_t room = sizeof line - 2 - len;
        const size_t add = std::min(strlen(suffix), room);
        memcpy(line + len, suffix, add);
        len += add;
    }
    line[len++] = '\n';
    // One write(2) per line: lines from several threads or processes do not interleave. A signal the
    // host handles without SA_RESTART makes it return EINTR before anything was written: write again,
    // or an error line would be lost.
    ssize_t w;
    do w = write(STDERR_FILENO, line, len); while (w < 0 && errno == EINTR);
}

void log_write(LogLevel level, const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, nullptr, fmt, ap);
    va_end(ap);
}

void log_limited(LogLimiter & limiter, LogLevel level, const char * fmt, ...) {
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now().time_since_epoch()).count();
    uint64_t suppressed = 0;
    if (!limiter.admit(now_ms, static_cast<int>(level), fmt, suppressed)) return;
    char suffix[96];
    if (suppressed > 0) snprintf(suffix, sizeof suffix, " [%llu more lines like this suppressed]", (unsigned long long) suppressed);
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, suppressed > 0 ? suffix : nullptr, fmt, ap);
    va_end(ap);
}

} // namespace moezip
