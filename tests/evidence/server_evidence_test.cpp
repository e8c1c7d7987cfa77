// A host that serves request after request under the preload (moezip-test-host serve): its report
// lists a bounded window of logits outputs yet compares exactly with a one-node run, and a worker
// fault that fails every compute in on_worker_error = "abort" gives a few stderr lines and counts,
// not one line per failed compute.
#include "tests/support/cluster.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

using nlohmann::json;
using namespace moezip_test;

namespace {

size_t count_of(const std::string & text, const std::string & needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
}

// Lines of `text` that contain `needle` and not `but_not`.
size_t lines_with(const std::string & text, const std::string & needle, const std::string & but_not) {
    size_t n = 0, start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        const std::string line = text.substr(start, end - start);
        if (line.find(needle) != std::string::npos && line.find(but_not) == std::string::npos) ++n;
        start = end + 1;
    }
    return n;
}

// Sum of the N of every "[N more lines like this suppressed]" and "N more lines like "..." were
// suppressed" in `text` on lines that contain `needle`.
uint64_t suppressed_told(const std::string & text, const std::string & needle) {
    uint64_t sum = 0;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        const std::string line = text.substr(start, end - start);
        if (line.find(needle) != std::string::npos) {
            size_t at = line.find(" more lines like");
            if (at != std::string::npos) {
                size_t b = at;
                while (b > 0 && isdigit((unsigned char) line[b - 1])) --b;
                sum += strtoull(line.c_str() + b, nullptr, 10);
            }
        }
        start = end + 1;
    }
    return sum;
}

const std::vector<std::string> kServe = {"--contexts", "1", "-n", "16", "--fixture", "24"};

} // namespace

// 50 requests of 16 tokens: 800 logits outputs, of which the report lists 512, and the experts run
// still compares equal to the one-node run (and the chains match) through moezip-report.
TEST(ServerEvidence, LongServeListsAWindowAndComparesExactly) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    Cluster c{test_dir("server_evidence_window"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w.sock", "4-7"));
    std::vector<std::string> serve = kServe;
    serve.insert(serve.end(), {"--requests", "50"});
    const std::string single_cfg = write_moezip_config(c.dir, "single", "mode = \"observe\"\nreport_flush_ms = 0\n");
    CommandResult single = run_preloaded(test_host("serve", {model}, c.dir + "/single-host.json", serve), single_cfg);
    ASSERT_EQ(single.exit_code, 0) << single.err;
    const std::string body = "mode = \"experts\"\nreport_flush_ms = 20\n[experts]\nlocal = \"0-3\"\n"
                             "[[worker]]\nendpoint = \"" + c.workers[0]->endpoint() + "\"\nexperts = \"4-7\"\n";
    CommandResult dist = run_preloaded(test_host("serve", {model}, c.dir + "/experts-host.json", serve),
                                       write_moezip_config(c.dir, "experts", body));
    ASSERT_EQ(dist.exit_code, 0) << dist.err;
    EXPECT_EQ(load_json(c.dir + "/experts-host.json")["serve"]["served"], 50);
    const json rep = load_json(c.dir + "/experts.json");
    const json & lg = rep["logits"];
    ASSERT_GT(lg["count"].get<uint64_t>(), 512u) << lg["count"];
    EXPECT_EQ(lg["graphs"].size(), 512u) << "the first 256 and the last 256 of " << lg["count"];
    EXPECT_EQ(lg["graphs"][511]["index"].get<uint64_t>(), lg["count"].get<uint64_t>() - 1);
    EXPECT_GT(sum_layers(rep, "remote_slots"), 0u) << "the worker computed its experts";
    EXPECT_EQ(lg["chain_xxh3"], load_json(c.dir + "/single.json")["logits"]["chain_xxh3"]);
    CommandResult cmp = run_tool("moezip-report", {"compare", c.dir + "/single.json", c.dir + "/experts.json"});
    EXPECT_EQ(cmp.exit_code, 0) << cmp.out << cmp.err;
    EXPECT_NE(cmp.out.find("equal: " + std::to_string(lg["count"].get<uint64_t>()) + " logits outputs"), std::string::npos) << cmp.out;
}

// Every request sent to the worker is corrupted in flight: with on_worker_error = "abort" every
// compute fails. 300 failed requests give at most 10 lines of "this compute fails" (the first in full,
// then 5 per minute and call site), the lines held back are told (in the next line written or at
// exit), and the process exits with status 4.
TEST(ServerEvidence, FailingComputesAreCountedNotEachLogged) {
    const std::string model = fixture_model({"--preset", "tiny", "--type", "q8_0"});
    Cluster c{test_dir("server_evidence_abort"), {}};
    ASSERT_TRUE(c.start_worker(model, "ipc://" + c.dir + "/w.sock", "4-7"));
    const std::string body = "mode = \"experts\"\nreport_flush_ms = 20\n[experts]\nlocal = \"0-3\"\n[dispatch]\non_worker_error = \"abort\"\n"
                             "[[worker]]\nendpoint = \"" + c.workers[0]->endpoint() + "\"\nexperts = \"4-7\"\n";
    std::vector<std::string> serve = kServe;
    serve.insert(serve.end(), {"--requests", "300"});
    CommandResult r = run_preloaded(test_host("serve", {model}, c.dir + "/host.json", serve), write_moezip_config(c.dir, "abort", body),
                                    {{"MOEZIP_TEST_FAULT", "corrupt_request"}});
    EXPECT_EQ(r.exit_code, 4) << r.err.substr(r.err.size() > 4000 ? r.err.size() - 4000 : 0);
    const json served = load_json(c.dir + "/host.json")["serve"];
    ASSERT_EQ(served["failed"], 300) << served << r.err.substr(0, 4000);
    const std::string stop = "this compute fails";
    const size_t written = lines_with(r.err, stop, "more lines like \"");
    EXPECT_GE(written, 1u) << r.err.substr(0, 4000);
    EXPECT_LE(written, 10u) << "one line per failed compute floods a server's stderr:\n" << r.err.substr(0, 4000);
    const json rep = load_json(c.dir + "/abort.json");
    const uint64_t failed_regions = rep["errors"]["count"].get<uint64_t>();
    EXPECT_GE(failed_regions, 300u) << rep["errors"].dump();
    // every failed compute is a line written or a line told as suppressed
    EXPECT_EQ(written + suppressed_told(r.err, stop), 300u) << r.err.substr(r.err.size() > 4000 ? r.err.size() - 4000 : 0);
    EXPECT_GE(rep["log"]["lines_suppressed"].get<uint64_t>(), 300u - written);
    EXPECT_EQ(rep["errors"]["first"].size(), 50u);
    EXPECT_EQ(rep["errors"]["recent"].size(), 16u);
    EXPECT_LT(count_of(r.err, "\n"), 100u) << "the whole stderr of 300 failed requests";
}
