// moezip-worker's start-up lines: progress while the served experts are read (MOEZIP_WORKER_PROGRESS_MS,
// tools/moezip-worker/model/load_progress.h), the summary before the ready line, and the ready line's
// load time. Byte totals are computed here from the GGUF's tensor table, not from the worker.
#include "tests/support/test_support.h"
#include "tests/support/worker_harness.h"
#include "tests/worker/worker_fixtures.h"

#include <gtest/gtest.h>

#include "ggml.h"
#include "gguf.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

using namespace moezip_test;

namespace {

/// Bytes of the routed experts `n_served` of `n_expert` per layer: every *_exps.weight tensor's size
/// in the file times n_served / n_expert (expert e is one n_expert-th of the tensor, ggml.h nb[2]).
uint64_t served_expert_bytes(const std::string & path, int n_served, int n_expert) {
    gguf_init_params params = {/*no_alloc =*/ true, /*ctx =*/ nullptr};
    gguf_context * g = gguf_init_from_file(path.c_str(), params);
    if (g == nullptr) return 0;
    uint64_t bytes = 0;
    for (int64_t id = 0; id < gguf_get_n_tensors(g); ++id) {
        const std::string name = gguf_get_tensor_name(g, id);
        const std::string suffix = "_exps.weight";
        if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
            bytes += (uint64_t) gguf_get_tensor_size(g, id) / (uint64_t) n_expert * (uint64_t) n_served;
    }
    gguf_free(g);
    return bytes;
}

/// The "loading <done> of <total> bytes" lines of a worker's stderr, as (done, total) pairs.
std::vector<std::pair<uint64_t, uint64_t>> progress_lines(const std::string & err) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    std::istringstream lines(err);
    std::string line;
    const std::string head = "moezip-worker: loading ";
    while (std::getline(lines, line)) {
        if (line.rfind(head, 0) != 0) continue;
        unsigned long long done = 0, total = 0;
        if (sscanf(line.c_str() + head.size(), "%llu of %llu bytes", &done, &total) == 2) out.emplace_back(done, total);
    }
    return out;
}

void expect_progress_to_total(const std::string & err, uint64_t total) {
    const auto lines = progress_lines(err);
    ASSERT_GE(lines.size(), 2u) << "a line per read with a 0 ms interval (2 layers x 3 tensors): " << err;
    for (size_t i = 0; i < lines.size(); ++i) {
        EXPECT_EQ(lines[i].second, total) << err;
        if (i > 0) {
            EXPECT_GT(lines[i].first, lines[i - 1].first) << "line " << i << ": " << err;
        }
    }
    EXPECT_EQ(lines.back().first, total) << err;
}

} // namespace

TEST(WorkerLoadProgress, ProgressLinesGrowToTheServedExpertsBytesOfTheFile) {
    const uint64_t total = served_expert_bytes(tiny_model(), 6, kExpert);
    ASSERT_GT(total, 0u);
    for (const char * mmap_flag : {"", "--mmap"}) {
        SCOPED_TRACE(*mmap_flag ? mmap_flag : "pread");
        std::string dir = test_dir(std::string("worker_load_progress") + (*mmap_flag ? "_mmap" : ""));
        WorkerProcess w;
        std::vector<std::string> flags = {"--experts", "1-6"};
        if (*mmap_flag) flags.push_back(mmap_flag);
        ASSERT_TRUE(start_worker(w, dir, flags, {{"MOEZIP_WORKER_PROGRESS_MS", "0"}}));
        const std::string err = w.stderr_text();
        expect_progress_to_total(err, total);
        char mib[64];
        snprintf(mib, sizeof mib, "moezip-worker: loaded %.1f MiB of expert weights in ", (double) total / (1 << 20));
        EXPECT_NE(err.find(mib), std::string::npos) << err;
        EXPECT_NE(err.find("MB/s; reading "), std::string::npos) << err;
        EXPECT_NE(w.ready_line().find("), ready in "), std::string::npos) << w.ready_line();
        EXPECT_NE(w.ready_line().find(" s (experts loaded in "), std::string::npos) << w.ready_line();
        EXPECT_EQ(w.stop(SIGTERM, 30000), 0);
    }
}

TEST(WorkerLoadProgress, AShortLoadPrintsOnlyTheSummary) {
    std::string dir = test_dir("worker_load_progress_quiet");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {}));  // default interval, 1 s: a tiny model loads in milliseconds
    const std::string err = w.stderr_text();
    EXPECT_TRUE(progress_lines(err).empty()) << err;
    EXPECT_NE(err.find("moezip-worker: loaded "), std::string::npos) << err;
    EXPECT_EQ(w.stop(SIGTERM, 30000), 0);
}

TEST(WorkerLoadProgress, ABadIntervalNamesTheVariableAndExitsTwo) {
    for (const char * bad : {"-1", "fast", "", "3600001"}) {
        CommandResult r = run_command({bin_path("moezip-worker"), "--model", tiny_model(), "--bind", "ipc://" + test_dir("worker_load_bad") + "/w.sock"},
                                      {{"MOEZIP_WORKER_PROGRESS_MS", bad}}, 60);
        EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
        EXPECT_NE(r.err.find(std::string("MOEZIP_WORKER_PROGRESS_MS='") + bad + "': expected milliseconds 0..3600000"), std::string::npos)
            << r.err;
        EXPECT_EQ(r.out.find("serving"), std::string::npos) << r.out;
    }
}
