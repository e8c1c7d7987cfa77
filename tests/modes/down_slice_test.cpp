// Shard mode's packed down slices (coordinator/compute/down_slice.h): the executor gives the same
// bits with the packed copy as with the strided view of ffn_down_exps, and the copies are kept,
// replaced and refused as documented.
#include "coordinator/compute/down_slice.h"
#include "coordinator/compute/moe_exec.h"
#include "tests/support/test_support.h"
#include "tests/support/worker_harness.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace moezip;
using namespace moezip_test;

namespace {

// The small preset: n_embd 256, n_ff 256 (8 q8_0 blocks), 8 experts, top-2.
std::string small_q8() { return fixture_model({"--preset", "small", "--type", "q8_0"}); }

/// Weighted per-slot outputs of 6 rows over n_ff units [first, first + count), with or without a
/// packed copy of the down slice.
std::vector<float> slice_outputs(const ReferenceModel & m, const ggml_tensor * packed, int64_t first, int64_t count) {
    ExpertWeights w = m.weights(0);
    w.ff_first = first;
    w.ff_count = count;
    w.down_slice = packed;
    const int64_t n_embd = w.gate_exps->ne[0], k = 2, rows = 6;
    std::vector<float> hidden((size_t) (n_embd * rows)), weights((size_t) (k * rows), 0.5f), out((size_t) (n_embd * k * rows));
    std::vector<int32_t> ids((size_t) (k * rows));
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float & x : hidden) x = u(rng);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (int32_t) ((i * 5 + i / 2) % 8);
    MoeExecutor exec(reference_api(), 1);
    Status st = exec.compute_slots(w, SlotBatch{rows, k, hidden.data(), (size_t) n_embd * sizeof(float), ids.data(), weights.data()},
                                   out.data());
    EXPECT_TRUE(st) << st.to_string();
    return out;
}

} // namespace

TEST(DownSlice, ThePackedCopyGivesTheStridedViewsBits) {
    ReferenceModel m;
    ASSERT_TRUE(m.load(small_q8()));
    const ggml_tensor * down = m.weights(0).down_exps;
    DownSliceCopies copies(reference_api());
    int64_t previous = 0;  // the width of the slice before: kept beside the newest (kPerKey = 2)
    for (auto slice : {std::pair<int64_t, int64_t>{0, 128}, {64, 128}, {224, 32}}) {
        const ggml_tensor * packed = copies.get(7, down, slice.first, slice.second);
        ASSERT_NE(packed, nullptr);
        EXPECT_EQ(packed->ne[0], slice.second);
        EXPECT_EQ(copies.bytes(), (uint64_t) ((slice.second + previous) / 32 * 34) * 256 * 8) << "q8_0 copies of the last two slices";
        previous = slice.second;
        const std::vector<float> strided = slice_outputs(m, nullptr, slice.first, slice.second);
        const std::vector<float> packed_out = slice_outputs(m, packed, slice.first, slice.second);
        ASSERT_EQ(strided.size(), packed_out.size());
        EXPECT_EQ(memcmp(strided.data(), packed_out.data(), strided.size() * sizeof(float)), 0)
            << "slice " << slice.first << "+" << slice.second;
        // and it is a part of the whole: the slice's output differs from the whole n_ff's
        EXPECT_NE(memcmp(strided.data(), slice_outputs(m, nullptr, 0, 256).data(), strided.size() * sizeof(float)), 0);
    }
    // a slice read through a view of a copy that holds more (a host's decode slice inside its
    // prefill slice): the same bits again
    const ggml_tensor * wide = copies.get(9, down, 32, 192);
    ASSERT_NE(wide, nullptr);
    for (auto slice : {std::pair<int64_t, int64_t>{32, 64}, {96, 128}, {160, 32}}) {
        ASSERT_EQ(copies.get(9, down, slice.first, slice.second), wide);
        const std::vector<float> strided = slice_outputs(m, nullptr, slice.first, slice.second);
        const std::vector<float> viewed = slice_outputs(m, wide, slice.first, slice.second);
        EXPECT_EQ(memcmp(strided.data(), viewed.data(), strided.size() * sizeof(float)), 0) << "slice " << slice.first << "+" << slice.second;
    }
    EXPECT_EQ(copies.get(9, down, 0, 64) == wide, false) << "[0, 64) is not inside [32, 224)";
}

