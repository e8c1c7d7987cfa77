#include "tools/moezip-worker/model/worker_slices.h"

#include "coordinator/base/log.h"
#include "coordinator/compute/down_slice.h"


#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace moezip {

bool slice_packable(const WorkerLayer & l) {
    return !l.repacked && l.local_of.empty() && l.gate_b == nullptr && l.up_b == nullptr && l.down_b == nullptr &&
           l.gate_exps != nullptr && l.up_exps != nullptr && l.down_exps != nullptr;
}

// gate or up: rows [first, first + count) of every served expert, one block of count rows each
Status WorkerSlices::pack_rows(const ggml_tensor * src, int64_t first, int64_t count, bool from_memory, Buffer & b, ggml_tensor & t) const {
    const size_t row = src->nb[1], slab = row * (size_t) count;
    const int64_t n_expert = src->ne[2];
    Status st = b.reserve(slab * (size_t) n_expert, std::string("a shard slice of ") + src->name);
    if (!st) return st;
    uint8_t * dst = static_cast<uint8_t *>(b.data());
    for (const ExpertRange & r : model_.served())
        for (int64_t e = r.first; e <= r.last; ++e) {
            const uint64_t at = (uint64_t) e * src->nb[2] + (uint64_t) first * row;
            if (from_memory) memcpy(dst + (size_t) e * slab, static_cast<const uint8_t *>(src->data) + at, slab);
            else if (!(st = model_.read_file(src, at, slab, dst + (size_t) e * slab))) return st;
        }
    describe_packed_slice(t, src, src->ne[0], count, n_expert, row, b.data(), first, count);
    return Status::ok();
}

// down: units [first, first + count) of every row of every served expert, rows packed one after another
Status WorkerSlices::pack_down(const ggml_tensor * src, int64_t first, int64_t count, bool from_memory, Buffer & b, ggml_tensor & t) const {
    const int64_t n_embd = src->ne[1], n_expert = src->ne[2];
    const int64_t blk = api_.ggml_blck_size(src->type);
    const size_t type_size = api_.ggml_type_size(src->type);
    const size_t part = (size_t) (count / blk) * type_size, at = (size_t) (first / blk) * type_size;
    Status st = b.reserve(part * (size_t) (n_embd * n_expert), std::string("a shard slice of ") + src->name);
    if (!st) return st;
    uint8_t * dst = static_cast<uint8_t *>(b.data());
    std::vector<uint8_t> bounce;  // one expert read from the file
    for (const ExpertRange & r : model_.served())
        for (int64_t e = r.first; e <= r.last; ++e) {
            const uint8_t * expert = static_cast<const uint8_t *>(src->data) + (size_t) e * src->nb[2];
            if (!from_memory) {
                bounce.resize(src->nb[2]);
                if (!(st = model_.read_file(src, (uint64_t) e * src->nb[2], src->nb[2], bounce.data()))) return st;
                expert = bounce.data();
            }
            pack_row_parts(expert, src->nb[1], at, part, n_embd, dst + (size_t) e * (size_t) n_embd * part);
        }
    describe_packed_slice(t, src, count, n_embd, n_expert, part, b.data(), first, count);
    return Status::ok();
}

Status WorkerSlices::make(const WorkerLayer & l, int64_t first, int64_t count, bool from_memory, Copy & c) const {
    Status st = pack_rows(l.gate_exps, first, count, from_memory, c.gate, c.packed.gate);
    if (st) st = pack_rows(l.up_exps, first, count, from_memory, c.up, c.packed.up);
    if (st) st = pack_down(l.down_exps, first, count, from_memory, c.down, c.packed.down);
    return st;
}

std::map<WorkerSlices::Key, std::unique_ptr<WorkerSlices::Copy>>::const_iterator WorkerSlices::holder(int il, int64_t first, int64_t count) const {
    auto best = copies_.end();
    for (auto it = copies_.lower_bound(Key{il, {INT64_MIN, INT64_MIN}}); it != copies_.end() && it->first.first == il; ++it)
        if (ff_range_holds(it->first.second.first, it->first.second.second, first, count) &&
            (best == copies_.end() || it->first.second.second < best->first.second.second))
            best = it;
    return best;
}

Status WorkerSlices::get(const WorkerLayer & l, int64_t first, int64_t count, bool from_memory, const Packed *& out, Use use,
                         const SlicesInUse & in_use) {
    out = nullptr;
    const Key key{l.il, {first, count}};
    auto holding = holder(l.il, first, count);  // the exact copy, or the smallest that holds the slice
    auto it = holding == copies_.end() ? copies_.end() : copies_.find(holding->first);
    if (it == copies_.end()) {
        // the least recently used slice of this layer goes first (before the new copy is made); one
        // packed ahead only replaces a copy that serves no computing connection's slice
        int held = 0;
        auto oldest = copies_.end();
        for (auto j = copies_.begin(); j != copies_.end(); ++j) {
            if (j->first.first != l.il) continue;
            ++held;
            const std::pair<int64_t, int64_t> & range = j->first.second;
            if (use == Use::ahead && std::any_of(in_use.begin(), in_use.end(), [&](const std::pair<int64_t, int64_t> & s) {
                    return ff_range_holds(range.first, range.second, s.first, s.second);
                }))
                continue;
            if (oldest == copies_.end() || j->second->last_use < oldest->second->last_use) oldest = j;
        }
        if (held >= kPerLayer && oldest == copies_.end()) {
            ++ahead_skipped_;
            return Status::ok();
        }
        if (held >= kPerLayer) {
            if (evicted_++ == 0)
                LOG_WARN("layer %d: more than %d n_ff slices in use on this worker: their packed copies are made again at "
                         "every request, which is slow; give each worker fewer coordinators with different shares",
                         l.il, kPerLayer);
            copies_.erase(oldest);
        }
        auto c = std::make_unique<Copy>();
        Status st = make(l, first, count, from_memory, *c);
        if (!st) return st;
        it = copies_.emplace(key, std::move(c)).first;
        max_bytes_ = std::max(max_bytes_, bytes());
    }
    it->second->last_use = ++clock_;
    out = &it->second->packed;
    return Status::ok();
}

bool WorkerSlices::holds(int il, int64_t first, int64_t count) const { return holder(il, first, count) != copies_.end(); }

bool WorkerSlices::holds_any(int il) const {
    auto it = copies_.lower_bound(Key{il, {INT64_MIN, INT64_MIN}});
    return it != copies_.end() && it->first.first == il;
}

uint64_t WorkerSlices::bytes() const {
    uint64_t n = 0;
    for (const auto & kv : copies_) n += kv.second->gate.size() + kv.second->up.size() + kv.second->down.size();
    return n;
}

} // namespace moezip
