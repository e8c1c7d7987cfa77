// moezip-worker in shard mode: packed slices of every expert's n_ff, the originals given back and read
// again, several coordinators' plans on one worker, and slices packed ahead of their requests
// (tools/moezip-worker/model/worker_slices.h, slice_residency.h); results compared bit for bit.
#include "tests/support/test_support.h"
#include "tests/support/worker_harness.h"
#include "tests/worker/worker_fixtures.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace moezip;
using namespace moezip_test;

TEST(WorkerShard, OriginalsGivenBackAndReadAgainLeaveEveryResultBitExact) {
    // Worker A gives back (a request keeps what it needed 300 ms), worker B keeps everything
    // (--keep-unsliced). The same requests must get the same bytes from both while A packs a slice
    // from its originals, gives them back, packs another slice from the file, reads the originals
    // again for a whole-n_ff request (a rows plan), and gives them back again. With anonymous memory
    // anything given back and not read again reads zeros: such a bug changes A's bytes.
    const std::string model = shard_model();
    ASSERT_FALSE(model.empty());
    const std::string dir = test_dir("worker_shard_residency");
    WorkerProcess a, b;
    ASSERT_TRUE(a.start({"--model", model, "--bind", "ipc://" + dir + "/a.sock"}, dir, {{"MOEZIP_WORKER_FAULT", "unsliced_keep_ms=300"}}))
        << a.error();
    ASSERT_TRUE(b.start({"--model", model, "--bind", "ipc://" + dir + "/b.sock", "--keep-unsliced"}, dir)) << b.error();
    WorkerClient a_lo(a.endpoint(), a.instance(), kPlanLo), a_hi(a.endpoint(), a.instance(), kPlanHi), a_all(a.endpoint(), a.instance());
    WorkerClient b_lo(b.endpoint(), b.instance(), kPlanLo), b_hi(b.endpoint(), b.instance(), kPlanHi), b_all(b.endpoint(), b.instance());
    int step = 0;
    auto both = [&](FfPart p) {
        ++step;
        WorkerClient & ca = p == FfPart::lo ? a_lo : p == FfPart::hi ? a_hi : a_all;
        WorkerClient & cb = p == FfPart::lo ? b_lo : p == FfPart::hi ? b_hi : b_all;
        for (int layer = 0; layer < 2; ++layer) {
            const ComputeRequest r = shard_request(layer, (uint32_t) (100 + step * 2 + layer));
            WorkerReply ra = ask(ca, part_frames(r, a.instance(), p)), rb = ask(cb, part_frames(r, b.instance(), p));
            ASSERT_EQ(ra.h.kind, (uint16_t) MsgKind::result) << "step " << step << ": " << ra.text();
            ASSERT_EQ(rb.h.kind, (uint16_t) MsgKind::result) << "step " << step << ": " << rb.text();
            ASSERT_EQ(ra.frames[0].size(), (size_t) (kShardEmbd * r.n_rows * 4));
            EXPECT_EQ(memcmp(ra.frames[0].data(), rb.frames[0].data(), ra.frames[0].size()), 0)
                << "step " << step << " layer " << layer << ": the worker that gave its originals back computed other bytes";
        }
    };
    both(FfPart::lo);     // packed from the originals, which then go
    const uint64_t rss_a = rss_bytes(a.pid()), rss_b = rss_bytes(b.pid());
    EXPECT_GT(rss_b, rss_a + kShardOriginals / 2) << "A " << rss_a << " B " << rss_b << " bytes";
    both(FfPart::hi);     // packed from the file
    both(FfPart::whole);  // the originals read again
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    both(FfPart::lo);     // only this slice in the last 300 ms, its copies held: given back again
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    both(FfPart::hi);     // its copies still held (two slices per layer)
    both(FfPart::whole);  // read again
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // idle: the whole request ages out
    EXPECT_GT(rss_bytes(b.pid()), rss_bytes(a.pid()) + kShardOriginals / 2) << "an idle worker gives its originals back too";
    ASSERT_EQ(a.stop(SIGTERM, 5000), 0);
    ASSERT_EQ(b.stop(SIGTERM, 5000), 0);
    unsigned long long given = 0, again = 0;
    ASSERT_TRUE(given_back(a.stderr_text(), given, again)) << a.stderr_text();
    // every tensor's mapping is whole pages: given back three times (after steps 1 and 4, and idle),
    // read again twice, to the byte
    EXPECT_EQ(given, 3 * kShardOriginals) << a.stderr_text();
    EXPECT_EQ(again, 2 * kShardOriginals) << a.stderr_text();
    EXPECT_FALSE(given_back(b.stderr_text(), given, again)) << "--keep-unsliced gives nothing back: " << b.stderr_text();
    EXPECT_NE(b.stderr_text().find("shard slices packed "), std::string::npos) << b.stderr_text();
}

