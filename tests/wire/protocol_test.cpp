// The wire header: layout, parsing of bad input, frame verification.
#include "coordinator/wire/protocol.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

using namespace moezip;

TEST(Protocol, HeaderRoundTripsAndCarriesFrameHashes) {
    std::vector<float> data = {1.f, 2.f, 3.f};
    MsgHeader h = msg_header_make(MsgKind::compute);
    h.request_id = 42;
    msg_header_set_frame(h, 0, WireType::f32, data.data(), data.size() * sizeof(float));
    unsigned char wire[sizeof(MsgHeader)];
    memcpy(wire, &h, sizeof h);
    EXPECT_EQ(memcmp(wire, "MEZP", 4), 0) << "magic reads MEZP on the wire";
    MsgHeader back;
    ErrorCode code;
    ASSERT_TRUE(msg_header_parse(wire, sizeof wire, back, code));
    EXPECT_EQ(back.request_id, 42u);
    EXPECT_EQ(back.n_frames, 1);
    const void * frames[1] = {data.data()};
    size_t sizes[1] = {data.size() * sizeof(float)};
    EXPECT_TRUE(msg_frames_verify(back, 1, frames, sizes, code));
}

TEST(Protocol, RejectsWrongMagicVersionSizeAndKind) {
    MsgHeader h = msg_header_make(MsgKind::ping);
    MsgHeader out;
    ErrorCode code;
    EXPECT_FALSE(msg_header_parse(&h, sizeof h - 1, out, code));
    EXPECT_EQ(code, ErrorCode::bad_frames);
    MsgHeader bad = h;
    bad.magic ^= 1;
    EXPECT_FALSE(msg_header_parse(&bad, sizeof bad, out, code));
    EXPECT_EQ(code, ErrorCode::bad_magic);
    bad = h;
    bad.version = 9;
    Status st = msg_header_parse(&bad, sizeof bad, out, code);
    EXPECT_EQ(code, ErrorCode::bad_version);
    EXPECT_NE(st.message().find("protocol version 9"), std::string::npos);
    bad = h;
    bad.kind = 99;
    EXPECT_FALSE(msg_header_parse(&bad, sizeof bad, out, code));
    EXPECT_EQ(code, ErrorCode::bad_kind);
    bad = h;
    bad.n_frames = 5;
    EXPECT_FALSE(msg_header_parse(&bad, sizeof bad, out, code));
    EXPECT_EQ(code, ErrorCode::bad_frames);
}

TEST(Protocol, DetectsAFlippedByteAndAMissingFrame) {
    std::vector<int32_t> ids = {1, 2, 3, 4};
    MsgHeader h = msg_header_make(MsgKind::compute);
    msg_header_set_frame(h, 0, WireType::i32, ids.data(), ids.size() * sizeof(int32_t));
    ids[2] ^= 0x100;
    const void * frames[1] = {ids.data()};
    size_t sizes[1] = {ids.size() * sizeof(int32_t)};
    ErrorCode code;
    EXPECT_FALSE(msg_frames_verify(h, 1, frames, sizes, code));
    EXPECT_EQ(code, ErrorCode::bad_hash);
    EXPECT_FALSE(msg_frames_verify(h, 0, frames, sizes, code));
    EXPECT_EQ(code, ErrorCode::bad_frames);
    sizes[0] -= 4;
    EXPECT_FALSE(msg_frames_verify(h, 1, frames, sizes, code));
    EXPECT_EQ(code, ErrorCode::bad_frames);
}
