#include "provider_map/expert_digest.h"

#include <cstring>
#include <xxhash.h>

namespace moezip {

namespace {

uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

} // namespace

uint64_t expert_slice_digest(const void * slice, size_t bytes) {
    uint8_t buf[8 + 2 * kExpertDigestSample];
    const uint64_t n = bytes;
    memcpy(buf, &n, 8);  // x86-64 is little-endian
    const size_t take = bytes < kExpertDigestSample ? bytes : kExpertDigestSample;
    size_t used = 8;
    if (take > 0) {
        const uint8_t * p = static_cast<const uint8_t *>(slice);
        memcpy(buf + used, p, take);
        used += take;
        memcpy(buf + used, p + bytes - take, take);
        used += take;
    }
    return XXH3_64bits(buf, used);
}

uint64_t expert_identity_digest(ExpertSlice gate, ExpertSlice up, ExpertSlice down) {
    return expert_slice_digest(gate.data, gate.bytes) ^ rotl64(expert_slice_digest(up.data, up.bytes), 1) ^
           rotl64(expert_slice_digest(down.data, down.bytes), 2);
}

ExpertSlice expert_slice_of(const ggml_tensor * exps, int64_t expert) {
    ExpertSlice s;
    s.bytes = exps->nb[2];
    s.data = static_cast<const uint8_t *>(exps->data) + (size_t) expert * exps->nb[2];
    return s;
}

uint64_t expert_identity_digest_of(const ggml_tensor * gate_exps, const ggml_tensor * up_exps,
                                   const ggml_tensor * down_exps, int64_t expert) {
    return expert_identity_digest(expert_slice_of(gate_exps, expert), expert_slice_of(up_exps, expert),
                                  expert_slice_of(down_exps, expert));
}

} // namespace moezip