TEST(WorkerShard, ThreeCoordinatorsWithDifferentSlicesKeepTheirCopies) {
    // Three coordinators ran with different shares on one worker that kept two slices per
    // layer: every request made its copy again, decode 100x slower. Four are kept now.
    const std::string dir = test_dir("worker_shard_three_slices");
    WorkerProcess a;
    ASSERT_TRUE(a.start({"--model", shard_model(), "--bind", "ipc://" + dir + "/a.sock"}, dir)) << a.error();
    const int32_t slices[3][2] = {{0, 128}, {128, 128}, {256, 256}};  // shares 0.25, 0.25, 0.5 of n_ff 512
    std::vector<std::unique_ptr<WorkerClient>> clients;
    for (int i = 1; i <= 3; ++i)
        clients.emplace_back(new WorkerClient(a.endpoint(), a.instance(),
                                              R"({"mode":"shard","shares":[0,0.25,0.25,0.5],"slice":)" + std::to_string(i) + "}"));
    for (int round = 0; round < 3; ++round)
        for (int i = 0; i < 3; ++i) {
            const ComputeRequest r = shard_request(0, (uint32_t) (round * 3 + i));
            WorkerReply rep = ask(*clients[(size_t) i], shard_frames(r, a.instance(), slices[i][0], slices[i][1]));
            ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::result) << "round " << round << " slice " << i << ": " << rep.text();
        }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // idle: layer 1's slices are packed between requests
    ASSERT_EQ(a.stop(SIGTERM, 5000), 0);
    // one copy of each slice of both layers (packed after each hello, between requests): gate, up and down of 8
    // experts, each count x 272 bytes (q8_0 rows of 256 are 272 bytes; down's piece of a row is
    // count/32 blocks of 34 bytes)
    EXPECT_NE(a.stderr_text().find("shard slices packed " + std::to_string(2 * 3 * 8 * 512 * 272) + " bytes at most"), std::string::npos)
        << a.stderr_text();
    EXPECT_EQ(a.stderr_text().find("dropped for other slices"), std::string::npos) << a.stderr_text();
}

