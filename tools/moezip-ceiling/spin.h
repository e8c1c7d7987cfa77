// moezip-ceiling: wall-clock helpers. A spin stands for a slot's compute: busy, on its core, for as
// long as the slot would take.
#pragma once

#include <chrono>

namespace moezip_ceiling {

using clock_type = std::chrono::steady_clock;

/// ms since t0.
inline double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

/// Busy for ms milliseconds.
inline void spin_ms(double ms) {
    const auto t0 = clock_type::now();
    while (ms_since(t0) < ms) {
    }
}

} // namespace moezip_ceiling
