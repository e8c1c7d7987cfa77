#include "tools/moezip-worker/slice_residency.h"

#include <algorithm>

namespace moezip {

// Only layers whose tensors are the file's bytes in the model's memory, in GGUF layout.
bool SliceResidency::manages(const WorkerLayer & l) const {
    return enabled_ && !l.repacked && l.local_of.empty() && l.gate_exps != nullptr && l.up_exps != nullptr &&
           l.down_exps != nullptr && l.gate_b == nullptr && l.up_b == nullptr && l.down_b == nullptr;
}

SliceResidency::LayerState & SliceResidency::state(const WorkerLayer & l) {
    auto it = layers_.find(l.il);
    if (it != layers_.end()) return it->second;
    LayerState & s = layers_[l.il];
    s.held = {{0, l.n_ff}};  // loaded whole (the served experts)
    return s;
}

Status SliceResidency::read_rows(const WorkerLayer & l, const UnitIntervals & rows) {
    for (const ExpertRange & r : model_.served())
        for (int64_t e = r.first; e <= r.last; ++e)
            for (const ggml_tensor * t : {l.gate_exps, l.up_exps})
                for (auto [a, b] : rows) {
                    const uint64_t start = (uint64_t) e * t->nb[2] + (uint64_t) a * t->nb[1], bytes = (uint64_t) (b - a) * t->nb[1];
                    Status st = model_.read_again(t, start, bytes);
                    if (!st) return st;
                    if (!model_.mapped()) reread_bytes_ += bytes;
                }
    return Status::ok();
}

void SliceResidency::give_back_rows(const WorkerLayer & l, const UnitIntervals & rows) {
    for (const ExpertRange & r : model_.served())
        for (int64_t e = r.first; e <= r.last; ++e)
            for (const ggml_tensor * t : {l.gate_exps, l.up_exps})
                for (auto [a, b] : rows)
                    released_bytes_ += model_.give_back(t, (uint64_t) e * t->nb[2] + (uint64_t) a * t->nb[1], (uint64_t) (b - a) * t->nb[1]);
}

Status SliceResidency::before(const WorkerLayer & l, int64_t first, int64_t count, bool need_down) {
    if (!manages(l)) return Status::ok();
    LayerState & s = state(l);
    const UnitIntervals missing = unit_intervals_subtract({{first, first + count}}, s.held);
    if (!missing.empty()) {
        Status st = read_rows(l, missing);
        if (!st) return st;  // held stays as it was: the next request reads it all again
        s.held = unit_intervals_union(s.held, missing);
    }
    if (need_down && !s.down_held) {
        const ggml_tensor * d = l.down_exps;
        for (const ExpertRange & r : model_.served()) {
            const uint64_t start = (uint64_t) r.first * d->nb[2], bytes = (uint64_t) (r.last - r.first + 1) * d->nb[2];
            Status st = model_.read_again(d, start, bytes);
            if (!st) return st;
            if (!model_.mapped()) reread_bytes_ += bytes;
        }
        s.down_held = true;
    }
    return Status::ok();
}

void SliceResidency::after(const WorkerLayer & l, int64_t first, int64_t count, bool whole, bool down_packed,
                           std::chrono::steady_clock::time_point now) {
    if (!manages(l)) return;
    LayerState & s = state(l);
    bool found = false;
    for (Seen & x : s.seen)
        if (x.first == first && x.count == count && x.whole == whole) {
            x.last = now;
            found = true;
        }
    if (!found) s.seen.push_back({first, count, whole, now});
    s.seen.erase(std::remove_if(s.seen.begin(), s.seen.end(),
                                [&](const Seen & x) { return now - x.last > std::chrono::milliseconds(keep_ms_); }),
                 s.seen.end());
    UnitIntervals keep;
    bool any_whole = false;
    for (const Seen & x : s.seen) {
        keep = unit_intervals_union(keep, {{x.first, x.first + x.count}});
        any_whole = any_whole || x.whole;
    }
    const UnitIntervals drop = unit_intervals_subtract(s.held, keep);
    if (!drop.empty()) {
        give_back_rows(l, drop);
        s.held = unit_intervals_subtract(s.held, drop);
    }
    // down: only while one slice is in use, whose packed copy this request just used (another
    // slice would replace the copy and need down again)
    if (s.down_held && down_packed && !any_whole && s.seen.size() == 1) {
        const ggml_tensor * d = l.down_exps;
        for (const ExpertRange & r : model_.served())
            released_bytes_ += model_.give_back(d, (uint64_t) r.first * d->nb[2], (uint64_t) (r.last - r.first + 1) * d->nb[2]);
        s.down_held = false;
    }
}

UnitIntervals SliceResidency::held_rows(int il) const {
    auto it = layers_.find(il);
    if (it != layers_.end()) return it->second.held;
    const WorkerLayer * l = model_.layer(il);
    return l ? UnitIntervals{{0, l->n_ff}} : UnitIntervals{};
}

bool SliceResidency::down_held(int il) const {
    auto it = layers_.find(il);
    return it == layers_.end() || it->second.down_held;
}

} // namespace moezip
