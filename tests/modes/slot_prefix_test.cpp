// A worker's slots as a prefix of the engine's slot order: the reply is one partial sum per row and
// this host continues the ADD chain from it (coordinator/compute/moe_exec.h,
// moe_sum_slots_after_prefix; coordinator/balance/expert_balance.h, prefer_slot_prefix).
#include "coordinator/balance/expert_balance.h"
#include "coordinator/compute/moe_exec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace moezip;

namespace {

/// Per expert of a call, its usable owners (host indices): every expert of `ids` owned by `hosts`.
std::vector<ExpertGroup> owned_by(const std::vector<int32_t> & ids, const std::vector<int> & hosts) {
    std::vector<ExpertGroup> g;
    for (int32_t e : ids) g.push_back({e, 1, hosts});
    return g;
}

} // namespace

TEST(SlotPrefix, AChainContinuedFromAPrefixSumIsTheWholeChainBitForBit) {
    // values of mixed magnitude, so that the order of the adds changes the rounding
    const int64_t E = 257, k = 8;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
    std::uniform_int_distribution<int> expo(-20, 20);
    std::vector<float> slots((size_t) (E * k));
    for (float & v : slots) v = std::ldexp(mant(rng), expo(rng));
    std::vector<float> whole((size_t) E);
    moe_sum_slots(slots.data(), E, k, 1, whole.data());
    // the reordered sum differs somewhere: the test can tell an order from another
    std::vector<float> reversed((size_t) E, 0.0f);
    for (int64_t s = k - 1; s >= 0; --s)
        for (int64_t j = 0; j < E; ++j) reversed[j] += slots[s * E + j];
    ASSERT_NE(memcmp(whole.data(), reversed.data(), E * sizeof(float)), 0);
    for (int64_t m = 1; m <= k; ++m) {
        std::vector<float> prefix((size_t) E);
        moe_sum_slots(slots.data(), E, m, 1, prefix.data());  // a worker's row sum of slots 0..m-1 is this fold
        // the prefix as it comes from libzmq: at an address not aligned for float
        std::vector<char> frame(E * sizeof(float) + 1);
        memcpy(frame.data() + 1, prefix.data(), E * sizeof(float));
        std::vector<float> out((size_t) E, -1.0f);
        moe_sum_slots_after_prefix(frame.data() + 1, m, slots.data(), E, k, out.data());
        EXPECT_EQ(memcmp(out.data(), whole.data(), E * sizeof(float)), 0) << "prefix of " << m << " slots";
    }
}

TEST(SlotPrefix, AWorkersSlotsOfADecodeCallBecomeTheFirstOnesWithTheSameCounts) {
    const std::vector<int32_t> ids = {12, 3, 40, 7, 21, 9, 33, 5};  // the router's top-8, in slot order
    std::vector<int> host_of(64, -1);
    const int here = 0, worker = 1;
    // the balancer gave the worker 3 slots, not the first ones
    for (int32_t e : ids) host_of[(size_t) e] = here;
    host_of[3] = host_of[21] = host_of[5] = worker;
    ASSERT_TRUE(prefer_slot_prefix(ids.data(), 8, owned_by(ids, {here, worker}), host_of));
    for (size_t s = 0; s < ids.size(); ++s) EXPECT_EQ(host_of[(size_t) ids[s]], s < 3 ? worker : here) << "slot " << s;
}

TEST(SlotPrefix, NoPrefixIsForcedWhereAnExpertHasOneOwnerOrTwoWorkersShare) {
    const std::vector<int32_t> ids = {12, 3, 40, 7};
    std::vector<int> base(64, -1);
    for (int32_t e : ids) base[(size_t) e] = 0;
    base[3] = base[7] = 1;  // worker 1 has slots 1 and 3
    // slot 0's expert is this host's alone: the worker cannot take it
    std::vector<ExpertGroup> g = owned_by(ids, {0, 1});
    g[0].hosts = {0};
    std::vector<int> host_of = base;
    EXPECT_FALSE(prefer_slot_prefix(ids.data(), 4, g, host_of));
    EXPECT_EQ(host_of, base) << "nothing rewritten";
    // slot 3's expert is the worker's alone: this host cannot take it
    g = owned_by(ids, {0, 1});
    g[3].hosts = {1};
    EXPECT_FALSE(prefer_slot_prefix(ids.data(), 4, g, host_of));
    EXPECT_EQ(host_of, base);
    // two workers: no single prefix
    host_of = base;
    host_of[40] = 2;
    const std::vector<int> two = host_of;
    EXPECT_FALSE(prefer_slot_prefix(ids.data(), 4, owned_by(ids, {0, 1, 2}), host_of));
    EXPECT_EQ(host_of, two);
    // one worker slot: its output is one row already, nothing to gain
    host_of = base;
    host_of[7] = 0;
    const std::vector<int> one = host_of;
    EXPECT_FALSE(prefer_slot_prefix(ids.data(), 4, owned_by(ids, {0, 1}), host_of));
    EXPECT_EQ(host_of, one);
}
