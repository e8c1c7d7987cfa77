// moezip: the exponential moving average the balancers keep of measured times (ms per slot, per
// row, per n_ff unit; worker overheads), so that one slow or fast call does not swing the split.
#pragma once

#include <cstdint>

namespace moezip {

/// Weight of a new measurement: about the last 10 calls count.
constexpr double kMovingAverageAlpha = 0.2;

/// Folds `sample` into `avg` with weight `alpha` (the first sample, n == 0, is taken as it is) and
/// counts it in `n`.
inline void moving_average_add(double & avg, double sample, uint64_t & n, double alpha = kMovingAverageAlpha) {
    avg = n == 0 ? sample : avg + alpha * (sample - avg);
    ++n;
}

} // namespace moezip
