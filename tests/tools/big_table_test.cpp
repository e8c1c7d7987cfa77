// BENCH_SET=big's table (tools/bench/big-table.js): a big.json written here by hand, with client
// timings whose rates, ratios and verdicts are worked out below, goes through the real script.
#include "tests/support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

using namespace moezip_test;
using nlohmann::json;

namespace {

json client(double decode_tok_s, double first_ms, double end_ms, const std::string & text) {
    return {{"prompt_n", 512}, {"predicted_n", 128}, {"ttft_ms", first_ms}, {"first_token_at_ms", first_ms}, {"end_at_ms", end_ms},
            {"prefill_tok_s", 256.0}, {"decode_tok_s", decode_tok_s}, {"text", text}, {"tokens", json::array()}};
}

json run(const std::string & variant, int rep, double decode1, const json & many, double rtt = 0) {
    json r = {{"variant", variant}, {"rep", rep}, {"ok", true}, {"error", nullptr},
              {"hosts", {{"server", {{"ready_s", 3.0}, {"cgroup_peak_bytes", 2e9}, {"rss_peak_bytes", 1e9}, {"disk_read_bytes", 5e9}, {"oom_kills", 0}}},
                         {"remote", nullptr}}},
              {"one", {{"clients", json::array({client(decode1, 2000, 14700, "a b c")})}, {"wall_ms", 14700}}},
              {"many", many}};
    if (rtt > 0) r["rtt_ms_p50_one_row"] = rtt;
    return r;
}

json many(double first0, double end0, double first1, double end1, const std::string & text1) {
    return {{"clients", json::array({client(5, first0, end0, "x"), client(6, first1, end1, text1)})}, {"wall_ms", end1}};
}

/// Runs big-table.js on `big` (written to a file); its stdout and exit status.
CommandResult table(const json & big, const std::string & dir, bool as_json) {
    const std::string path = dir + "/big.json";
    std::ofstream(path) << big.dump();
    std::vector<std::string> argv = {"node", repo_root() + "/tools/bench/big-table.js", path};
    if (as_json) argv.push_back("--json");
    return run_command(argv, {}, 60);
}

const json * row(const json & s, const std::string & variant) {
    for (const json & r : s["rows"]) if (r["variant"] == variant) return &r;
    return nullptr;
}

json hand_written_bench() {
    json runs = json::array();
    // rep 1. single's 2 clients: (127 + 127) decode tokens from the first first token (4000 ms) to the
    // last end (30400 ms): 254 / 26.4 = 9.6212 tok/s; prefill 1024 prompt tokens by 5000 ms: 204.8 tok/s.
    runs.push_back(run("single", 1, 10.0, many(4000, 30000, 5000, 30400, "y")));
    // experts1's: 254 / (16200 - 3000) ms = 19.2424 tok/s, 2.0x single's.
    runs.push_back(run("experts1", 1, 10.5, many(3000, 16200, 3000, 16200, "y"), 0.5));
    // single_limited: prefilled as single was ({0}{1}: first tokens 1000 ms apart), client 1's text differs
    runs.push_back(run("single_limited", 1, 0.5, many(4000, 99000, 5000, 99000, "z")));
    // rpc: both clients prefilled together ({0,1}), client 1's text differs
    runs.push_back(run("rpc", 1, 7.0, many(4000, 40000, 4030, 40000, "z")));
    // rep 2: one client only
    runs.push_back(run("single", 2, 12.5, nullptr));
    runs.push_back(run("experts1", 2, 10.0, nullptr, 0.5));
    return {{"meta", {{"layers", 48}, {"model_bytes", 16.87e9}, {"limit_bytes", 10.46e9}, {"limit_fraction", 0.62}, {"clients", 2},
                      {"prompt_tokens", 512}, {"predict", 128}, {"repack", false}, {"cgroup", "v1"}, {"cores", 2}, {"date", "2026-12-07"}}},
            {"runs", runs}};
}

} // namespace

