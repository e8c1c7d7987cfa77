// When a running host rewrites its report: at most once per report_flush_ms, and only when the
// report says something new (a changed memory sample alone is not new).
#include "coordinator/evidence/report_flush.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using nlohmann::json;
using moezip::ReportFlushGate;

TEST(ReportFlush, DueAtMostOncePerInterval) {
    ReportFlushGate gate(5000);
    const auto t0 = ReportFlushGate::Clock::time_point{} + std::chrono::hours(1);
    int due = 0;
    // one graph every 10 ms for 60 s: 12 writes (at 0, 5, 10, ... 55 s), not 6000
    for (int ms = 0; ms < 60000; ms += 10) due += gate.due(t0 + std::chrono::milliseconds(ms)) ? 1 : 0;
    EXPECT_EQ(due, 12);
}

TEST(ReportFlush, ZeroIntervalIsNeverDue) {
    ReportFlushGate gate(0);
    EXPECT_FALSE(gate.due(ReportFlushGate::Clock::now()));
}

TEST(ReportFlush, OnlyAChangedReportIsWritten) {
    ReportFlushGate gate(5000);
    json r = {{"schema", "moezip-report/1"}, {"complete", false}, {"logits", {{"count", 10}}}, {"memory", {{"rss_kib", 1000}}}};
    EXPECT_TRUE(gate.changed(r)) << "the first report is written";
    r["memory"]["rss_kib"] = 1004;
    EXPECT_FALSE(gate.changed(r)) << "only the memory sample moved";
    EXPECT_EQ(gate.skipped(), 1u);
    r["logits"]["count"] = 11;
    EXPECT_TRUE(gate.changed(r)) << "one more logits output";
    EXPECT_FALSE(gate.changed(r));
    EXPECT_EQ(gate.skipped(), 2u);
}
