// The tensor types moezip's model tools (moezip-fixture, moezip-upcycle) can write, and their
// names on the command line. One list for both tools, so that a type one of them learns to write
// is known to the other by the same spelling.
#pragma once

#include "ggml.h"

#include <string>
#include <vector>

namespace moezip {

/// f32, f16, bf16 and the types ggml_quantize_chunk (ggml/src/ggml.c) produces without an
/// importance matrix (q8_0, q4_0, q4_1, q5_0, q5_1, q2_K ... q6_K), in that order.
const std::vector<ggml_type> & writable_types();

/// ggml_type_name of each writable type, in the order of writable_types().
std::vector<std::string> writable_type_names();

/// True when `type` is one of writable_types().
bool is_writable_type(ggml_type type);

/// The writable type whose ggml name is `name`, compared case-insensitively ("Q4_K" = "q4_K").
/// False, and `out` untouched, when no writable type has that name.
bool writable_type_lookup(const std::string & name, ggml_type & out);

} // namespace moezip
