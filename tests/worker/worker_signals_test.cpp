// moezip-worker under signals (coordinator/wire/zmq_eintr.h): a signal that lands inside a ZeroMQ
// call returns EINTR there. The worker took that for an error: its serving loop ended with
// "Interrupted system call" and exit status 1 when SIGTERM came while it read its monitor's events
// (CI, Worker.SigtermExitsZeroWithinASecond, 2 runs in 300 here), and a signal between the parts of a
// request or a reply would have cut the message's framing. The fault signal_every_us puts a signal
// into every call of the serving loop.
#include "tests/support/cluster.h"
#include "tests/worker/worker_fixtures.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>

using namespace moezip_test;
using moezip::MsgKind;

TEST(WorkerSignals, ASignalEvery50UsLosesNoRequestAndNoReplyAndSigtermStillExitsZero) {
    ReferenceModel m;
    ASSERT_TRUE(m.load(tiny_model()));
    const std::string dir = test_dir("worker_signal_storm");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {"--threads", "1"}, {{"MOEZIP_WORKER_FAULT", "signal_every_us=50"}}));
    constexpr int kComputes = 1000, kPings = 300;
    int results = 0, exact = 0, pongs = 0;
    {
        WorkerClient c(w.endpoint(), w.instance());
        ASSERT_TRUE(c.planned()) << "hello under signals";
        for (int i = 0; i < kComputes; ++i) {
            ComputeRequest r = random_request(i % 2, 1 + i % 16, 1000 + (uint32_t) i);
            r.reply = moezip::ReplyKind::slots;
            WorkerReply rep = ask_compute(c, r);
            if (rep.h.kind != (uint16_t) MsgKind::result) {
                ADD_FAILURE() << "request " << i << ": " << rep.text();
                break;
            }
            ++results;
            if (rep.h.request_id == r.request_id && rep.verify() == moezip::ErrorCode::ok &&
                same_bytes(rep.frames[0], reference_compute(m, r).slots))
                ++exact;
            if (i % 3 == 0 && pongs < kPings && ask(c, simple_frames(MsgKind::ping, 5000 + (uint64_t) i)).h.kind == (uint16_t) MsgKind::pong)
                ++pongs;
        }
    }
    EXPECT_EQ(results, kComputes);
    EXPECT_EQ(exact, kComputes) << "every result is its own request's, hash-verified and equal to the reference";
    EXPECT_EQ(pongs, kPings);
    double ms = 0;
    EXPECT_EQ(w.stop(SIGTERM, 5000, &ms), 0) << w.stderr_text();
    const std::string counters = w.stderr_text();
    EXPECT_NE(counters.find("requests 1301 (hello 1, compute 1000, ping 300)"), std::string::npos) << counters;
    EXPECT_EQ(worker_counter(counters, "errors"), 0u) << counters;
    EXPECT_EQ(counters.find("Interrupted system call"), std::string::npos) << counters;
}

// The fault sleeps (delay_ms, slow, prepack_delay_ms) were usleep, which ends at
// the first EINTR: with signal_every_us they lasted microseconds, and a test combining the two
// tested nothing.
TEST(WorkerSignals, AFaultsDelayLastsItsWholeTimeThroughSignals) {
    const std::string dir = test_dir("worker_signal_delay");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {}, {{"MOEZIP_WORKER_FAULT", "delay_ms=300,signal_every_us=100"}}));
    WorkerClient c(w.endpoint(), w.instance());
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(ask_compute(c, random_request(0, 1, 61)).h.kind, (uint16_t) MsgKind::result);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(ms, 300.0) << "the delay was cut short by the signals";
}

TEST(WorkerSignals, ADelayMarkerWithoutADelayOrAPlaceToWriteIsRefusedAtStart) {
    CommandResult alone = run_command({bin_path("moezip-worker"), "--model", tiny_model()}, {{"MOEZIP_WORKER_FAULT", "delay_marker=/tmp/x"}}, 60);
    EXPECT_EQ(alone.exit_code, 2);
    EXPECT_NE(alone.err.find("it needs delay_ms=N"), std::string::npos) << alone.err;
    CommandResult nowhere = run_command({bin_path("moezip-worker"), "--model", tiny_model()},
                                        {{"MOEZIP_WORKER_FAULT", "delay_ms=5,delay_marker=/nonexistent/dir/x"}}, 60);
    EXPECT_EQ(nowhere.exit_code, 2);
    EXPECT_NE(nowhere.err.find("delay_marker=/nonexistent/dir/x: cannot write it"), std::string::npos) << nowhere.err;
}
