#include "coordinator/compute/down_slice.h"

#include <algorithm>
#include <cstring>

namespace moezip {

bool DownSliceCopies::holds(uint64_t key, const ggml_tensor * down, int64_t ff_first, int64_t ff_count) const {
    auto it = copies_.find(key);
    return it != copies_.end() && it->second->src == down->data && it->second->ff_first == ff_first && it->second->ff_count == ff_count;
}

const ggml_tensor * DownSliceCopies::get(uint64_t key, const ggml_tensor * down, int64_t ff_first, int64_t ff_count) {
    if (holds(key, down, ff_first, ff_count)) return &copies_.find(key)->second->tensor;
    const int64_t n_ff = down->ne[0], n_embd = down->ne[1], n_expert = down->ne[2];
    const int64_t blk = api_.ggml_blck_size(down->type);
    const size_t type_size = api_.ggml_type_size(down->type);
    const size_t row = api_.ggml_row_size(down->type, n_ff);
    if (down->extra != nullptr || down->data == nullptr || down->nb[0] != type_size || down->nb[1] != row ||
        down->nb[2] != row * (size_t) n_embd || ff_first < 0 || ff_count <= 0 || ff_first + ff_count > n_ff ||
        ff_first % blk != 0 || ff_count % blk != 0)
        return nullptr;
    copies_.erase(key);  // the old copy goes before the new one is made: one per key at any time
    auto c = std::make_unique<Copy>();
    c->src = down->data;
    c->ff_first = ff_first;
    c->ff_count = ff_count;
    const size_t part = (size_t) (ff_count / blk) * type_size;  // bytes of one row's slice
    const size_t at = (size_t) (ff_first / blk) * type_size;
    c->size = part * (size_t) (n_embd * n_expert);
    c->data.reset(new uint8_t[c->size]);
    const uint8_t * src = static_cast<const uint8_t *>(down->data);
    for (int64_t r = 0; r < n_embd * n_expert; ++r)  // rows of expert e follow each other: nb[2] = nb[1] * n_embd
        memcpy(c->data.get() + (size_t) r * part, src + (size_t) r * row + at, part);
    ggml_tensor & t = c->tensor;
    t.type = down->type;
    t.ne[0] = ff_count;
    t.ne[1] = n_embd;
    t.ne[2] = n_expert;
    t.ne[3] = 1;
    t.nb[0] = type_size;
    t.nb[1] = part;
    t.nb[2] = part * (size_t) n_embd;
    t.nb[3] = t.nb[2] * (size_t) n_expert;
    t.data = c->data.get();
    memcpy(t.name, down->name, sizeof t.name);
    // which units it holds, for MoeExecutor to check against the weights' slice (a leaf's op_params
    // are otherwise unused)
    t.op_params[0] = (int32_t) ff_first;
    t.op_params[1] = (int32_t) ff_count;
    const ggml_tensor * out = &c->tensor;
    copies_[key] = std::move(c);
    max_bytes_ = std::max(max_bytes_, bytes());
    return out;
}

uint64_t DownSliceCopies::bytes() const {
    uint64_t n = 0;
    for (const auto & kv : copies_) n += kv.second->size;
    return n;
}

} // namespace moezip
