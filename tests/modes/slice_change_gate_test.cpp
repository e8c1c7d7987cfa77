// When a change of shard slices pays for itself (coordinator/balance/slice_change_gate.h): what the
// first packs cost is known before any change; the calibration's change is taken at once; a later
// better split waits until what the current split lost since the last change reaches that cost.
#include "coordinator/balance/slice_change_gate.h"

#include <gtest/gtest.h>

using moezip::CallSize;
using moezip::SliceChangeGate;

constexpr CallSize kDecode = CallSize::small, kPrefill = CallSize::large;

namespace {

// The run's first calls of 4 layers, each `ms` long (every host packs its first slices), then a
// second call of layer 0, which ends the measurement.
void first_packs(SliceChangeGate & g, double ms) {
    for (int il = 0; il < 4; ++il) g.observe_call(kPrefill, il, ms, 1.0, 0.0);
    g.observe_call(kPrefill, 0, 2.0, 2.0, 0.0);
}

// A change whose first call of each of 4 layers took `over` ms more than expected.
void change_costing(SliceChangeGate & g, double over, double floor = 0.0, CallSize size = kDecode) {
    g.changed(size);
    for (int il = 0; il < 4; ++il) g.observe_call(size, il, 2.0 + over, 2.0, floor);
    g.observe_call(size, 0, 2.0, 2.0, 0.0);
}

} // namespace

TEST(SliceChangeGate, TheFirstPacksPriceAChangeBeforeAnyIsMade) {
    SliceChangeGate g;
    EXPECT_TRUE(g.to_json()["slice_change_cost_ms"].is_null());
    first_packs(g, 300.0);
    EXPECT_DOUBLE_EQ(g.change_cost_ms(), 1200.0) << "4 layers' first calls of 300 ms";
    EXPECT_TRUE(g.take(kDecode, 2.0, 1.9, 4, /*calibration =*/ true)) << "the calibration's change is taken at once";
    change_costing(g, 20.0);  // looked cheap (a prompt's calls): the dearer first packs stand
    EXPECT_DOUBLE_EQ(g.change_cost_ms(), 1200.0);
}

TEST(SliceChangeGate, ASplitChosenFromTheCoresIsJudgedAtTheCalibrationNotReplaced) {
    // make bench: the calibration measured a 40%-capped worker while it packed within its quota and
    // moved the split from the cores (0.29 of n_ff) to 0.08 for the whole run
    SliceChangeGate g;
    g.mark_chosen(kPrefill);
    EXPECT_TRUE(g.chosen(kPrefill));
    EXPECT_FALSE(g.chosen(kDecode)) << "the decode split was not chosen: equal by default";
    first_packs(g, 1000.0);  // 4000 ms to change
    EXPECT_FALSE(g.take(kPrefill, 600.0, 400.0, 4, /*calibration =*/ true)) << "800 ms of regret against 4000";
    EXPECT_TRUE(g.take(kDecode, 2.0, 1.9, 4, /*calibration =*/ true)) << "the even decode split is replaced at once";
    g.changed(kDecode);
    EXPECT_TRUE(g.chosen(kDecode)) << "a split once changed was chosen by a measure";
    EXPECT_EQ(g.to_json()["slice_changes_declined"], 1);
    EXPECT_FALSE(g.take(kPrefill, 600.0, 400.0, 4, false)) << "1600 ms";
    EXPECT_FALSE(g.take(kPrefill, 600.0, 400.0, 8, false)) << "3200 ms";
    EXPECT_TRUE(g.take(kPrefill, 600.0, 400.0, 4, false)) << "4000 ms: paid";
}

TEST(SliceChangeGate, ASmallSavingWaitsUntilItHasPaidForTheRepack) {
    // the measured case: a split 5% better on ~2 ms calls, checked every 64 calls, against 1.2 s of
    // repacking. Taken at once, it cost a 64-step decode a third of its speed (shard1_auto_slow 0.36x).
    SliceChangeGate g;
    first_packs(g, 300.0);
    ASSERT_TRUE(g.take(kDecode, 2.0, 1.9, 4, /*calibration =*/ true));
    change_costing(g, 300.0);
    int checks = 0;
    while (!g.take(kDecode, 2.0, 1.9, 64, false)) ++checks;
    // 0.1 ms x 64 calls = 6.4 ms of regret a check: 1200 / 6.4 = 187.5, so the 188th check
    EXPECT_EQ(checks, 187);
    EXPECT_EQ(g.to_json()["slice_changes_declined"], 187);
    g.changed(kDecode);
    EXPECT_EQ(g.to_json()["regret_ms"], 0.0) << "the regret starts again after a change";
}

TEST(SliceChangeGate, ALargeSavingIsTakenOnceItHasPaid) {
    // the worker slowed down: the current split makes every call wait 10 ms more than the proposed one
    SliceChangeGate g;
    first_packs(g, 400.0);
    ASSERT_TRUE(g.take(kDecode, 2.0, 1.9, 4, /*calibration =*/ true));
    change_costing(g, 0.0, 400.0);  // a repack floor of 400 ms a layer
    EXPECT_DOUBLE_EQ(g.change_cost_ms(), 1600.0);
    EXPECT_FALSE(g.take(kDecode, 12.0, 2.0, 64, false)) << "10 ms x 64 calls = 640 ms does not pay for 1600 ms";
    EXPECT_FALSE(g.take(kDecode, 12.0, 2.0, 64, false)) << "1280 ms: not yet";
    EXPECT_TRUE(g.take(kDecode, 12.0, 2.0, 64, false)) << "1920 ms: now";
}

