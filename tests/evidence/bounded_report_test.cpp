// The report of a long-running server stays bounded: 200,000 graphs with logits and 20,000 errors
// fed to one Evidence give a report of fixed size, a fixed heap, and a chain that still tells two
// runs apart by any one output (moezip-report compare).
#include "coordinator/evidence/evidence.h"
#include "tests/support/test_support.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <fstream>
#include <string>
#include <vector>

using nlohmann::json;

namespace {

constexpr int kGraphs = 200000;
constexpr int kVocab = 32;
constexpr int kErrorEvery = 10;  // one error per 10 graphs: 20,000 errors
// Stated in docs/report.md: the first 256 and the last 256 logits outputs are listed, the first 50 and
// the last 16 error messages kept, each cut to 1024 bytes: well under 256 KiB however long the run.
constexpr size_t kReportBound = 256 * 1024;
constexpr size_t kHeapBound = 1024 * 1024;  // the Evidence's own growth over the whole feed

// Heap bytes in use in this process: small blocks plus mmapped large ones (a vector of millions of
// records is one mmapped block).
size_t heap_in_use() {
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

// The logits of graph i: distinct per graph, with `flip` changing graph `flip_at` only.
void logits_of(int i, std::vector<float> & v, int flip_at = -1) {
    for (int k = 0; k < kVocab; ++k) v[(size_t) k] = (float) (i % 9973) * 0.5f + (float) k + (float) (i / 9973) * 1e-3f;
    if (i == flip_at) v[3] += 1.0f;
}

// The error message of graph i: longer than a report keeps.
std::string error_of(int i) {
    return "worker tcp://127.0.0.1:1 failed at graph " + std::to_string(i) + ": " + std::string(3000, 'x');
}

// Feeds the whole run; returns the chain the docs define (XXH3_64(xxh3_i, seed = chain) from 0),
// computed here from the raw logits, not read from the Evidence.
uint64_t feed(moezip::Evidence & ev, int flip_at = -1) {
    std::vector<float> v((size_t) kVocab);
    uint64_t chain = 0;
    for (int i = 0; i < kGraphs; ++i) {
        logits_of(i, v, flip_at);
        ev.add_logits(v.data(), kVocab, 1);
        const uint64_t h = XXH3_64bits(v.data(), v.size() * sizeof(float));
        chain = XXH3_64bits_withSeed(&h, sizeof h, chain);
        if (i % kErrorEvery == 0) ev.add_error(error_of(i));
    }
    return chain;
}

std::string write_report(const std::string & dir, const std::string & name, const moezip::Evidence & ev) {
    const std::string path = dir + "/" + name;
    EXPECT_TRUE(moezip::report_write_atomic(path, moezip::evidence_to_json(ev, true)));
    return path;
}

} // namespace

TEST(BoundedReport, TwoHundredThousandGraphsGiveAFixedSizeReport) {
    const size_t heap_before = heap_in_use();
    auto * ev = new moezip::Evidence();
    const uint64_t chain = feed(*ev);
    const size_t heap_growth = heap_in_use() - heap_before;
    EXPECT_LT(heap_growth, kHeapBound) << "the evidence of " << kGraphs << " graphs holds " << heap_growth << " bytes";

    const json j = moezip::evidence_to_json(*ev, true);
    const std::string text = j.dump(1);
    EXPECT_LT(text.size(), kReportBound) << "report of " << kGraphs << " graphs: " << text.size() << " bytes";

    const json & lg = j["logits"];
    EXPECT_EQ(lg["count"], kGraphs);
    EXPECT_EQ(lg["chain_xxh3"], moezip::hex64(chain)) << "the chain covers every output, listed or not";
    ASSERT_EQ(lg["graphs"].size(), 512u);
    EXPECT_EQ(lg["listed"], 512);
    EXPECT_EQ(lg["graphs"][0]["index"], 0);
    EXPECT_EQ(lg["graphs"][255]["index"], 255);
    EXPECT_EQ(lg["graphs"][256]["index"], kGraphs - 256) << "the recent window starts 256 outputs before the end";
    EXPECT_EQ(lg["graphs"][511]["index"], kGraphs - 1);
    std::vector<float> v((size_t) kVocab);
    logits_of(kGraphs - 1, v);
    EXPECT_EQ(lg["graphs"][511]["xxh3"], moezip::hex64(XXH3_64bits(v.data(), v.size() * sizeof(float))));

    const json & er = j["errors"];
    EXPECT_EQ(er["count"], kGraphs / kErrorEvery);
    ASSERT_EQ(er["first"].size(), 50u);
    ASSERT_EQ(er["recent"].size(), 16u);
    const std::string last = er["recent"][15].get<std::string>();
    EXPECT_NE(last.find("failed at graph " + std::to_string(kGraphs - kErrorEvery) + ":"), std::string::npos) << last;
    EXPECT_LT(last.size(), 1100u) << "a 3000-byte message is cut";
    EXPECT_NE(last.find("... (" + std::to_string(error_of(kGraphs - kErrorEvery).size()) + " bytes)"), std::string::npos) << last;
    delete ev;
}

// Two runs that differ in one unlisted output (the 100,000th of 200,000) are told apart by the chain;
// two equal runs compare equal.
TEST(BoundedReport, CompareTellsRunsApartByAnUnlistedOutput) {
    const std::string dir = moezip_test::test_dir("bounded_report_compare");
    std::string a, b, c;
    {
        moezip::Evidence ev;
        feed(ev);
        a = write_report(dir, "a.json", ev);
    }
    {
        moezip::Evidence ev;
        feed(ev);
        b = write_report(dir, "b.json", ev);
    }
    {
        moezip::Evidence ev;
        feed(ev, kGraphs / 2);
        c = write_report(dir, "c.json", ev);
    }
    auto same = moezip_test::run_tool("moezip-report", {"compare", a, b});
    EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
    EXPECT_NE(same.out.find("equal: " + std::to_string(kGraphs) + " logits outputs"), std::string::npos) << same.out;
    auto differ = moezip_test::run_tool("moezip-report", {"compare", a, c});
    EXPECT_EQ(differ.exit_code, 1) << differ.out << differ.err;
    EXPECT_NE(differ.out.find("an unlisted output differs"), std::string::npos) << differ.out;
}
