#include "tools/moezip-worker/unit_intervals.h"

#include <algorithm>

namespace moezip {

UnitIntervals unit_intervals_subtract(const UnitIntervals & a, const UnitIntervals & b) {
    UnitIntervals out;
    size_t j = 0;
    for (auto [lo, hi] : a) {
        while (j < b.size() && b[j].second <= lo) ++j;
        for (size_t k = j; k < b.size() && b[k].first < hi; ++k) {
            if (b[k].first > lo) out.emplace_back(lo, b[k].first);
            lo = std::max(lo, b[k].second);
            if (lo >= hi) break;
        }
        if (lo < hi) out.emplace_back(lo, hi);
    }
    return out;
}

UnitIntervals unit_intervals_union(const UnitIntervals & a, const UnitIntervals & b) {
    UnitIntervals all(a);
    all.insert(all.end(), b.begin(), b.end());
    std::sort(all.begin(), all.end());
    UnitIntervals out;
    for (const auto & iv : all) {
        if (iv.first >= iv.second) continue;
        if (!out.empty() && iv.first <= out.back().second) out.back().second = std::max(out.back().second, iv.second);
        else out.push_back(iv);
    }
    return out;
}

} // namespace moezip
