// Tests of moezip-report (tools/moezip-report/): compare and show on small JSON files written here.
#include "tests/support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <cstdio>
#include <fstream>

using nlohmann::json;
using moezip_test::run_command;

namespace {

std::string hex(uint64_t v) {
    char buf[17];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long) v);
    return buf;
}

// n distinct per-output hashes, as a run with some seed would produce.
std::vector<uint64_t> hashes(int n, uint64_t seed = 1) {
    std::vector<uint64_t> h;
    for (int i = 0; i < n; ++i) h.push_back(XXH3_64bits_withSeed(&i, sizeof i, seed));
    return h;
}

// The report's chain: XXH3_64bits_withSeed(&xxh3_i, 8, seed = chain), from 0 (coordinator/evidence/evidence.cpp).
uint64_t chain_of(const std::vector<uint64_t> & h) {
    uint64_t c = 0;
    for (uint64_t x : h) c = XXH3_64bits_withSeed(&x, sizeof x, c);
    return c;
}

json report_json(const std::vector<uint64_t> & h) {
    json graphs = json::array();
    for (size_t i = 0; i < h.size(); ++i) {
        graphs.push_back({{"index", i}, {"n_tokens", 16}, {"n_vocab", 512}, {"rows", 1}, {"xxh3", hex(h[i])}});
    }
    return {{"schema", "moezip-report/1"},
            {"complete", true},
            {"config", {{"path", "moezip.toml"}, {"mode", "rows"}, {"digest", "00000000000000ab"}}},
            {"engine", {{"ggml_version", "0.23.0"}, {"ggml_commit", "80fb11a"}, {"cpu_variant", "zen4"}, {"abi", "ok"},
                        {"built_for", "llama.cpp 80fb11ac73e6"}}},
            {"layers", json::array({{{"il", 0}, {"calls", 7}, {"rows", 22}, {"local_rows", 11}, {"remote_rows", 11}, {"ms", 1.5}},
                                    {{"il", 1}, {"calls", 7}, {"rows", 22}, {"local_rows", 11}, {"remote_rows", 11}, {"ms", 1.25}}})},
            {"checks", {{"identity_passed", 2}, {"identity_failed", 0}, {"regions_handled", 14}, {"regions_passthrough", 0}}},
            {"workers", json::array({{{"endpoint", "tcp://127.0.0.1:5601"}, {"requests", 14}, {"rtt_ms_p50", 0.75},
                                      {"identity", {{"experts", "4-7"}}}, {"refused", ""}},
                                     {{"endpoint", "tcp://127.0.0.1:5602"}, {"refused", "worker tcp://127.0.0.1:5602 refused: it runs ggml abc"}},
                                     {{"shadow", {{"calls", 6}, {"max_abs_err", 0.5}, {"min_cosine", 0.999}}}}})},
            {"memory", {{"hwm_kib", 2048000}, {"rss_kib_graph_max", 1024000}, {"model_skipped_bytes", 524288000}, {"rss_dropped_bytes", 1048576}}},
            {"logits", {{"count", h.size()}, {"chain_xxh3", hex(chain_of(h))}, {"graphs", graphs}}}};
}

json run_json(const std::vector<uint64_t> & h) {
    json arr = json::array();
    for (uint64_t x : h) arr.push_back(hex(x));
    return {{"schema", "moezip-run/1"}, {"model", "m.gguf"}, {"n_vocab", 512}, {"logits_xxh3", arr}};
}

std::string write(const std::string & dir, const std::string & name, const std::string & text) {
    std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    return path;
}

moezip_test::CommandResult report_tool(const std::vector<std::string> & args) { return moezip_test::run_tool("moezip-report", args, 30); }

} // namespace

TEST(ReportTool, EqualReportsExitZeroAndPrintTheChain) {
    std::string dir = moezip_test::test_dir("report_tool_equal");
    std::vector<uint64_t> h = hashes(6);
    std::string a = write(dir, "a.json", report_json(h).dump(1));
    std::string b = write(dir, "b.json", report_json(h).dump());   // other layout, same content
    auto r = report_tool({"compare", a, b});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.out, "equal: 6 logits outputs, chain " + hex(chain_of(h)) + "\n");
}

