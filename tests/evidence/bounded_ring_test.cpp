// BoundedRing: the last N items of a sequence, oldest first, in N items of memory.
#include "coordinator/evidence/bounded_ring.h"

#include <gtest/gtest.h>

#include <vector>

TEST(BoundedRing, KeepsTheLastItemsInOrder) {
    moezip::BoundedRing<int> ring(4);
    for (int i = 0; i < 3; ++i) ring.push(i);
    EXPECT_EQ(ring.in_order(), (std::vector<int>{0, 1, 2}));
    for (int i = 3; i < 1003; ++i) ring.push(i);
    EXPECT_EQ(ring.in_order(), (std::vector<int>{999, 1000, 1001, 1002}));
    EXPECT_EQ(ring.size(), 4u);
    EXPECT_EQ(ring.allocated_bytes(), 4 * sizeof(int)) << "one allocation of the window, never more";
}

TEST(BoundedRing, ZeroCapacityHoldsNothing) {
    moezip::BoundedRing<int> ring(0);
    ring.push(1);
    EXPECT_EQ(ring.size(), 0u);
    EXPECT_TRUE(ring.in_order().empty());
}
