// moezip: a bounded record of one kind of per-request time (a worker's round trips, its service
// times) for the report's percentiles. A server sends requests for days: the first kExact samples
// are kept as they are (percentiles exact), beyond that every sample also goes to a log-linear
// histogram of fixed size (percentiles within 1/128 of the value: docs/report.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moezip {

/// Times in ms (float). Memory: at most kExact floats plus kBuckets counters, however many samples.
/// Not thread-safe: its owner (WorkerLink's stats) is used by one thread at a time.
class LatencySamples {
public:
    static constexpr size_t kExact = 4096;      ///< samples kept exactly (the first ones)
    static constexpr int kSubBuckets = 64;      ///< histogram buckets per power of two
    static constexpr int kMinExp = -14;         ///< smallest octave: [2^-15, 2^-14) ms (~30 ns); below is the first bucket
    static constexpr int kMaxExp = 26;          ///< largest octave: up to 2^26 ms (~18 h); above is the last bucket
    static constexpr size_t kBuckets = (size_t) (kMaxExp - kMinExp + 1) * kSubBuckets + 1;  ///< + one for <= 0

    /// Adds one time (ms; NaN is ignored, <= 0 counts as 0).
    void push_back(float ms);
    /// Samples added (all of them, not only those kept).
    size_t size() const { return (size_t) count_; }
    bool empty() const { return count_ == 0; }
    /// The i-th sample, for i < kept(): the first samples as they came.
    float operator[](size_t i) const { return exact_[i]; }
    size_t kept() const { return exact_.size(); }
    /// The p-quantile (0..1) by rank round(p * (n - 1)), as nth_element over all samples would give:
    /// exact while size() <= kExact; then the middle of the histogram bucket holding that rank
    /// (relative error at most 1/128), clamped to the smallest and largest sample seen; the smallest
    /// and largest themselves exact. NaN when empty.
    double percentile(double p) const;
    /// Bytes held (the kept samples and the histogram, allocated or not yet).
    size_t allocated_bytes() const { return exact_.capacity() * sizeof(float) + hist_.capacity() * sizeof(uint32_t); }

private:
    static size_t bucket_of(float ms);
    static double bucket_middle(size_t b);
    void add_to_histogram(float ms);

    uint64_t count_ = 0;
    float min_ = 0, max_ = 0;
    std::vector<float> exact_;      // the first kExact samples
    std::vector<uint32_t> hist_;    // [kBuckets], allocated at the first sample beyond kExact (then holding all)
};

} // namespace moezip