TEST(WorkerShard, APlanWithADecodeSplitAllowsItsTwoSlicesAndNoOther) {
    // local_share = "auto" keeps a split for decode calls and one for prefill calls (a host throttled
    // under sustained load is slower in the second): a worker's plan names both, and the worker
    // computes either slice, the same bits as a worker planned for that slice alone. The prefill
    // slice lies inside the decode slice: it is computed from a view of the larger copy, and only
    // that one is packed.
    const std::string dir = test_dir("worker_shard_decode_split");
    WorkerProcess a, ref;
    ASSERT_TRUE(a.start({"--model", shard_model(), "--bind", "ipc://" + dir + "/a.sock"}, dir)) << a.error();
    ASSERT_TRUE(ref.start({"--model", shard_model(), "--bind", "ipc://" + dir + "/ref.sock"}, dir)) << ref.error();
    // n_ff 512: prefill slice 1 of [0.75, 0.25] is [384, 512), decode slice 1 of [0.5, 0.5] is [256, 512)
    WorkerClient both(a.endpoint(), a.instance(), R"({"mode":"shard","shares":[0.75,0.25],"decode_shares":[0.5,0.5],"slice":1})");
    // the reference packs each slice exactly: the prefill slice first, so it is not served from the decode one
    WorkerClient prefill_only(ref.endpoint(), ref.instance(), R"({"mode":"shard","shares":[0.75,0.25],"slice":1})");
    ASSERT_TRUE(both.planned() && prefill_only.planned());
    const ComputeRequest r = shard_request(1, 41);
    ASSERT_EQ(ask(prefill_only, shard_frames(r, ref.instance(), 384, 128)).h.kind, (uint16_t) MsgKind::result);
    WorkerClient decode_only(ref.endpoint(), ref.instance(), R"({"mode":"shard","shares":[0.5,0.5],"slice":1})");
    ASSERT_TRUE(decode_only.planned());
    for (auto slice : {std::pair<int32_t, int32_t>{384, 128}, {256, 256}}) {
        WorkerReply got = ask(both, shard_frames(r, a.instance(), slice.first, slice.second));
        WorkerReply alone = ask(slice.first == 384 ? prefill_only : decode_only, shard_frames(r, ref.instance(), slice.first, slice.second));
        ASSERT_EQ(got.h.kind, (uint16_t) MsgKind::result) << got.text();
        ASSERT_EQ(alone.h.kind, (uint16_t) MsgKind::result) << alone.text();
        ASSERT_EQ(got.frames[0].size(), alone.frames[0].size());
        EXPECT_EQ(memcmp(got.frames[0].data(), alone.frames[0].data(), got.frames[0].size()), 0) << "slice " << slice.first;
    }
    WorkerReply other = ask(both, shard_frames(r, a.instance(), 0, 256));
    ASSERT_EQ(other.h.kind, (uint16_t) MsgKind::error) << "this host's slice";
    EXPECT_EQ(other.h.status, (int32_t) ErrorCode::bad_plan) << other.text();
    EXPECT_NE(other.text().find("is not the planned [384, 512) or [256, 512)"), std::string::npos) << other.text();
    // malformed decode splits are refused at hello, naming the key
    for (auto bad : {std::pair<const char *, const char *>{R"({"mode":"shard","shares":[0.75,0.25],"decode_shares":[0.5,0.25,0.25],"slice":1})",
                                                             "decode_shares must have as many numbers as shares"},
                     {R"({"mode":"shard","shares":[0.75,0.25],"decode_shares":[0.5,0.6],"slice":1})", "decode_shares must sum to 1"},
                     {R"({"mode":"shard","shares":[1,0],"decode_shares":[1,0],"slice":1})", "has share 0"}}) {
        WorkerClient c(a.endpoint(), a.instance(), "");
        c.send(simple_frames(MsgKind::hello, 9, hello_json(bad.first)));
        WorkerReply rep;
        ASSERT_TRUE(c.recv(rep));
        EXPECT_EQ(rep.h.status, (int32_t) ErrorCode::bad_plan) << rep.text();
        EXPECT_NE(rep.text().find(bad.second), std::string::npos) << rep.text();
    }
    // a split that leaves this worker nothing in decode, something in prefill, is a plan
    WorkerClient prefill_slice_only(a.endpoint(), a.instance(), R"({"mode":"shard","shares":[0.75,0.25],"decode_shares":[1,0],"slice":1})");
    EXPECT_TRUE(prefill_slice_only.planned());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // idle: the hellos' slices are packed between requests
    ASSERT_EQ(a.stop(SIGTERM, 5000), 0);
    // the decode slice of both layers, which holds the prefill slice: gate, up and down of 8
    // experts, 256 units of 272 bytes each (see ThreeCoordinators... below); both slices packed
    // apart would be (128 + 256) units
    EXPECT_NE(a.stderr_text().find("shard slices packed " + std::to_string(2 * 3 * 8 * 256 * 272) + " bytes at most"),
              std::string::npos)
        << a.stderr_text();
    EXPECT_NE(a.stderr_text().find("packed ahead of their requests"), std::string::npos) << a.stderr_text();
}

