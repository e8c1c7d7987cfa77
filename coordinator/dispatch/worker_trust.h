// moezip: whether a worker's results are believed. XXH3 over every frame detects corruption, not a
// worker (or a man in the middle without CURVE) that computes wrong numbers and hashes them. So with
// verify_every = N, one result in every window of N results of each worker, at a random position
// the worker cannot predict, is also computed here and compared: bit for bit where the combine is
// exact (rows, experts exact: same kernels, same order), within tolerances where the protocol allows
// another summation order (shard, experts partial). A mismatch discards that result (this host's is
// used), marks the worker untrusted (no more work this run; named in the report and on stderr) and
// counts as a fallback, which fails the run under require_intercept. A worker that tampers with
// every result is caught within N results; one that tampers with a fraction f of them is caught per
// tampered result with probability 1/N.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace moezip {

/// The comparison of a worker's part with this host's computation of it.
struct PartComparison {
    bool equal = true;         ///< within the rule used (bit-exact or tolerances)
    double max_abs = 0;        ///< largest |theirs - here|
    double cosine = 1;         ///< cosine similarity of the two parts (1 for two zero parts)
    size_t first_bad = 0;      ///< index of the first differing value (when not equal)
};

/// Bit-exact comparison of n f32 values; `theirs` may be unaligned (a ZeroMQ frame).
PartComparison part_compare_exact(const void * theirs, const float * here, size_t n);
/// Within tolerances: max |theirs - here| <= max_abs * max(1, max |here|) and cosine >= min_cosine;
/// a NaN or infinity in `theirs` where `here` has none is never within them.
PartComparison part_compare_close(const void * theirs, const float * here, size_t n, double max_abs, double min_cosine);

/// Per-worker verification state: which results to check, what was found, and the verdict.
class WorkerTrust {
public:
    /// `every`: verify_every (0 = never).
    explicit WorkerTrust(int every = 0);

    /// Called once per result of this worker before it is used: true when this one is checked.
    bool due();
    /// Records a check of one result; a mismatch makes the worker untrusted with `why`.
    void record(const PartComparison & c, const std::string & why);
    bool untrusted() const { return !untrusted_.empty(); }
    const std::string & why_untrusted() const { return untrusted_; }
    /// {"checked", "mismatches", "max_abs", "min_cosine", "untrusted" (when it is)}.
    nlohmann::json to_json() const;

private:
    int every_;
    uint64_t results_ = 0, pick_ = 0;
    std::mt19937_64 rng_;
    uint64_t checked_ = 0, mismatches_ = 0;
    double max_abs_ = 0, min_cos_ = 1;
    std::string untrusted_;
};

} // namespace moezip
