// moezip: the one textual form of 64-bit digests and ids (reports, hello_ok, messages).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace moezip {

/// 16 lowercase hex digits, zero-padded: the form of every XXH3-64 digest and worker instance id.
inline std::string hex64(uint64_t v) {
    char buf[17];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long) v);
    return buf;
}

} // namespace moezip