TEST(SliceChangeGate, NoChangeWhileAnotherIsBeingMeasuredAndNoSavingNoRegret) {
    SliceChangeGate g;
    first_packs(g, 25.0);
    ASSERT_TRUE(g.take(kDecode, 2.0, 1.9, 4, /*calibration =*/ true));
    g.changed(kDecode);
    g.observe_call(kDecode, 0, 52.0, 2.0, 0.0);  // layers 1.. not seen yet
    EXPECT_FALSE(g.take(kDecode, 100.0, 1.0, 64, false)) << "the last change's cost is not known yet";
    g.observe_call(kDecode, 1, 52.0, 2.0, 0.0);
    g.observe_call(kDecode, 0, 2.0, 2.0, 0.0);
    EXPECT_DOUBLE_EQ(g.change_cost_ms(), 100.0) << "50 + 50, as dear as the first packs' 4 x 25";
    const double regret = g.to_json()["regret_ms"].get<double>();
    EXPECT_DOUBLE_EQ(regret, 99.0 * 64) << "the saving proposed while measuring still counts";
    EXPECT_TRUE(g.take(kDecode, 2.0, 2.5, 64, false)) << "... and pays for the change once the measurement is done";
    g.changed(kDecode);
    for (int i = 0; i < 1000; ++i) EXPECT_FALSE(g.take(kDecode, 2.0, 2.5, 64, false)) << "a worse split adds nothing";
    EXPECT_EQ(g.to_json()["regret_ms"], 0.0);
}

TEST(SliceChangeGate, DecodeAndPrefillSplitsKeepTheirOwnRegretAndShareThePrice) {
    // a worker capped by a CPU quota: full speed in short decode calls, a fraction in long prefill
    // ones, so each call size has its split. The first packs (prefill calls here) price a change of
    // either; the decode split's regret does not buy a prefill change, nor the reverse.
    SliceChangeGate g;
    first_packs(g, 250.0);  // 1000 ms
    ASSERT_TRUE(g.take(kPrefill, 600.0, 400.0, 4, /*calibration =*/ true));
    change_costing(g, 100.0, 0.0, kPrefill);  // 400 ms: the first packs' 1000 ms stand
    EXPECT_FALSE(g.take(kDecode, 3.0, 2.0, 600, false)) << "600 ms of decode regret";
    EXPECT_FALSE(g.take(kPrefill, 600.0, 599.0, 300, false)) << "300 ms of prefill regret: its own, not added to decode's";
    EXPECT_DOUBLE_EQ(g.to_json()["regret_ms_decode"].get<double>(), 600.0);
    EXPECT_DOUBLE_EQ(g.to_json()["regret_ms_prefill"].get<double>(), 300.0);
    EXPECT_TRUE(g.take(kDecode, 3.0, 2.0, 400, false)) << "1000 ms of decode regret pays for a change";
    g.changed(kDecode);
    g.observe_call(kPrefill, 0, 900.0, 500.0, 0.0);  // a prefill call does not measure the decode change
    EXPECT_FALSE(g.take(kDecode, 3.0, 0.0, 10, false)) << "the decode change is still being measured";
    for (int il = 0; il < 4; ++il) g.observe_call(kDecode, il, 2.0 + 500.0, 2.0, 0.0);
    g.observe_call(kDecode, 0, 2.0, 2.0, 0.0);
    EXPECT_DOUBLE_EQ(g.change_cost_ms(), 2000.0) << "the decode change's 4 x 500 ms is the dearest: it prices both";
    EXPECT_DOUBLE_EQ(g.to_json()["regret_ms_decode"].get<double>(), 30.0) << "the saving proposed while measuring still counts";
    EXPECT_TRUE(g.take(kPrefill, 600.0, 0.0, 4, false)) << "300 + 2400 ms of prefill regret against 2000";
}

TEST(SliceChangeGate, APrefillChangeBeingMeasuredDoesNotHoldBackDecodeChanges) {
    // A prompt ended with a prefill change; its measurement ends only when prefill calls
    // see every layer again, which no decode call does, so 6000 decode calls declined every decode
    // change with a regret 31 times the price.
    SliceChangeGate g;
    first_packs(g, 25.0);  // 100 ms
    ASSERT_TRUE(g.take(kPrefill, 2.0, 1.9, 4, /*calibration =*/ true));
    g.changed(kPrefill);
    g.observe_call(kPrefill, 0, 60.0, 2.0, 0.0);  // the prompt's last call: layers 1.. never seen again
    EXPECT_FALSE(g.take(kPrefill, 100.0, 1.0, 64, false)) << "the prefill change's own cost is not known yet";
    for (int check = 0; check < 10; ++check) g.observe_call(kDecode, check % 4, 2.0, 2.0, 0.0);
    EXPECT_TRUE(g.take(kDecode, 3.0, 1.0, 64, false)) << "128 ms of decode regret pays for the 100 ms price";
}

TEST(SliceChangeGate, AProbeWaitsUntilTenTimesAChangesPriceHasPassed) {
    // without the wait, a worker's decode slice went off (paid), on (probe), off (paid) every 192
    // calls, a repack on both sides each time, with no saving paying for the probes
    SliceChangeGate g;
    EXPECT_TRUE(g.probe_affordable(0.0)) << "no price yet";
    first_packs(g, 1000.0);  // 4000 ms a change
    EXPECT_FALSE(g.probe_affordable(39999.0));
    EXPECT_TRUE(g.probe_affordable(40000.0));
}

