// Row split by shares and expert ownership.
#include "coordinator/modes/split.h"

#include <gtest/gtest.h>

using namespace moezip;

TEST(SplitRows, SeventyEightTwentyTwoOfHundredRows) {
    auto b = split_rows(100, {0.78, 0.22});
    ASSERT_EQ(b.size(), 2u);
    EXPECT_EQ(b[0].first, 0); EXPECT_EQ(b[0].count, 78);
    EXPECT_EQ(b[1].first, 78); EXPECT_EQ(b[1].count, 22);
}

TEST(SplitRows, CountsAlwaysAddUpAndFollowEachOther) {
    for (int64_t n : {0, 1, 2, 3, 7, 16, 127, 512}) {
        auto b = split_rows(n, {0.5, 0.25, 0.25});
        int64_t total = 0;
        for (size_t i = 0; i < b.size(); ++i) {
            EXPECT_EQ(b[i].first, total) << "n=" << n;
            total += b[i].count;
        }
        EXPECT_EQ(total, n);
    }
}

TEST(SplitRows, LargestRemaindersGetTheLeftoverRows) {
    // 7 * (1/3) = 2.33 each: one row left over goes to the first (ties: earlier block)
    auto b = split_rows(7, {1.0 / 3, 1.0 / 3, 1.0 / 3});
    EXPECT_EQ(b[0].count, 3); EXPECT_EQ(b[1].count, 2); EXPECT_EQ(b[2].count, 2);
    // 0.78 of 1 row rounds to the coordinator, the worker gets none
    auto one = split_rows(1, {0.78, 0.22});
    EXPECT_EQ(one[0].count, 1); EXPECT_EQ(one[1].count, 0);
}

TEST(SplitRows, AZeroShareGetsNoRows) {
    auto b = split_rows(5, {0.0, 1.0});
    EXPECT_EQ(b[0].count, 0);
    EXPECT_EQ(b[1].count, 5);
}

TEST(ExpertOwners, CoordinatorWorkersAndUnowned) {
    Config cfg;
    ASSERT_TRUE(config_load_string("mode = \"experts\"\n[experts]\nlocal = \"0-1\"\n[[worker]]\nendpoint = \"ipc:///tmp/a\"\n"
                                   "experts = \"2-4\"\n[[worker]]\nendpoint = \"ipc:///tmp/b\"\nexperts = \"6\"\n",
                                   "t.toml", cfg));
    std::vector<int> o = expert_owners(cfg, 8);
    EXPECT_EQ(o, (std::vector<int>{-1, -1, 0, 0, 0, -2, 1, -2}));
}

TEST(SplitFf, SlicesAreWholeBlocksInOrder) {
    // a3b's n_ff 768 in q8_0 blocks of 32 (24 blocks), 50/50: two slices of 384
    std::vector<RowBlock> s = split_ff(768, 32, {0.5, 0.5});
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0].first, 0); EXPECT_EQ(s[0].count, 384);
    EXPECT_EQ(s[1].first, 384); EXPECT_EQ(s[1].count, 384);
    // 3 blocks of 256 (q4_K) by 1/3 each: one block per host
    s = split_ff(768, 256, {1.0 / 3, 1.0 / 3, 1.0 / 3});
    EXPECT_EQ(s[0].count, 256); EXPECT_EQ(s[1].first, 256); EXPECT_EQ(s[2].first, 512); EXPECT_EQ(s[2].count, 256);
    // 0.9 / 0.1 of 3 blocks: 2.7 -> 3 and 0.3 -> 0 (a share below one block gets nothing)
    s = split_ff(768, 256, {0.9, 0.1});
    EXPECT_EQ(s[0].count, 768); EXPECT_EQ(s[1].count, 0);
}
