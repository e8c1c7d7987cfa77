// moezip fuzz targets: how one fuzz input becomes a received multipart message (the worker's request
// decoder and the coordinator's reply decoder read the same form), and how a message is written as
// such an input (tests/fuzz/fuzz_seeds.cpp).
//
//   byte 0   flags: kFuzzFixFrames - after splitting, the header's frame_bytes/frame_xxh3 of the
//            received data frames are set to their real sizes and hashes, so that mutated data gets
//            past the hash check to the checks behind it; kFuzzMisalign - data frames sit at odd
//            addresses, as ZeroMQ may hand them over.
//   then     the parts, each a 4-byte little-endian length and its bytes; a length past the end of
//            the input takes what is left. Part 0 is the header frame, parts 1.. the data frames
//            (a ROUTER's identity frame is not part of it).
#pragma once

#include "coordinator/wire/protocol.h"

#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace moezip_fuzz {

constexpr uint8_t kFuzzFixFrames = 1;
constexpr uint8_t kFuzzMisalign = 2;

/// A message as received: parts[i] has sizes[i] bytes at ptrs[i].
struct FuzzMessage {
    std::vector<std::string> storage;  // one byte of padding first when misaligned
    std::vector<const void *> ptrs;
    std::vector<size_t> sizes;
    int n() const { return (int) ptrs.size(); }
};

/// Splits a fuzz input into its parts (see above). Never fails: any bytes give some message.
inline FuzzMessage fuzz_message_parse(const uint8_t * data, size_t size) {
    FuzzMessage m;
    if (size == 0) return m;
    const uint8_t flags = data[0];
    size_t at = 1;
    while (at < size) {
        uint32_t len = 0;
        size_t have = size - at < 4 ? size - at : 4;
        memcpy(&len, data + at, have);
        at += have;
        size_t take = len < size - at ? len : size - at;
        const bool pad = (flags & kFuzzMisalign) && !m.storage.empty();
        m.storage.emplace_back(pad ? 1 : 0, '\0');
        m.storage.back().append(reinterpret_cast<const char *>(data + at), take);
        at += take;
    }
    if ((flags & kFuzzFixFrames) && !m.storage.empty() && m.storage[0].size() == sizeof(moezip::MsgHeader)) {
        moezip::MsgHeader h;
        memcpy(&h, m.storage[0].data(), sizeof h);
        const bool pad = (flags & kFuzzMisalign) != 0;
        for (size_t i = 1; i < m.storage.size() && i <= (size_t) moezip::kMaxDataFrames; ++i) {
            const std::string & s = m.storage[i];
            h.frame_bytes[i - 1] = s.size() - (pad ? 1 : 0);
            h.frame_xxh3[i - 1] = XXH3_64bits(s.data() + (pad ? 1 : 0), s.size() - (pad ? 1 : 0));
        }
        memcpy(&m.storage[0][0], &h, sizeof h);
    }
    for (size_t i = 0; i < m.storage.size(); ++i) {
        const size_t skip = (flags & kFuzzMisalign) && i > 0 ? 1 : 0;
        m.ptrs.push_back(m.storage[i].data() + skip);
        m.sizes.push_back(m.storage[i].size() - skip);
    }
    return m;
}

/// The fuzz input for `parts` (part 0 the header frame) with `flags`.
inline std::string fuzz_message_encode(uint8_t flags, const std::vector<std::string> & parts) {
    std::string out(1, (char) flags);
    for (const std::string & p : parts) {
        uint32_t len = (uint32_t) p.size();
        out.append(reinterpret_cast<const char *>(&len), 4);
        out += p;
    }
    return out;
}

/// Ends the process (a finding for libFuzzer) when `ok` is false, printing `what`.
inline void fuzz_require(bool ok, const char * what, const std::string & detail = "") {
    if (ok) return;
    fprintf(stderr, "fuzz invariant broken: %s %s\n", what, detail.c_str());
    abort();
}

/// A decoder's Status and ErrorCode agree: ok with code ok, or an error with a code and a message.
inline void fuzz_require_status(const moezip::Status & st, moezip::ErrorCode code) {
    if (st.is_ok()) fuzz_require(code == moezip::ErrorCode::ok, "ok with an error code", moezip::error_code_name(code));
    else fuzz_require(code != moezip::ErrorCode::ok && !st.message().empty(), "error without code or message", st.to_string());
}

} // namespace moezip_fuzz
