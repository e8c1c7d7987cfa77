#include "coordinator/compute/down_slice.h"

#include "coordinator/base/log.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace moezip {

bool gguf_dense_layout(const GgmlApi & api, const ggml_tensor * t) {
    if (t == nullptr || t->data == nullptr || t->extra != nullptr) return false;
    const size_t row = api.ggml_row_size(t->type, t->ne[0]);
    return t->nb[0] == api.ggml_type_size(t->type) && t->nb[1] == row && t->nb[2] == row * (size_t) t->ne[1] &&
           t->nb[3] == t->nb[2] * (size_t) t->ne[2];
}

void pack_row_parts(const uint8_t * src, size_t row, size_t at, size_t part, int64_t n_rows, uint8_t * dst) {
    for (int64_t r = 0; r < n_rows; ++r) memcpy(dst + (size_t) r * part, src + (size_t) r * row + at, part);
}

void describe_packed_slice(ggml_tensor & t, const ggml_tensor * like, int64_t ne0, int64_t ne1, int64_t ne2, size_t row_bytes,
                           void * data, int64_t ff_first, int64_t ff_count) {
    t = ggml_tensor{};
    t.type = like->type;
    t.ne[0] = ne0;
    t.ne[1] = ne1;
    t.ne[2] = ne2;
    t.ne[3] = 1;
    t.nb[0] = like->nb[0];
    t.nb[1] = row_bytes;
    t.nb[2] = row_bytes * (size_t) ne1;
    t.nb[3] = t.nb[2] * (size_t) ne2;
    t.data = data;
    memcpy(t.name, like->name, sizeof t.name);
    t.op_params[0] = (int32_t) ff_first;
    t.op_params[1] = (int32_t) ff_count;
}

void DownSliceCopies::drop(uint64_t key, const ggml_tensor * down, int64_t ff_first, int64_t ff_count) {
    auto it = copies_.find(key);
    if (it == copies_.end()) return;
    auto & kept = it->second;
    kept.erase(std::remove_if(kept.begin(), kept.end(), [&](const std::unique_ptr<Copy> & c) {
                   return c->src == down->data && c->ff_first == ff_first && c->ff_count == ff_count;
               }),
               kept.end());
}

bool DownSliceCopies::holds(uint64_t key, const ggml_tensor * down, int64_t ff_first, int64_t ff_count) const {
    auto it = copies_.find(key);
    if (it == copies_.end()) return false;
    for (const auto & c : it->second)
        if (c->src == down->data && ff_range_holds(c->ff_first, c->ff_count, ff_first, ff_count)) return true;
    return false;
}

const ggml_tensor * DownSliceCopies::get(uint64_t key, const ggml_tensor * down, int64_t ff_first, int64_t ff_count) {
    std::vector<std::unique_ptr<Copy>> & kept = copies_[key];
    // the exact copy first, else the smallest that holds the slice
    size_t best = kept.size();
    for (size_t i = 0; i < kept.size(); ++i) {
        const Copy & c = *kept[i];
        if (c.src != down->data || !ff_range_holds(c.ff_first, c.ff_count, ff_first, ff_count)) continue;
        if (best == kept.size() || c.ff_count < kept[best]->ff_count) best = i;
    }
    if (best < kept.size()) {
        std::rotate(kept.begin(), kept.begin() + (ptrdiff_t) best, kept.begin() + (ptrdiff_t) best + 1);  // most recently used first
        return &kept[0]->tensor;
    }
    const int64_t n_ff = down->ne[0], n_embd = down->ne[1], n_expert = down->ne[2];
    const int64_t blk = api_.ggml_blck_size(down->type);
    const size_t type_size = api_.ggml_type_size(down->type);
    const size_t row = api_.ggml_row_size(down->type, n_ff);
    if (!gguf_dense_layout(api_, down) || ff_first < 0 || ff_count <= 0 || ff_first + ff_count > n_ff ||
        ff_first % blk != 0 || ff_count % blk != 0)
        return nullptr;
    // a copy of other weights (the same key, reloaded) or the least recently used goes before the
    // new one is made: at most kPerKey per key at any time
    kept.erase(std::remove_if(kept.begin(), kept.end(), [&](const std::unique_ptr<Copy> & c) { return c->src != down->data; }), kept.end());
    if (kept.size() >= kPerKey) kept.resize(kPerKey - 1);
    auto c = std::make_unique<Copy>();
    c->src = down->data;
    c->ff_first = ff_first;
    c->ff_count = ff_count;
    const size_t part = (size_t) (ff_count / blk) * type_size;  // bytes of one row's slice
    const size_t at = (size_t) (ff_first / blk) * type_size;
    Status st = c->data.reserve(part * (size_t) (n_embd * n_expert), std::string("a packed slice of ") + down->name);
    if (!st) {
        if (!reserve_failed_) LOG_ERROR("shard: %s; computing from a strided view of the mapping", st.message().c_str());
        reserve_failed_ = true;
        return nullptr;
    }
    // rows of expert e follow each other: nb[2] = nb[1] * n_embd
    uint8_t * dst = static_cast<uint8_t *>(c->data.data());
    pack_row_parts(static_cast<const uint8_t *>(down->data), row, at, part, n_embd * n_expert, dst);
    describe_packed_slice(c->tensor, down, ff_count, n_embd, n_expert, part, dst, ff_first, ff_count);
    const ggml_tensor * out = &c->tensor;
    kept.insert(kept.begin(), std::move(c));
    max_bytes_ = std::max(max_bytes_, bytes());
    ++made_;
    ++made_per_key_[key];
    return out;
}

uint64_t DownSliceCopies::bytes() const {
    uint64_t n = 0;
    for (const auto & kv : copies_)
        for (const auto & c : kv.second) n += c->data.size();
    return n;
}

} // namespace moezip
