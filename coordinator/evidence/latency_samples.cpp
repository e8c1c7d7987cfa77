#include "coordinator/evidence/latency_samples.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace moezip {

size_t LatencySamples::bucket_of(float ms) {
    if (!(ms > 0)) return 0;
    int e = 0;
    const double m = std::frexp((double) ms, &e);  // ms = m * 2^e, m in [0.5, 1)
    if (e < kMinExp) return 1;
    if (e > kMaxExp) return kBuckets - 1;
    const int sub = std::min(kSubBuckets - 1, (int) ((m - 0.5) * 2 * kSubBuckets));
    return 1 + (size_t) (e - kMinExp) * kSubBuckets + (size_t) sub;
}

double LatencySamples::bucket_middle(size_t b) {
    if (b == 0) return 0;
    const size_t i = b - 1;
    const int e = kMinExp + (int) (i / kSubBuckets);
    const double sub = (double) (i % kSubBuckets);
    // bucket [0.5 + sub/(2K), 0.5 + (sub+1)/(2K)) * 2^e: its middle
    return std::ldexp(0.5 + (sub + 0.5) / (2.0 * kSubBuckets), e);
}

void LatencySamples::add_to_histogram(float ms) {
    uint32_t & c = hist_[bucket_of(ms)];
    if (c < UINT32_MAX) ++c;
}

void LatencySamples::push_back(float ms) {
    if (std::isnan(ms)) return;
    if (ms < 0) ms = 0;
    min_ = count_ == 0 ? ms : std::min(min_, ms);
    max_ = count_ == 0 ? ms : std::max(max_, ms);
    ++count_;
    if (exact_.size() < kExact) {
        if (exact_.empty()) exact_.reserve(kExact);  // one allocation of the whole window
        exact_.push_back(ms);
        return;
    }
    if (hist_.empty()) {
        hist_.assign(kBuckets, 0);
        for (float x : exact_) add_to_histogram(x);
    }
    add_to_histogram(ms);
}

double LatencySamples::percentile(double p) const {
    if (count_ == 0) return std::numeric_limits<double>::quiet_NaN();
    p = std::min(1.0, std::max(0.0, p));
    const uint64_t k = (uint64_t) (p * (double) (count_ - 1) + 0.5);
    if (hist_.empty()) {
        std::vector<float> v = exact_;
        std::nth_element(v.begin(), v.begin() + (ptrdiff_t) k, v.end());
        return v[(size_t) k];
    }
    if (k == 0) return min_;            // the extremes are known exactly
    if (k == count_ - 1) return max_;
    uint64_t seen = 0;
    for (size_t b = 0; b < hist_.size(); ++b) {
        seen += hist_[b];
        if (seen > k) return std::min((double) max_, std::max((double) min_, bucket_middle(b)));
    }
    return max_;
}

} // namespace moezip
