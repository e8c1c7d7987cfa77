// libFuzzer target: the worker's request decoder. One input is one multipart request as the worker
// receives it (tests/fuzz/fuzz_message.h), decoded as Server::handle does (worker_server.cpp): the
// header (msg_header_parse), then a compute request against a small described model
// (request_check_compute, what WorkerCompute::validate runs) and hello/ping frames against the header
// (msg_frames_verify). Besides "no crash, no sanitizer report", a request the check accepts must hold
// everything WorkerCompute::compute reads without checking again.
#include "tests/fuzz/fuzz_message.h"
#include "tools/moezip-worker/request_check.h"

#include <algorithm>

using namespace moezip;
using moezip_fuzz::fuzz_require;

namespace {

// Two MoE layers of a q8_0-like (block 32) and an f32-like (block 1) model, 8 experts, some served.
RequestShape fuzz_shape() {
    RequestShape s;
    s.layers = {{0, 8, 64, 32}, {3, 8, 16, 1}};
    s.n_expert = 8;
    s.served = {{0, 3}, {6, 6}};
    s.served_mask = {true, true, true, true, false, false, true, false};
    return s;
}

int32_t read_i32(const void * frame, int64_t i) {
    int32_t v;
    memcpy(&v, static_cast<const uint8_t *>(frame) + i * 4, 4);
    return v;
}

// What compute() relies on once validate() said ok.
void require_computable(const RequestShape & shape, const MsgHeader & h, int n, const void * const * frames, const size_t * sizes) {
    fuzz_require(n == h.n_frames && (n == 3 || n == 4), "frame count", std::to_string(n));
    const RequestShape::Layer * l = shape.layer(h.layer);
    fuzz_require(l != nullptr && h.n_embd == l->n_embd && h.n_ff == l->n_ff, "layer and dims");
    fuzz_require(h.n_rows >= 0 && h.n_rows <= kMaxRows && h.n_used >= 1 && h.n_used <= kMaxUsed, "counts");
    const uint64_t cells = (uint64_t) h.n_used * (uint64_t) h.n_rows;
    fuzz_require(sizes[0] == (uint64_t) h.n_embd * h.n_rows * 4 && sizes[1] == cells * 4 && sizes[2] == cells * 4, "frame sizes");
    fuzz_require(h.reply == (uint16_t) ReplyKind::slots || h.reply == (uint16_t) ReplyKind::row_sums, "reply kind");
    int64_t pairs = 0;
    for (uint64_t i = 0; i < cells; ++i) {
        const int32_t id = read_i32(frames[1], (int64_t) i);
        fuzz_require(id >= -1 && id < shape.n_expert && (id < 0 || shape.serves(id)), "expert id", std::to_string(id));
        pairs += id >= 0;
    }
    const uint64_t out_rows = h.reply == (uint16_t) ReplyKind::slots ? (uint64_t) pairs : (uint64_t) h.n_rows;
    fuzz_require(out_rows * (uint64_t) h.n_embd <= (uint64_t) kMaxUsed * kMaxRows * (uint64_t) l->n_embd, "reply size");
    if (n == 4) {
        int64_t first = 0, count = 0;
        fuzz_require(sizes[3] == 8 && h.reply == (uint16_t) ReplyKind::row_sums, "slice frame");
        request_slice_of(frames[3], first, count);
        fuzz_require(first >= 0 && count >= 1 && first + count <= l->n_ff && first % l->ff_block == 0 && count % l->ff_block == 0,
                     "slice", std::to_string(first) + "+" + std::to_string(count));
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    static const RequestShape shape = fuzz_shape();
    moezip_fuzz::FuzzMessage m = moezip_fuzz::fuzz_message_parse(data, size);
    if (m.n() < 1) return 0;  // the server answers "empty message" before decoding anything
    MsgHeader h;
    ErrorCode code = ErrorCode::ok;
    Status st = msg_header_parse(m.ptrs[0], m.sizes[0], h, code);
    moezip_fuzz::fuzz_require_status(st, code);
    if (!st) return 0;
    const int n = m.n() - 1;
    const void * const * frames = m.ptrs.data() + 1;
    const size_t * sizes = m.sizes.data() + 1;
    const MsgKind kind = static_cast<MsgKind>(h.kind);
    if (kind == MsgKind::compute) {
        st = request_check_compute(shape, h, n, frames, sizes, code);
        moezip_fuzz::fuzz_require_status(st, code);
        if (st) require_computable(shape, h, n, frames, sizes);
    } else if (kind == MsgKind::hello || kind == MsgKind::ping) {
        st = msg_frames_verify(h, n, frames, sizes, code);
        moezip_fuzz::fuzz_require_status(st, code);
        if (st && n > 0) (void) std::string(static_cast<const char *>(frames[0]), std::min<size_t>(sizes[0], 400));  // logged
    }
    return 0;
}
