// Releasing the coordinator's pages of worker-owned experts (coordinator/memory/weight_release.h): only
// whole pages of the named experts leave this process, the bytes read back unchanged from the
// file, and memory that is not a read-only file mapping is never touched.
#include "coordinator/memory/weight_release.h"
#include "coordinator/memory/model_files.h"
#include "coordinator/memory/page_presence.h"
#include "provider_map/expert_digest.h"
#include "provider_map/provider_map.h"
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

using namespace moezip;

namespace {

const size_t kPage = (size_t) sysconf(_SC_PAGESIZE);

/// Resident bytes of the mapping that starts at `p` (the "Rss:" line of its /proc/self/smaps block).
int64_t mapping_rss_bytes(const void * p) {
    std::ifstream in("/proc/self/smaps");
    std::string line;
    bool inside = false;
    while (std::getline(in, line)) {
        uintptr_t b = 0, e = 0;
        if (sscanf(line.c_str(), "%lx-%lx ", &b, &e) == 2 && line.find(':') > line.find(' ')) {
            inside = b == reinterpret_cast<uintptr_t>(p);
            continue;
        }
        if (inside && line.rfind("Rss:", 0) == 0) return strtoll(line.c_str() + 4, nullptr, 10) * 1024;
    }
    return -1;
}

/// A file of n_expert slices of `slice` bytes with a recognisable pattern, mapped read-only and
/// shared as llama.cpp maps a GGUF (MAP_POPULATE: every page resident).
struct MappedExperts {
    std::string path;
    std::vector<uint8_t> bytes;
    void * map = MAP_FAILED;
    ggml_tensor t{};

    MappedExperts(const std::string & dir, size_t slice, int n_expert, int prot = PROT_READ) {
        path = dir + "/experts.bin";
        bytes.resize(slice * n_expert);
        for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = (uint8_t) (i * 131 + i / 4099);
        std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char *>(bytes.data()), (std::streamsize) bytes.size());
        int fd = open(path.c_str(), prot & PROT_WRITE ? O_RDWR : O_RDONLY);
        map = mmap(nullptr, bytes.size(), prot, MAP_SHARED | MAP_POPULATE, fd, 0);
        close(fd);
        t.type = GGML_TYPE_I8;
        t.ne[0] = (int64_t) slice; t.ne[1] = 1; t.ne[2] = n_expert; t.ne[3] = 1;
        t.nb[0] = 1; t.nb[1] = slice; t.nb[2] = slice; t.nb[3] = slice * n_expert;
        t.data = map;
        strcpy(t.name, "blk.0.ffn_up_exps.weight");
    }
    ~MappedExperts() { if (map != MAP_FAILED) munmap(map, bytes.size()); }
    bool unchanged() const { return memcmp(map, bytes.data(), bytes.size()) == 0; }
};

std::vector<MemoryMapping> maps_now() { return memory_mappings_parse(proc_self_maps()); }

TEST(MemoryMappings, ParsesTheProcMapsFormat) {
    // lines in the format of proc(5): address perms offset dev inode pathname
    const std::string text =
        "7f0000000000-7f0000200000 r--s 00001000 fd:01 1234   /models/a3b.gguf\n"
        "7f0000200000-7f0000300000 rw-p 00000000 00:00 0 \n"
        "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
        "garbage line\n";
    std::vector<MemoryMapping> m = memory_mappings_parse(text);
    ASSERT_EQ(m.size(), 3u);
    EXPECT_EQ(m[0].begin, (uintptr_t) 0x7f0000000000);
    EXPECT_EQ(m[0].end, (uintptr_t) 0x7f0000200000);
    EXPECT_TRUE(m[0].readable);
    EXPECT_FALSE(m[0].writable);
    EXPECT_TRUE(m[0].shared);
    EXPECT_EQ(m[0].path, "/models/a3b.gguf");
    EXPECT_TRUE(m[1].writable);
    EXPECT_EQ(m[1].path, "");
    EXPECT_EQ(m[2].path, "[stack]");
}

TEST(WeightRelease, DropsExactlyTheNamedExpertsAndTheyReadBackUnchanged) {
    const std::string dir = moezip_test::test_dir("weight_release_aligned");
    const size_t slice = 16 * kPage;
    MappedExperts m(dir, slice, 16);
    ASSERT_NE(m.map, MAP_FAILED);
    ASSERT_EQ(mapping_rss_bytes(m.map), (int64_t) (16 * slice)) << "MAP_POPULATE made every page resident";
    uint64_t released = 0;
    Status st = release_expert_slices(&m.t, {9, 2, 3, 4}, maps_now(), released);
    ASSERT_TRUE(st) << st.to_string();
    EXPECT_EQ(released, 4 * slice);
    EXPECT_EQ(mapping_rss_bytes(m.map), (int64_t) (12 * slice)) << "the four slices left this process";
    EXPECT_TRUE(m.unchanged()) << "the dropped pages fault back in from the file with the same bytes";
    EXPECT_EQ(mapping_rss_bytes(m.map), (int64_t) (16 * slice));
}

