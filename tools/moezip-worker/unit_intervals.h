// moezip-worker: sets of n_ff units as sorted half-open intervals (slice_residency.h).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace moezip {

/// Half-open intervals [a, b) of n_ff units, sorted and disjoint.
using UnitIntervals = std::vector<std::pair<int64_t, int64_t>>;
/// a minus b; a and b sorted and disjoint. Empty intervals never appear in the result.
UnitIntervals unit_intervals_subtract(const UnitIntervals & a, const UnitIntervals & b);
/// The union of a and b (sorted and disjoint; touching intervals joined, empty ones dropped).
UnitIntervals unit_intervals_union(const UnitIntervals & a, const UnitIntervals & b);

} // namespace moezip
