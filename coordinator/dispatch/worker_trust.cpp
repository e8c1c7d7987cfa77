#include "coordinator/dispatch/worker_trust.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace moezip {

namespace {

float load_f32(const void * base, size_t i) {
    float v;
    memcpy(&v, static_cast<const char *>(base) + i * sizeof(float), sizeof v);
    return v;
}

// max |a - b|, cosine, and the first index where they are not bit-identical.
PartComparison measure(const void * theirs, const float * here, size_t n) {
    PartComparison c;
    double dot = 0, na = 0, nb = 0;
    bool found = false;
    for (size_t i = 0; i < n; ++i) {
        const float a = load_f32(theirs, i), b = here[i];
        if (!found && memcmp(&a, &b, sizeof a) != 0) { c.first_bad = i; found = true; }
        const double d = std::fabs((double) a - (double) b);
        c.max_abs = std::isnan(d) ? INFINITY : std::max(c.max_abs, d);
        dot += (double) a * b; na += (double) a * a; nb += (double) b * b;
    }
    c.cosine = na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : (na == nb ? 1.0 : 0.0);
    if (!std::isfinite(c.cosine)) c.cosine = -1;
    c.equal = !found;
    return c;
}

} // namespace

PartComparison part_compare_exact(const void * theirs, const float * here, size_t n) { return measure(theirs, here, n); }

PartComparison part_compare_close(const void * theirs, const float * here, size_t n, double max_abs, double min_cosine) {
    PartComparison c = measure(theirs, here, n);
    double scale = 1;
    for (size_t i = 0; i < n; ++i) scale = std::max(scale, (double) std::fabs(here[i]));
    c.equal = c.equal || (std::isfinite(c.max_abs) && c.max_abs <= max_abs * scale && c.cosine >= min_cosine);
    return c;
}

WorkerTrust::WorkerTrust(int every) : every_(every), rng_(std::random_device{}()) {}

bool WorkerTrust::due() {
    if (every_ <= 0) return false;
    const uint64_t n = (uint64_t) every_;
    const uint64_t i = results_++;
    if (i % n == 0) pick_ = i + rng_() % n;  // one check per window of N, where the worker cannot predict it
    return i == pick_;
}

void WorkerTrust::record(const PartComparison & c, const std::string & why) {
    ++checked_;
    max_abs_ = std::max(max_abs_, c.max_abs);
    min_cos_ = std::min(min_cos_, c.cosine);
    if (c.equal) return;
    ++mismatches_;
    if (untrusted_.empty()) untrusted_ = why;
}

nlohmann::json WorkerTrust::to_json() const {
    nlohmann::json j = {{"checked", checked_}, {"mismatches", mismatches_}, {"max_abs", max_abs_}, {"min_cosine", min_cos_}};
    if (!untrusted_.empty()) j["untrusted"] = untrusted_;
    return j;
}

} // namespace moezip
