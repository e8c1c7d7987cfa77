// Writes the seed corpus of the request and reply fuzz targets: real messages of the protocol as a
// coordinator and a worker send them, serialized as fuzz inputs (tests/fuzz/fuzz_message.h).
//   fuzz_seeds OUT_DIR   ->  OUT_DIR/request/*.bin, OUT_DIR/reply/*.bin
// `make fuzz-seeds` runs it into tests/fuzz/corpus/ (the files are committed).
#include "tests/fuzz/fuzz_message.h"

#include "ggml.h"  // GGML_GLU_OP_SWIGLU

#include <cstdio>
#include <string>
#include <vector>

using namespace moezip;
using namespace moezip_fuzz;

namespace {

std::string bytes_of(const void * p, size_t n) { return std::string(static_cast<const char *>(p), n); }

template <typename T> std::string bytes_of(const std::vector<T> & v) { return bytes_of(v.data(), v.size() * sizeof(T)); }

// A message: header (frame sizes and hashes set from `frames`) and its data frames.
std::vector<std::string> message(MsgHeader h, const std::vector<std::pair<WireType, std::string>> & frames) {
    std::vector<std::string> parts(1);
    for (size_t i = 0; i < frames.size(); ++i)
        msg_header_set_frame(h, (int) i, frames[i].first, frames[i].second.data(), frames[i].second.size());
    parts[0] = bytes_of(&h, sizeof h);
    for (const auto & f : frames) parts.push_back(f.second);
    return parts;
}

// A compute request for layer `il` (n_embd 8) of the fuzz targets' described model.
std::vector<std::string> compute(int il, int32_t n_ff, ReplyKind reply, const std::vector<int32_t> & ids, int n_used,
                                 const std::vector<int32_t> & slice = {}, bool gpt_oss_form = false) {
    const int n_rows = (int) ids.size() / n_used;
    MsgHeader h = msg_header_make(MsgKind::compute);
    h.request_id = 7;
    h.instance = 0x1234abcd5678ef01ull;
    h.layer = il;
    h.n_embd = 8;
    h.n_ff = n_ff;
    h.n_used = n_used;
    h.n_rows = n_rows;
    h.reply = (uint16_t) reply;
    h.glu_op = GGML_GLU_OP_SWIGLU;
    if (gpt_oss_form) {  // expert biases and swiglu_oai with gpt-oss's alpha and limit (protocol v4)
        h.glu_op = GGML_GLU_OP_SWIGLU_OAI;
        h.glu_alpha = 1.702f;
        h.glu_limit = 7.0f;
        h.ffn_flags = kFfnBiases;
    }
    std::vector<float> hidden((size_t) 8 * n_rows), weights(ids.size());
    for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = 0.25f * (float) i - 1.0f;
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.5f;
    std::vector<std::pair<WireType, std::string>> frames = {
        {WireType::f32, bytes_of(hidden)}, {WireType::i32, bytes_of(ids)}, {WireType::f32, bytes_of(weights)}};
    if (!slice.empty()) frames.push_back({WireType::i32, bytes_of(slice)});
    return message(h, frames);
}

std::vector<std::string> simple(MsgKind kind, const std::string & text, uint64_t instance, int32_t status = 0) {
    MsgHeader h = msg_header_make(kind);
    h.request_id = 3;
    h.instance = instance;
    h.status = status;
    if (text.empty()) return message(h, {});
    return message(h, {{WireType::none, text}});
}

std::vector<std::string> result(ReplyKind reply, int n_rows, int n_pairs) {
    MsgHeader h = msg_header_make(MsgKind::result);
    h.request_id = 7;
    h.instance = 0x1234abcd5678ef01ull;
    h.n_embd = 8;
    h.n_ff = 64;
    h.n_used = 2;
    h.n_rows = n_rows;
    h.n_pairs = n_pairs;
    h.reply = (uint16_t) reply;
    h.glu_op = GGML_GLU_OP_SWIGLU;
    h.service_us = 120;
    std::vector<float> out((size_t) 8 * (reply == ReplyKind::slots ? n_pairs : n_rows), 0.125f);
    return message(h, {{WireType::f32, bytes_of(out)}});
}

bool write(const std::string & path, const std::string & bytes) {
    FILE * f = fopen(path.c_str(), "wb");
    if (f == nullptr) return false;
    bool ok = fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    return fclose(f) == 0 && ok;
}

} // namespace

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds OUT_DIR (writes OUT_DIR/request/*.bin and OUT_DIR/reply/*.bin)\n");
        return 2;
    }
    const std::string out = argv[1];
    const std::string hello_json = "{\"protocol\":4,\"ggml_commit\":\"5b4ebc5\",\"cpu_variant\":\"zen4\",\"cpu_build_id\":\"ab\"}";
    const std::vector<std::pair<std::string, std::string>> seeds = {
        {"request/compute_slots.bin", fuzz_message_encode(0, compute(0, 64, ReplyKind::slots, {0, 1, 2, -1, 6, 3}, 2))},
        {"request/compute_row_sums.bin", fuzz_message_encode(0, compute(3, 16, ReplyKind::row_sums, {1, 6, 0, 2}, 2))},
        {"request/compute_shard_slice.bin", fuzz_message_encode(0, compute(0, 64, ReplyKind::row_sums, {0, 1, 2, 3}, 2, {32, 32}))},
        {"request/compute_fix_frames.bin", fuzz_message_encode(kFuzzFixFrames, compute(0, 64, ReplyKind::slots, {0, -1, 3, 6}, 1))},
        {"request/compute_misaligned.bin",
         fuzz_message_encode(kFuzzFixFrames | kFuzzMisalign, compute(3, 16, ReplyKind::row_sums, {0, 1, 2, 3, 6, 0}, 3, {4, 8}))},
        {"request/compute_gpt_oss_form.bin", fuzz_message_encode(0, compute(5, 16, ReplyKind::slots, {0, 1, 6, -1}, 2, {}, true))},
        {"request/hello.bin", fuzz_message_encode(0, simple(MsgKind::hello, hello_json, 0))},
        {"request/ping.bin", fuzz_message_encode(0, simple(MsgKind::ping, "", 0))},
        {"reply/result_slots.bin", fuzz_message_encode(0, result(ReplyKind::slots, 2, 3))},
        {"reply/result_row_sums.bin", fuzz_message_encode(kFuzzFixFrames, result(ReplyKind::row_sums, 3, 5))},
        {"reply/error_bad_expert.bin",
         fuzz_message_encode(0, simple(MsgKind::error, "expert 5 (row 0, slot 1) is not served here (serving 0-3,6)",
                                       0x1234abcd5678ef01ull, (int32_t) ErrorCode::bad_expert))},
        {"reply/hello_ok.bin",
         fuzz_message_encode(0, simple(MsgKind::hello_ok, "{\"protocol\":4,\"instance\":\"1234abcd5678ef01\",\"layers\":[]}",
                                       0x1234abcd5678ef01ull))},
        {"reply/pong.bin", fuzz_message_encode(kFuzzMisalign, simple(MsgKind::pong, "", 0x1234abcd5678ef01ull))},
    };
    for (const auto & s : seeds) {
        if (!write(out + "/" + s.first, s.second)) {
            fprintf(stderr, "fuzz_seeds: cannot write %s/%s\n", out.c_str(), s.first.c_str());
            return 1;
        }
    }
    printf("fuzz_seeds: %zu seeds written under %s\n", seeds.size(), out.c_str());
    return 0;
}
