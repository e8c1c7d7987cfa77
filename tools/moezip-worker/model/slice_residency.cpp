#include "tools/moezip-worker/model/slice_residency.h"

#include <algorithm>

namespace moezip {

bool SliceResidency::manages(const WorkerLayer & l) const { return enabled_ && slice_packable(l); }

bool SliceResidency::originals_held(const WorkerLayer & l) const {
    auto it = layers_.find(l.il);
    return it == layers_.end() || it->second.held;
}

Status SliceResidency::before_whole(const WorkerLayer & l) {
    auto it = layers_.find(l.il);
    if (it == layers_.end() || it->second.held) return Status::ok();
    for (const ggml_tensor * t : {l.gate_exps, l.up_exps, l.down_exps})
        for (const ExpertRange & r : model_.served()) {
            const uint64_t start = (uint64_t) r.first * t->nb[2], bytes = (uint64_t) (r.last - r.first + 1) * t->nb[2];
            Status st = model_.read_again(t, start, bytes);
            if (!st) return st;  // still marked as given back: the next request reads all of it again
            if (!model_.mapped()) reread_bytes_ += bytes;
        }
    it->second.held = true;
    return Status::ok();
}

void SliceResidency::after(const WorkerLayer & l, int64_t first, int64_t count, bool whole, const WorkerSlices & slices,
                           std::chrono::steady_clock::time_point now) {
    if (!manages(l)) return;
    LayerState & s = layers_[l.il];
    bool found = false;
    for (Seen & x : s.seen)
        if (x.whole == whole && (whole || (x.first == first && x.count == count))) {
            x.last = now;
            found = true;
        }
    if (!found) s.seen.push_back({first, count, whole, now});
    give_back_if_unused(l, s, slices, now);
}

void SliceResidency::sweep(const WorkerSlices & slices, std::chrono::steady_clock::time_point now) {
    for (auto & kv : layers_) {
        if (!kv.second.held) continue;
        const WorkerLayer * l = model_.layer(kv.first);
        if (l != nullptr && manages(*l)) give_back_if_unused(*l, kv.second, slices, now);
    }
}

void SliceResidency::give_back_if_unused(const WorkerLayer & l, LayerState & s, const WorkerSlices & slices,
                                         std::chrono::steady_clock::time_point now) {
    s.seen.erase(std::remove_if(s.seen.begin(), s.seen.end(),
                                [&](const Seen & x) { return now - x.last > std::chrono::milliseconds(keep_ms_); }),
                 s.seen.end());
    // only a layer shard mode uses (a worker that only serves rows or experts keeps its originals)
    if (!s.held || !slices.holds_any(l.il)) return;
    for (const Seen & x : s.seen)
        if (x.whole || !slices.holds(l.il, x.first, x.count)) return;
    for (const ggml_tensor * t : {l.gate_exps, l.up_exps, l.down_exps}) {
        model_.no_huge_pages(t);
        for (const ExpertRange & r : model_.served())
            released_bytes_ += model_.give_back(t, (uint64_t) r.first * t->nb[2], (uint64_t) (r.last - r.first + 1) * t->nb[2]);
    }
    s.held = false;
}

} // namespace moezip
