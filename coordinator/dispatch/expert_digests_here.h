// moezip: this host's content digests of the experts a worker must compute, for the identity check
// of each plan (coordinator/dispatch/dispatcher.cpp check_layer; provider_map/expert_digest.h).
//
// A digest reads every byte of the expert's gate, up and down slices from the engine's tensors. In
// experts mode most of those are a worker's experts, which this host does not keep resident
// (session_map_model_lazily maps them without MAP_POPULATE; weight_release drops
// them after use). So before reading a slice it asks the kernel to read the range ahead
// (MADV_WILLNEED: large reads instead of one 4 KiB fault at a time), and, for the experts this host
// does not compute, it drops each one's pages right after hashing it (release_expert_slices:
// read-only file mappings only; anonymous memory, --no-mmap, is resident anyway and left alone), so
// at most one expert of a worker is resident here at a time (dropping a layer's at once raised the
// coordinator's peak by a layer of the worker's experts: 306 MiB on a3b-L4-q8_0, docs/history/bench-runs.md).
// Checking a worker therefore costs reading its experts once from the page cache or the disk, not
// resident memory. Each digest is computed once per plan and kept until the plan is forgotten, so
// a second worker, or a worker restarted, is checked without reading anything again.
#pragma once

#include "provider_map/moe_region.h"

#include <cstdint>
#include <map>
#include <vector>

namespace moezip {

class ExpertDigestsHere {
public:
    /// The content digests (expert_identity_digest_of, biases included) of `experts` of region r,
    /// in that order. Those in `drop_after` that were read now have their pages dropped afterwards.
    /// Every expert must be in [0, r.n_expert).
    std::vector<uint64_t> digests(const MoeRegion & r, const std::vector<int> & experts, const std::vector<int> & drop_after);
    /// The engine freed the weights of these plans: their digests are dropped.
    void forget(const std::vector<uint64_t> & plans);
    /// Totals since the start: bytes of expert slices read for digests, and the time it took (ms).
    uint64_t bytes_read() const { return bytes_read_; }
    double ms() const { return ms_; }

private:
    std::map<uint64_t, std::map<int, uint64_t>> by_plan_;  // plan_id -> expert -> digest
    uint64_t bytes_read_ = 0;
    double ms_ = 0;
};

} // namespace moezip
