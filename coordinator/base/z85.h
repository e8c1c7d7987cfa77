// moezip: whether a text is a CurveZMQ key in Z85 (ZeroMQ RFC 32), without libzmq, so that the config
// checker (and its fuzz target) can check public_key values on their own.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace moezip {

/// True when `text` is 40 characters of the Z85 alphabet whose 5-character groups each encode a
/// value below 2^32: the text of a 32-byte key (what zmq_z85_decode accepts).
inline bool z85_key_text_valid(const std::string & text) {
    static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
    if (text.size() != 40) return false;
    for (size_t g = 0; g < 40; g += 5) {
        uint64_t value = 0;
        for (size_t i = g; i < g + 5; ++i) {
            const char * at = text[i] != '\0' ? strchr(alphabet, text[i]) : nullptr;
            if (at == nullptr) return false;
            value = value * 85 + (uint64_t) (at - alphabet);
        }
        if (value > 0xffffffffull) return false;
    }
    return true;
}

} // namespace moezip
