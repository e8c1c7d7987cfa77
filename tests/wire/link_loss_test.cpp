// A worker whose process ends while a request is in flight: the coordinator's wait ends when the
// connection closes, not at the request's timeout (20 s stalls were seen with timeout_ms =
// 20000 after SIGTERM and kill -9), and a reply the worker sent just before it exited is still taken.
#include "coordinator/wire/transport.h"
#include "tests/support/test_support.h"
#include "tests/support/worker_harness.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <thread>

using namespace moezip_test;

namespace {

std::string tiny_q8() { return fixture_model({"--preset", "tiny", "--type", "q8_0"}); }

// hello, so that the link holds the worker's verified instance
void say_hello(moezip::WorkerLink & link, uint64_t instance) {
    moezip::MsgHeader h = moezip::msg_header_make(moezip::MsgKind::hello);
    h.request_id = 1;
    const std::string plan = hello_json(kRowsPlan);
    ASSERT_TRUE(link.send(h, {{moezip::WireType::none, {plan.data(), plan.size()}}}));
    moezip::MsgHeader rh;
    zmq::message_t d;
    ASSERT_TRUE(link.recv(1, rh, d));
    link.set_instance(instance);
}

// One row through two experts of layer 0 of the tiny preset (n_embd 64, n_ff 64).
moezip::Status send_compute(moezip::WorkerLink & link, uint64_t request_id) {
    static std::vector<float> hidden(64, 0.25f), weights = {0.5f, 0.5f};
    static std::vector<int32_t> ids = {1, 5};
    moezip::MsgHeader h = moezip::msg_header_make(moezip::MsgKind::compute);
    h.request_id = request_id; h.layer = 0; h.n_embd = 64; h.n_ff = 64; h.n_used = 2; h.n_rows = 1;
    h.reply = (uint16_t) moezip::ReplyKind::row_sums; h.glu_op = GGML_GLU_OP_SWIGLU;
    return link.send(h, {{moezip::WireType::f32, {hidden.data(), hidden.size() * 4}},
                         {moezip::WireType::i32, {ids.data(), ids.size() * 4}},
                         {moezip::WireType::f32, {weights.data(), weights.size() * 4}}});
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

TEST(LinkLoss, AWorkerKilledWhileARequestIsInFlightEndsTheWaitWithoutTheTimeout) {
    const std::string model = tiny_q8();
    ASSERT_FALSE(model.empty());
    for (const char * transport : {"tcp", "ipc"}) {
        SCOPED_TRACE(transport);
        const std::string dir = test_dir(std::string("link_loss_kill_") + transport);
        const std::string bind = std::string(transport) == "tcp" ? "tcp://127.0.0.1:*" : "ipc://" + dir + "/w.sock";
        WorkerProcess w;
        // every compute is held 5 s: the kill lands while the request is being served
        ASSERT_TRUE(w.start({"--model", model, "--bind", bind}, dir, {{"MOEZIP_WORKER_FAULT", "delay_ms=5000"}})) << w.error();
        zmq::context_t ctx(1);
        moezip::WorkerLink link(ctx, w.endpoint(), 20000);
        say_hello(link, w.instance());
        ASSERT_TRUE(send_compute(link, 7));
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ASSERT_EQ(w.stop(SIGKILL, 5000), 128 + SIGKILL);
        const auto t0 = std::chrono::steady_clock::now();
        moezip::MsgHeader rh;
        zmq::message_t data;
        const moezip::Status st = link.recv(7, rh, data);
        const double waited = ms_since(t0);
        ASSERT_FALSE(st);
        EXPECT_EQ(st.code(), moezip::Status::Code::io_error) << st.to_string();
        EXPECT_NE(st.message().find("connection closed while the request was in flight"), std::string::npos) << st.to_string();
        EXPECT_EQ(link.stats().disconnects, 1u);
        EXPECT_EQ(link.stats().timeouts, 0u) << "the wait ran into the 20 s timeout";
        EXPECT_LT(waited, 10000.0) << "half the timeout at most (it takes milliseconds)";
    }
}

TEST(LinkLoss, AReplySentJustBeforeTheWorkerExitsIsTakenOrTheWaitEndsAtOnce) {
    // SIGTERM while a request is served: the worker answers it, then closes and exits. The reply
    // and the disconnect reach the coordinator by different pipes. libzmq may drop a reply that
    // arrived as the connection closed (ZMQ_IMMEDIATE ends the pipe; seen in about 1 of 20 rounds
    // here): then the wait must end with the connection-closed error, never the timeout, and the
    // caller's policy computes the part here. Most rounds take the reply.
    const std::string model = tiny_q8();
    ASSERT_FALSE(model.empty());
    int taken = 0;
    for (int round = 0; round < 6; ++round) {
        SCOPED_TRACE(round);
        const std::string dir = test_dir("link_loss_term_" + std::to_string(round));
        WorkerProcess w;
        const std::string held = dir + "/held";
        std::remove(held.c_str());
        ASSERT_TRUE(w.start({"--model", model, "--bind", "tcp://127.0.0.1:*"}, dir,
                            {{"MOEZIP_WORKER_FAULT", "delay_ms=300,delay_marker=" + held}}))
            << w.error();
        zmq::context_t ctx(1);
        moezip::WorkerLink link(ctx, w.endpoint(), 20000);
        say_hello(link, w.instance());
        ASSERT_TRUE(send_compute(link, 9));
        ASSERT_TRUE(wait_for_file(held, 10000)) << "the worker holds the request (its delay)";
        int code = -1;
        std::thread stopper([&]() { code = w.stop(SIGTERM, 5000); });
        moezip::MsgHeader rh;
        zmq::message_t data;
        const moezip::Status st = link.recv(9, rh, data);
        stopper.join();
        EXPECT_EQ(code, 0) << w.stderr_text();
        EXPECT_EQ(link.stats().timeouts, 0u) << st.to_string();
        if (!st) {
            EXPECT_NE(st.message().find("connection closed while the request was in flight"), std::string::npos) << st.to_string();
            continue;
        }
        ++taken;
        EXPECT_EQ(rh.kind, (uint16_t) moezip::MsgKind::result);
        EXPECT_EQ(data.size(), 64u * 4u) << "one row of n_embd f32";
    }
    // how often libzmq drops such a reply depends on thread interleaving (1 round in 20 here); what
    // every round must show is above: the reply, or the connection-closed error, never the timeout
    EXPECT_GE(taken, 1) << "a reply sent before the exit is taken";
}

TEST(LinkLoss, ARequestSentAfterTheWorkerExitedIsNotWaitedFor) {
    // The worker exits between two requests (SIGTERM while idle); the link may not have seen the
    // close yet when the next request is sent, which then goes nowhere.
    const std::string model = tiny_q8();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("link_loss_idle");
    WorkerProcess w;
    ASSERT_TRUE(w.start({"--model", model, "--bind", "tcp://127.0.0.1:*"}, dir)) << w.error();
    zmq::context_t ctx(1);
    moezip::WorkerLink link(ctx, w.endpoint(), 20000);
    say_hello(link, w.instance());
    ASSERT_EQ(w.stop(SIGTERM, 5000), 0) << w.stderr_text();
    const auto t0 = std::chrono::steady_clock::now();
    moezip::Status st = send_compute(link, 11);
    if (st) {
        moezip::MsgHeader rh;
        zmq::message_t data;
        st = link.recv(11, rh, data);
    }
    ASSERT_FALSE(st);
    const double waited = ms_since(t0);
    // either the send found the connection closed (it waits 250 ms for a new one) or the reply's
    // wait saw it close; never the 20 s timeout
    const bool named = st.message().find("closed its connection") != std::string::npos ||
                       st.message().find("connection closed while the request was in flight") != std::string::npos;
    EXPECT_TRUE(named) << st.to_string();
    EXPECT_EQ(st.code(), moezip::Status::Code::io_error) << st.to_string();
    EXPECT_EQ(link.stats().timeouts, 0u);
    EXPECT_LT(waited, 10000.0) << "half the timeout at most";
}

TEST(HostileReply, AServiceTimeLongerThanTheRoundTripIsClampedToIt) {
    // A fake worker saying service_us = 2^32-1 gave service_ms_p50 4294967 and a
    // negative round trip minus service in the report, and steered automatic shares. The worker's own
    // time cannot exceed the round trip the link measured.
    const std::string dir = test_dir("hostile_service_time");
    static const float result[2] = {1.0f, 2.0f};
    FakeWorkerSocket fake("ipc://" + dir + "/fake.sock", [](const moezip::MsgHeader & h) {
        moezip::MsgHeader r = moezip::msg_header_make(moezip::MsgKind::result);
        r.request_id = h.request_id;
        r.service_us = UINT32_MAX;
        moezip::msg_header_set_frame(r, 0, moezip::WireType::f32, result, sizeof result);
        std::vector<zmq::message_t> out;
        out.emplace_back(&r, sizeof r);
        out.emplace_back(result, sizeof result);
        return out;
    });
    zmq::context_t ctx(1);
    moezip::WorkerLink link(ctx, fake.endpoint(), 5000);
    ASSERT_TRUE(send_compute(link, 3));
    const auto t0 = std::chrono::steady_clock::now();
    moezip::MsgHeader rh;
    zmq::message_t data;
    ASSERT_TRUE(link.recv(3, rh, data));
    const double bound_ms = ms_since(t0) + 5000;  // the round trip began before t0, within the send's wait
    EXPECT_LE(rh.service_us / 1000.0, bound_ms) << rh.service_us;
    ASSERT_EQ(link.stats().service_ms.size(), 1u);
    EXPECT_LE(link.stats().service_ms[0], link.stats().rtt_ms[0]);
    EXPECT_GE(link.stats().rtt_minus_service_ms[0], 0.0f);
    // the round trip's samples are floats: the total, rounded alike, is not above it
    EXPECT_LE((float) link.stats().service_ms_total(), link.stats().rtt_ms[0]);
    EXPECT_EQ(link.stats().service_us_total, (uint64_t) rh.service_us);
}