TEST(BigTable, AggregatesRatiosIntervalsAndVerdicts) {
    CommandResult r = table(hand_written_bench(), test_dir("big_table_json"), true);
    EXPECT_EQ(r.exit_code, 1) << "single_limited's answers differ: the script must fail\n" << r.err;
    const json s = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(s.is_discarded()) << r.out << r.err;
    const json * single = row(s, "single");
    const json * experts1 = row(s, "experts1");
    ASSERT_TRUE(single && experts1);
    EXPECT_NEAR((*single)["decodeN"]["median"].get<double>(), 254.0 / 26.4, 1e-9);
    EXPECT_NEAR((*single)["prefillN"]["median"].get<double>(), 204.8, 1e-9);
    EXPECT_NEAR((*single)["decodeNclient"]["median"].get<double>(), 5.5, 1e-9);
    EXPECT_NEAR((*single)["decode1"]["median"].get<double>(), 11.25, 1e-9);  // median of 10 and 12.5
    EXPECT_NEAR((*experts1)["decode1"]["median"].get<double>(), 10.25, 1e-9);
    EXPECT_EQ((*single)["identical1"], "reference");
    EXPECT_EQ((*experts1)["identical1"], "yes");
    EXPECT_EQ((*experts1)["identicalN"], "yes");
    EXPECT_EQ((*row(s, "single_limited"))["identical1"], "yes");
    EXPECT_EQ((*row(s, "single_limited"))["identicalN"], "no (many/1 differ)");
    EXPECT_EQ((*row(s, "rpc"))["identicalN"], "other batches ({0,1} against {0}{1}): 1 of 2 differ");
    // 48 layers x 0.5 ms over a step of 1000/10.5 ms (rep 1: 0.252) and 1000/10 ms (rep 2: 0.24): median 0.246
    EXPECT_NEAR((*experts1)["round_trip_share"].get<double>(), (48 * 0.5 / (1000 / 10.5) + 0.24) / 2, 1e-9);

    ASSERT_EQ(s["targets"].size(), 4u);
    const json & vs_limited = s["targets"][0];
    EXPECT_NEAR(vs_limited["ratio"].get<double>(), 20.5, 1e-9);    // 10.25 / 0.5
    EXPECT_TRUE(vs_limited["interval"].is_null()) << "one paired repetition gives no interval";
    EXPECT_EQ(vs_limited["verdict"], "met");
    const json & vs_rpc = s["targets"][1];
    EXPECT_NEAR(vs_rpc["ratio"].get<double>(), 10.25 / 7.0, 1e-9);
    EXPECT_EQ(vs_rpc["verdict"], "missed");
    const json & vs_single = s["targets"][2];
    EXPECT_NEAR(vs_single["ratio"].get<double>(), 10.25 / 11.25, 1e-9);
    ASSERT_TRUE(vs_single["interval"].is_array());
    EXPECT_NEAR(vs_single["interval"][0].get<double>(), 0.8, 1e-9);   // rep 2: 10 / 12.5
    EXPECT_NEAR(vs_single["interval"][1].get<double>(), 1.05, 1e-9);  // rep 1: 10.5 / 10
    EXPECT_EQ(vs_single["verdict"], "missed");
    const json & aggregate = s["targets"][3];
    EXPECT_NEAR(aggregate["ratio"].get<double>(), 2.0, 1e-9);
    EXPECT_EQ(aggregate["verdict"], "met");
}

TEST(BigTable, MarkdownSaysOneThreadPerHostAndNamesAFailedVariant) {
    json big = hand_written_bench();
    big["runs"].push_back({{"variant", "rpc"}, {"rep", 2}, {"ok", false}, {"error", "llama-server killed by its memory cgroup OOM killer"},
                           {"hosts", {{"server", {{"ready_s", nullptr}, {"oom_kills", 1}}}}}, {"one", nullptr}, {"many", nullptr}});
    CommandResult r = table(big, test_dir("big_table_md"), false);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("one thread per host on a 2-core machine"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("| rpc (1 of 2 failed: llama-server killed by its memory cgroup OOM killer) |"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("| experts1 decode >= 1.6x rpc | 1.46 | one repetition | missed |"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("| experts1 decode >= 0.95x single | 0.91 | 0.80-1.05 | missed |"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("are 25% of a one-client decode step"), std::string::npos) << r.out;
}

// Concurrent answers that differ only where llama-server prefilled them in other batches than the
// reference's are reported, and the run passes; the same batches and another answer fail it.
TEST(BigTable, OtherBatchesAreReportedNotFailed) {
    json big = hand_written_bench();
    json runs = json::array();
    for (const json & r : big["runs"]) if (r["variant"] != "single_limited") runs.push_back(r);
    big["runs"] = runs;
    CommandResult r = table(big, test_dir("big_table_batches"), false);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("| yes | other batches ({0,1} against {0}{1}): 1 of 2 differ |"), std::string::npos) << r.out;
}

// A limit that is not the stated fraction of the model (mawk's %d caps at 2^31 - 1: 10.46 GB became
// 2.15 GB) makes the table fail and say both.
TEST(BigTable, ALimitThatIsNotTheFractionOfTheModelFailsTheTable) {
    json big = hand_written_bench();
    json runs = json::array();
    for (const json & r : big["runs"]) if (r["variant"] != "single_limited" && r["variant"] != "rpc") runs.push_back(r);
    big["runs"] = runs;
    EXPECT_EQ(table(big, test_dir("big_table_limit_ok"), false).exit_code, 0);
    big["meta"]["limit_bytes"] = 2147483647.0;
    CommandResult r = table(big, test_dir("big_table_limit"), false);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("the limited hosts ran under 2.15 GB, not 0.62 of the model's 16.87 GB"), std::string::npos) << r.err;
}

TEST(BigTable, SkippedBenchSaysWhy) {
    CommandResult r = table({{"skipped", "no writable memory cgroup"}}, test_dir("big_table_skipped"), false);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find("skipped: no writable memory cgroup"), std::string::npos) << r.out;
}