TEST(WeightRelease, KeepsPagesSharedWithAKeptExpert) {
    const std::string dir = moezip_test::test_dir("weight_release_unaligned");
    const size_t slice = kPage / 4 * 3;  // slices straddle pages: 0.75 page each
    MappedExperts m(dir, slice, 8);
    ASSERT_NE(m.map, MAP_FAILED);
    uint64_t released = 0;
    // expert 1 alone is bytes [0.75, 1.5) pages: no whole page inside
    ASSERT_TRUE(release_expert_slices(&m.t, {1}, maps_now(), released));
    EXPECT_EQ(released, 0u);
    // experts 1..3 are bytes [0.75, 3) pages: whole pages 1 and 2; page 0 (expert 0) and page 3
    // (expert 4) are kept
    ASSERT_TRUE(release_expert_slices(&m.t, {1, 2, 3}, maps_now(), released));
    EXPECT_EQ(released, 2 * kPage);
    EXPECT_EQ(mapping_rss_bytes(m.map), (int64_t) (m.bytes.size() + kPage - 1) / (int64_t) kPage * (int64_t) kPage - 2 * (int64_t) kPage);
    EXPECT_TRUE(m.unchanged());
}

TEST(WeightRelease, NeverTouchesAnonymousOrWritableMemory) {
    const size_t slice = 4 * kPage;
    std::vector<uint8_t> copy(8 * slice);
    void * anon = mmap(nullptr, copy.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(anon, MAP_FAILED);
    for (size_t i = 0; i < copy.size(); ++i) copy[i] = static_cast<uint8_t *>(anon)[i] = (uint8_t) (i % 251 + 1);
    ggml_tensor t{};
    t.ne[0] = (int64_t) slice; t.ne[1] = 1; t.ne[2] = 8;
    t.nb[2] = slice;
    t.data = anon;
    strcpy(t.name, "blk.1.ffn_down_exps.weight");
    uint64_t released = 0;
    Status st = release_expert_slices(&t, {4, 5, 6, 7}, maps_now(), released);
    EXPECT_EQ(st.code(), Status::Code::unsupported);
    EXPECT_NE(st.message().find("anonymous memory"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("blk.1.ffn_down_exps.weight"), std::string::npos) << st.message();
    EXPECT_EQ(released, 0u);
    EXPECT_EQ(memcmp(anon, copy.data(), copy.size()), 0) << "the only copy was kept";
    munmap(anon, copy.size());

    const std::string dir = moezip_test::test_dir("weight_release_writable");
    MappedExperts w(dir, slice, 8, PROT_READ | PROT_WRITE);
    ASSERT_NE(w.map, MAP_FAILED);
    st = release_expert_slices(&w.t, {0}, maps_now(), released);
    EXPECT_EQ(st.code(), Status::Code::unsupported);
    EXPECT_NE(st.message().find("writable"), std::string::npos) << st.message();
    EXPECT_EQ(released, 0u);
}

TEST(WeightRelease, NeverTouchesAPrivateMappingWhosePagesWereChanged) {
    // An engine may map a file privately, change some pages (copy on write) and make the mapping
    // read-only. Dropping those pages would bring back the file's bytes, not the engine's.
    const std::string dir = moezip_test::test_dir("weight_release_private");
    const size_t slice = 4 * kPage;
    MappedExperts m(dir, slice, 4);  // writes the file
    const int fd = open(m.path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    void * p = mmap(nullptr, m.bytes.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    close(fd);
    ASSERT_NE(p, MAP_FAILED);
    static_cast<uint8_t *>(p)[2 * slice + 5] ^= 0xff;  // expert 2 now differs from the file
    ASSERT_EQ(mprotect(p, m.bytes.size(), PROT_READ), 0);
    std::vector<uint8_t> engine_bytes(static_cast<uint8_t *>(p), static_cast<uint8_t *>(p) + m.bytes.size());
    ggml_tensor t = m.t;
    t.data = p;
    uint64_t released = 0;
    Status st = release_expert_slices(&t, {2, 3}, maps_now(), released);
    EXPECT_EQ(st.code(), Status::Code::unsupported);
    EXPECT_NE(st.message().find("private"), std::string::npos) << st.message();
    EXPECT_EQ(released, 0u);
    EXPECT_EQ(memcmp(p, engine_bytes.data(), engine_bytes.size()), 0) << "the changed page was kept";
    munmap(p, m.bytes.size());
}

TEST(WeightRelease, RowsOutsideASliceAreEveryExpertsOtherRowsJoinedAcrossExperts) {
    // gate/up [n_embd, n_ff, n_expert]: 3 experts of 8 rows of 100 bytes; the slice is rows 2..4
    ggml_tensor t{};
    t.ne[0] = 100; t.ne[1] = 8; t.ne[2] = 3; t.ne[3] = 1;
    t.nb[0] = 1; t.nb[1] = 100; t.nb[2] = 800; t.nb[3] = 2400;
    const ByteRanges got = rows_outside_slice(&t, 2, 3);
    // expert 0: [0, 200) and [500, 800); expert 1's rows 0-1 [800, 1000) touch expert 0's tail
    const ByteRanges want = {{0, 200}, {500, 1000}, {1300, 1800}, {2100, 2400}};
    EXPECT_EQ(got, want);
    EXPECT_EQ(rows_outside_slice(&t, 0, 8), ByteRanges{}) << "the whole n_ff: nothing outside";
    EXPECT_EQ(rows_outside_slice(&t, 0, 0), (ByteRanges{{0, 800}, {800, 1600}, {1600, 2400}})) << "no slice: everything";
}

TEST(WeightRelease, TouchingRangesAreMergedBeforeWholePagesAreDropped) {
    const std::string dir = moezip_test::test_dir("weight_release_ranges");
    const size_t slice = 4 * kPage;
    MappedExperts m(dir, slice, 4);
    ASSERT_NE(m.map, MAP_FAILED);
    uint64_t released = 0;
    // pages [1.5, 2.5) hold no whole page and [2.5, 4.5) one (page 3); merged, [1.5, 4.5) holds pages 2 and 3
    Status st = release_tensor_ranges(&m.t, {{kPage * 5 / 2, kPage * 9 / 2}, {kPage * 3 / 2, kPage * 5 / 2}}, maps_now(), released);
    ASSERT_TRUE(st) << st.to_string();
    EXPECT_EQ(released, (uint64_t) 2 * kPage);
    EXPECT_EQ(mapping_rss_bytes(m.map), (int64_t) (m.bytes.size() - 2 * kPage));
    EXPECT_TRUE(m.unchanged());
    st = release_tensor_ranges(&m.t, {{0, 4 * slice + 1}}, maps_now(), released);
    EXPECT_EQ(st.code(), Status::Code::invalid_argument) << st.to_string();
}

TEST(WeightRelease, APageSharedByTwoTensorsDroppedRangesIsDropped) {
    // gate and up back to back as llama.cpp maps them: 3 experts of 1.25 pages each, so the tensors
    // meet inside page 3. Dropping up's last expert and gate's first touches that page from both
    // sides: merged by address it is whole, per tensor it never was (and stayed resident).
    const std::string dir = moezip_test::test_dir("weight_release_two_tensors");
    const size_t slice = kPage * 5 / 4;
    MappedExperts m(dir, slice, 6);
    ASSERT_NE(m.map, MAP_FAILED);
    ggml_tensor up = m.t, gate = m.t;
    up.ne[2] = gate.ne[2] = 3;
    up.nb[3] = gate.nb[3] = 3 * slice;
    gate.data = static_cast<char *>(m.map) + 3 * slice;
    strcpy(gate.name, "blk.0.ffn_gate_exps.weight");
    WeightReleaseTally tally;
    ByteRanges up_last, gate_first;
    ASSERT_TRUE(expert_slice_ranges(&up, {2}, up_last));
    ASSERT_TRUE(expert_slice_ranges(&gate, {0}, gate_first));
    // [2.5, 3.75) and [3.75, 5) pages: whole pages 3 and 4 together
    ASSERT_TRUE(tally.release({{&up, up_last}, {&gate, gate_first}}, "", "the experts workers own")) << tally.not_released;
    EXPECT_EQ(tally.advised_bytes, (uint64_t) 2 * kPage);
    EXPECT_EQ(tally.parts, 1u);
    uint64_t pages = 0, present = 0;
    const uintptr_t b = reinterpret_cast<uintptr_t>(m.map);
    ASSERT_TRUE(pages_present_bytes({{b + 3 * kPage, b + 5 * kPage}}, pages, present));
    EXPECT_EQ(pages, (uint64_t) 2 * kPage);
    EXPECT_EQ(present, 0u) << "the page the two tensors share is still resident";
    // 7.5 pages mapped: 8 resident (MAP_POPULATE), 2 dropped
    EXPECT_EQ(mapping_rss_bytes(m.map), (int64_t) (6 * kPage));
    EXPECT_TRUE(m.unchanged());
}

TEST(WeightRelease, CanarySamplesOfDroppedPagesAreReadFromTheFileNotFaultedIn) {
    // A plan's canary (provider_map.h) reads the first and last 256 bytes of each expert tensor at
    // every graph. With a reader for pages not present here (the model file of the recorded
    // mapping), dropped pages stay out of this process, and the canary is the one memory gives.
    const std::string dir = moezip_test::test_dir("weight_release_canary");
    MappedExperts m(dir, 4 * kPage, 4);
    ASSERT_NE(m.map, MAP_FAILED);
    ModelFiles files;
    files.mapped(m.map, m.bytes.size(), m.path, 0);
    ASSERT_EQ(madvise(m.map, m.bytes.size(), MADV_DONTNEED), 0);
    ASSERT_EQ(mapping_rss_bytes(m.map), 0);
    MoeRegion r;
    r.gate_exps = r.up_exps = r.down_exps = &m.t;
    BackendVariant v;
    const ByteReaderFn from_file = [&files](const void * at, void * out, size_t n) {
        return !pages_touching_present(at, n) && files.read(at, out, n);
    };
    const ProviderEntry read_from_file = provider_entry_make(r, v, nullptr, nullptr, from_file);
    EXPECT_EQ(mapping_rss_bytes(m.map), 0) << "the canary faulted dropped pages back in";
    const ProviderEntry read_in_memory = provider_entry_make(r, v, nullptr, nullptr);
    EXPECT_GT(mapping_rss_bytes(m.map), 0);
    EXPECT_EQ(read_from_file.gate.canary, read_in_memory.gate.canary);
    EXPECT_EQ(read_from_file.gate.canary, expert_slice_digest(m.bytes.data(), m.bytes.size()));
    EXPECT_EQ(read_from_file.identity, read_in_memory.identity);
    // present pages are read in memory: the reader declines them
    uint8_t head[16];
    EXPECT_FALSE(from_file(m.map, head, sizeof head));
    // outside any recorded mapping the file cannot be read
    EXPECT_FALSE(files.read(head, head, sizeof head));
}

TEST(WeightRelease, RejectsAnExpertOutsideTheTensor) {
    const std::string dir = moezip_test::test_dir("weight_release_range");
    MappedExperts m(dir, kPage, 4);
    uint64_t released = 0;
    Status st = release_expert_slices(&m.t, {1, 4}, maps_now(), released);
    EXPECT_EQ(st.code(), Status::Code::invalid_argument);
    EXPECT_NE(st.message().find("expert 4 outside [0, 4)"), std::string::npos) << st.message();
    EXPECT_EQ(released, 0u);
}

TEST(ModelMapPlan, SkipsWholePagesOfWorkerOwnedRunsOnly) {
    // a 100-page file with one expert tensor at byte 10*P + 100 of 8 experts of 2.5 pages each;
    // experts 2-4 and 7 are workers', 0-1 and 5-6 this host's (P = 4096)
    const uint64_t P = 4096;
    const std::vector<ExpertTensorBytes> t = {{10 * P + 100, 20 * P, 8}};
    const std::vector<int> owners = {-1, -1, 0, 0, 1, -1, -1, 0};
    ModelMapPlan plan = model_map_plan(100 * P, t, owners, P);
    // experts 2-4: bytes [10P+100 + 5P, 10P+100 + 12.5P) -> whole pages [16P, 22P)
    // expert 7:    bytes [10P+100 + 17.5P, 10P+100 + 20P) -> whole pages [28P, 30P)
    ASSERT_EQ(plan.skip.size(), 2u);
    EXPECT_EQ(plan.skip[0], std::make_pair(16 * P, 22 * P));
    EXPECT_EQ(plan.skip[1], std::make_pair(28 * P, 30 * P));
    ASSERT_EQ(plan.populate.size(), 3u);
    EXPECT_EQ(plan.populate[0], std::make_pair((uint64_t) 0, 16 * P));
    EXPECT_EQ(plan.populate[1], std::make_pair(22 * P, 28 * P));
    EXPECT_EQ(plan.populate[2], std::make_pair(30 * P, 100 * P));
    // nobody else owns anything: everything is populated
    plan = model_map_plan(100 * P, t, std::vector<int>(8, -1), P);
    EXPECT_TRUE(plan.skip.empty());
    ASSERT_EQ(plan.populate.size(), 1u);
    EXPECT_EQ(plan.populate[0], std::make_pair((uint64_t) 0, 100 * P));
}

TEST(ProcStatus, ReadsResidentAndPeakSizes) {
    int64_t rss = proc_status_kib("VmRSS"), hwm = proc_status_kib("VmHWM");
    EXPECT_GT(rss, 0);
    EXPECT_GE(hwm, rss);
    EXPECT_EQ(proc_status_kib("NoSuchKey"), -1);
}

} // namespace
