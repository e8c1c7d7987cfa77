// The identity digests of experts (provider_map/expert_digest.h) and this host's side of them
// (coordinator/dispatch/expert_digests_here.h): every byte counts, each digest is read once per
// plan, and reading a worker's experts from a file mapping does not leave them resident here.
#include "coordinator/dispatch/expert_digests_here.h"
#include "coordinator/memory/weight_release.h"
#include "provider_map/expert_digest.h"
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

using namespace moezip;

TEST(ExpertDigest, AChangeInTheMiddleOfASliceChangesTheContentDigestButNotTheCanary) {
    std::vector<uint8_t> a(64 * 1024), b;
    for (size_t i = 0; i < a.size(); ++i) a[i] = (uint8_t) (i * 131 + 7);
    b = a;
    b[a.size() / 2] ^= 0x10;  // far from the 256 bytes at each end the canary reads
    EXPECT_EQ(expert_slice_digest(a.data(), a.size()), expert_slice_digest(b.data(), b.size()));
    EXPECT_NE(expert_content_digest(a.data(), a.size()), expert_content_digest(b.data(), b.size()));
    EXPECT_NE(expert_content_digest(a.data(), a.size()), expert_content_digest(a.data(), a.size() - 1)) << "the length counts";
}

namespace {

/// Three expert tensors [.., .., n_expert] whose data lies in a read-only mapping of a file: as the
/// engine maps a model (llama-mmap.cpp: PROT_READ, MAP_SHARED).
struct MappedExperts {
    static constexpr int kExperts = 8;
    static constexpr size_t kSlice = 2 << 20;  // 2 MiB per expert and tensor: 48 MiB in all
    std::string path;
    void * map = nullptr;
    size_t bytes = 3 * kExperts * kSlice;
    ggml_tensor t[3];
    MoeRegion r;

    explicit MappedExperts(const std::string & dir) {
        path = dir + "/experts.bin";
        std::vector<uint8_t> chunk(kSlice);
        int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0600);
        for (size_t s = 0; s < 3 * kExperts; ++s) {
            for (size_t i = 0; i < kSlice; ++i) chunk[i] = (uint8_t) (s * 31 + i * 7);
            EXPECT_EQ(write(fd, chunk.data(), chunk.size()), (ssize_t) chunk.size());
        }
        map = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        memset(t, 0, sizeof t);
        for (int i = 0; i < 3; ++i) {
            t[i].type = GGML_TYPE_I8;
            t[i].ne[0] = (int64_t) kSlice;
            t[i].ne[1] = 1;
            t[i].ne[2] = kExperts;
            t[i].ne[3] = 1;
            t[i].nb[0] = 1;
            t[i].nb[1] = kSlice;
            t[i].nb[2] = kSlice;
            t[i].nb[3] = kSlice * kExperts;
            t[i].data = static_cast<uint8_t *>(map) + (size_t) i * kExperts * kSlice;
        }
        r.gate_exps = &t[0];
        r.up_exps = &t[1];
        r.down_exps = &t[2];
        r.n_expert = kExperts;
        r.plan_id = 42;
    }
    ~MappedExperts() {
        if (map != MAP_FAILED && map != nullptr) munmap(map, bytes);
    }
};

} // namespace

TEST(ExpertDigestsHere, DigestsEqualTheWorkersOwnAndAreReadOncePerPlan) {
    MappedExperts m(moezip_test::test_dir("digests_here_once"));
    ASSERT_NE(m.map, MAP_FAILED);
    ExpertDigestsHere here;
    const std::vector<int> experts = {4, 5, 6, 7};
    const std::vector<uint64_t> d = here.digests(m.r, experts, {});
    ASSERT_EQ(d.size(), 4u);
    // the worker's value: the same function over a copy in its own (anonymous) memory
    for (size_t i = 0; i < experts.size(); ++i)
        EXPECT_EQ(d[i], expert_identity_digest_of(m.r.gate_exps, m.r.up_exps, m.r.down_exps, experts[i])) << experts[i];
    EXPECT_NE(d[0], d[1]);
    EXPECT_EQ(here.bytes_read(), 4u * 3 * MappedExperts::kSlice);
    EXPECT_EQ(here.digests(m.r, {5, 6}, {}), std::vector<uint64_t>({d[1], d[2]}));
    EXPECT_EQ(here.bytes_read(), 4u * 3 * MappedExperts::kSlice) << "a second worker of the plan reads nothing again";
    here.forget({m.r.plan_id});
    here.digests(m.r, {5}, {});
    EXPECT_EQ(here.bytes_read(), 5u * 3 * MappedExperts::kSlice) << "a forgotten plan is read again";
}

TEST(ExpertDigestsHere, AWorkersExpertsReadForTheDigestDoNotStayResidentHere) {
    MappedExperts m(moezip_test::test_dir("digests_here_rss"));
    ASSERT_NE(m.map, MAP_FAILED);
    ExpertDigestsHere here;
    const std::vector<int> theirs = {0, 1, 2, 3, 4, 5, 6, 7};  // 48 MiB
    const int64_t before = proc_status_kib("VmRSS");
    here.digests(m.r, theirs, /*drop_after =*/ theirs);
    const int64_t after = proc_status_kib("VmRSS");
    ASSERT_GT(before, 0);
    EXPECT_LT(after - before, 8 * 1024) << "KiB left resident after reading 48 MiB of a worker's experts";
    // without dropping, the same read stays: the measure above can tell the two apart
    here.forget({m.r.plan_id});
    here.digests(m.r, theirs, {});
    EXPECT_GT(proc_status_kib("VmRSS") - after, 40 * 1024);
}
