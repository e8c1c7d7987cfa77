// libFuzzer target: the coordinator's reply decoder. One input is one multipart reply as a
// WorkerLink receives it (tests/fuzz/fuzz_message.h), decoded by msg_decode (coordinator/wire/
// protocol.h, the pure decoder WorkerLink::recv calls since protocol v2), then read the way recv
// reads a decoded reply: request id and instance compared, data frame 0 taken, an error reply's text
// and code named. Besides "no crash, no sanitizer report", a decoded reply must carry exactly the
// data frames its header announces, with their sizes and hashes.
#include "tests/fuzz/fuzz_message.h"

#include "coordinator/base/hex.h"

using namespace moezip;
using moezip_fuzz::fuzz_require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    moezip_fuzz::FuzzMessage m = moezip_fuzz::fuzz_message_parse(data, size);
    MsgHeader h;
    ErrorCode code = ErrorCode::ok;
    Status st = msg_decode(m.n(), m.ptrs.data(), m.sizes.data(), h, code);
    moezip_fuzz::fuzz_require_status(st, code);
    if (!st) return 0;
    const int n = m.n() - 1;
    fuzz_require(n == h.n_frames && n <= kMaxDataFrames, "data frames", std::to_string(n));
    for (int i = 0; i < n; ++i)
        fuzz_require(m.sizes[i + 1] == h.frame_bytes[i] && XXH3_64bits(m.ptrs[i + 1], m.sizes[i + 1]) == h.frame_xxh3[i],
                     "frame size or hash", std::to_string(i));
    // what recv does next: stale or foreign replies are told apart by request id and instance ...
    std::string who = hex64(h.instance) + " " + std::to_string(h.request_id) + " " + msg_kind_name(h.kind);
    // ... and an error reply becomes a message with its code and text
    if (h.kind == (uint16_t) MsgKind::error) {
        std::string text = n > 0 ? std::string(static_cast<const char *>(m.ptrs[1]), m.sizes[1]) : std::string();
        who += std::string(" worker error ") + error_code_name(static_cast<ErrorCode>(h.status)) + ": " + text;
    }
    fuzz_require(!who.empty(), "message");
    return 0;
}
