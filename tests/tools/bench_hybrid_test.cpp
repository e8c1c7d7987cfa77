// make bench's hybrid emulation summary (tools/bench/hybrid-summary.js): run files written here with
// known speeds and per-layer times go through the real summary, which must give p, the Amdahl bound,
// the ratio within repetitions, the per-layer costs and the GPU-host projection computed by hand below,
// and must say NO when a variant's answer differs from the plain run's.
#include "tests/support/cluster.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

using namespace moezip_test;
using nlohmann::json;

namespace {

/// llama-bench -o json of one prompt test (512 tokens) and one decode test (64), or decode only.
json bench_out(double prefill_ts, double decode_ts, bool with_prompt = true) {
    json tests = json::array();
    if (with_prompt) tests.push_back({{"n_prompt", 512}, {"n_gen", 0}, {"avg_ts", prefill_ts}});
    tests.push_back({{"n_prompt", 0}, {"n_gen", 64}, {"avg_ts", decode_ts}});
    return tests;
}

/// A preload report of 4 layers, 65 calls each: the first call `first_ms`, the 64 others `per_call_ms` each.
json report(double per_call_ms, double first_ms, const json & workers = json::array()) {
    json layers = json::array();
    for (int il = 0; il < 4; ++il)
        layers.push_back({{"il", il}, {"calls", 65}, {"ms", first_ms + 64 * per_call_ms}, {"first_call", {{"ms", first_ms}}}});
    return {{"layers", layers}, {"workers", workers}};
}

void write(const std::string & path, const json & j) { std::ofstream(path) << j.dump(); }
void write_text(const std::string & path, const std::string & s) { std::ofstream(path) << s; }

json run_summary(const std::string & dir, int reps) {
    CommandResult r = run_command({"node", repo_root() + "/tools/bench/hybrid-summary.js", dir, std::to_string(reps), "abc1234"}, {}, 60);
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
    std::ifstream in(dir + "/hybrid.json");
    json j = json::parse(in, nullptr, false);
    j["exit_code"] = r.exit_code;
    j["stdout"] = r.out;
    j["stderr"] = r.err;
    return j;
}

/// Two repetitions: single decodes at 20 tok/s, local_copy at 25, experts1 at 37.5 and 36 (ratios to
/// local_copy 1.5 and 1.44); local_copy's decode-only run 25 tok/s (a 40 ms step) with 6 ms of CPU
/// experts per layer (24 ms: p = 0.6); local's 20 tok/s (50 ms) with 8.75 ms per layer (35 ms: p = 0.7);
/// experts1's layers 3.5 ms per call, its worker 8400 B out, 33000 B back per request.
void write_runs(const std::string & dir, const std::string & experts1_text) {
    const std::string runs = dir + "/runs";
    run_command({"mkdir", "-p", runs}, {}, 10);
    const json worker = {{"requests", 100}, {"bytes_out", 840000}, {"bytes_in", 3300000}, {"rtt_ms_p50_one_row", 3.2},
                         {"rtt_minus_service_ms_p50", 0.4}};
    for (int r = 1; r <= 2; ++r) {
        const std::string s = std::to_string(r);
        write(runs + "/single-" + s + ".out", bench_out(50, 20));
        write(runs + "/local-" + s + ".out", bench_out(48, 20));
        write(runs + "/local_copy-" + s + ".out", bench_out(55, 25));
        write(runs + "/experts1-" + s + ".out", bench_out(80, r == 1 ? 37.5 : 36));
        write(runs + "/local-decode-" + s + ".out", bench_out(0, 20, false));
        write(runs + "/local-decode-" + s + ".report.json", report(8.75, 30));
        write(runs + "/local_copy-decode-" + s + ".out", bench_out(0, 25, false));
        write(runs + "/local_copy-decode-" + s + ".report.json", report(6, 400));
        write(runs + "/experts1-decode-" + s + ".out", bench_out(0, 37, false));
        write(runs + "/experts1-decode-" + s + ".report.json", report(3.5, 300, json::array({worker})));
    }
    const std::string plain = "Once upon a time there was a little fox who lived by the river.";
    write_text(runs + "/text-single.out", plain);
    write_text(runs + "/text-local.out", plain);
    write_text(runs + "/text-local_copy.out", plain);
    write_text(runs + "/text-experts1.out", experts1_text);
}

TEST(BenchHybrid, PAndTheBoundComeFromTheDecodeRunsAndTheRatioFromTheSameMemoryKind) {
    const std::string dir = test_dir("bench_hybrid");
    write_runs(dir, "Once upon a time there was a little fox who lived by the river.");
    const json s = run_summary(dir, 2);
    ASSERT_EQ(s["exit_code"], 0) << s["stderr"];
    EXPECT_NEAR(s["p"]["point"].get<double>(), 0.6, 1e-9);
    EXPECT_NEAR(s["p_plain"]["point"].get<double>(), 0.7, 1e-9);
    EXPECT_NEAR(s["bound"].get<double>(), 1 / (0.4 + 0.3), 1e-4);
    // median of the two paired ratios 1.5 and 1.44 over local_copy
    EXPECT_NEAR(s["over_copy"]["decode"]["point"].get<double>(), 1.47, 1e-4);
    EXPECT_NEAR(s["of_bound"].get<double>(), 1.47 * 0.7, 1e-4);
    EXPECT_NEAR(s["ratios"]["experts1"]["decode"]["point"].get<double>(), (1.875 + 1.8) / 2, 1e-4);
    // per layer: 6 ms of experts, experts1 3.5 ms, so 0.5 ms beyond half; the busier direction 33000 B
    EXPECT_NEAR(s["per_layer"]["expert_ms_layer"].get<double>(), 6, 1e-9);
    EXPECT_NEAR(s["per_layer"]["overhead_ms_layer"].get<double>(), 0.5, 1e-9);
    EXPECT_NEAR(s["per_layer"]["wire_bytes"].get<double>(), 33000, 1e-6);
    // that overhead, 4 layers of 0.5 ms, in experts1's 1000/36.75 ms decode step
    EXPECT_NEAR(s["round_trip_share"].get<double>(), 2.0 / (1000 / 36.75), 1e-4);
    EXPECT_TRUE(s["identical"]["experts1"].get<bool>());
}

TEST(BenchHybrid, TheGpuHostProjectionAddsTheGpuPartTheHalfTheOverheadAndTheWire) {
    const std::string dir = test_dir("bench_hybrid_projection");
    write_runs(dir, "Once upon a time there was a little fox who lived by the river.");
    const json s = run_summary(dir, 2);
    ASSERT_EQ(s["exit_code"], 0) << s["stderr"];
    auto row = [&](const std::string & shape, const json & host, const std::string & link) -> json {
        for (const json & r : s["projection"])
            if (r["shape"] == shape && r["host"] == host && r["link"] == link) return r;
        ADD_FAILURE() << "no row " << shape << " " << host << " " << link;
        return json::object();
    };
    // Qwen3-30B-A3B, 1 Gbit/s, this CPU: c = 6 ms, the GPU's part 6 x 0.15 / 0.85, the wire 33000 B at 117.5 MB/s
    {
        const json r = row("Qwen3-30B-A3B", "measured", "1g");
        const double g = 6 * 0.15 / 0.85, one = 1000 / (48 * (g + 6)), e1 = 1000 / (48 * (g + 3 + 0.5 + 33000 / 117500.0));
        EXPECT_NEAR(r["one_node_tok_s"].get<double>(), one, 1e-3);
        EXPECT_NEAR(r["experts1_tok_s"].get<double>(), e1, 1e-3);
        EXPECT_NEAR(r["bound"].get<double>(), 1 / (0.15 + 0.425), 1e-4);
    }
    // Qwen3-235B-A22B, 10 Gbit/s, a host decoding 10 tok/s alone: a 100 ms step over 94 layers, 85% of it
    // in the experts; twice the bytes at 1175 MB/s
    {
        const json r = row("Qwen3-235B-A22B", 10, "10g");
        const double c = 85.0 / 94, g = 15.0 / 94, e1 = 1000 / (94 * (g + c / 2 + 0.5 + 66000 / 1175000.0));
        EXPECT_NEAR(r["one_node_tok_s"].get<double>(), 10, 1e-3);
        EXPECT_NEAR(r["experts1_tok_s"].get<double>(), e1, 1e-3);
        EXPECT_NEAR(r["x"].get<double>(), e1 / 10, 1e-4);
    }
}

TEST(BenchHybrid, AnAnswerThatDiffersFromThePlainRunsFailsTheSummary) {
    const std::string dir = test_dir("bench_hybrid_differs");
    write_runs(dir, "Once upon a time there was a little fox who lived by the lake!!");
    const json s = run_summary(dir, 2);
    EXPECT_EQ(s["exit_code"], 1);
    EXPECT_FALSE(s["identical"]["experts1"].get<bool>());
    EXPECT_NE(s["stderr"].get<std::string>().find("experts1's answer differs from the plain hybrid run's"), std::string::npos)
        << s["stderr"];
    EXPECT_NE(s["stdout"].get<std::string>().find("| experts1 |"), std::string::npos);
    EXPECT_NE(s["stdout"].get<std::string>().find("| NO |"), std::string::npos) << s["stdout"];
}

}  // namespace
