// moezip: the most recent N items of an unbounded sequence, in fixed memory (a long-running
// server's report keeps a recent window of per-graph and per-error entries, not one per event).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace moezip {

/// Holds the last `capacity` items pushed; older ones are overwritten. Memory: capacity items,
/// allocated as they first arrive (never more). Not thread-safe: the owner's lock guards it.
template <typename T>
class BoundedRing {
public:
    explicit BoundedRing(size_t capacity) : capacity_(capacity) {}

    /// Appends `item`; when full, the oldest item is dropped.
    void push(T item) {
        if (capacity_ == 0) return;
        if (items_.size() < capacity_) {
            items_.reserve(capacity_);  // one allocation of the whole window, never a doubling past it
            items_.push_back(std::move(item));
            return;
        }
        items_[next_] = std::move(item);
        next_ = (next_ + 1) % capacity_;
    }
    /// The items held, oldest first.
    std::vector<T> in_order() const {
        std::vector<T> out;
        out.reserve(items_.size());
        for (size_t i = 0; i < items_.size(); ++i) out.push_back(items_[(next_ + i) % items_.size()]);
        return out;
    }
    size_t size() const { return items_.size(); }
    size_t capacity() const { return capacity_; }
    /// Bytes the ring holds allocated (its items' own heap memory not included).
    size_t allocated_bytes() const { return items_.capacity() * sizeof(T); }

private:
    size_t capacity_;
    std::vector<T> items_;
    size_t next_ = 0;  // where the next push overwrites once full (the oldest item)
};

} // namespace moezip