// A coordinator that says hello again (automatic shares: at every change of its slices) withdraws its
// earlier plan's slices from the packing queue: packed anyway, they would take a CPU-capped worker's
// quota from its requests. A slice another connection's plan queued too stays queued. Each hello waits 1 s (fault prepack_delay_ms) before it queues, so the
// hellos sent together are all answered before anything is packed.
TEST(WorkerShard, ANewHelloWithdrawsTheEarlierPlansSlicesNotYetPacked) {
    const char * plan_a = R"({"mode":"shard","shares":[0.25,0.25,0.5],"slice":1})";  // [128, 256): 128 units
    const char * plan_b = R"({"mode":"shard","shares":[0.5,0.5],"slice":1})";    // [256, 512): 256 units
    // gate, up and down of 8 experts in 2 layers, 272 bytes a unit (see ThreeCoordinators... above)
    auto bytes = [](int units) { return "shard slices packed " + std::to_string(2 * 3 * 8 * units * 272) + " bytes at most"; };
    for (const bool shared : {false, true}) {
        SCOPED_TRACE(shared ? "another connection asked for the first plan too" : "one connection");
        const std::string dir = test_dir(std::string("worker_shard_withdraw_") + (shared ? "shared" : "alone"));
        WorkerProcess a;
        ASSERT_TRUE(a.start({"--model", shard_model(), "--bind", "ipc://" + dir + "/a.sock"}, dir, {{"MOEZIP_WORKER_FAULT", "prepack_delay_ms=1000"}}))
            << a.error();
        WorkerClient other(a.endpoint(), a.instance(), ""), coordinator(a.endpoint(), a.instance(), "");
        if (shared) other.send(simple_frames(MsgKind::hello, 1, hello_json(plan_a)));
        coordinator.send(simple_frames(MsgKind::hello, 2, hello_json(plan_a)));
        coordinator.send(simple_frames(MsgKind::hello, 3, hello_json(plan_b)));
        WorkerReply rep;
        for (int i = 0; i < 2; ++i) {
            ASSERT_TRUE(coordinator.recv(rep, 20000));
            EXPECT_EQ(rep.h.kind, (uint16_t) MsgKind::hello_ok) << rep.text();
        }
        if (shared) {
            ASSERT_TRUE(other.recv(rep, 20000));
            EXPECT_EQ(rep.h.kind, (uint16_t) MsgKind::hello_ok) << rep.text();
        }
        // idle: the queue is packed; the worker says how many once it is empty (the hello_ok came
        // before the 1 s delay, so a fixed sleep had half a second to spare)
        const std::string packed = shared ? "4 shard slices packed ahead" : "2 shard slices packed ahead";
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (a.stderr_text().find("shard slices packed ahead") == std::string::npos && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        ASSERT_EQ(a.stop(SIGTERM, 5000), 0);
        EXPECT_NE(a.stderr_text().find(bytes(shared ? 128 + 256 : 256)), std::string::npos) << a.stderr_text();
        EXPECT_NE(a.stderr_text().find(packed), std::string::npos) << a.stderr_text();
    }
}

TEST(WorkerShard, HellosAloneNeverPushOutTheCopiesARequestUses) {
    // 600 connections said hello with random shard plans and never computed: the slices
    // packed ahead for them pushed the computing coordinators' copies out of the layer's places
    // (WorkerSlices::kPerLayer = 4), and their next requests packed again inside the request.
    const std::string dir = test_dir("worker_shard_hello_only");
    WorkerProcess a;
    ASSERT_TRUE(a.start({"--model", shard_model(), "--bind", "ipc://" + dir + "/a.sock"}, dir)) << a.error();
    // two coordinators with a prefill and a decode slice each: four slices of n_ff 512 in use per layer
    WorkerClient p(a.endpoint(), a.instance(), R"({"mode":"shard","shares":[0.25,0.25,0.5],"slice":1,"decode_shares":[0.5,0.25,0.25]})");
    WorkerClient q(a.endpoint(), a.instance(), R"({"mode":"shard","shares":[0,0.125,0.875],"slice":1,"decode_shares":[0.125,0.125,0.75]})");
    const std::vector<std::pair<WorkerClient *, std::pair<int32_t, int32_t>>> in_use = {
        {&p, {128, 128}}, {&p, {256, 128}}, {&q, {0, 64}}, {&q, {64, 64}}};
    auto compute_all = [&]() {
        for (int layer : {0, 1})
            for (const auto & [client, slice] : in_use) {
                const ComputeRequest r = shard_request(layer, 5);
                const WorkerReply rep = ask(*client, shard_frames(r, a.instance(), slice.first, slice.second));
                ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::result) << "layer " << layer << " [" << slice.first << ", +" << slice.second << "): " << rep.text();
            }
    };
    compute_all();
    // a peer that only says hello, with a fifth slice
    WorkerClient idle(a.endpoint(), a.instance(), R"({"mode":"shard","shares":[0.75,0.25,0],"slice":1})");  // [384, 512)
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // idle: the queue is packed
    compute_all();
    ASSERT_EQ(a.stop(SIGTERM, 5000), 0);
    const std::string text = a.stderr_text();
    EXPECT_NE(text.find("(2 not packed ahead: no place but slices in use)"), std::string::npos) << text;
    EXPECT_EQ(text.find("copies dropped for other slices"), std::string::npos) << "no copy a computing plan names was dropped: " << text;
}

