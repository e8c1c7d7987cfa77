// moezip-fixture: the GGUF header of a fixture file (metadata keys and tensor infos), built with the
// engine's own gguf API (ggml/include/gguf.h) so the file is exactly what llama.cpp expects.
#pragma once

#include "tools/moezip-fixture/fixture_arch.h"
#include "tools/moezip-fixture/fixture_config.h"
#include "tools/moezip-fixture/fixture_tensors.h"
#include "tools/moezip-fixture/fixture_vocab.h"

#include "ggml.h"
#include "gguf.h"

#include <memory>

namespace moezip {

struct fixture_gguf_free { void operator()(gguf_context * c) const { gguf_free(c); } };
struct fixture_ggml_free { void operator()(ggml_context * c) const { ggml_free(c); } };

/// A gguf context holding all metadata and tensor infos (no data), and the no_alloc ggml context
/// that owns the tensor descriptions it was built from.
struct fixture_meta {
    std::unique_ptr<ggml_context, fixture_ggml_free> tensors;
    std::unique_ptr<gguf_context, fixture_gguf_free> gguf;
};

/// Which file of a split model a header describes (llama.cpp's split convention: the first file
/// holds every metadata key, each file split.no, split.count and split.tensors.count, the keys
/// src/llama-model-loader.cpp reads).
struct fixture_part {
    int64_t no = 0;        ///< split.no, 0-based
    int64_t count = 1;     ///< split.count; 1 = an ordinary single file (no split.* keys)
    int64_t first = 0;     ///< index in the plan of this file's first tensor
    int64_t n = 0;         ///< tensors in this file
    int64_t n_total = 0;   ///< split.tensors.count: tensors of the whole model
};

/// Builds one file's header. The first (or only) file gets every key:
/// general.architecture/name/quantization_version, <arch>.context_length, embedding_length,
/// block_count, the expert width key (expert_feed_forward_length or feed_forward_length),
/// feed_forward_length of the dense layers when the arch has some, expert_count,
/// expert_used_count (an array with per-layer counts), attention.head_count, head_count_kv,
/// key_length, value_length, rope.dimension_count, layer_norm_rms_epsilon (1e-6),
/// rope.freq_base (the arch's), the arch's own keys (fixture_arch.h), tokenizer.ggml.* (model
/// "llama", tokens, scores, token_type, bos/eos/unk ids, add_bos_token),
/// moezip.fixture.{preset,seed,type}, then split.* when split. Other files get only split.*.
/// Tensor infos are plan[first, first + n). Preconditions: `plan` validated
/// (fixture_tensor_plan_validate), otherwise ggml asserts.
fixture_meta fixture_meta_build(const fixture_config & cfg, const fixture_arch & arch, const fixture_dims & d,
                                const fixture_vocab & vocab, const std::vector<fixture_tensor> & plan,
                                const fixture_part & part);

} // namespace moezip
