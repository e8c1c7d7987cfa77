#include "tools/moezip-fixture/fixture_config.h"

#include "tools/model-common/writable_types.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace moezip {

namespace {

struct preset_row {
    const char *    name;
    fixture_hparams hp; // n_embd, n_layer, n_expert, n_expert_used, n_ff_exp, n_head, n_head_kv, head_dim, n_ctx_train, n_vocab
};

// The a3b rows are the Qwen3-30B-A3B shape (its config.json: hidden 2048, 128 experts, top-8,
// moe_intermediate 768, 32 query / 4 KV heads of 128) cut to 4 or 8 of its 48 layers.
const preset_row k_presets[] = {
    {"tiny",   {  64, 2,   8, 2,  64,  4, 2,  16, 4096, 0, {}}},
    {"small",  { 256, 2,   8, 2, 256,  4, 2,  64, 4096, 0, {}}},
    {"a3b-L4", {2048, 4, 128, 8, 768, 32, 4, 128, 4096, 0, {}}},
    {"a3b-L8", {2048, 8, 128, 8, 768, 32, 4, 128, 4096, 0, {}}},
};

std::string join(const std::vector<std::string> & v) {
    std::string out;
    for (const auto & s : v) out += (out.empty() ? "" : ", ") + s;
    return out;
}

Status check_range(const char * flag, int64_t v, int64_t lo, int64_t hi) {
    if (v >= lo && v <= hi) return Status::ok();
    return Status::invalid_argument(std::string(flag) + " must be in " + std::to_string(lo) + ".." +
                                    std::to_string(hi) + ", got " + std::to_string(v));
}

} // namespace

std::vector<std::string> fixture_preset_names() {
    std::vector<std::string> names;
    for (const auto & p : k_presets) names.push_back(p.name);
    return names;
}

Status fixture_preset_lookup(const std::string & name, fixture_hparams & hp) {
    for (const auto & p : k_presets) {
        if (name == p.name) {
            hp = p.hp;
            return Status::ok();
        }
    }
    return Status::invalid_argument("unknown --preset '" + name + "' (known: " + join(fixture_preset_names()) + ")");
}

std::vector<std::string> fixture_type_names() { return writable_type_names(); }

Status fixture_type_lookup(const std::string & name, ggml_type & type) {
    if (writable_type_lookup(name, type)) return Status::ok();
    return Status::invalid_argument("unknown --type '" + name + "' (supported: " + join(fixture_type_names()) + ")");
}

Status fixture_expert_used_parse(const std::string & text, fixture_hparams & hp) {
    std::vector<int64_t> counts;
    size_t pos = 0;
    while (pos <= text.size()) {
        const size_t comma = std::min(text.find(',', pos), text.size());
        const std::string item = text.substr(pos, comma - pos);
        char * end = nullptr;
        const long long v = item.empty() ? 0 : strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end != 0 || !isdigit((unsigned char) item[0]))
            return Status::invalid_argument("--n-expert-used: expected a count or a comma-separated list of counts "
                                            "(one per layer), got '" + text + "'");
        counts.push_back((int64_t) v);
        pos = comma + 1;
    }
    hp.n_expert_used = counts[0];
    hp.n_expert_used_layers.clear();
    if (counts.size() > 1) hp.n_expert_used_layers = counts;
    return Status::ok();
}

Status fixture_hparams_validate(const fixture_hparams & hp, int64_t n_vocab_min) {
    // Upper bounds: the engine's own limits where it has one (src/llama-hparams.h), otherwise
    // generous sizes that keep every tensor's element count far from int64 overflow.
    const struct { const char * flag; int64_t v, lo, hi; } checks[] = {
        {"--n-embd",        hp.n_embd,        1, 65536},
        {"--n-layer",       hp.n_layer,       1, 512},
        {"--n-expert",      hp.n_expert,      1, 1024},
        {"--n-expert-used", hp.n_expert_used, 1, hp.n_expert},
        {"--n-ff-exp",      hp.n_ff_exp,      1, 65536},
        {"--n-head",        hp.n_head,        1, 1024},
        {"--n-head-kv",     hp.n_head_kv,     1, hp.n_head},
        {"--head-dim",      hp.head_dim,      2, 1024},
        {"--n-ctx-train",   hp.n_ctx_train,   1, 1 << 24},
    };
    for (const auto & c : checks) {
        Status st = check_range(c.flag, c.v, c.lo, c.hi);
        if (!st) return st;
    }
    if (hp.n_head % hp.n_head_kv != 0) {
        return Status::invalid_argument("--n-head (" + std::to_string(hp.n_head) + ") must be a multiple of --n-head-kv (" +
                                        std::to_string(hp.n_head_kv) + ")");
    }
    if (hp.head_dim % 2 != 0) {
        return Status::invalid_argument("--head-dim must be even (RoPE rotates pairs), got " + std::to_string(hp.head_dim));
    }
    if (hp.n_vocab != 0) return check_range("--vocab-size", hp.n_vocab, n_vocab_min, 1 << 20);
    return Status::ok();
}

} // namespace moezip
