// LatencySamples: the report's per-worker percentiles in fixed memory: exact for short runs, within
// 1/128 of the exact value for runs of millions of requests.
#include "coordinator/evidence/latency_samples.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

// The percentile over all samples as the report defines it: rank round(p * (n - 1)) of the sorted samples.
double exact_percentile(std::vector<float> v, double p) {
    const size_t k = (size_t) (p * (double) (v.size() - 1) + 0.5);
    std::nth_element(v.begin(), v.begin() + (ptrdiff_t) k, v.end());
    return v[k];
}

} // namespace

TEST(LatencySamples, ShortRunsAreExact) {
    moezip::LatencySamples s;
    std::vector<float> all;
    for (int i = 0; i < 1001; ++i) {
        const float ms = (float) ((i * 7919) % 1001) * 0.25f;  // 0 .. 250 ms in a scrambled order
        s.push_back(ms);
        all.push_back(ms);
    }
    EXPECT_EQ(s.size(), 1001u);
    EXPECT_EQ(s.percentile(0.5), exact_percentile(all, 0.5));
    EXPECT_EQ(s.percentile(0.99), exact_percentile(all, 0.99));
    EXPECT_EQ(s[0], 0.0f);
    EXPECT_TRUE(std::isnan(moezip::LatencySamples().percentile(0.5))) << "no sample: null in the report";
}

// Three million samples spread over 0.01 ms .. 1 s: fixed memory, percentiles within 1/128.
TEST(LatencySamples, MillionsOfSamplesInFixedMemory) {
    moezip::LatencySamples s;
    std::vector<float> all;
    all.reserve(3000000);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 3000000; ++i) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;  // xorshift64
        const float ms = (float) std::exp(std::log(0.01) + (double) (x % 1000000) / 1e6 * (std::log(1000.0) - std::log(0.01)));
        s.push_back(ms);
        all.push_back(ms);
    }
    EXPECT_EQ(s.size(), 3000000u);
    EXPECT_LE(s.allocated_bytes(), 64u * 1024) << "bounded however many samples";
    for (double p : {0.01, 0.5, 0.9, 0.99, 0.999}) {
        const double want = exact_percentile(all, p);
        EXPECT_NEAR(s.percentile(p), want, want / 128.0 + 1e-9) << "p" << p;
    }
    EXPECT_EQ(s.percentile(1.0), exact_percentile(all, 1.0)) << "the largest sample is exact";
}
