// moezip: elapsed time in the unit and width of the message header's time fields.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace moezip {

/// Whole µs from `t` to now on the steady clock, clamped to [0, 2^32-1]: the range of
/// MsgHeader::service_us and setup_us (coordinator/wire/protocol.h), so a long request saturates
/// instead of wrapping.
inline uint32_t micros_since(std::chrono::steady_clock::time_point t) {
    const int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t).count();
    return (uint32_t) std::min<int64_t>(std::max<int64_t>(us, 0), UINT32_MAX);
}

} // namespace moezip
