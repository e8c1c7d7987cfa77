// The worker's load machinery without a model: jobs on threads (tools/moezip-worker/model/load_jobs.h)
// and the progress lines (load_progress.h), written to a memory stream.
#include "tools/moezip-worker/model/load_jobs.h"
#include "tools/moezip-worker/model/load_progress.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace moezip;

TEST(LoadJobs, EveryJobRunsExactlyOnceOnAnyNumberOfThreads) {
    for (int n_threads : {1, 2, 4, 8}) {
        std::vector<std::atomic<int>> runs(100);
        std::vector<std::function<Status()>> jobs;
        for (size_t i = 0; i < runs.size(); ++i) jobs.push_back([&runs, i]() { ++runs[i]; return Status::ok(); });
        EXPECT_TRUE(load_jobs_run(jobs, n_threads).is_ok()) << n_threads;
        for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << "job " << i << ", " << n_threads << " threads";
    }
    EXPECT_TRUE(load_jobs_run({}, 4).is_ok());
}

TEST(LoadJobs, OneThreadStopsAtTheFirstFailureAndReturnsIt) {
    std::atomic<int> ran{0};
    std::vector<std::function<Status()>> jobs;
    for (int i = 0; i < 10; ++i)
        jobs.push_back([&ran, i]() { ++ran; return i == 3 ? Status::io_error("job three") : Status::ok(); });
    Status st = load_jobs_run(jobs, 1);
    EXPECT_FALSE(st.is_ok());
    EXPECT_EQ(st.message(), "job three");
    EXPECT_EQ(ran.load(), 4) << "no job starts after the failure";
}

TEST(LoadJobs, SeveralFailuresReturnTheLowestIndexOfThoseThatRan) {
    std::vector<std::function<Status()>> jobs;
    for (int i = 0; i < 2; ++i) jobs.push_back([i]() { return Status::io_error("job " + std::to_string(i)); });
    Status st = load_jobs_run(jobs, 2);
    EXPECT_FALSE(st.is_ok());
    EXPECT_EQ(st.message(), "job 0");  // index 0 is always taken first, by whichever thread
}

namespace {

std::string progress_text(uint64_t total, int interval_ms, const std::vector<uint64_t> & adds, std::string * summary = nullptr) {
    char * buf = nullptr;
    size_t len = 0;
    FILE * f = open_memstream(&buf, &len);
    {
        LoadProgress p(total, interval_ms, f);
        for (uint64_t a : adds) p.add(a);
        p.finish_reading();
        if (summary) *summary = p.summary();
    }
    fclose(f);
    std::string out(buf, len);
    free(buf);
    return out;
}

} // namespace

TEST(LoadProgress, EveryReadGetsALineAtIntervalZeroAndTheLastStatesTheTotal) {
    std::string summary;
    const std::string text = progress_text(100, 0, {10, 20, 70}, &summary);
    EXPECT_NE(text.find("moezip-worker: loading 10 of 100 bytes (10.0%), "), std::string::npos) << text;
    EXPECT_NE(text.find("moezip-worker: loading 30 of 100 bytes (30.0%), "), std::string::npos) << text;
    EXPECT_NE(text.find("moezip-worker: loading 100 of 100 bytes (100.0%), "), std::string::npos) << text;
    EXPECT_EQ(text.find("loading 100 of 100", text.find("loading 100 of 100") + 1), std::string::npos) << "the total once: " << text;
    EXPECT_EQ(summary.rfind("loaded 0.0 MiB of expert weights in ", 0), 0u) << summary;
    EXPECT_NE(summary.find("; reading "), std::string::npos) << summary;
}

TEST(LoadProgress, ALoadShorterThanTheIntervalPrintsNothing) {
    EXPECT_EQ(progress_text(100, 3600000, {10, 90}), "");
}

TEST(LoadProgress, TheIntervalComesFromTheEnvironmentOrIsRefusedWithTheVariableNamed) {
    int ms = -1;
    std::string why;
    EXPECT_TRUE(load_progress_interval_parse(nullptr, ms, why));
    EXPECT_EQ(ms, 1000);
    EXPECT_TRUE(load_progress_interval_parse("0", ms, why));
    EXPECT_EQ(ms, 0);
    EXPECT_TRUE(load_progress_interval_parse("3600000", ms, why));
    EXPECT_EQ(ms, 3600000);
    for (const char * bad : {"", "-1", "3600001", "1s", "0x10", "99999999999999999999", " 5", "+5", "5 ", "\t5", "1e3", " "}) {
        EXPECT_FALSE(load_progress_interval_parse(bad, ms, why)) << bad;
        EXPECT_NE(why.find(std::string("MOEZIP_WORKER_PROGRESS_MS='") + bad + "'"), std::string::npos) << why;
    }
}
