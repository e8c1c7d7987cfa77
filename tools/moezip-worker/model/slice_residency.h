// moezip-worker: in shard mode the originals of a layer's expert tensors leave memory once every
// slice in use computes from its packed copies (worker_slices.h).
//
// A shard worker loads every expert's whole n_ff (the digests of hello_ok are of all of it), then
// computes each shard request from packed copies of its slice. Holding the originals as well would
// make every shard worker keep the whole model plus the copies, and the machines' memory would not
// add up. So when, for a layer that has packed copies, no request of the last keep_ms computed from
// the originals and every slice asked for in that time has its copies held, the originals of gate,
// up and down (all served experts) are given back: madvise MADV_DONTNEED, and no huge pages for them
// any more (khugepaged would fill the range again with zeroed huge pages otherwise). That is looked
// at after each request and, for an idle worker, by sweep() from the serving loop.
//
// A request that reads the originals (rows or experts mode, from another coordinator) reads them
// from the file again first (anonymous memory, the default load, reads zeros once given back; a
// file mapping, --mmap, reads the file again by itself), and keeps them for keep_ms. New slices are
// packed from the file while the originals are away. Layers held in another layout (--repack) or
// with biases are never given back.
#pragma once

#include "provider_map/status.h"
#include "tools/moezip-worker/model/worker_model.h"
#include "tools/moezip-worker/model/worker_slices.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

namespace moezip {

class SliceResidency {
public:
    /// How long a request keeps what it needed after it, ms: a slice that moved (local_share =
    /// "auto"), a second coordinator's slice or a rows/experts coordinator keeps the originals.
    static constexpr int kKeepMs = 10000;

    /// `enabled` false: nothing is ever given back (--keep-unsliced). `keep_ms`: kKeepMs, or a
    /// shorter time for tests (the worker's fault switch unsliced_keep_ms).
    SliceResidency(const WorkerModel & model, bool enabled, int keep_ms = kKeepMs) : model_(model), enabled_(enabled), keep_ms_(keep_ms) {}

    /// True while layer l's originals are in memory (always, unless given back).
    bool originals_held(const WorkerLayer & l) const;
    /// Before a request that computes from the originals: reads them back from the file if they
    /// were given back. Errors: io_error (file unreadable, or changed since load: nothing read, the
    /// request is refused and the originals stay marked as given back).
    Status before_whole(const WorkerLayer & l);
    /// After a request of layer l: a shard one over units [first, first + count), or `whole`.
    /// Gives the originals back when the rule above holds with the copies `slices` holds.
    void after(const WorkerLayer & l, int64_t first, int64_t count, bool whole, const WorkerSlices & slices,
               std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
    /// The same rule for every layer of the model without a new request (an idle worker: the
    /// requests that needed the originals have aged out). Cheap when nothing changes.
    void sweep(const WorkerSlices & slices, std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

    uint64_t released_bytes() const { return released_bytes_; }  ///< pages given back (madvise), bytes
    uint64_t reread_bytes() const { return reread_bytes_; }      ///< bytes read again from the file

private:
    struct Seen {
        int64_t first, count;
        bool whole;
        std::chrono::steady_clock::time_point last;
    };
    struct LayerState {
        bool held = true;
        std::vector<Seen> seen;  // requests of the last keep_ms, one entry per slice (or whole)
    };
    bool manages(const WorkerLayer & l) const;
    void give_back_if_unused(const WorkerLayer & l, LayerState & s, const WorkerSlices & slices, std::chrono::steady_clock::time_point now);

    const WorkerModel & model_;
    const bool enabled_;
    const int keep_ms_;
    std::map<int, LayerState> layers_;
    uint64_t released_bytes_ = 0, reread_bytes_ = 0;
};

} // namespace moezip
