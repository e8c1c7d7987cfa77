// moezip-worker: in shard mode only the n_ff slices coordinators compute here stay in memory.
//
// A shard request asks for units [first, first + count) of every expert's n_ff (worker_compute.h).
// It reads those rows of ffn_gate_exps and ffn_up_exps ([n_embd, n_ff, n_expert]: row r of expert e
// is bytes e*nb[2] + r*nb[1] .. + nb[1], ggml.h) and, through the packed copy of the slice
// (coordinator/compute/down_slice.h), none of ffn_down_exps. Holding the rest would make every shard
// worker keep the whole model, so the machines' memory would not add up. After a request, rows that
// no slice asked for in the last kKeepMs and, once its packed copy exists and one slice is in use,
// all of down, are given back (madvise MADV_DONTNEED on the pages wholly inside them).
//
// What was given back is read again before any request needs it: anonymous memory (the default
// load) would read zeros, so every range is tracked, conservatively: a range counts as given back
// even where its edge pages stayed, and reading it again rewrites the same bytes. A file mapping
// (--mmap) reads the file again by itself; the tracking then only avoids needless madvise calls.
// Requests of other modes (rows, experts) need every row and down: they read everything back and
// keep it for kKeepMs. Layers held in another layout (--repack) are never given back.
#pragma once

#include "coordinator/base/status.h"
#include "tools/moezip-worker/unit_intervals.h"
#include "tools/moezip-worker/worker_model.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace moezip {

class SliceResidency {
public:
    /// How long a slice asked for keeps its rows after its last request, ms: a slice that moved
    /// (local_share = "auto") or a second coordinator's slice is not read back at every request.
    static constexpr int kKeepMs = 10000;

    /// `enabled` false: nothing is ever given back (--keep-unsliced). `keep_ms`: kKeepMs, or a
    /// shorter time for tests (the worker's fault switch unsliced_keep_ms).
    SliceResidency(const WorkerModel & model, bool enabled, int keep_ms = kKeepMs) : model_(model), enabled_(enabled), keep_ms_(keep_ms) {}

    /// Before computing layer `l` with units [first, first + count) of n_ff (a non-shard request:
    /// 0, n_ff): reads back the rows of that slice that were given back, and all of down when
    /// `need_down` (its packed copy for this slice is not held, or the request is not a shard one).
    /// Errors: io_error from reading the file (the request is then refused; nothing half-read is
    /// counted as held).
    Status before(const WorkerLayer & l, int64_t first, int64_t count, bool need_down);
    /// After computing it: records the slice (`whole`: a non-shard request) and gives back the rows
    /// no slice of the last keep_ms asks for, and down when `down_packed` (the packed copy of this
    /// slice is held) and this is the only slice in use. `now` is for tests.
    void after(const WorkerLayer & l, int64_t first, int64_t count, bool whole, bool down_packed,
               std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

    uint64_t released_bytes() const { return released_bytes_; }  ///< pages given back (madvise), bytes
    uint64_t reread_bytes() const { return reread_bytes_; }      ///< bytes read again from the file
    /// Rows of gate/up held now for layer il (what the next request of it may use without reading).
    UnitIntervals held_rows(int il) const;
    bool down_held(int il) const;

private:
    struct Seen {
        int64_t first, count;
        bool whole;
        std::chrono::steady_clock::time_point last;
    };
    struct LayerState {
        UnitIntervals held;       // gate/up rows held (the same for both tensors)
        bool down_held = true;
        std::vector<Seen> seen;   // slices asked for, with their last request
    };
    LayerState & state(const WorkerLayer & l);
    bool manages(const WorkerLayer & l) const;
    Status read_rows(const WorkerLayer & l, const UnitIntervals & rows);
    void give_back_rows(const WorkerLayer & l, const UnitIntervals & rows);

    const WorkerModel & model_;
    const bool enabled_;
    const int keep_ms_;
    std::map<int, LayerState> layers_;
    uint64_t released_bytes_ = 0, reread_bytes_ = 0;
};

} // namespace moezip
