// When a change of shard slices pays for itself (coordinator/balance/slice_change_gate.h): the first
// change is taken and measured; a later better split waits until what the current split lost since
// then reaches what a change cost.
#include "coordinator/balance/slice_change_gate.h"

#include <gtest/gtest.h>

using moezip::SliceChangeGate;

namespace {

// A change whose first calls of 4 layers took `per_layer_ms` over their expected time each, then a
// second call of layer 0 (which ends the measurement).
void change_costing(SliceChangeGate & g, double per_layer_ms) {
    g.changed();
    for (int il = 0; il < 4; ++il) g.observe_call(il, per_layer_ms, 0.0);
    g.observe_call(0, 0.0, 0.0);
}

} // namespace

TEST(SliceChangeGate, TheFirstChangeIsTakenAndItsRepacksMeasured) {
    SliceChangeGate g;
    EXPECT_TRUE(g.take(2.0, 1.9, 4)) << "the calibration's change: nothing measured yet";
    EXPECT_LT(g.change_cost_ms(), 0.0);
    change_costing(g, 300.0);
    EXPECT_DOUBLE_EQ(g.change_cost_ms(), 1200.0) << "4 layers' first calls at 300 ms over";
    EXPECT_TRUE(g.to_json()["slice_change_cost_ms"].is_number());
}

TEST(SliceChangeGate, ASmallSavingWaitsUntilItHasPaidForTheRepack) {
    // the measured case: a split 5% better on ~2 ms calls, checked every 64 calls, against 1.2 s of
    // repacking. Taken at once, it cost a 64-step decode a third of its speed (shard1_auto_slow 0.36x).
    SliceChangeGate g;
    ASSERT_TRUE(g.take(2.0, 1.9, 4));
    change_costing(g, 300.0);
    int checks = 0;
    while (!g.take(2.0, 1.9, 64)) ++checks;
    // 0.1 ms x 64 calls = 6.4 ms of regret a check: 1200 / 6.4 = 187.5, so the 188th check
    EXPECT_EQ(checks, 187);
    EXPECT_EQ(g.to_json()["slice_changes_declined"], 187);
    g.changed();
    EXPECT_EQ(g.to_json()["regret_ms"], 0.0) << "the regret starts again after a change";
}

TEST(SliceChangeGate, ALargeSavingIsTakenAtTheNextCheck) {
    // the worker slowed down: the current split makes every call wait 20 ms more than the proposed one
    SliceChangeGate g;
    ASSERT_TRUE(g.take(2.0, 1.9, 4));
    change_costing(g, 300.0);
    EXPECT_TRUE(g.take(22.0, 2.0, 64)) << "20 ms x 64 calls = 1280 ms >= 1200 ms";
}

TEST(SliceChangeGate, AChangeCostsAtLeastItsRepacksFloor) {
    // the make bench case: the first change's calls were a prompt's, 22 ms over their rough
    // prediction, while the repacks (this host's and the worker's) took at least 400 ms a layer
    SliceChangeGate g;
    ASSERT_TRUE(g.take(2.0, 1.9, 4));
    g.changed();
    for (int il = 0; il < 4; ++il) g.observe_call(il, 5.5, 400.0);
    g.observe_call(0, 0.0, 0.0);
    EXPECT_DOUBLE_EQ(g.change_cost_ms(), 4 * 400.0);
    EXPECT_FALSE(g.take(12.0, 2.0, 64)) << "10 ms x 64 calls = 640 ms does not pay for 1600 ms";
    EXPECT_FALSE(g.take(12.0, 2.0, 64)) << "1280 ms: not yet";
    EXPECT_TRUE(g.take(12.0, 2.0, 64)) << "1920 ms: now";
}

TEST(SliceChangeGate, NoChangeWhileAnotherIsBeingMeasuredAndNoSavingNoRegret) {
    SliceChangeGate g;
    ASSERT_TRUE(g.take(2.0, 1.9, 4));
    g.changed();
    g.observe_call(0, 50.0, 0.0);  // layers 1.. not seen yet
    EXPECT_FALSE(g.take(100.0, 1.0, 64)) << "the last change's cost is not known yet";
    g.observe_call(1, 50.0, 0.0);
    g.observe_call(0, 0.0, 0.0);
    EXPECT_DOUBLE_EQ(g.change_cost_ms(), 100.0);
    for (int i = 0; i < 1000; ++i) EXPECT_FALSE(g.take(2.0, 2.5, 64)) << "a worse split adds nothing";
    EXPECT_EQ(g.to_json()["regret_ms"], 0.0);
}
