// Populating a lazily mapped model except the workers' experts (model_map_populate.h).
#include "preload/model_map_populate.h"

#include "coordinator/memory/page_cache.h"
#include "coordinator/memory/weight_release.h"
#include "coordinator/modes/split.h"
#include "provider_map/engine_api.h"
#include "preload/engine_locate.h"
#include "provider_map/gguf_expert_layout.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace moezip {

ModelMapPopulation populate_model_map(const Config & cfg, char * addr, size_t len, int fd, long offset) {
    ModelMapPopulation out;
    if (offset != 0) {
        out.why_not = "the mapping does not start at the file's beginning";
        return out;
    }
    // The tensor table is read through the descriptor's own link, not the name it points to: that
    // name may be gone (a file deleted after it was opened, O_TMPFILE, memfd: "... (deleted)"), or
    // another file by now (a model replaced on disk while this one loads).
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    GgmlApi api;
    void * base = loaded_object_handle(loaded_object_path("libggml-base"));
    if (base == nullptr || !ggml_api_bind_base(api, base)) {
        out.why_not = "libggml-base is not loaded";
        return out;
    }
    std::vector<GgufExpertTensor> tensors;
    Status st = gguf_expert_tensors(api, path, tensors);
    if (!st) {
        out.why_not = st.message();
        return out;
    }
    std::vector<ExpertTensorBytes> bytes;
    for (const GgufExpertTensor & t : tensors) bytes.push_back({t.offset, t.bytes, t.n_expert});
    const std::vector<int> owners = expert_owners(cfg, tensors.empty() ? 0 : (int) tensors[0].n_expert);
    const ModelMapPlan plan = model_map_plan(len, bytes, owners, (uint64_t) sysconf(_SC_PAGESIZE));
    // a hint: EINVAL without transparent huge pages, and THP "never" ignores it
    out.hugepage_advised = madvise(addr, len, MADV_HUGEPAGE) == 0;
    // the workers' experts come in only when read: the identity digest (which reads them ahead and
    // drops them again), a fallback or a verify check
    for (const auto & r : plan.skip) out.skipped_bytes += r.second - r.first;
    for (const auto & r : plan.populate) {
        if (madvise(addr + r.first, r.second - r.first, MADV_POPULATE_READ) != 0) {
            out.why_not = std::string("madvise(MADV_POPULATE_READ) failed: ") + strerror(errno);
            return out;
        }
        out.populated_bytes += r.second - r.first;
    }
    const uintptr_t at = reinterpret_cast<uintptr_t>(addr);
    out.populated_pmd_bytes = smaps_totals_here(at, at + len).pmd_mapped_bytes;
    return out;
}

} // namespace moezip