TEST(ReportTool, HashChangedAtIndexThreeExitsOneNamingIt) {
    std::string dir = moezip_test::test_dir("report_tool_changed");
    std::vector<uint64_t> h = hashes(6), g = h;
    g[3] ^= 1;
    auto r = report_tool({"compare", write(dir, "a.json", report_json(h).dump()), write(dir, "b.json", report_json(g).dump())});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("first difference at logits output 3\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(hex(h[3])), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(hex(g[3])), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("a.json 6, "), std::string::npos) << r.out;
}

TEST(ReportTool, CountDiffersExitsOne) {
    std::string dir = moezip_test::test_dir("report_tool_count");
    std::vector<uint64_t> h = hashes(7), g(h.begin(), h.end() - 1);
    auto r = report_tool({"compare", write(dir, "a.json", report_json(h).dump()), write(dir, "b.json", report_json(g).dump())});
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("first difference at logits output 6"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("a.json 7, "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("b.json 6\n"), std::string::npos) << r.out;
}

TEST(ReportTool, GarbageExitsTwoNamingTheFile) {
    std::string dir = moezip_test::test_dir("report_tool_garbage");
    std::string good = write(dir, "good.json", report_json(hashes(2)).dump());
    std::string junk = write(dir, "junk.json", "this is { not json");
    auto r = report_tool({"compare", good, junk});
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(junk + ": not JSON"), std::string::npos) << r.err;
    auto m = report_tool({"compare", dir + "/missing.json", good});
    EXPECT_EQ(m.exit_code, 2);
    EXPECT_NE(m.err.find(dir + "/missing.json: cannot read"), std::string::npos) << m.err;
}

TEST(ReportTool, MalformedLogitsFieldExitsTwoNamingTheField) {
    std::string dir = moezip_test::test_dir("report_tool_field");
    json j = report_json(hashes(3));
    j["logits"]["graphs"][1]["xxh3"] = "xyz";
    std::string bad = write(dir, "bad.json", j.dump());
    auto r = report_tool({"compare", bad, bad});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("bad.json: logits.graphs[1].xxh3: expected 16 hex digits"), std::string::npos) << r.err;
}

TEST(ReportTool, SchemaMismatchExitsTwo) {
    std::string dir = moezip_test::test_dir("report_tool_schema");
    std::vector<uint64_t> h = hashes(4);
    std::string rep = write(dir, "report.json", report_json(h).dump());
    std::string run = write(dir, "run.json", run_json(h).dump());
    auto r = report_tool({"compare", rep, run});
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find("mean different things"), std::string::npos) << r.err;
    json other = report_json(h);
    other["schema"] = "moezip-report/9";
    auto u = report_tool({"compare", rep, write(dir, "other.json", other.dump())});
    EXPECT_EQ(u.exit_code, 2);
    EXPECT_NE(u.err.find("other.json: unknown schema \"moezip-report/9\""), std::string::npos) << u.err;
}

TEST(ReportTool, TwoRunOutputsCompare) {
    std::string dir = moezip_test::test_dir("report_tool_runs");
    std::vector<uint64_t> h = hashes(5), g = h;
    g[0] ^= 0x100;
    std::string a = write(dir, "a.json", run_json(h).dump());
    auto same = report_tool({"compare", a, write(dir, "b.json", run_json(h).dump())});
    EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
    EXPECT_EQ(same.out, "equal: 5 logits outputs, chain " + hex(chain_of(h)) + "\n");
    auto diff = report_tool({"compare", a, write(dir, "c.json", run_json(g).dump())});
    EXPECT_EQ(diff.exit_code, 1);
    EXPECT_NE(diff.out.find("first difference at logits output 0"), std::string::npos) << diff.out;
}

TEST(ReportTool, ShowSummarisesModeLayersChecksAndWorkers) {
    std::string dir = moezip_test::test_dir("report_tool_show");
    std::string a = write(dir, "a.json", report_json(hashes(3)).dump());
    auto r = report_tool({"show", a});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("mode: rows"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("engine: ggml 0.23.0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("moezip built for llama.cpp 80fb11ac73e6"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("logits: 3 outputs"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("1.250"), std::string::npos) << r.out;   // layer 1's ms
    EXPECT_NE(r.out.find("identity passed 2, failed 0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  tcp://127.0.0.1:5601  4-7         14 "), std::string::npos) << "a table row per worker:\n" << r.out;
    EXPECT_NE(r.out.find("0.750"), std::string::npos) << r.out;  // its round trip p50
    EXPECT_NE(r.out.find("refused tcp://127.0.0.1:5602: worker tcp://127.0.0.1:5602 refused: it runs ggml abc"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("shadow checks: 6 calls, max abs error 0.500, min cosine 0.999"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("memory: peak 2000 MiB, while serving 1000 MiB, never loaded 500 MiB of worker-owned experts, released 1 MiB after use"), std::string::npos) << r.out;
    auto g = report_tool({"show", write(dir, "junk.json", "[1,2")});
    EXPECT_EQ(g.exit_code, 2);
}

TEST(ReportTool, UsageErrorsExitTwo) {
    EXPECT_EQ(report_tool({}).exit_code, 2);
    EXPECT_EQ(report_tool({"compare", "only-one.json"}).exit_code, 2);
    EXPECT_EQ(report_tool({"frobnicate"}).exit_code, 2);
}
