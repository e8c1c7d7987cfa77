// moezip-worker and a model file that changes under it: rewritten in place, written back with its
// modification time set back, replaced by a rename, changed during a compute or a slice's copy. A
// result read from bytes its hello_ok digests do not name is refused or dropped, by name.
#include "tests/support/test_support.h"
#include "tests/support/worker_harness.h"
#include "tests/worker/worker_fixtures.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>

using namespace moezip;
using namespace moezip_test;

TEST(WorkerShard, AModelFileChangedOnDiskIsNeverReadAgain) {
    // Once the originals are given back, new slices and whole requests read the file: if it changed
    // since load, its bytes are not the ones hello_ok's digests named. Refused, by name. A worker
    // that maps the file (--mmap) would compute from the changed bytes at once: it refuses every
    // request after the change (--mmap computed from a changed file with a clean report).
    for (const bool mapped : {false, true}) {
        SCOPED_TRACE(mapped ? "--mmap" : "anonymous memory");
        const std::string dir = test_dir(std::string("worker_shard_file_changed_") + (mapped ? "mmap" : "anon"));
        const std::string model = dir + "/m.gguf";
        ASSERT_EQ(run_command({"/bin/cp", shard_model(), model}).exit_code, 0);
        std::vector<std::string> args = {"--model", model, "--bind", "ipc://" + dir + "/a.sock"};
        if (mapped) args.push_back("--mmap");
        WorkerProcess a;
        ASSERT_TRUE(a.start(args, dir, {{"MOEZIP_WORKER_FAULT", "unsliced_keep_ms=300"}})) << a.error();
        // a mapped worker refuses a hello once its file changed: its connections are planned before;
        // an anonymous one is told its new slice (packed after its hello, from the file) after
        WorkerClient lo(a.endpoint(), a.instance(), kPlanLo);
        std::unique_ptr<WorkerClient> hi, all;
        auto plan_hi_and_all = [&]() {
            hi.reset(new WorkerClient(a.endpoint(), a.instance(), kPlanHi));
            all.reset(new WorkerClient(a.endpoint(), a.instance()));
        };
        if (mapped) plan_hi_and_all();
        const ComputeRequest r = shard_request(0, 7);
        ASSERT_EQ(ask(lo, part_frames(r, a.instance(), FfPart::lo)).h.kind, (uint16_t) MsgKind::result);  // originals given back
        ASSERT_EQ(run_command({"/usr/bin/touch", "-d", "2001-01-01", model}).exit_code, 0);  // the file "changed"
        if (!mapped) plan_hi_and_all();
        std::vector<FfPart> refused = {FfPart::hi, FfPart::whole};
        if (mapped) refused.push_back(FfPart::lo);
        for (FfPart p : refused) {
            WorkerReply rep = ask(p == FfPart::hi ? *hi : p == FfPart::lo ? lo : *all, part_frames(r, a.instance(), p));
            ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::error) << rep.text();
            EXPECT_NE(rep.text().find("changed on disk since this worker loaded it"), std::string::npos) << rep.text();
            EXPECT_NE(rep.text().find(model), std::string::npos) << rep.text();
        }
        if (!mapped) {
            EXPECT_EQ(ask(lo, part_frames(r, a.instance(), FfPart::lo)).h.kind, (uint16_t) MsgKind::result)
                << "the slice packed (into its own memory) before the change is still served";
        }
    }
}

