// moezip wire protocol v5 (byte layout and rules: docs/internals/protocol.md).
//
// Transport: ZeroMQ, coordinator DEALER -> worker ROUTER. Every message is multipart:
//   frame 0: MsgHeader (152 bytes, little-endian, fixed layout pinned by static_asserts)
//   frames 1..n_frames: data frames whose byte counts and XXH3-64 hashes the header carries.
// The receiver recomputes every hash and rejects a message whose header or frames disagree.
//
// Kinds and their data frames:
//   hello       coord -> worker  [0] JSON: {"protocol":4, "ggml_commit", "cpu_variant", "cpu_build_id",
//                                "plan": what this coordinator will ask of this worker (mode, experts,
//                                n_ff slice); the worker keeps it per connection and refuses compute
//                                outside it (bad_plan)}
//   hello_ok    worker -> coord  [0] JSON: the worker's identity (engine, model layers, experts served,
//                                the process instance also carried by every reply header)
//   compute     coord -> worker  [0] hidden  f32 [n_embd, n_rows]
//                                [1] ids     i32 [n_used, n_rows]  (-1 = slot not for this worker)
//                                [2] weights f32 [n_used, n_rows]
//   result      worker -> coord  reply = slots:    [0] f32 [n_embd, n_pairs]: weighted output of every
//                                                  slot with id >= 0, in (row, slot) order
//                                reply = row_sums: [0] f32 [n_embd, n_rows]: per row, the slot-order sum
//                                                  of its slots (rows mode: the whole ffn_moe_out row)
//   error       worker -> coord  [0] UTF-8 message; header.status = ErrorCode
//   ping/pong   liveness, no frames
#pragma once

#include "coordinator/base/hex.h"
#include "provider_map/status.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace moezip {

constexpr uint32_t kProtocolMagic = 0x505a454du;  // "MEZP" as little-endian bytes 'M','E','Z','P'
/// v2: the header grew an `instance` field (136 bytes), and a worker refuses a compute request
/// addressed to another instance (bad_instance). v3: the hello carries the coordinator's plan and a
/// worker computes only what the plan of the connection allows (bad_plan); per-request budgets
/// (over_budget) and allocation failures (out_of_memory) are error replies. v4: the header grew the
/// expert FFN's form (ffn_flags, glu_alpha, glu_limit; 152 bytes) so that workers compute gpt-oss
/// (expert biases, swiglu_oai) and llama4 (routing weight before the FFN) layers. v5: hello_ok's
/// expert digests cover every byte of each slice (provider_map/expert_digest.h), no longer a sample
/// of its ends. Older peers are refused by version (read from the first 8 bytes, whatever the
/// header's size).
constexpr uint16_t kProtocolVersion = 5;
constexpr int kMaxDataFrames = 4;
/// Parts of one message at most: the header and kMaxDataFrames data frames (a ROUTER's identity
/// frame not counted). Receivers drop the parts beyond it and answer bad_frames.
constexpr int kMaxMessageParts = 1 + kMaxDataFrames;
/// Upper bounds a worker enforces before allocating anything (oversized counts are errors).
constexpr int32_t kMaxRows = 1 << 20;
constexpr int32_t kMaxEmbd = 1 << 16;
constexpr int32_t kMaxUsed = 256;

/// Bits of MsgHeader::ffn_flags: the form of the layer's expert FFN as the engine's graph computes it
/// (build_moe_ffn in llama.cpp's src/llama-graph.cpp). A worker computes a request only when the bias
/// bits equal the biases its model file has for the layer (bad_shape otherwise).
enum FfnFlag : uint32_t {
    kFfnWeightBefore = 1u << 0,  ///< the routing weight scales each slot's input; the output is not weighted (llama4)
    kFfnGateBias = 1u << 1,      ///< ADD_ID of blk.N.ffn_gate_exps.bias after the gate matmul (gpt-oss)
    kFfnUpBias = 1u << 2,        ///< ... ffn_up_exps.bias after the up matmul
    kFfnDownBias = 1u << 3,      ///< ... ffn_down_exps.bias after the down matmul
    kFfnBiases = kFfnGateBias | kFfnUpBias | kFfnDownBias,
    kFfnKnown = kFfnWeightBefore | kFfnBiases,
};

enum class MsgKind : uint16_t { hello = 1, hello_ok = 2, compute = 3, result = 4, error = 5, ping = 6, pong = 7 };
enum class ReplyKind : uint16_t { slots = 1, row_sums = 2 };
/// Wire dtypes (values of enum ggml_type for the ones used).
enum class WireType : uint8_t { f32 = 0, i32 = 26, none = 255 };

/// Error codes carried in MsgHeader::status of an error reply.
enum class ErrorCode : int32_t {
    ok = 0,
    bad_magic = 1,        ///< not a moezip message
    bad_version = 2,      ///< protocol version not spoken
    bad_kind = 3,         ///< unknown or unexpected kind
    bad_frames = 4,       ///< frame count or sizes disagree with the header
    bad_hash = 5,         ///< a frame's XXH3-64 does not match
    bad_shape = 6,        ///< dims disagree with the worker's model, or oversized counts
    bad_expert = 7,       ///< expert id out of range or not served by this worker
    bad_layer = 8,        ///< layer not in the model or not a MoE layer
    compute_failed = 9,   ///< ggml compute failed
    bad_instance = 10,    ///< compute addressed to another worker instance (the worker restarted or was replaced)
    over_budget = 11,     ///< the request needs more rows, slots, bytes or scratch than the worker's per-request budget
    bad_plan = 12,        ///< no hello with a plan on this connection, or compute outside it (experts, n_ff slice)
    out_of_memory = 13,   ///< an allocation for the request failed; nothing was computed
    stopping = 14,        ///< the worker is exiting (SIGTERM/SIGINT): the request was not computed
    model_changed = 15,   ///< the worker's model file no longer holds the bytes hello_ok's digests named (--mmap: every request; a default worker: a request that read the file): restart it
};

