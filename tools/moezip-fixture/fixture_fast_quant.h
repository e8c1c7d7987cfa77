// moezip-fixture: quantized weights generated directly as blocks, without the reference quantizer.
//
// ggml_quantize_chunk's K-quant search costs about 50 s of CPU per Qwen3-30B-A3B layer in q4_K;
// drawing the quants and scales themselves costs well under a second. The values are random but
// every block is valid and its dequantized values have the spread the f32 path would give (a
// uniform draw of standard deviation t.std around 0): q4_K's x = d*sc*q - dmin*m with q in 0..15
// and sc, m near 63 spans about [-a, a] with a = sqrt(3)*std; q8_0's x = d*q with q in -127..127
// and d = a/127. Block layouts: ggml/src/ggml-common.h (block_q4_K, block_q8_0); the 6-bit scale
// packing is the one get_scale_min_k4 in ggml/src/ggml-quants.c reads.
#pragma once

#include "tools/moezip-fixture/fixture_tensors.h"

#include "ggml.h"

#include <cstdint>
#include <vector>

namespace moezip {

/// True when fixture_fast_quant_rows can write tensor `t`: its type is q4_K or q8_0 and its values
/// are centred on 0 (norms, centred on 1, stay f32 anyway).
bool fixture_fast_quant_supports(const fixture_tensor & t);

/// A deterministic stream of quantized rows of one tensor: the same seed and tensor name give the
/// same bytes whatever the chunking of the calls.
class fixture_fast_quant {
public:
    fixture_fast_quant(const fixture_tensor & t, uint64_t seed);

    /// Appends the next `n_rows` rows (ggml_row_size(t.type, t.ne[0]) bytes each) to `out`.
    void next_rows(int64_t n_rows, std::vector<uint8_t> & out);

private:
    void q4_K_block(uint8_t * block);
    void q8_0_block(uint8_t * block);

    const fixture_tensor & t_;
    uint64_t state_;
    ggml_fp16_t d_q4 = 0, dmin_q4 = 0, d_q8 = 0;
};

} // namespace moezip
