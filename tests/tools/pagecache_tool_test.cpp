// Tests of the page-cache state of a file (coordinator/memory/page_cache.h) and of moezip-pagecache,
// on files written under build/test-out/ (a disk filesystem: tmpfs pages cannot be evicted, and the
// evict test would say so). Readahead builds 2 MiB folios only after it has ramped up (on this VM's
// 6.18 ext4: none in 64 MiB read through a mapping, 48 MiB of 128 MiB), so the test of the fill kinds
// uses 128 MiB.
#include "coordinator/memory/page_cache.h"
#include "tests/support/test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

using moezip::PageCacheFill;
using moezip::PageCacheState;
using moezip::Status;

namespace {

constexpr uint64_t file_bytes = (8u << 20) + 123;  // a tail that is not a whole page

std::string write_file(const std::string & name, uint64_t bytes = file_bytes) {
    const std::string path = moezip_test::test_dir(name) + "/model.bin";
    std::vector<char> data(bytes);
    for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<char>(i * 2654435761u >> 24);
    std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
    return path;
}

PageCacheState state_of(const std::string & path) {
    PageCacheState s;
    Status st = moezip::page_cache_state(path, s);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return s;
}

} // namespace

TEST(PageCache, EvictLeavesNothingAndMeasuringReadsNothingIn) {
    const std::string path = write_file("pagecache_evict");
    ASSERT_TRUE(moezip::page_cache_evict(path).is_ok());
    PageCacheState a = state_of(path);
    EXPECT_EQ(a.file_bytes, file_bytes);
    EXPECT_EQ(a.resident_bytes, 0u);
    EXPECT_EQ(a.pmd_mapped_bytes, 0u);
    // the measurement maps and touches only resident pages (MADV_RANDOM: no readahead either)
    EXPECT_EQ(state_of(path).resident_bytes, 0u);
}

TEST(PageCache, TheKernelFillKeepsReadaheadsFoliosAndTheSmallFillLeavesNoneThatAPmdMaps) {
    constexpr uint64_t big = (128u << 20) + 123;
    const std::string path = write_file("pagecache_fills", big);
    ASSERT_TRUE(moezip::page_cache_evict(path).is_ok());
    ASSERT_TRUE(moezip::page_cache_fill(path, PageCacheFill::kernel).is_ok());
    PageCacheState k = state_of(path);
    EXPECT_EQ(k.resident_bytes, big);
    // never more than the file's whole 2 MiB units, and only whole ones
    EXPECT_LE(k.pmd_mapped_bytes, big / (2u << 20) * (2u << 20));
    EXPECT_EQ(k.pmd_mapped_bytes % (2u << 20), 0u);
    if (k.pmd_mapped_bytes == 0)
        std::cerr << "note: this kernel's readahead built no 2 MiB folio for a 128 MiB file (no large folios on "
                     "this filesystem?): the small fill's zero below is no contrast here\n";

    ASSERT_TRUE(moezip::page_cache_evict(path).is_ok());
    ASSERT_TRUE(moezip::page_cache_fill(path, PageCacheFill::small).is_ok());
    PageCacheState s = state_of(path);
    EXPECT_EQ(s.resident_bytes, big);
    EXPECT_EQ(s.pmd_mapped_bytes, 0u) << "reads without readahead left 2 MiB folios";
}

TEST(PageCache, EvictRefusesWhileAProcessHoldsThePagesAndSaysHowManyStay) {
    const std::string path = write_file("pagecache_busy");
    int fd = open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    void * m = mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(m, MAP_FAILED);
    ASSERT_EQ(mlock(m, 4096), 0) << "mlock of one page (RLIMIT_MEMLOCK)";
    Status st = moezip::page_cache_evict(path);
    munlock(m, 4096);
    munmap(m, file_bytes);
    close(fd);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("bytes stay in the page cache"), std::string::npos) << st.message();
}

TEST(PageCache, AMissingFileIsAnErrorNamingItAndTheCall) {
    PageCacheState s;
    Status st = moezip::page_cache_state("/nonexistent/model.gguf", s);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("/nonexistent/model.gguf: open failed"), std::string::npos) << st.message();
}

TEST(PagecacheTool, SetSmallPrintsTheStateItLeftAndRefusesAnUnknownFill) {
    const std::string path = write_file("pagecache_tool");
    auto r = moezip_test::run_tool("moezip-pagecache", {"set", "--fill", "small", path});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["file"], path);
    EXPECT_EQ(j["file_bytes"], file_bytes);
    EXPECT_EQ(j["resident_bytes"], file_bytes);
    EXPECT_EQ(j["pmd_mapped_bytes"], 0u);
    EXPECT_EQ(state_of(path).resident_bytes, file_bytes);

    auto bad = moezip_test::run_tool("moezip-pagecache", {"set", "--fill", "huge", path});
    EXPECT_NE(bad.exit_code, 0);
    EXPECT_NE(bad.err.find("--fill"), std::string::npos) << bad.err;

    auto evicted = moezip_test::run_tool("moezip-pagecache", {"evict", path});
    ASSERT_EQ(evicted.exit_code, 0) << evicted.err;
    EXPECT_EQ(state_of(path).resident_bytes, 0u);
}
