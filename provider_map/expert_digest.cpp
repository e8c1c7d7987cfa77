#include "provider_map/expert_digest.h"

#include <cstring>
#include <xxhash.h>

namespace moezip {

namespace {

uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

} // namespace

uint64_t expert_slice_digest_of_samples(size_t bytes, const void * head, const void * tail) {
    uint8_t buf[8 + 2 * kExpertDigestSample];
    const uint64_t n = bytes;
    memcpy(buf, &n, 8);  // x86-64 is little-endian
    const size_t take = bytes < kExpertDigestSample ? bytes : kExpertDigestSample;
    size_t used = 8;
    if (take > 0) {
        memcpy(buf + used, head, take);
        used += take;
        memcpy(buf + used, tail, take);
        used += take;
    }
    return XXH3_64bits(buf, used);
}

uint64_t expert_slice_digest(const void * slice, size_t bytes) {
    const uint8_t * p = static_cast<const uint8_t *>(slice);
    const size_t take = bytes < kExpertDigestSample ? bytes : kExpertDigestSample;
    return expert_slice_digest_of_samples(bytes, p, take > 0 ? p + bytes - take : p);
}

uint64_t expert_content_digest(const void * slice, size_t bytes) { return bytes == 0 ? XXH3_64bits(nullptr, 0) : XXH3_64bits(slice, bytes); }

uint64_t expert_identity_digest(uint64_t gate, uint64_t up, uint64_t down) {
    return gate ^ rotl64(up, 1) ^ rotl64(down, 2);
}

namespace {

uint64_t slice_digest_of(const ggml_tensor * t, int64_t e) {
    return expert_content_digest(static_cast<const uint8_t *>(t->data) + (size_t) e * t->nb[2], t->nb[2]);
}

} // namespace

uint64_t expert_identity_digest_of(const ggml_tensor * gate_exps, const ggml_tensor * up_exps,
                                   const ggml_tensor * down_exps, int64_t e) {
    return expert_identity_digest(slice_digest_of(gate_exps, e), slice_digest_of(up_exps, e), slice_digest_of(down_exps, e));
}

uint64_t expert_identity_digest_of(const ggml_tensor * gate_exps, const ggml_tensor * up_exps, const ggml_tensor * down_exps,
                                   const ggml_tensor * gate_b, const ggml_tensor * up_b, const ggml_tensor * down_b, int64_t e) {
    return expert_identity_digest_with_biases(expert_identity_digest_of(gate_exps, up_exps, down_exps, e), gate_b, up_b, down_b, e);
}

uint64_t expert_identity_digest_with_biases(uint64_t d, const ggml_tensor * gate_b, const ggml_tensor * up_b,
                                            const ggml_tensor * down_b, int64_t e) {
    const ggml_tensor * biases[3] = {gate_b, up_b, down_b};
    for (int i = 0; i < 3; ++i) {
        if (biases[i] == nullptr) continue;
        const uint8_t * column = static_cast<const uint8_t *>(biases[i]->data) + (size_t) e * biases[i]->nb[1];
        d ^= rotl64(XXH3_64bits(column, biases[i]->nb[1]), 3 + i);
    }
    return d;
}

} // namespace moezip
