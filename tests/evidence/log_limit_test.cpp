// stderr rate limits: a message repeated once per graph is written a few times per window, and what
// was held back is counted in the next line written and in the exit summary.
#include "coordinator/base/log.h"
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <string>

namespace {

// Runs `body` with this process's stderr (fd 2) sent to a file; returns what was written.
template <typename F>
std::string capture_stderr(const std::string & path, F body) {
    fflush(stderr);
    const int saved = dup(STDERR_FILENO);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_GE(fd, 0);
    dup2(fd, STDERR_FILENO);
    close(fd);
    body();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    return moezip_test::read_file(path);
}

size_t count_of(const std::string & text, const std::string & needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
}

void fail_once(int i) { LOG_CAPPED(moezip::LogLevel::error, "layer 3: test outage %d; stopping this compute", i); }

} // namespace

// 10,000 identical errors from one call site: 5 lines, and the exit summary counts the other 9,995.
TEST(LogLimit, TenThousandIdenticalErrorsGiveFiveLinesAndACount) {
    const std::string dir = moezip_test::test_dir("log_limit_burst");
    const uint64_t total_before = moezip::log_suppressed_total();
    const std::string out = capture_stderr(dir + "/stderr.txt", [] {
        for (int i = 0; i < 10000; ++i) fail_once(i);
        moezip::log_report_suppressed();
    });
    EXPECT_EQ(count_of(out, "; stopping this compute\n"), 5u) << "lines written as they came:\n" << out;
    EXPECT_EQ(count_of(out, "test outage"), 6u) << "5 lines and one summary:\n" << out;
    EXPECT_NE(out.find("9995 more lines like \"layer 3: test outage %d; stopping this compute\""), std::string::npos) << out;
    EXPECT_NE(out.find("log_limit_test.cpp:"), std::string::npos) << "the summary names the call site: " << out;
    EXPECT_EQ(moezip::log_suppressed_total() - total_before, 9995u);
    // told once: a second summary has nothing to say
    const std::string again = capture_stderr(dir + "/stderr2.txt", [] { moezip::log_report_suppressed(); });
    EXPECT_EQ(count_of(again, "test outage"), 0u) << again;
}

// The window: 5 lines per 60 s; the first line of the next window carries the count held back.
TEST(LogLimit, NextWindowTellsHowManyWereHeldBack) {
    static moezip::LogLimiter lim("f.cpp", 1);  // static, as LOG_CAPPED's: a limiter that suppressed is listed for the exit summary
    uint64_t held = 0;
    int written = 0;
    for (int i = 0; i < 100; ++i) written += lim.admit(1000 + i, 0, "x", held) ? 1 : 0;
    EXPECT_EQ(written, 5);
    EXPECT_EQ(lim.pending(), 95u);
    EXPECT_FALSE(lim.admit(1000 + moezip::LogLimiter::kWindowMs - 1, 0, "x", held)) << "still the first window";
    ASSERT_TRUE(lim.admit(1000 + moezip::LogLimiter::kWindowMs, 0, "x", held)) << "a new window";
    EXPECT_EQ(held, 96u) << "the lines held back since the last written one";
    EXPECT_EQ(lim.pending(), 0u);
    EXPECT_EQ(lim.total_suppressed(), 96u);
    ASSERT_TRUE(lim.admit(1000 + moezip::LogLimiter::kWindowMs + 1, 0, "x", held));
    EXPECT_EQ(held, 0u) << "nothing held back since";
}

// The line written after suppressed ones says how many.
TEST(LogLimit, WrittenLineCarriesTheSuppressedCount) {
    const std::string dir = moezip_test::test_dir("log_limit_suffix");
    static moezip::LogLimiter lim("g.cpp", 2);
    const std::string out = capture_stderr(dir + "/stderr.txt", [] {
        for (int i = 0; i < 8; ++i) moezip::log_limited(lim, moezip::LogLevel::error, "burst %d", i);
    });
    EXPECT_EQ(count_of(out, "burst "), 5u) << out;
    EXPECT_EQ(lim.pending(), 3u);
}
