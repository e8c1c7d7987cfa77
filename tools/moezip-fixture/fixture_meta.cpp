#include "tools/moezip-fixture/fixture_meta.h"

#include <string>

namespace moezip {

namespace {

const char * const k_arch = "qwen3moe";

std::string arch_key(const char * suffix) { return std::string(k_arch) + "." + suffix; }

void set_u32(gguf_context * g, const char * suffix, int64_t v) {
    gguf_set_val_u32(g, arch_key(suffix).c_str(), (uint32_t) v);
}

void set_model_keys(gguf_context * g, const fixture_config & cfg) {
    const fixture_hparams & hp = cfg.hp;
    gguf_set_val_str(g, "general.architecture", k_arch);
    gguf_set_val_str(g, "general.name", ("moezip fixture " + cfg.preset).c_str());
    gguf_set_val_u32(g, "general.quantization_version", GGML_QNT_VERSION);
    set_u32(g, "context_length", hp.n_ctx_train);
    set_u32(g, "embedding_length", hp.n_embd);
    set_u32(g, "block_count", hp.n_layer);
    set_u32(g, "expert_feed_forward_length", hp.n_ff_exp);
    set_u32(g, "expert_count", hp.n_expert);
    set_u32(g, "expert_used_count", hp.n_expert_used);
    set_u32(g, "attention.head_count", hp.n_head);
    set_u32(g, "attention.head_count_kv", hp.n_head_kv);
    set_u32(g, "attention.key_length", hp.head_dim);
    set_u32(g, "attention.value_length", hp.head_dim);
    set_u32(g, "rope.dimension_count", hp.head_dim);
    gguf_set_val_f32(g, arch_key("attention.layer_norm_rms_epsilon").c_str(), 1e-6f);
    gguf_set_val_f32(g, arch_key("rope.freq_base").c_str(), 1000000.0f);
    gguf_set_val_str(g, "moezip.fixture.preset", cfg.preset.c_str());
    gguf_set_val_u64(g, "moezip.fixture.seed", cfg.seed);
    gguf_set_val_str(g, "moezip.fixture.type", ggml_type_name(cfg.weight_type));
}

void set_vocab_keys(gguf_context * g, const fixture_vocab & vocab) {
    std::vector<const char *> texts;
    texts.reserve(vocab.tokens.size());
    for (const auto & t : vocab.tokens) texts.push_back(t.c_str());
    gguf_set_val_str(g, "tokenizer.ggml.model", "llama");
    gguf_set_arr_str(g, "tokenizer.ggml.tokens", texts.data(), texts.size());
    gguf_set_arr_data(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, vocab.scores.data(), vocab.scores.size());
    gguf_set_arr_data(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, vocab.types.data(), vocab.types.size());
    gguf_set_val_u32(g, "tokenizer.ggml.bos_token_id", fixture_bos_id);
    gguf_set_val_u32(g, "tokenizer.ggml.eos_token_id", fixture_eos_id);
    gguf_set_val_u32(g, "tokenizer.ggml.unknown_token_id", fixture_unk_id);
    gguf_set_val_bool(g, "tokenizer.ggml.add_bos_token", true);
    gguf_set_val_bool(g, "tokenizer.ggml.add_eos_token", false);
}

} // namespace

fixture_meta fixture_meta_build(const fixture_config & cfg, const fixture_vocab & vocab,
                                const std::vector<fixture_tensor> & plan) {
    fixture_meta meta;
    ggml_init_params params = {};
    params.mem_size = (plan.size() + 1) * ggml_tensor_overhead();
    params.no_alloc = true; // descriptions only: the data is streamed by fixture_write
    meta.tensors.reset(ggml_init(params));
    meta.gguf.reset(gguf_init_empty());
    set_model_keys(meta.gguf.get(), cfg);
    set_vocab_keys(meta.gguf.get(), vocab);
    for (const auto & t : plan) {
        ggml_tensor * tensor = ggml_new_tensor(meta.tensors.get(), t.type, t.n_dims, t.ne);
        ggml_set_name(tensor, t.name.c_str());
        gguf_add_tensor(meta.gguf.get(), tensor);
    }
    return meta;
}

} // namespace moezip
