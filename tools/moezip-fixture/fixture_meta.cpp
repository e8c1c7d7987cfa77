#include "tools/moezip-fixture/fixture_meta.h"

#include <string>

namespace moezip {

namespace {

/// Writes `<arch>.<suffix>` keys.
struct arch_keys {
    gguf_context * g;
    std::string arch;

    std::string key(const char * suffix) const { return arch + "." + suffix; }
    void u32(const char * suffix, int64_t v) const { gguf_set_val_u32(g, key(suffix).c_str(), (uint32_t) v); }
    void f32(const char * suffix, float v) const { gguf_set_val_f32(g, key(suffix).c_str(), v); }
};

void set_expert_used(const arch_keys & k, const fixture_hparams & hp) {
    if (hp.n_expert_used_layers.empty()) {
        k.u32("expert_used_count", hp.n_expert_used);
        return;
    }
    std::vector<uint32_t> v(hp.n_expert_used_layers.begin(), hp.n_expert_used_layers.end());
    gguf_set_arr_data(k.g, k.key("expert_used_count").c_str(), GGUF_TYPE_UINT32, v.data(), v.size());
}

void set_model_keys(gguf_context * g, const fixture_config & cfg, const fixture_arch & arch, const fixture_dims & d) {
    const fixture_hparams & hp = cfg.hp;
    const arch_keys k{g, arch.name};
    gguf_set_val_str(g, "general.architecture", arch.name);
    gguf_set_val_str(g, "general.name", ("moezip fixture " + cfg.preset).c_str());
    gguf_set_val_u32(g, "general.quantization_version", GGML_QNT_VERSION);
    k.u32("context_length", hp.n_ctx_train);
    k.u32("embedding_length", hp.n_embd);
    k.u32("block_count", hp.n_layer);
    if (d.n_ff > 0) k.u32("feed_forward_length", d.n_ff);  // the dense layers' width
    k.u32(arch.ff_exp_key, hp.n_ff_exp);
    k.u32("expert_count", hp.n_expert);
    set_expert_used(k, hp);
    k.u32("attention.head_count", hp.n_head);
    k.u32("attention.head_count_kv", d.n_head_kv);
    k.u32("attention.key_length", d.n_embd_head_k);
    k.u32("attention.value_length", d.n_embd_head_v);
    k.u32("rope.dimension_count", d.n_rot);
    k.f32("attention.layer_norm_rms_epsilon", 1e-6f);
    k.f32("rope.freq_base", arch.rope_freq_base);
    if (arch.keys) arch.keys(g, arch.name, d);
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

/// The keys gguf-split writes (tools/gguf-split/gguf-split.cpp): u16 split.no and split.count,
/// i32 split.tensors.count.
void set_split_keys(gguf_context * g, const fixture_part & part) {
    gguf_set_val_u16(g, "split.no", (uint16_t) part.no);
    gguf_set_val_u16(g, "split.count", (uint16_t) part.count);
    gguf_set_val_i32(g, "split.tensors.count", (int32_t) part.n_total);
}

} // namespace

fixture_meta fixture_meta_build(const fixture_config & cfg, const fixture_arch & arch, const fixture_dims & d,
                                const fixture_vocab & vocab, const std::vector<fixture_tensor> & plan,
                                const fixture_part & part) {
    fixture_meta meta;
    ggml_init_params params = {};
    params.mem_size = (size_t) (part.n + 1) * ggml_tensor_overhead();
    params.no_alloc = true; // descriptions only: the data is streamed by fixture_write
    meta.tensors.reset(ggml_init(params));
    meta.gguf.reset(gguf_init_empty());
    if (part.no == 0) {
        set_model_keys(meta.gguf.get(), cfg, arch, d);
        set_vocab_keys(meta.gguf.get(), vocab);
    }
    if (part.count > 1) set_split_keys(meta.gguf.get(), part);
    for (int64_t i = part.first; i < part.first + part.n; ++i) {
        const fixture_tensor & t = plan[(size_t) i];
        ggml_tensor * tensor = ggml_new_tensor(meta.tensors.get(), t.type, t.n_dims, t.ne);
        ggml_set_name(tensor, t.name.c_str());
        gguf_add_tensor(meta.gguf.get(), tensor);
    }
    return meta;
}

} // namespace moezip