TEST(Worker, AMappedModelRewrittenWithItsModificationTimeSetBackIsRefusedAndARenameIsNot) {
    // A --mmap worker compared size and modification time only; the same bytes
    // count of another model written over the file, with `touch -d` setting the time back, was
    // computed from with a clean report. The status-change time cannot be set back: when it moves,
    // the digests are read again from the mapping.
    const std::string other = fixture_model({"--preset", "tiny", "--type", "q8_0", "--seed", "7"});
    ASSERT_FALSE(other.empty());
    const std::string dir = test_dir("worker_rewritten_in_place");
    const ComputeRequest r = random_request(0, 2, 91);
    auto copy = [](const std::string & from, const std::string & to) { return run_command({"/bin/cp", from, to}).exit_code == 0; };
    auto result_of = [&](WorkerProcess & w) {
        WorkerClient c(w.endpoint(), w.instance());
        return ask_compute(c, r);
    };
    // 1. rewritten in place, the modification time set back: refused, now and later
    {
        const std::string model = dir + "/m.gguf";
        ASSERT_TRUE(copy(tiny_model(), model));
        WorkerProcess w;
        ASSERT_TRUE(w.start({"--model", model, "--bind", "ipc://" + dir + "/w.sock", "--mmap"}, dir)) << w.error();
        WorkerClient planned_before(w.endpoint(), w.instance());  // its plan was accepted before the change
        ASSERT_EQ(ask_compute(planned_before, r).h.kind, (uint16_t) MsgKind::result);
        struct stat before;
        ASSERT_EQ(stat(model.c_str(), &before), 0);
        ASSERT_EQ(run_command({"/bin/dd", "if=" + other, "of=" + model, "conv=notrunc", "status=none"}).exit_code, 0);
        const struct timespec times[2] = {before.st_atim, before.st_mtim};
        ASSERT_EQ(utimensat(AT_FDCWD, model.c_str(), times, 0), 0);
        struct stat after;
        ASSERT_EQ(stat(model.c_str(), &after), 0);
        ASSERT_EQ(after.st_size, before.st_size);
        ASSERT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec) << "the size and modification time are the old ones";
        for (int i = 0; i < 2; ++i) {
            WorkerReply rep = ask_compute(planned_before, r);
            ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::error) << rep.text();
            EXPECT_EQ(rep.h.status, (int32_t) moezip::ErrorCode::model_changed) << rep.text();
            EXPECT_NE(rep.text().find("its modification time set back"), std::string::npos) << rep.text();
        }
        // its hello still answered hello_ok, so the coordinator probed it every
        // back-off without ever counting a refusal: the hello is refused with the same reason now
        WorkerClient later(w.endpoint(), w.instance(), "");
        later.send(simple_frames(MsgKind::hello, 7, hello_json(kRowsPlan)));
        WorkerReply hello;
        ASSERT_TRUE(later.recv(hello));
        ASSERT_EQ(hello.h.kind, (uint16_t) MsgKind::error) << hello.text();
        EXPECT_EQ(hello.h.status, (int32_t) moezip::ErrorCode::model_changed) << hello.text();
        EXPECT_NE(hello.text().find("restart the worker"), std::string::npos) << hello.text();
    }
    // 2. replaced by a rename (the way to update a model): the worker keeps its open file, whose
    // bytes did not change, and serves the same result
    {
        const std::string model = dir + "/r.gguf";
        ASSERT_TRUE(copy(tiny_model(), model));
        WorkerProcess w;
        ASSERT_TRUE(w.start({"--model", model, "--bind", "ipc://" + dir + "/r.sock", "--mmap"}, dir)) << w.error();
        const WorkerReply first = result_of(w);
        ASSERT_EQ(first.h.kind, (uint16_t) MsgKind::result);
        ASSERT_TRUE(copy(other, dir + "/r.new"));
        ASSERT_EQ(rename((dir + "/r.new").c_str(), model.c_str()), 0);
        const WorkerReply again = result_of(w);
        ASSERT_EQ(again.h.kind, (uint16_t) MsgKind::result) << again.text();
        EXPECT_NE(w.stderr_text().find("hashed again"), std::string::npos) << "the unlink moved the status-change time: " << w.stderr_text();
        ASSERT_EQ(again.frames.size(), first.frames.size());
        ASSERT_GE(first.frames.size(), 1u);
        ASSERT_EQ(again.frames[0].size(), first.frames[0].size());
        EXPECT_EQ(memcmp(again.frames[0].data(), first.frames[0].data(), first.frames[0].size()), 0) << "the same bits";
    }
}