TEST(WorkerShard, ACoordinatorsNewPlanIsPackedAheadInPlaceOfItsOldSlices) {
    // Automatic shares say hello with a new plan at every change of a split: its old slice is in no
    // plan any more, so the new one is packed ahead in its place, not left to the next request.
    const std::string dir = test_dir("worker_shard_new_plan_ahead");
    WorkerProcess a;
    ASSERT_TRUE(a.start({"--model", shard_model(), "--bind", "ipc://" + dir + "/a.sock"}, dir)) << a.error();
    WorkerClient p(a.endpoint(), a.instance(), R"({"mode":"shard","shares":[0.25,0.25,0.5],"slice":1,"decode_shares":[0.5,0.25,0.25]})");
    WorkerClient q(a.endpoint(), a.instance(), R"({"mode":"shard","shares":[0,0.125,0.875],"slice":1,"decode_shares":[0.125,0.125,0.75]})");
    auto compute = [&](WorkerClient & c, int32_t first, int32_t count) {
        for (int layer : {0, 1}) {
            const WorkerReply rep = ask(c, shard_frames(shard_request(layer, 5), a.instance(), first, count));
            ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::result) << "layer " << layer << " [" << first << ", +" << count << "): " << rep.text();
        }
    };
    compute(p, 128, 128);
    compute(p, 256, 128);
    compute(q, 0, 64);
    compute(q, 64, 64);  // four slices in use per layer: every place taken
    // p's decode split moves: [256, 384) -> [384, 512)
    p.send(simple_frames(MsgKind::hello, 9, hello_json(R"({"mode":"shard","shares":[0.25,0.25,0.5],"slice":1,"decode_shares":[0.75,0.25,0]})")));
    WorkerReply rep;
    ASSERT_TRUE(p.recv(rep, 20000));
    ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::hello_ok) << rep.text();
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // idle: the queue is packed
    compute(p, 384, 128);
    compute(p, 128, 128);
    compute(q, 0, 64);
    ASSERT_EQ(a.stop(SIGTERM, 5000), 0);
    const std::string text = a.stderr_text();
    EXPECT_EQ(text.find("not packed ahead"), std::string::npos) << "the new slice took the old one's place: " << text;
    EXPECT_NE(text.find("(2 copies dropped for other slices)"), std::string::npos) << "p's old decode slice, in both layers: " << text;
}
