// moezip-upcycle: the types of the tensors it writes (--type) and the conversion of f32 values to
// them with the engine's ggml_quantize_chunk (ggml/src/ggml.c, reference quantizers, no
// importance matrix).
//
// `--type same` (the default) gives each expert tensor the type of the dense tensor it is made
// from: ffn_gate_exps that of ffn_gate, ffn_up_exps of ffn_up, ffn_down_exps of ffn_down. A
// quantized dense model then keeps its kernels: the MoE layer computes each unit with the same
// MUL_MAT_ID kernel and the same quantized activations as the dense MUL_MAT did.
#pragma once

#include "provider_map/status.h"

#include "ggml.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moezip_upcycle {

/// What --type asked for.
struct type_choice {
    bool same = true;                 ///< each tensor keeps its dense source's type
    ggml_type type = GGML_TYPE_F32;   ///< the type when !same
};

/// Names --type accepts: "same", then f32, f16, bf16 and the types ggml_quantize_chunk writes
/// without an importance matrix (q8_0, q4_0, q4_1, q5_0, q5_1, q2_K ... q6_K).
std::vector<std::string> type_choice_names();

/// Parses a --type name (ggml spelling, case-insensitive, or "same"). Errors: invalid_argument
/// naming the value and the accepted names.
moezip::Status type_choice_parse(const std::string & name, type_choice & out);

/// "same" or the type's name.
std::string type_choice_name(const type_choice & c);

/// The type of an output tensor made from a dense tensor of type `src`.
ggml_type type_choice_resolve(const type_choice & c, ggml_type src);

/// Checks that `type` can be written here (f32, or a type with a reference quantizer that needs no
/// importance matrix) and that its block divides the row length `ne0` of tensor `name`. Errors:
/// invalid_argument naming the tensor, ne0, the type and `hint` (what to choose instead).
moezip::Status type_check_writable(const std::string & name, ggml_type type, int64_t ne0, const std::string & hint);

/// llama-quantize's rule for a dense model's tensor (src/llama-quant.cpp
/// tensor_allows_quantization, tensor_type_fallback): tensors of 2 or more dimensions whose name
/// ends in "weight", except norms ("_norm.weight") and routers ("ffn_gate_inp.weight"), get
/// `target`; when its block does not divide ne0, f16 instead (the fallback of a 32-block type).
/// Every other tensor keeps `src`.
ggml_type type_for_dense_tensor(const std::string & name, int n_dims, int64_t ne0, ggml_type src, ggml_type target);

/// Converts f32 values (rows of `ne0`) to `type`'s bytes. Precondition: type_check_writable passed.
void type_convert(const std::vector<float> & src, ggml_type type, int64_t ne0, std::vector<uint8_t> & out);

} // namespace moezip_upcycle
