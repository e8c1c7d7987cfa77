#include "coordinator/dispatch/expert_digests_here.h"

#include "coordinator/base/log.h"
#include "coordinator/memory/weight_release.h"
#include "provider_map/expert_digest.h"

#include <algorithm>
#include <chrono>
#include <sys/mman.h>
#include <unistd.h>

namespace moezip {

namespace {

// Asks the kernel to read [p, p + bytes) ahead. Errors are ignored: it is advice (anonymous memory
// is resident already; a range partly outside any mapping is advised where it is mapped).
void read_ahead(const void * p, size_t bytes) {
    static const uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes + page - 1) & ~(page - 1);
    (void) madvise(reinterpret_cast<void *>(begin), end - begin, MADV_WILLNEED);
}

} // namespace

std::vector<uint64_t> ExpertDigestsHere::digests(const MoeRegion & r, const std::vector<int> & experts,
                                                 const std::vector<int> & drop_after) {
    std::map<int, uint64_t> & known = by_plan_[r.plan_id];
    std::vector<MemoryMapping> maps;  // read once, at the first expert to drop
    bool can_drop = !drop_after.empty();
    const auto t0 = std::chrono::steady_clock::now();
    for (int e : experts) {
        if (known.count(e)) continue;
        for (const ggml_tensor * t : {r.gate_exps, r.up_exps, r.down_exps}) {
            read_ahead(static_cast<const uint8_t *>(t->data) + (size_t) e * t->nb[2], t->nb[2]);
            bytes_read_ += t->nb[2];
        }
        known[e] = expert_identity_digest_of(r.gate_exps, r.up_exps, r.down_exps, r.gate_b, r.up_b, r.down_b, e);
        if (!can_drop || std::find(drop_after.begin(), drop_after.end(), e) == drop_after.end()) continue;
        // one expert at a time, so that at most one expert's pages are resident here at once
        if (maps.empty()) maps = memory_mappings_parse(proc_self_maps());
        uint64_t released = 0;
        for (const ggml_tensor * t : {r.gate_exps, r.up_exps, r.down_exps})
            if (!release_expert_slices(t, {e}, maps, released)) can_drop = false;  // anonymous memory: resident anyway
    }
    ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<uint64_t> out;
    for (int e : experts) out.push_back(known[e]);
    return out;
}

void ExpertDigestsHere::forget(const std::vector<uint64_t> & plans) {
    for (uint64_t p : plans) by_plan_.erase(p);
}

} // namespace moezip