TEST(DownSlice, CopiesAreKeptPerKeyAndRefusedWhenNotWholeBlocks) {
    ReferenceModel m;
    ASSERT_TRUE(m.load(small_q8()));
    const ggml_tensor * down = m.weights(0).down_exps;
    DownSliceCopies copies(reference_api());
    const ggml_tensor * a = copies.get(1, down, 0, 128);
    EXPECT_EQ(copies.get(1, down, 0, 128), a) << "the same slice of the same key: the same copy";
    const ggml_tensor * b = copies.get(2, down, 128, 128);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(copies.bytes(), 2u * 4 * 34 * 256 * 8);
    // a slice inside a held one is read from that copy (a view): nothing is made
    EXPECT_EQ(copies.get(1, down, 0, 64), a) << "[0, 64) lies in the copy of [0, 128)";
    EXPECT_EQ(copies.get(1, down, 32, 64), a);
    EXPECT_EQ(copies.bytes(), 2u * 4 * 34 * 256 * 8);
    const ggml_tensor * c = copies.get(1, down, 64, 128);  // another slice under key 1: kept beside the first (decode and prefill splits)
    ASSERT_NE(c, nullptr);
    EXPECT_NE(c, a);
    EXPECT_EQ(copies.bytes(), (4u + 4 + 4) * 34 * 256 * 8);
    EXPECT_EQ(copies.get(1, down, 96, 32), c) << "two copies of one width hold it: the one used last";
    copies.get(1, down, 192, 32);  // a third: the least recently used of key 1 ([0, 128)) goes
    EXPECT_FALSE(copies.holds(1, down, 0, 128));
    EXPECT_FALSE(copies.holds(1, down, 0, 32));
    EXPECT_TRUE(copies.holds(1, down, 64, 128));
    EXPECT_TRUE(copies.holds(1, down, 100 / 32 * 32, 64)) << "inside [64, 192)";
    EXPECT_EQ(copies.bytes(), (4u + 4 + 1) * 34 * 256 * 8);
    copies.forget(2);
    copies.forget(1);
    EXPECT_EQ(copies.bytes(), 0u);
    copies.get(1, down, 0, 64);
    EXPECT_EQ(copies.bytes(), 2u * 34 * 256 * 8);
    EXPECT_EQ(copies.get(3, down, 16, 32), nullptr) << "not on a q8_0 block boundary";
    EXPECT_EQ(copies.get(3, down, 0, 288), nullptr) << "beyond n_ff";
    // a packed slice that does not match the weights' slice is an error, never a silent mix
    ExpertWeights w = m.weights(0);
    w.ff_first = 0;
    w.ff_count = 64;
    w.down_slice = b;  // 128 wide
    std::vector<float> hidden(256, 0.1f), weights(2, 0.5f), out(256 * 2);
    std::vector<int32_t> ids = {0, 1};
    MoeExecutor exec(reference_api(), 1);
    Status st = exec.compute_slots(w, SlotBatch{1, 2, hidden.data(), 256 * sizeof(float), ids.data(), weights.data()}, out.data());
    EXPECT_EQ(st.code(), Status::Code::invalid_argument) << st.to_string();
    EXPECT_NE(st.message().find("packed down slice does not hold the n_ff slice"), std::string::npos) << st.message();
    // the same width at another place of n_ff is refused too
    const ggml_tensor * first_half = copies.get(4, down, 0, 128);
    w.ff_first = 128;
    w.ff_count = 128;
    w.down_slice = first_half;
    st = exec.compute_slots(w, SlotBatch{1, 2, hidden.data(), 256 * sizeof(float), ids.data(), weights.data()}, out.data());
    EXPECT_EQ(st.code(), Status::Code::invalid_argument) << st.to_string();
}
