// moezip: the one quoted form of user text in messages and in the resolved config: a TOML basic
// string, so that whatever bytes a file held, a message stays one printable line.
#pragma once

#include <cstdio>
#include <string>

namespace moezip {

/// `s` as a TOML basic string with quotes: '"' and '\' escaped, control characters as \uXXXX
/// ("a\"b", "x\u000ay"); other bytes as they are.
inline std::string quote_text(const std::string & s) {
    std::string out = "\"";
    for (char c : s) {
        const unsigned char u = (unsigned char) c;
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (u < 0x20 || u == 0x7f) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", u);
            out += e;
        } else {
            out += c;
        }
    }
    return out + "\"";
}

} // namespace moezip
