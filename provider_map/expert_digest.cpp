#include "provider_map/expert_digest.h"

#include <algorithm>
#include <xxhash.h>

namespace moezip {

uint64_t expert_slice_digest(const void * slice, size_t bytes) {
    const size_t sample = std::min<size_t>(256, bytes);
    const unsigned char * p = static_cast<const unsigned char *>(slice);
    XXH3_state_t * st = XXH3_createState();
    XXH3_64bits_reset(st);
    uint64_t n = bytes;
    XXH3_64bits_update(st, &n, sizeof n);
    XXH3_64bits_update(st, p, sample);
    XXH3_64bits_update(st, p + bytes - sample, sample);
    uint64_t d = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return d;
}

static uint64_t rotl(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }

uint64_t expert_identity_digest(uint64_t gate, uint64_t up, uint64_t down) {
    return gate ^ rotl(up, 1) ^ rotl(down, 2);
}

static uint64_t slice_digest_of(const ggml_tensor * t, int64_t e) {
    return expert_slice_digest(static_cast<const char *>(t->data) + e * t->nb[2], t->nb[2]);
}

uint64_t expert_identity_digest_of(const ggml_tensor * gate_exps, const ggml_tensor * up_exps,
                                   const ggml_tensor * down_exps, int64_t e) {
    return expert_identity_digest(slice_digest_of(gate_exps, e), slice_digest_of(up_exps, e), slice_digest_of(down_exps, e));
}

} // namespace moezip
