// moezip-fixture: the GGUF header of a fixture (metadata keys and tensor infos), built with the
// engine's own gguf API (ggml/include/gguf.h) so the file is exactly what llama.cpp expects.
#pragma once

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

/// Builds the header. Keys written (qwen3moe.* as src/llama-arch.cpp names them):
/// general.architecture/name/quantization_version, qwen3moe.context_length, embedding_length,
/// block_count, expert_feed_forward_length, expert_count, expert_used_count,
/// attention.head_count, head_count_kv, key_length, value_length, layer_norm_rms_epsilon (1e-6),
/// rope.freq_base (1e6, Qwen3's), rope.dimension_count, tokenizer.ggml.* (model "llama", tokens,
/// scores, token_type, bos/eos/unk ids, add_bos_token), and moezip.fixture.{preset,seed,type}.
/// Preconditions: `plan` validated (fixture_tensor_plan_validate), otherwise ggml asserts.
fixture_meta fixture_meta_build(const fixture_config & cfg, const fixture_vocab & vocab,
                                const std::vector<fixture_tensor> & plan);

} // namespace moezip