TEST(Worker, AMappedModelChangedAndWrittenBackDuringAComputeDropsThatResult) {
    // A suspected race: a --mmap worker reads the file as it is while the kernels run. A
    // rewrite during a compute, written back before the next request with the modification time set
    // back, left that one result from other bytes unchecked (the next request's re-hash finds the old
    // bytes). The stamp is compared again after the compute (here: during the reply's delay).
    const std::string other = fixture_model({"--preset", "tiny", "--type", "q8_0", "--seed", "7"});
    ASSERT_FALSE(other.empty());
    const std::string dir = test_dir("worker_changed_during_compute");
    const std::string model = dir + "/m.gguf", original = dir + "/original.gguf";
    ASSERT_EQ(run_command({"/bin/cp", tiny_model(), model}).exit_code, 0);
    ASSERT_EQ(run_command({"/bin/cp", tiny_model(), original}).exit_code, 0);
    WorkerProcess w;
    const std::string held = dir + "/held";
    std::remove(held.c_str());
    ASSERT_TRUE(w.start({"--model", model, "--bind", "ipc://" + dir + "/w.sock", "--mmap"}, dir,
                        {{"MOEZIP_WORKER_FAULT", "delay_ms=1500,delay_marker=" + held}}))
        << w.error();
    WorkerClient c(w.endpoint(), w.instance());
    const ComputeRequest r = random_request(0, 2, 92);
    const WorkerReply before = ask_compute(c, r);
    ASSERT_EQ(before.h.kind, (uint16_t) MsgKind::result) << before.text();
    struct stat st0;
    ASSERT_EQ(stat(model.c_str(), &st0), 0);
    bool rewritten = false;
    std::thread rewrite([&]() {
        // inside the 1.5 s the second request is held (the marker's second line), not after a guess
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        auto lines = [&]() {
            const std::string text = read_file(held);
            return std::count(text.begin(), text.end(), '\n');
        };
        while (lines() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        const bool a = run_command({"/bin/dd", "if=" + other, "of=" + model, "conv=notrunc", "status=none"}).exit_code == 0;
        const bool b = run_command({"/bin/dd", "if=" + original, "of=" + model, "conv=notrunc", "status=none"}).exit_code == 0;
        const struct timespec times[2] = {st0.st_atim, st0.st_mtim};
        rewritten = a && b && utimensat(AT_FDCWD, model.c_str(), times, 0) == 0;
    });
    const WorkerReply during = ask_compute(c, r);
    rewrite.join();
    ASSERT_TRUE(rewritten);
    ASSERT_EQ(during.h.kind, (uint16_t) MsgKind::error) << "a result computed while the file changed: " << during.text();
    EXPECT_EQ(during.h.status, (int32_t) moezip::ErrorCode::compute_failed) << during.text();
    EXPECT_NE(during.text().find("while this request was computed"), std::string::npos) << during.text();
    // written back: the next request hashes the served experts again, finds the loaded bytes and serves them
    const WorkerReply after = ask_compute(c, r);
    ASSERT_EQ(after.h.kind, (uint16_t) MsgKind::result) << after.text();
    ASSERT_EQ(after.frames.size(), before.frames.size());
    ASSERT_GE(before.frames.size(), 1u);
    ASSERT_EQ(after.frames[0].size(), before.frames[0].size());
    EXPECT_EQ(memcmp(after.frames[0].data(), before.frames[0].data(), before.frames[0].size()), 0) << "the same bits";
}

TEST(WorkerShard, ASliceCopiedWhileTheMappedFileChangedIsDropped) {
    // A --mmap worker packed its slices after a hello while the file was being tampered
    // with, then the bytes were written back with the modification time restored. The next request's
    // re-hash found the file unchanged ("serving goes on") and the tampered copy was served. A copy
    // made while the file's stamp moved is dropped now, and made again from the file once it is known good.
    const std::string other = fixture_model({"--preset", "tiny", "--type", "q8_0", "--n-embd", "256", "--n-ff-exp", "512", "--seed", "7"});
    ASSERT_FALSE(other.empty());
    const std::string dir = test_dir("worker_shard_packed_while_changed");
    const std::string model = dir + "/m.gguf";
    ASSERT_EQ(run_command({"/bin/cp", shard_model(), model}).exit_code, 0);
    const ComputeRequest r = shard_request(1, 17);
    WorkerProcess ref;
    ASSERT_TRUE(ref.start({"--model", shard_model(), "--bind", "ipc://" + dir + "/ref.sock"}, dir)) << ref.error();
    WorkerClient ref_hi(ref.endpoint(), ref.instance(), kPlanHi);
    const WorkerReply expected = ask(ref_hi, part_frames(r, ref.instance(), FfPart::hi));
    ASSERT_EQ(expected.h.kind, (uint16_t) MsgKind::result) << expected.text();
    WorkerProcess w;
    ASSERT_TRUE(w.start({"--model", model, "--bind", "ipc://" + dir + "/w.sock", "--mmap"}, dir, {{"MOEZIP_WORKER_FAULT", "prepack_delay_ms=1000"}}))
        << w.error();
    struct stat st0;
    ASSERT_EQ(stat(model.c_str(), &st0), 0);
    bool tampered = false, restored = false;
    std::thread writer([&]() {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the worker waits 1 s, then packs from the mapping
        tampered = run_command({"/bin/dd", "if=" + other, "of=" + model, "conv=notrunc", "status=none"}).exit_code == 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // packed by now
        const bool back = run_command({"/bin/dd", "if=" + shard_model(), "of=" + model, "conv=notrunc", "status=none"}).exit_code == 0;
        const struct timespec times[2] = {st0.st_atim, st0.st_mtim};
        restored = back && utimensat(AT_FDCWD, model.c_str(), times, 0) == 0;
    });
    WorkerClient hi(w.endpoint(), w.instance(), kPlanHi);  // hello_ok, then the worker packs
    writer.join();
    ASSERT_TRUE(hi.planned());
    ASSERT_TRUE(tampered && restored);
    const WorkerReply got = ask(hi, part_frames(r, w.instance(), FfPart::hi));
    ASSERT_EQ(got.h.kind, (uint16_t) MsgKind::result) << got.text();
    ASSERT_EQ(got.frames[0].size(), expected.frames[0].size());
    EXPECT_EQ(memcmp(got.frames[0].data(), expected.frames[0].data(), got.frames[0].size()), 0) << "the tampered copy was served";
    ASSERT_EQ(w.stop(SIGTERM, 5000), 0);
    EXPECT_NE(w.stderr_text().find("hashed again"), std::string::npos) << w.stderr_text();
}

TEST(WorkerShard, AModelReplacedByRenameIsStillReadWhileItsBytesAreTheSame) {
    // Review: with the status-change time compared, a rename over the model (the way to update one)
    // refused every later read of the old, unchanged file. Its served experts are hashed again from
    // the file instead, and a new slice is packed from it as before.
    const std::string dir = test_dir("worker_shard_renamed");
    const std::string model = dir + "/m.gguf";
    ASSERT_EQ(run_command({"/bin/cp", shard_model(), model}).exit_code, 0);
    WorkerProcess a;
    ASSERT_TRUE(a.start({"--model", model, "--bind", "ipc://" + dir + "/a.sock"}, dir, {{"MOEZIP_WORKER_FAULT", "unsliced_keep_ms=300"}}))
        << a.error();
    WorkerClient lo(a.endpoint(), a.instance(), kPlanLo);
    const ComputeRequest r = shard_request(0, 7);
    ASSERT_EQ(ask(lo, part_frames(r, a.instance(), FfPart::lo)).h.kind, (uint16_t) MsgKind::result);  // originals given back
    struct stat before;
    ASSERT_EQ(stat(model.c_str(), &before), 0);
    ASSERT_EQ(run_command({"/bin/cp", tiny_model(), dir + "/other.gguf"}).exit_code, 0);
    ASSERT_EQ(rename((dir + "/other.gguf").c_str(), model.c_str()), 0);
    // a new slice, packed after its hello from the (old) file
    WorkerClient hi(a.endpoint(), a.instance(), kPlanHi);
    WorkerReply rep = ask(hi, part_frames(r, a.instance(), FfPart::hi));
    ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::result) << rep.text();
    ASSERT_EQ(a.stop(SIGTERM, 5000), 0);
    EXPECT_NE(a.stderr_text().find("hashed again"), std::string::npos) << "the status change was seen and checked: " << a.stderr_text();
    // a worker that keeps its originals (--keep-unsliced) copies new slices from them, checked at
    // load: a rename over its file changes nothing (review: a stamp check on those copies refused
    // every new slice after any rename, for good)
    const std::string kept_model = dir + "/k.gguf";
    ASSERT_EQ(run_command({"/bin/cp", shard_model(), kept_model}).exit_code, 0);
    WorkerProcess k;
    ASSERT_TRUE(k.start({"--model", kept_model, "--bind", "ipc://" + dir + "/k.sock", "--keep-unsliced"}, dir)) << k.error();
    ASSERT_EQ(run_command({"/bin/cp", tiny_model(), dir + "/other2.gguf"}).exit_code, 0);
    ASSERT_EQ(rename((dir + "/other2.gguf").c_str(), kept_model.c_str()), 0);
    WorkerClient k_hi(k.endpoint(), k.instance(), kPlanHi);
    const WorkerReply k_rep = ask(k_hi, part_frames(r, k.instance(), FfPart::hi));
    ASSERT_EQ(k_rep.h.kind, (uint16_t) MsgKind::result) << k_rep.text();
    ASSERT_EQ(k_rep.frames[0].size(), rep.frames[0].size());
    EXPECT_EQ(memcmp(k_rep.frames[0].data(), rep.frames[0].data(), rep.frames[0].size()), 0) << "the same bits as the other worker's";
}