/// Frame 0 of every message. 152 bytes, little-endian, no implicit padding.
struct MsgHeader {
    uint32_t magic;              ///< kProtocolMagic
    uint16_t version;            ///< kProtocolVersion
    uint16_t kind;               ///< MsgKind
    uint64_t request_id;         ///< chosen by the coordinator, echoed in the reply
    int32_t layer;               ///< il of the MoE layer (compute/result)
    int32_t n_embd;              ///< hidden size
    int32_t n_ff;                ///< expert FFN size (checked against the worker's model)
    int32_t n_used;              ///< slots per row (n_expert_used)
    int32_t n_rows;              ///< rows in this message
    int32_t row_offset;          ///< first row's index in the coordinator's region (for the report)
    int32_t n_pairs;             ///< result/slots: number of (row, slot) outputs
    int32_t status;              ///< ErrorCode in error replies, else 0
    uint16_t reply;              ///< ReplyKind requested/returned
    uint8_t dtype[kMaxDataFrames];  ///< WireType of each data frame
    uint16_t n_frames;           ///< data frames that follow (0..kMaxDataFrames)
    uint32_t glu_op;             ///< compute: enum ggml_glu_op of the layer's activation (value of ggml.h's enum)
    uint32_t service_us;         ///< result: the worker's time on the request, receipt to reply ready (hash checks,
                                 ///< validation, compute), µs, saturating; 0 in other kinds. RTT - service = transfer
                                 ///< and queueing. (Was `reserved`, always 0: older peers read 0.)
    uint64_t frame_bytes[kMaxDataFrames];  ///< byte count of each data frame
    uint64_t frame_xxh3[kMaxDataFrames];   ///< XXH3-64 of each data frame
    /// The worker process instance: a random non-zero 64-bit value a worker picks when it starts.
    /// Every reply carries the worker's own; a compute request carries the instance the coordinator
    /// verified (hello and per-layer checks), and a worker refuses one addressed to another instance.
    /// 0 in hello and ping (not addressed to an instance yet).
    uint64_t instance;
    uint32_t ffn_flags;          ///< compute: FfnFlag bits of the layer's expert FFN; 0 in other kinds
    float glu_alpha;             ///< compute with glu_op SWIGLU_OAI: its alpha (ggml_swiglu_oai, op_params[2]); else 0
    float glu_limit;             ///< compute with glu_op SWIGLU_OAI: its clamp limit (op_params[3]); else 0
    uint32_t setup_us;           ///< result: of service_us, µs spent making this request's weights ready (packing an n_ff
                                 ///< slice, reading back originals), not computing; saturating. 0 in other kinds (a compute
                                 ///< request with another value is refused). (Was `reserved`, always 0: older peers send 0.)
};
static_assert(sizeof(MsgHeader) == 152, "MsgHeader is 152 bytes on the wire");
static_assert(offsetof(MsgHeader, request_id) == 8, "wire layout");
static_assert(offsetof(MsgHeader, reply) == 48, "wire layout");
static_assert(offsetof(MsgHeader, service_us) == 60, "wire layout");
static_assert(offsetof(MsgHeader, frame_bytes) == 64, "wire layout");
static_assert(offsetof(MsgHeader, frame_xxh3) == 96, "wire layout");
static_assert(offsetof(MsgHeader, instance) == 128, "wire layout");
static_assert(offsetof(MsgHeader, ffn_flags) == 136, "wire layout");
static_assert(offsetof(MsgHeader, glu_limit) == 144, "wire layout");

/// A result's compute time, ms: service_us minus setup_us (the worker's word, clamped to the round
/// trip by WorkerLink::recv). What a worker's speed is measured from.
inline double result_compute_ms(const MsgHeader & h) {
    return (double) (h.service_us - (h.setup_us < h.service_us ? h.setup_us : h.service_us)) / 1000.0;
}

/// A header with magic, version and kind set, everything else zero.
MsgHeader msg_header_make(MsgKind kind);

/// Sets frame i's dtype, byte count and XXH3-64 from its bytes; updates n_frames.
void msg_header_set_frame(MsgHeader & h, int i, WireType dtype, const void * data, size_t bytes);

/// Checks frame 0 as received (`bytes` = its size) before anything else is read: magic and version
/// (from the first 8 bytes, so a peer of another version is named as such), size, kind known. Errors carry the ErrorCode in `code`.
Status msg_header_parse(const void * data, size_t bytes, MsgHeader & out, ErrorCode & code);

/// Checks that `n` data frames were received with the sizes and hashes the header announces.
/// `frames[i]`/`sizes[i]` are the received frames. Errors: bad_frames or bad_hash in `code`.
Status msg_frames_verify(const MsgHeader & h, int n, const void * const * frames, const size_t * sizes, ErrorCode & code);

/// Decodes one received message given as its parts (part 0 the header, then the data frames;
/// a ROUTER's identity frame already removed): msg_header_parse, then msg_frames_verify. Pure: reads
/// only the given bytes, allocates nothing. `n_parts` may be 0. Errors as those two, with `code`.
Status msg_decode(int n_parts, const void * const * parts, const size_t * sizes, MsgHeader & h, ErrorCode & code);

const char * msg_kind_name(uint16_t kind);
const char * error_code_name(ErrorCode code);

} // namespace moezip
