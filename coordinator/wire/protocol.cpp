#include "coordinator/wire/protocol.h"

#include <cstdio>
#include <cstring>
#include <xxhash.h>

namespace moezip {

MsgHeader msg_header_make(MsgKind kind) {
    MsgHeader h;
    memset(&h, 0, sizeof h);
    h.magic = kProtocolMagic;
    h.version = kProtocolVersion;
    h.kind = static_cast<uint16_t>(kind);
    for (uint8_t & d : h.dtype) d = static_cast<uint8_t>(WireType::none);
    return h;
}

void msg_header_set_frame(MsgHeader & h, int i, WireType dtype, const void * data, size_t bytes) {
    h.dtype[i] = static_cast<uint8_t>(dtype);
    h.frame_bytes[i] = bytes;
    h.frame_xxh3[i] = XXH3_64bits(data, bytes);
    if (h.n_frames < i + 1) h.n_frames = (uint16_t) (i + 1);
}

Status msg_header_parse(const void * data, size_t bytes, MsgHeader & out, ErrorCode & code) {
    // magic (4 bytes) and version (2) sit at the same offsets in every version's header
    uint32_t magic = 0;
    uint16_t version = 0;
    // what is readable is kept, so that an error reply can echo request_id (offset 8 in every version)
    memset(&out, 0, sizeof out);
    if (bytes == sizeof(MsgHeader)) memcpy(&out, data, sizeof out);  // the host is little-endian x86-64, as the wire
    else if (bytes >= 16) memcpy(&out.request_id, static_cast<const uint8_t *>(data) + 8, sizeof out.request_id);
    if (bytes >= 8) {
        memcpy(&magic, data, sizeof magic);
        memcpy(&version, static_cast<const uint8_t *>(data) + 4, sizeof version);
    }
    if (bytes >= 8 && magic != kProtocolMagic) {
        code = ErrorCode::bad_magic;
        return Status::corruption("bad magic (not a moezip message)");
    }
    if (bytes >= 8 && version != kProtocolVersion) {
        code = ErrorCode::bad_version;
        return Status::corruption("protocol version " + std::to_string(version) + ", this side speaks " +
                                  std::to_string(kProtocolVersion));
    }
    if (bytes != sizeof(MsgHeader)) {
        code = ErrorCode::bad_frames;
        return Status::corruption("header frame is " + std::to_string(bytes) + " bytes, expected " + std::to_string(sizeof(MsgHeader)));
    }
    if (out.kind < static_cast<uint16_t>(MsgKind::hello) || out.kind > static_cast<uint16_t>(MsgKind::pong)) {
        code = ErrorCode::bad_kind;
        return Status::corruption("unknown message kind " + std::to_string(out.kind));
    }
    if (out.n_frames > kMaxDataFrames) {
        code = ErrorCode::bad_frames;
        return Status::corruption("header announces " + std::to_string(out.n_frames) + " data frames (max 4)");
    }
    code = ErrorCode::ok;
    return Status::ok();
}

Status msg_frames_verify(const MsgHeader & h, int n, const void * const * frames, const size_t * sizes, ErrorCode & code) {
    if (n != h.n_frames) {
        code = ErrorCode::bad_frames;
        return Status::corruption("received " + std::to_string(n) + " data frames, header announces " + std::to_string(h.n_frames));
    }
    for (int i = 0; i < n; ++i) {
        if (sizes[i] != h.frame_bytes[i]) {
            code = ErrorCode::bad_frames;
            return Status::corruption("frame " + std::to_string(i + 1) + " is " + std::to_string(sizes[i]) +
                                      " bytes, header announces " + std::to_string(h.frame_bytes[i]));
        }
        if (XXH3_64bits(frames[i], sizes[i]) != h.frame_xxh3[i]) {
            code = ErrorCode::bad_hash;
            return Status::corruption("frame " + std::to_string(i + 1) + " hash mismatch (corrupted in transit)");
        }
    }
    code = ErrorCode::ok;
    return Status::ok();
}

Status msg_decode(int n_parts, const void * const * parts, const size_t * sizes, MsgHeader & h, ErrorCode & code) {
    if (n_parts < 1) {
        code = ErrorCode::bad_frames;
        return Status::corruption("empty message");
    }
    Status st = msg_header_parse(parts[0], sizes[0], h, code);
    if (!st) return st;
    return msg_frames_verify(h, n_parts - 1, parts + 1, sizes + 1, code);
}

const char * msg_kind_name(uint16_t kind) {
    switch (static_cast<MsgKind>(kind)) {
        case MsgKind::hello: return "hello";
        case MsgKind::hello_ok: return "hello_ok";
        case MsgKind::compute: return "compute";
        case MsgKind::result: return "result";
        case MsgKind::error: return "error";
        case MsgKind::ping: return "ping";
        case MsgKind::pong: return "pong";
    }
    return "unknown";
}

const char * error_code_name(ErrorCode code) {
    switch (code) {
        case ErrorCode::ok: return "ok";
        case ErrorCode::bad_magic: return "bad_magic";
        case ErrorCode::bad_version: return "bad_version";
        case ErrorCode::bad_kind: return "bad_kind";
        case ErrorCode::bad_frames: return "bad_frames";
        case ErrorCode::bad_hash: return "bad_hash";
        case ErrorCode::bad_shape: return "bad_shape";
        case ErrorCode::bad_expert: return "bad_expert";
        case ErrorCode::bad_layer: return "bad_layer";
        case ErrorCode::compute_failed: return "compute_failed";
        case ErrorCode::bad_instance: return "bad_instance";
        case ErrorCode::over_budget: return "over_budget";
        case ErrorCode::bad_plan: return "bad_plan";
        case ErrorCode::out_of_memory: return "out_of_memory";
        case ErrorCode::stopping: return "stopping";
        case ErrorCode::model_changed: return "model_changed";
    }
    return "unknown";
}

} // namespace moezip
