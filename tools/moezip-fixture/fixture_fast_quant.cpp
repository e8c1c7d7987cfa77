#include "tools/moezip-fixture/fixture_fast_quant.h"

#include "tools/moezip-fixture/fixture_rng.h"

#include <cmath>
#include <cstring>

namespace moezip {

namespace {

constexpr int k_qk_k = 256;          // QK_K: values per q4_K super-block
constexpr int k_q4_K_bytes = 144;    // sizeof(block_q4_K): d, dmin (fp16), 12 bytes of scales, 128 of quants
constexpr int k_qk8_0 = 32;          // QK8_0
constexpr int k_q8_0_bytes = 34;     // sizeof(block_q8_0): d (fp16), 32 int8 quants
constexpr int k_scale_base = 56;     // 6-bit sub-block scales and mins are drawn from 56..63

/// Packs 8 sub-block scales and mins (6 bits each) the way get_scale_min_k4 unpacks them:
/// sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scale) and 4-7 (min); sub-blocks 4-7 split into
/// a low nibble in bytes 8-11 and their top 2 bits in the top bits of bytes 0-7.
void pack_scales_mins(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12]) {
    for (int j = 0; j < 4; ++j) {
        out[j]     = (uint8_t) (sc[j] | ((sc[j + 4] >> 4) << 6));
        out[j + 4] = (uint8_t) (m[j] | ((m[j + 4] >> 4) << 6));
        out[j + 8] = (uint8_t) ((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

} // namespace

bool fixture_fast_quant_supports(const fixture_tensor & t) {
    return (t.type == GGML_TYPE_Q4_K || t.type == GGML_TYPE_Q8_0) && t.center == 0.0f;
}

fixture_fast_quant::fixture_fast_quant(const fixture_tensor & t, uint64_t seed) : t_(t) {
    uint64_t h = 0xCBF29CE484222325ull; // FNV-1a 64 of the name, as fixture_rng mixes it
    for (unsigned char c : t.name) h = (h ^ c) * 0x100000001B3ull;
    state_ = seed ^ 0x6661737451756E74ull; // "fastQunt": a stream apart from the f32 path's
    splitmix64_next(state_);
    state_ ^= h;
    const float a = std::sqrt(3.0f) * t.std; // values span about [-a, a], as uniform(-a, a) of std t.std
    // q4_K: d*sc*q reaches 2a*sc/63 at q = 15; dmin*m about a, so the mean is 0
    d_q4 = ggml_fp32_to_fp16(2.0f * a / (15.0f * 63.0f));
    dmin_q4 = ggml_fp32_to_fp16(a / 63.0f);
    d_q8 = ggml_fp32_to_fp16(a / 127.0f);
}

void fixture_fast_quant::q4_K_block(uint8_t * block) {
    memcpy(block, &d_q4, 2);
    memcpy(block + 2, &dmin_q4, 2);
    uint64_t bits = splitmix64_next(state_);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
        sc[j] = (uint8_t) (k_scale_base + (bits & 7)); bits >>= 3;
        m[j]  = (uint8_t) (k_scale_base + (bits & 7)); bits >>= 3;
    }
    pack_scales_mins(sc, m, block + 4);
    for (int k = 0; k < k_qk_k / 2; k += 8) {   // every nibble of 0..15 is a valid quant
        const uint64_t q = splitmix64_next(state_);
        memcpy(block + 16 + k, &q, 8);
    }
}

void fixture_fast_quant::q8_0_block(uint8_t * block) {
    memcpy(block, &d_q8, 2);
    for (int k = 0; k < k_qk8_0; k += 4) {
        uint64_t q = splitmix64_next(state_);
        for (int b = 0; b < 4; ++b, q >>= 16)
            block[2 + k + b] = (uint8_t) (int8_t) ((int) ((q & 0xFFFF) % 255) - 127); // -127..127, as the quantizer's
    }
}

void fixture_fast_quant::next_rows(int64_t n_rows, std::vector<uint8_t> & out) {
    const bool q4 = t_.type == GGML_TYPE_Q4_K;
    const int64_t block_values = q4 ? k_qk_k : k_qk8_0;
    const int64_t block_bytes = q4 ? k_q4_K_bytes : k_q8_0_bytes;
    const int64_t n_blocks = n_rows * (t_.ne[0] / block_values);
    const size_t start = out.size();
    out.resize(start + (size_t) (n_blocks * block_bytes));
    uint8_t * p = out.data() + start;
    for (int64_t b = 0; b < n_blocks; ++b, p += block_bytes) {
        if (q4) q4_K_block(p);
        else q8_0_block(p);
    }
}

} // namespace moezip
