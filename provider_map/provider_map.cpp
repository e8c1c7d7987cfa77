#include "provider_map/provider_map.h"

#include "provider_map/expert_digest.h"

#include <xxhash.h>

#include <cstring>

namespace moezip {

// The canary of t's bytes: its samples read with `read_bytes` when it can (so pages of the mapping
// that were dropped, a worker's experts, are not faulted back in here, nor their cached neighbours
// by the kernel's fault-around), else from the memory.
static uint64_t weight_canary(const ggml_tensor * t, size_t bytes, const ByteReaderFn & read_bytes) {
    const size_t take = bytes < kExpertDigestSample ? bytes : kExpertDigestSample;
    const uint8_t * p = static_cast<const uint8_t *>(t->data);
    uint8_t head[kExpertDigestSample], tail[kExpertDigestSample];
    if (!read_bytes || !read_bytes(p, head, take)) memcpy(head, p, take);
    if (!read_bytes || !read_bytes(p + bytes - take, tail, take)) memcpy(tail, p + bytes - take, take);
    return expert_slice_digest_of_samples(bytes, head, tail);
}

static WeightInfo weight_info(const ggml_tensor * t, const char * (*type_name)(ggml_type), const BufferTypeNameFn & buft_name,
                              const ByteReaderFn & read_bytes) {
    WeightInfo w;
    if (t == nullptr) return w;
    w.name = t->name;
    w.type = type_name ? type_name(t->type) : std::to_string((int) t->type);
    w.buffer_type = buft_name ? buft_name(t) : "";
    for (int i = 0; i < 3; ++i) w.ne[i] = t->ne[i];
    w.data = t->data;
    // ggml_nbytes for the contiguous GGUF layout of expert tensors (this file binds no ggml function)
    w.bytes = (uint64_t) t->nb[3] * (uint64_t) t->ne[3];
    w.canary = t->data != nullptr ? weight_canary(t, (size_t) w.bytes, read_bytes) : 0;
    w.repacked = t->extra != nullptr || w.buffer_type.find("REPACK") != std::string::npos;
    return w;
}

static void hash_weight(XXH3_state_t * st, const WeightInfo & w) {
    XXH3_64bits_update(st, w.name.data(), w.name.size());
    XXH3_64bits_update(st, w.type.data(), w.type.size());
    XXH3_64bits_update(st, w.buffer_type.data(), w.buffer_type.size());
    XXH3_64bits_update(st, w.ne, sizeof w.ne);
    XXH3_64bits_update(st, &w.data, sizeof w.data);
    XXH3_64bits_update(st, &w.bytes, sizeof w.bytes);
    XXH3_64bits_update(st, &w.canary, sizeof w.canary);
    XXH3_64bits_update(st, &w.repacked, sizeof w.repacked);
}

ProviderEntry provider_entry_make(const MoeRegion & r, const BackendVariant & variant,
                                  const char * (*type_name)(ggml_type), const BufferTypeNameFn & buft_name,
                                  const ByteReaderFn & read_bytes) {
    ProviderEntry e;
    e.il = r.il;
    e.dispatchable = r.dispatchable;
    e.reason = r.reason;
    e.pattern = r.pattern;
    e.n_embd = r.n_embd; e.n_ff = r.n_ff; e.n_expert = r.n_expert; e.n_used = r.n_used;
    e.gate = weight_info(r.gate_exps, type_name, buft_name, read_bytes);
    e.up = weight_info(r.up_exps, type_name, buft_name, read_bytes);
    e.down = weight_info(r.down_exps, type_name, buft_name, read_bytes);
    XXH3_state_t * st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, variant.path.data(), variant.path.size());
    XXH3_64bits_update(st, variant.build_id.data(), variant.build_id.size());
    XXH3_64bits_update(st, &variant.compute_fn, sizeof variant.compute_fn);
    int64_t dims[3] = {e.n_embd, e.n_ff, e.n_expert};
    XXH3_64bits_update(st, dims, sizeof dims);
    hash_weight(st, e.gate);
    hash_weight(st, e.up);
    hash_weight(st, e.down);
    e.identity = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return e;
}

static std::string weight_diff(const char * which, const WeightInfo & a, const WeightInfo & b) {
    if (a.name != b.name) return std::string(which) + " tensor is " + b.name + ", planned " + a.name;
    if (a.type != b.type) return std::string(which) + " type is " + b.type + ", planned " + a.type;
    if (a.buffer_type != b.buffer_type) return std::string(which) + " buffer is " + b.buffer_type + ", planned " + a.buffer_type;
    if (a.repacked != b.repacked) return std::string(which) + (b.repacked ? " is repacked now" : " is no longer repacked");
    for (int i = 0; i < 3; ++i)
        if (a.ne[i] != b.ne[i]) return std::string(which) + " shape differs from the plan";
    if (a.data != b.data) return std::string(which) + " weights moved (" + b.name + " data address differs from the plan)";
    if (a.bytes != b.bytes) return std::string(which) + " tensor size differs from the plan";
    if (a.canary != b.canary) return std::string(which) + " weights changed in place (" + b.name + " content differs from the plan)";
    return "";
}

Status provider_check(const ProviderEntry & planned, const ProviderEntry & now) {
    if (planned.identity == now.identity) return Status::ok();
    std::string where = "layer " + std::to_string(now.il) + ": ";
    if (planned.n_embd != now.n_embd || planned.n_ff != now.n_ff || planned.n_expert != now.n_expert)
        return Status::mismatch(where + "dimensions differ from the plan");
    for (auto d : {weight_diff("gate", planned.gate, now.gate), weight_diff("up", planned.up, now.up),
                   weight_diff("down", planned.down, now.down)})
        if (!d.empty()) return Status::mismatch(where + d);
    return Status::mismatch(where + "CPU backend variant differs from the plan");
}

bool provider_weights_overlap(const ProviderEntry & e, const void * base, size_t size) {
    const char * b = static_cast<const char *>(base);
    for (const WeightInfo * w : {&e.gate, &e.up, &e.down}) {
        const char * d = static_cast<const char *>(w->data);
        if (d != nullptr && d < b + size && b < d + w->bytes) return true;
    }
    return false;
}

} // namespace moezip
