#include "tools/moezip-worker/request/request_check.h"

#include "ggml.h"  // enum ggml_glu_op (values only)

#include <cmath>
#include <cstring>
#include <string>

namespace moezip {

namespace {

bool glu_op_supported(uint32_t op) {
    switch (op) {
        case GGML_GLU_OP_SWIGLU: case GGML_GLU_OP_GEGLU: case GGML_GLU_OP_REGLU:
        case GGML_GLU_OP_GEGLU_ERF: case GGML_GLU_OP_GEGLU_QUICK: case GGML_GLU_OP_SWIGLU_OAI: return true;
        default: return false;
    }
}

Status fail(ErrorCode & code, ErrorCode c, std::string message) {
    code = c;
    return Status::invalid_argument(std::move(message));
}

std::string bias_names(uint32_t flags) {
    std::string s;
    for (auto f : {std::make_pair(kFfnGateBias, "gate"), std::make_pair(kFfnUpBias, "up"), std::make_pair(kFfnDownBias, "down")})
        if (flags & f.first) s += std::string(s.empty() ? "" : ", ") + f.second;
    return s.empty() ? "none" : s;
}

// The FFN's form: the glu parameters and ffn_flags against the layer's biases.
Status check_ffn_form(const RequestShape::Layer & l, const MsgHeader & h, ErrorCode & code) {
    if (h.glu_op == GGML_GLU_OP_SWIGLU_OAI) {
        if (!std::isfinite(h.glu_alpha) || !std::isfinite(h.glu_limit))
            return fail(code, ErrorCode::bad_shape, "swiglu_oai alpha " + std::to_string(h.glu_alpha) + ", limit " +
                                                        std::to_string(h.glu_limit) + " are not finite");
    } else if (h.glu_alpha != 0 || h.glu_limit != 0) {
        return fail(code, ErrorCode::bad_shape, "glu_alpha and glu_limit are only for swiglu_oai (glu_op " +
                                                    std::to_string(GGML_GLU_OP_SWIGLU_OAI) + "), glu_op is " + std::to_string(h.glu_op));
    }
    if ((h.ffn_flags & ~(uint32_t) kFfnKnown) != 0)
        return fail(code, ErrorCode::bad_shape, "ffn_flags " + std::to_string(h.ffn_flags) + " has unknown bits (known: " +
                                                    std::to_string((uint32_t) kFfnKnown) + ")");
    if ((h.ffn_flags & kFfnBiases) != l.biases)
        return fail(code, ErrorCode::bad_shape, "expert biases of the request (" + bias_names(h.ffn_flags & kFfnBiases) +
                                                    ") differ from layer " + std::to_string(l.il) + "'s in this model (" +
                                                    bias_names(l.biases) + ")");
    if (h.n_frames == 4 && l.biases != 0)
        return fail(code, ErrorCode::bad_shape, "an n_ff slice of experts with biases is not computed (layer " + std::to_string(l.il) +
                                                    " has " + bias_names(l.biases) + " biases)");
    if (h.setup_us != 0) return fail(code, ErrorCode::bad_shape, "setup_us header field is " + std::to_string(h.setup_us) + " in a request, must be 0");
    return Status::ok();
}

Status check_header(const RequestShape & shape, const MsgHeader & h, ErrorCode & code) {
    if (h.n_frames != 3 && h.n_frames != 4)
        return fail(code, ErrorCode::bad_frames, "compute needs 3 data frames (hidden, ids, weights) or 4 (and an n_ff slice), header announces " +
                                                     std::to_string(h.n_frames));
    const WireType want[4] = {WireType::f32, WireType::i32, WireType::f32, WireType::i32};
    for (int i = 0; i < h.n_frames; ++i)
        if (h.dtype[i] != static_cast<uint8_t>(want[i]))
            return fail(code, ErrorCode::bad_frames, "frame " + std::to_string(i + 1) + " dtype " + std::to_string(h.dtype[i]) +
                                                         ", expected " + std::to_string(static_cast<int>(want[i])) +
                                                         " (hidden f32, ids i32, weights f32, n_ff slice i32)");
    if (h.n_frames == 4 && h.frame_bytes[3] != 2 * sizeof(int32_t))
        return fail(code, ErrorCode::bad_frames, "n_ff slice frame is announced as " + std::to_string(h.frame_bytes[3]) +
                                                     " bytes, needs 8 (first, count)");
    if (h.n_frames == 4 && h.reply != static_cast<uint16_t>(ReplyKind::row_sums))
        return fail(code, ErrorCode::bad_kind, "an n_ff slice gives partial sums: the reply must be row_sums (2)");
    const RequestShape::Layer * l = shape.layer(h.layer);
    if (l == nullptr) return fail(code, ErrorCode::bad_layer, "layer " + std::to_string(h.layer) + " is not a MoE layer of this model");
    if (h.n_embd != l->n_embd || h.n_ff != l->n_ff)
        return fail(code, ErrorCode::bad_shape, "n_embd " + std::to_string(h.n_embd) + ", n_ff " + std::to_string(h.n_ff) +
                                                    " differ from layer " + std::to_string(h.layer) + "'s n_embd " +
                                                    std::to_string(l->n_embd) + ", n_ff " + std::to_string(l->n_ff));
    if (h.n_rows < 0 || h.n_rows > kMaxRows)
        return fail(code, ErrorCode::bad_shape, "n_rows " + std::to_string(h.n_rows) + " outside 0.." + std::to_string(kMaxRows));
    if (h.n_used < 1 || h.n_used > kMaxUsed)
        return fail(code, ErrorCode::bad_shape, "n_used " + std::to_string(h.n_used) + " outside 1.." + std::to_string(kMaxUsed));
    if (h.reply != static_cast<uint16_t>(ReplyKind::slots) && h.reply != static_cast<uint16_t>(ReplyKind::row_sums))
        return fail(code, ErrorCode::bad_kind, "reply kind " + std::to_string(h.reply) + " unknown (1 = slots, 2 = row_sums)");
    if (!glu_op_supported(h.glu_op))
        return fail(code, ErrorCode::bad_kind, "glu_op " + std::to_string(h.glu_op) +
                                                   " not supported (swiglu, geglu, reglu, geglu_erf, geglu_quick, swiglu_oai)");
    Status form = check_ffn_form(*l, h, code);
    if (!form) return form;
    const uint64_t want_bytes[3] = {(uint64_t) h.n_embd * h.n_rows * 4, (uint64_t) h.n_used * h.n_rows * 4,
                                    (uint64_t) h.n_used * h.n_rows * 4};
    const char * names[3] = {"hidden", "ids", "weights"};
    for (int i = 0; i < 3; ++i)
        if (h.frame_bytes[i] != want_bytes[i])
            return fail(code, ErrorCode::bad_frames, std::string(names[i]) + " frame is announced as " +
                                                         std::to_string(h.frame_bytes[i]) + " bytes, n_rows " +
                                                         std::to_string(h.n_rows) + " needs " + std::to_string(want_bytes[i]));
    return Status::ok();
}

Status check_ids(const RequestShape & shape, const MsgHeader & h, const void * frame, ErrorCode & code) {
    const int64_t n = (int64_t) h.n_used * h.n_rows;
    const uint8_t * bytes = static_cast<const uint8_t *>(frame);
    for (int64_t i = 0; i < n; ++i) {
        int32_t id;
        memcpy(&id, bytes + i * sizeof id, sizeof id);  // the frame may be misaligned
        if (id < -1 || id >= shape.n_expert)
            return fail(code, ErrorCode::bad_expert, "expert id " + std::to_string(id) + " (row " + std::to_string(i / h.n_used) +
                                                         ", slot " + std::to_string(i % h.n_used) + ") outside [-1, " +
                                                         std::to_string(shape.n_expert) + ")");
        if (id >= 0 && !shape.serves(id))
            return fail(code, ErrorCode::bad_expert, "expert " + std::to_string(id) + " (row " + std::to_string(i / h.n_used) +
                                                         ", slot " + std::to_string(i % h.n_used) + ") is not served here (serving " +
                                                         expert_ranges_format(shape.served) + ")");
    }
    return Status::ok();
}

} // namespace

const RequestShape::Layer * RequestShape::layer(int il) const {
    for (const Layer & l : layers)
        if (l.il == il) return &l;
    return nullptr;
}

void request_slice_of(const void * frame, int64_t & first, int64_t & count) {
    int32_t v[2];
    memcpy(v, frame, sizeof v);  // the frame may be misaligned
    first = v[0];
    count = v[1];
}

Status request_check_compute(const RequestShape & shape, const MsgHeader & h, int n, const void * const * frames,
                             const size_t * sizes, ErrorCode & code) {
    Status st = check_header(shape, h, code);
    if (!st) return st;
    st = msg_frames_verify(h, n, frames, sizes, code);
    if (!st) return st;
    if (h.n_frames == 4) {
        int64_t first = 0, count = 0;
        request_slice_of(frames[3], first, count);
        const RequestShape::Layer * l = shape.layer(h.layer);
        const int64_t block = l->ff_block > 0 ? l->ff_block : 1;
        auto bad = [&](const std::string & why) {
            return fail(code, ErrorCode::bad_shape,
                        "n_ff slice [" + std::to_string(first) + ", " + std::to_string(first + count) + ") " + why);
        };
        if (count < 1) return bad("is empty");
        if (first < 0 || first + count > l->n_ff)
            return bad("is outside [0, " + std::to_string(l->n_ff) + ") of layer " + std::to_string(l->il));
        // ffn_down_exps is quantized along n_ff: a slice must cut it between blocks
        if (first % block != 0 || count % block != 0)
            return bad("does not start and end on a multiple of " + std::to_string(block) +
                       " (the quantization block of ffn_down_exps along n_ff)");
    }
    return check_ids(shape, h, frames[1], code);
}

} // namespace moezip
