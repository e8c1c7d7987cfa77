// moezip-worker end to end: a child process on an ipc:// path (once on tcp://127.0.0.1:*), spoken to
// with a DEALER; results compared bit for bit with MoeExecutor run here on the same file's weights.
#include "coordinator/config/expert_range.h"
#include "coordinator/compute/moe_exec.h"
#include "coordinator/wire/protocol.h"
#include "provider_map/expert_digest.h"
#include "tests/support/test_support.h"
#include "tests/support/worker_harness.h"
#include "tests/worker/worker_fixtures.h"
#include "tools/moezip-worker/request/worker_budget.h"
#include "tools/moezip-worker/request/worker_plan.h"

#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>

using namespace moezip;
using namespace moezip_test;

namespace {

std::string hex16(uint64_t v) {
    char buf[17];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long) v);
    return buf;
}

} // namespace

TEST(Worker, HelloDescribesServedExpertsWithDigestsOfTheFile) {
    ASSERT_FALSE(tiny_model().empty());
    ReferenceModel m;
    ASSERT_TRUE(m.load(tiny_model()));
    ASSERT_TRUE(reference_api().cpu_bound);
    std::string dir = test_dir("worker_hello");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {"--experts", "0-3"}));
    EXPECT_NE(w.ready_line().find("experts 0-3 of 8 (2 MoE layers"), std::string::npos) << w.ready_line();
    WorkerClient c(w.endpoint(), w.instance());

    WorkerReply rep = ask(c, simple_frames(MsgKind::hello, 77, hello_json(kRowsPlan)));
    ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::hello_ok);
    EXPECT_EQ(rep.h.request_id, 77u);
    ASSERT_EQ(rep.verify(), ErrorCode::ok);
    nlohmann::json j = nlohmann::json::parse(rep.text(), nullptr, false);
    ASSERT_TRUE(j.is_object()) << rep.text();
    EXPECT_EQ(j["protocol"], kProtocolVersion);
    EXPECT_EQ(j["instance"], moezip::hex64(w.instance())) << "hello_ok names the instance of the ready line";
    EXPECT_EQ(rep.h.instance, w.instance()) << "every reply header carries the instance";
    EXPECT_NE(w.instance(), 0u);
    EXPECT_EQ(j["ggml_commit"], reference_api().ggml_commit());
    EXPECT_EQ(j["ggml_version"], reference_api().ggml_version());
    EXPECT_EQ(j["cpu_variant"], reference_variant());
    EXPECT_EQ(j["cpu_build_id"], reference_build_id());
    EXPECT_FALSE(reference_build_id().empty());
    EXPECT_EQ(j["experts"], "0-3");
    EXPECT_EQ(j["n_expert"], kExpert);
    ASSERT_EQ(j["layers"].size(), 2u);
    for (int il = 0; il < 2; ++il) {
        const nlohmann::json & l = j["layers"][il];
        EXPECT_EQ(l["il"], il);
        EXPECT_EQ(l["n_embd"], kEmbd);
        EXPECT_EQ(l["n_ff"], kFf);
        EXPECT_EQ(l["n_expert"], kExpert);
        const char * names[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"};
        for (int t = 0; t < 3; ++t) {
            const ggml_tensor * ref = m.tensor(il, names[t]);
            EXPECT_EQ(l["tensors"][t]["name"], ref->name);
            EXPECT_EQ(l["tensors"][t]["type"], "q8_0");
            EXPECT_EQ(l["tensors"][t]["ne"], nlohmann::json({ref->ne[0], ref->ne[1], ref->ne[2]}));
        }
        ASSERT_EQ(l["digests"].size(), 4u) << l["digests"].dump();
        ExpertWeights ew = m.weights(il);
        for (int e = 0; e < 4; ++e)
            EXPECT_EQ(l["digests"][std::to_string(e)], hex16(expert_identity_digest_of(ew.gate_exps, ew.up_exps, ew.down_exps, e)))
                << "layer " << il << " expert " << e;
    }
    WorkerReply pong = ask(c, simple_frames(MsgKind::ping, 78));
    EXPECT_EQ(pong.h.kind, (uint16_t) MsgKind::pong);
    EXPECT_EQ(pong.h.request_id, 78u);
}

TEST(Worker, AllOwnedRowsAreBitIdenticalToTheEngineKernels) {
    ReferenceModel m;
    ASSERT_TRUE(m.load(tiny_model()));
    std::string dir = test_dir("worker_all_owned");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {}));
    WorkerClient c(w.endpoint(), w.instance());
    for (int il = 0; il < 2; ++il) {
        ComputeRequest r = random_request(il, 7, 100 + il);
        Expected want = reference_compute(m, r);
        WorkerReply sums = ask_compute(c, r);
        ASSERT_EQ(sums.h.kind, (uint16_t) MsgKind::result) << sums.text();
        ASSERT_EQ(sums.verify(), ErrorCode::ok);
        EXPECT_EQ(sums.h.request_id, r.request_id);
        EXPECT_EQ(sums.h.n_pairs, 7 * kUsed);
        EXPECT_TRUE(same_bytes(sums.frames[0], want.row_sums)) << "row_sums differ from ffn_moe_out, layer " << il;
        int nonzero = 0;
        for (float v : want.row_sums) nonzero += v != 0.0f;
        EXPECT_GT(nonzero, kEmbd * 7 / 2) << "the reference should not be trivially zero";

        r.reply = ReplyKind::slots;
        WorkerReply slots = ask_compute(c, r);
        ASSERT_EQ(slots.h.kind, (uint16_t) MsgKind::result) << slots.text();
        EXPECT_EQ(slots.h.reply, (uint16_t) ReplyKind::slots);
        EXPECT_EQ(slots.h.n_pairs, 7 * kUsed);
        EXPECT_TRUE(same_bytes(slots.frames[0], want.slots)) << "per-slot outputs differ, layer " << il;
    }
}

TEST(Worker, PartialOwnershipReturnsTheOwnedPairsOnly) {
    ReferenceModel m;
    ASSERT_TRUE(m.load(tiny_model()));
    std::string dir = test_dir("worker_partial");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {"--experts", "0-3"}));
    WorkerClient c(w.endpoint(), w.instance());
    ComputeRequest full = random_request(1, 9, 7);
    full.ids[0] = 5, full.ids[1] = 6;  // row 0: nothing for this worker
    full.ids[2] = 1, full.ids[3] = 2;  // row 1: both slots here
    Expected ref = reference_compute(m, full);

    ComputeRequest r = full;  // what a coordinator sends: -1 for experts owned elsewhere
    std::vector<float> want_pairs, want_sums((size_t) kEmbd * r.n_rows, 0.0f);
    for (int row = 0; row < r.n_rows; ++row) {
        bool first = true;
        for (int s = 0; s < kUsed; ++s) {
            int & id = r.ids[row * kUsed + s];
            if (id >= 4) { id = -1; continue; }
            const float * slot = ref.slots.data() + (size_t) (row * kUsed + s) * kEmbd;
            want_pairs.insert(want_pairs.end(), slot, slot + kEmbd);
            for (int j = 0; j < kEmbd; ++j) want_sums[row * kEmbd + j] = first ? slot[j] : want_sums[row * kEmbd + j] + slot[j];
            first = false;
        }
    }
    r.reply = ReplyKind::slots;
    WorkerReply slots = ask_compute(c, r);
    ASSERT_EQ(slots.h.kind, (uint16_t) MsgKind::result) << slots.text();
    ASSERT_EQ(slots.verify(), ErrorCode::ok);
    EXPECT_EQ(slots.h.n_pairs, (int32_t) (want_pairs.size() / kEmbd));
    EXPECT_TRUE(same_bytes(slots.frames[0], want_pairs)) << "owned pairs differ from the full computation's";

    r.reply = ReplyKind::row_sums;
    WorkerReply sums = ask_compute(c, r);
    ASSERT_EQ(sums.h.kind, (uint16_t) MsgKind::result) << sums.text();
    EXPECT_TRUE(same_bytes(sums.frames[0], want_sums)) << "partial row sums differ";
    EXPECT_EQ(memcmp(static_cast<const float *>(sums.frames[0].data()) + kEmbd, ref.row_sums.data() + kEmbd, kEmbd * sizeof(float)), 0)
        << "a row with every slot here must equal ffn_moe_out";

    ComputeRequest empty = random_request(0, 0, 9);
    WorkerReply none = ask_compute(c, empty);
    ASSERT_EQ(none.h.kind, (uint16_t) MsgKind::result) << none.text();
    EXPECT_EQ(none.h.n_pairs, 0);
    ASSERT_EQ(none.frames.size(), 1u);
    EXPECT_EQ(none.frames[0].size(), 0u);
    EXPECT_EQ(none.verify(), ErrorCode::ok);
}

TEST(Worker, MalformedRequestsGetErrorRepliesAndServingContinues) {
    std::string dir = test_dir("worker_malformed");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {"--experts", "0-3"}));
    WorkerClient c(w.endpoint(), w.instance());
    const ComputeRequest good = random_request(0, 3, 11, 4);
    auto with_header = [&](std::function<void(MsgHeader &)> f) {
        MsgHeader h = compute_header(good, c.instance());
        f(h);
        return compute_frames(h, good);
    };
    auto with_request = [&](std::function<void(ComputeRequest &)> f) {
        ComputeRequest r = good;
        f(r);
        return compute_frames(compute_header(r, c.instance()), r);
    };
    struct Case {
        const char * name;
        ErrorCode code;
        std::vector<zmq::message_t> frames;
    };
    std::vector<Case> cases;
    cases.push_back({"wrong magic", ErrorCode::bad_magic, with_header([](MsgHeader & h) { h.magic ^= 1; })});
    cases.push_back({"wrong version (a v1 peer)", ErrorCode::bad_version, with_header([](MsgHeader & h) { h.version = 1; })});
    cases.push_back({"addressed to another worker instance", ErrorCode::bad_instance, with_header([](MsgHeader & h) { h.instance ^= 1; })});
    cases.push_back({"addressed to no instance", ErrorCode::bad_instance, with_header([](MsgHeader & h) { h.instance = 0; })});
    cases.push_back({"unknown kind", ErrorCode::bad_kind, with_header([](MsgHeader & h) { h.kind = 99; })});
    cases.push_back({"a result sent to the worker", ErrorCode::bad_kind, with_header([](MsgHeader & h) { h.kind = (uint16_t) MsgKind::result; })});
    cases.push_back({"hidden frame disagrees with n_rows", ErrorCode::bad_frames,
                     with_request([](ComputeRequest & r) { r.hidden.resize(r.hidden.size() - kEmbd); })});
    cases.push_back({"bad hash", ErrorCode::bad_hash, with_header([](MsgHeader & h) { h.frame_xxh3[2] ^= 1; })});
    cases.push_back({"expert id out of range", ErrorCode::bad_expert, with_request([](ComputeRequest & r) { r.ids[3] = kExpert; })});
    cases.push_back({"expert id below -1", ErrorCode::bad_expert, with_request([](ComputeRequest & r) { r.ids[0] = -2; })});
    cases.push_back({"expert not served", ErrorCode::bad_expert, with_request([](ComputeRequest & r) { r.ids[1] = 5; })});
    cases.push_back({"layer not MoE", ErrorCode::bad_layer, with_request([](ComputeRequest & r) { r.layer = 2; })});
    cases.push_back({"n_embd not the model's", ErrorCode::bad_shape, with_header([](MsgHeader & h) { h.n_embd = 32; })});
    cases.push_back({"oversized n_rows", ErrorCode::bad_shape, with_header([](MsgHeader & h) { h.n_rows = kMaxRows + 1; })});
    cases.push_back({"n_used zero", ErrorCode::bad_shape, with_header([](MsgHeader & h) { h.n_used = 0; })});
    cases.push_back({"unknown reply kind", ErrorCode::bad_kind, with_header([](MsgHeader & h) { h.reply = 9; })});
    cases.push_back({"unsupported glu op", ErrorCode::bad_kind, with_header([](MsgHeader & h) { h.glu_op = GGML_GLU_OP_SWIGLU_CLAMP; })});
    // the FFN's form (protocol v4): this model has no expert biases
    cases.push_back({"biases announced for a layer without them", ErrorCode::bad_shape,
                     with_header([](MsgHeader & h) { h.ffn_flags = moezip::kFfnDownBias; })});
    cases.push_back({"unknown ffn flag", ErrorCode::bad_shape, with_header([](MsgHeader & h) { h.ffn_flags = 1u << 9; })});
    cases.push_back({"glu alpha without swiglu_oai", ErrorCode::bad_shape, with_header([](MsgHeader & h) { h.glu_alpha = 1.702f; })});
    cases.push_back({"swiglu_oai with a NaN limit", ErrorCode::bad_shape, with_header([](MsgHeader & h) {
                         h.glu_op = GGML_GLU_OP_SWIGLU_OAI;
                         h.glu_limit = std::numeric_limits<float>::quiet_NaN();
                     })});
    cases.push_back({"setup_us set in a request", ErrorCode::bad_shape, with_header([](MsgHeader & h) { h.setup_us = 7; })});
    cases.push_back({"ids sent as f32", ErrorCode::bad_frames, with_header([](MsgHeader & h) { h.dtype[1] = (uint8_t) WireType::f32; })});
    {
        std::vector<zmq::message_t> f = compute_frames(compute_header(good, c.instance()), good);
        f.resize(1);
        cases.push_back({"truncated multipart (header only)", ErrorCode::bad_frames, std::move(f)});
    }
    {
        std::vector<zmq::message_t> f = compute_frames(compute_header(good, c.instance()), good);
        f.emplace_back("x", 1);
        cases.push_back({"an extra frame", ErrorCode::bad_frames, std::move(f)});
    }
    {
        std::vector<zmq::message_t> f;
        f.emplace_back("junk!", 5);
        cases.push_back({"junk single frame", ErrorCode::bad_frames, std::move(f)});
        std::vector<zmq::message_t> g;
        std::string junk(sizeof(MsgHeader), 'j');
        g.emplace_back(junk.data(), junk.size());
        cases.push_back({"a header's worth of junk", ErrorCode::bad_magic, std::move(g)});
        // a v3 peer: a 136-byte header with v3 in it is named by its version, not by its size
        MsgHeader v3 = compute_header(good, c.instance());
        v3.version = 3;
        std::vector<zmq::message_t> old;
        old.emplace_back(&v3, (size_t) 136);
        cases.push_back({"a v3 peer's header", ErrorCode::bad_version, std::move(old)});
    }
    for (Case & k : cases) {
        const bool readable_header = k.frames[0].size() == sizeof(MsgHeader);
        WorkerReply rep = ask(c, std::move(k.frames));
        EXPECT_EQ(rep.h.kind, (uint16_t) MsgKind::error) << k.name;
        EXPECT_EQ(rep.h.status, (int32_t) k.code) << k.name << ": got " << error_code_name((ErrorCode) rep.h.status) << ": " << rep.text();
        EXPECT_EQ(rep.verify(), ErrorCode::ok) << k.name;
        EXPECT_FALSE(rep.text().empty()) << k.name;
        if (readable_header && k.code != ErrorCode::bad_magic) {
            EXPECT_EQ(rep.h.request_id, good.request_id) << k.name;
        }
    }
    WorkerReply ok = ask_compute(c, good);
    EXPECT_EQ(ok.h.kind, (uint16_t) MsgKind::result) << "the worker stopped serving: " << ok.text();
    ASSERT_EQ(w.stop(SIGTERM, 5000), 0);
    EXPECT_NE(w.stderr_text().find("errors " + std::to_string(cases.size())), std::string::npos) << w.stderr_text();
}


TEST(Worker, ShardSlicesArePartialSumsOfTheEngineKernels) {
    // tiny q8_0: n_ff 64 = two blocks of 32; each slice is bit-identical to the executor on the same
    // views, and the two partial sums add up to the whole row (up to float rounding)
    ReferenceModel m;
    ASSERT_TRUE(m.load(tiny_model()));
    std::string dir = test_dir("worker_shard");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {}));
    // the plan of two workers with half of n_ff each (the coordinator's own share 0): slices [0, 32), [32, 64)
    WorkerClient c(w.endpoint(), w.instance(), R"({"mode":"shard","shares":[0,0.5,0.5],"slice":1})");
    WorkerClient c2(w.endpoint(), w.instance(), R"({"mode":"shard","shares":[0,0.5,0.5],"slice":2})");
    ComputeRequest r = random_request(1, 9, 77);
    const Expected whole = reference_compute(m, r);
    std::vector<float> sum((size_t) kEmbd * r.n_rows, 0.0f);
    for (int32_t first : {0, 32}) {
        WorkerReply rep = ask(first == 0 ? c : c2, shard_frames(r, c.instance(), first, 32));
        ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::result) << rep.text();
        ASSERT_EQ(rep.verify(), ErrorCode::ok);
        MoeExecutor exec(reference_api(), 1);
        ExpertWeights ew = m.weights(r.layer);
        ew.ff_first = first;
        ew.ff_count = 32;
        SlotBatch b;
        b.n_rows = r.n_rows; b.k = r.n_used; b.hidden = r.hidden.data(); b.hidden_stride = kEmbd * sizeof(float);
        b.ids = r.ids.data(); b.weights = r.weights.data();
        std::vector<float> slots((size_t) kEmbd * r.n_used * r.n_rows), part((size_t) kEmbd * r.n_rows);
        ASSERT_TRUE(exec.compute_slots(ew, b, slots.data()));
        moe_sum_slots(slots.data(), kEmbd, r.n_used, r.n_rows, part.data());
        EXPECT_TRUE(same_bytes(rep.frames[0], part)) << "slice " << first << " differs from the executor's";
        EXPECT_FALSE(same_bytes(rep.frames[0], whole.row_sums)) << "a slice is not the whole computation";
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    double max_err = 0, max_abs = 0;
    for (size_t i = 0; i < sum.size(); ++i) {
        max_err = std::max(max_err, (double) std::fabs(sum[i] - whole.row_sums[i]));
        max_abs = std::max(max_abs, (double) std::fabs(whole.row_sums[i]));
    }
    EXPECT_GT(max_abs, 0.0);
    EXPECT_LE(max_err, 1e-5 * std::max(1.0, max_abs)) << "slices must add up to the whole FFN";
    // malformed slices are refused with a named error, and the worker keeps serving
    // each with the one reason that applies (the message once listed all three)
    struct Case { const char * name; ErrorCode code; std::vector<zmq::message_t> frames; const char * says; };
    std::vector<Case> cases;
    cases.push_back({"slice not on a block boundary", ErrorCode::bad_shape, shard_frames(r, c.instance(), 16, 32),
                     "n_ff slice [16, 48) does not start and end on a multiple of 32"});
    cases.push_back({"slice past n_ff", ErrorCode::bad_shape, shard_frames(r, c.instance(), 32, 64),
                     "n_ff slice [32, 96) is outside [0, 64) of layer"});
    cases.push_back({"empty slice", ErrorCode::bad_shape, shard_frames(r, c.instance(), 0, 0), "n_ff slice [0, 0) is empty"});
    cases.push_back({"slice frame of 4 bytes", ErrorCode::bad_frames, shard_frames(r, c.instance(), 0, 32, 4), ""});
    ComputeRequest slots_reply = r;
    slots_reply.reply = ReplyKind::slots;
    cases.push_back({"slice with per-slot reply", ErrorCode::bad_kind, shard_frames(slots_reply, c.instance(), 0, 32), ""});
    cases.push_back({"another host's slice (not this connection's plan)", ErrorCode::bad_plan, shard_frames(r, c.instance(), 32, 32), ""});
    cases.push_back({"whole n_ff on a shard connection", ErrorCode::bad_plan, compute_frames(compute_header(r, c.instance()), r), ""});
    for (Case & k : cases) {
        WorkerReply rep = ask(c, std::move(k.frames));
        EXPECT_EQ(rep.h.kind, (uint16_t) MsgKind::error) << k.name;
        EXPECT_EQ(rep.h.status, (int32_t) k.code) << k.name << ": got " << error_code_name((ErrorCode) rep.h.status) << ": " << rep.text();
        EXPECT_NE(rep.text().find(k.says), std::string::npos) << k.name << ": " << rep.text();
        if (k.code == ErrorCode::bad_shape) {
            EXPECT_EQ(rep.text().find(" or "), std::string::npos) << k.name << ": " << rep.text();
        }
    }
    EXPECT_EQ(ask(c, shard_frames(r, c.instance(), 0, 32)).h.kind, (uint16_t) MsgKind::result) << "the worker stopped serving";
}

// RssAnon of a process in KiB (/proc/<pid>/status), -1 when unreadable.
static long rss_anon_kib(int pid) {
    std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
    size_t pos = status.find("RssAnon:");
    return pos == std::string::npos ? -1 : strtol(status.c_str() + pos + 8, nullptr, 10);
}

TEST(Worker, UnservedExpertsNeverBecomeResident) {
    // 2 layers x 32 experts of 3 x 512x1024 q8_0 (0.53 MiB each): 102 MiB of expert weights.
    std::string model = fixture_model({"--preset", "small", "--n-embd", "512", "--n-ff-exp", "1024", "--n-expert", "32", "--type", "q8_0"});
    ASSERT_FALSE(model.empty());
    std::string dir = test_dir("worker_resident");
    WorkerProcess part, all;
    ASSERT_TRUE(part.start({"--model", model, "--bind", "ipc://" + dir + "/part.sock", "--experts", "0-3"}, dir)) << part.error();
    ASSERT_TRUE(all.start({"--model", model, "--bind", "ipc://" + dir + "/all.sock"}, dir)) << all.error();
    EXPECT_NE(part.ready_line().find("12.8 MiB of expert weights"), std::string::npos) << part.ready_line();
    EXPECT_NE(all.ready_line().find("102.0 MiB of expert weights"), std::string::npos) << all.ready_line();
    const long part_kib = rss_anon_kib(part.pid()), all_kib = rss_anon_kib(all.pid());
    ASSERT_GT(part_kib, 0);
    // The 28 unserved experts are 89 MiB; huge pages may add up to 2 MiB at each end of the 6
    // served ranges. Relative to a full load, so the process's own memory (sanitizers) cancels out.
    EXPECT_GT(all_kib - part_kib, 70 * 1024) << "RssAnon " << part_kib << " KiB serving 4 of 32 experts, " << all_kib
                                            << " KiB serving all: unserved experts were touched?";
}

TEST(Worker, SigtermExitsZeroWithinASecond) {
    std::string dir = test_dir("worker_sigterm");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {"--threads", "1"}));
    {
        WorkerClient c(w.endpoint(), w.instance(), /*plan =*/ "");
        EXPECT_EQ(ask(c, simple_frames(MsgKind::ping, 1)).h.kind, (uint16_t) MsgKind::pong);
    }
    double ms = 0;
    EXPECT_EQ(w.stop(SIGTERM, 5000, &ms), 0) << w.stderr_text();
    EXPECT_LT(ms, 1000.0);
    EXPECT_NE(w.stderr_text().find("requests 1 (hello 0, compute 0, ping 1)"), std::string::npos) << w.stderr_text();
}

TEST(Worker, MmapGivesTheSameResultsAsLoadedMemory) {
    std::string dir = test_dir("worker_mmap");
    WorkerProcess loaded, mapped;
    ASSERT_TRUE(start_worker(loaded, dir, {"--experts", "2-5"}));
    std::string dir2 = test_dir("worker_mmap2");
    ASSERT_TRUE(start_worker(mapped, dir2, {"--experts", "2-5", "--mmap"}));
    WorkerClient a(loaded.endpoint(), loaded.instance()), b(mapped.endpoint(), mapped.instance());
    ComputeRequest r = random_request(1, 6, 21);
    for (int32_t & id : r.ids) id = id >= 2 && id <= 5 ? id : -1;
    WorkerReply ra = ask_compute(a, r), rb = ask_compute(b, r);
    ASSERT_EQ(ra.h.kind, (uint16_t) MsgKind::result) << ra.text();
    ASSERT_EQ(rb.h.kind, (uint16_t) MsgKind::result) << rb.text();
    ASSERT_EQ(ra.frames[0].size(), rb.frames[0].size());
    EXPECT_EQ(memcmp(ra.frames[0].data(), rb.frames[0].data(), ra.frames[0].size()), 0);
    WorkerReply ha = ask(a, simple_frames(MsgKind::hello, 2, hello_json(kRowsPlan))), hb = ask(b, simple_frames(MsgKind::hello, 2, hello_json(kRowsPlan)));
    nlohmann::json ja = nlohmann::json::parse(ha.text(), nullptr, false), jb = nlohmann::json::parse(hb.text(), nullptr, false);
    EXPECT_NE(ja["instance"], jb["instance"]) << "two processes, two instances";
    ja.erase("instance");
    jb.erase("instance");
    EXPECT_EQ(ja, jb) << "same identity either way";
}

TEST(Worker, ThreadCountDoesNotChangeTheBits) {
    ReferenceModel m;
    ASSERT_TRUE(m.load(tiny_model()));
    std::string dir = test_dir("worker_threads");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {"--threads", "2"}));
    WorkerClient c(w.endpoint(), w.instance());
    ComputeRequest r = random_request(0, 16, 71);
    r.reply = ReplyKind::slots;
    WorkerReply rep = ask_compute(c, r);
    ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::result) << rep.text();
    EXPECT_TRUE(same_bytes(rep.frames[0], reference_compute(m, r).slots)) << "2 threads vs the 1-thread reference";
}

TEST(Worker, ServesOverTcpOnAFreePort) {
    ReferenceModel m;
    ASSERT_TRUE(m.load(tiny_model()));
    std::string dir = test_dir("worker_tcp");
    WorkerProcess w;
    ASSERT_TRUE(w.start({"--model", tiny_model(), "--bind", "tcp://127.0.0.1:*"}, dir)) << w.error();
    ASSERT_EQ(w.endpoint().rfind("tcp://127.0.0.1:", 0), 0u) << w.ready_line();
    EXPECT_EQ(w.stderr_text().find("warning"), std::string::npos) << "loopback must not warn";
    WorkerClient c(w.endpoint(), w.instance());
    ComputeRequest r = random_request(0, 4, 31);
    WorkerReply rep = ask_compute(c, r);
    ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::result) << rep.text();
    EXPECT_TRUE(same_bytes(rep.frames[0], reference_compute(m, r).row_sums));
}

TEST(Worker, ConfigTableGivesDefaultsAndFlagsOverrideIt) {
    std::string dir = test_dir("worker_config");
    std::string cfg = dir + "/moezip.toml";
    FILE * f = fopen(cfg.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fprintf(f, "[worker_server]\nbind = \"ipc://%s/from-config.sock\"\nmodel = \"%s\"\nexperts = \"4-7\"\nthreads = 1\n",
            dir.c_str(), tiny_model().c_str());
    fclose(f);
    WorkerProcess w;
    ASSERT_TRUE(w.start({"--config", cfg, "--experts", "1,6"}, dir)) << w.error();
    EXPECT_EQ(w.endpoint(), "ipc://" + dir + "/from-config.sock");
    EXPECT_NE(w.ready_line().find("experts 1,6 of 8"), std::string::npos) << w.ready_line();
}

TEST(Worker, BadStartupInputFailsWithAMessage) {
    std::string dir = test_dir("worker_bad_start");
    CommandResult r = run_command({bin_path("moezip-worker"), "--model", tiny_model(), "--experts", "0-8", "--bind", "ipc://" + dir + "/x"}, {}, 60);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("expert 8 does not exist"), std::string::npos) << r.err;
    // a range reaching past the model names its first missing expert, not its end
    r = run_command({bin_path("moezip-worker"), "--model", tiny_model(), "--experts", "6-12", "--bind", "ipc://" + dir + "/x"}, {}, 60);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("expert 8 does not exist (model"), std::string::npos) << r.err;
    r = run_command({bin_path("moezip-worker"), "--model", dir + "/missing.gguf"}, {}, 60);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("missing.gguf"), std::string::npos) << r.err;
    r = run_command({bin_path("moezip-worker"), "--model", tiny_model()}, {{"MOEZIP_WORKER_FAULT", "explode"}}, 60);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("'explode'"), std::string::npos) << r.err;
}

TEST(WorkerFault, CorruptResultIsCaughtByTheHashCheck) {
    std::string dir = test_dir("worker_fault_corrupt");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {}, {{"MOEZIP_WORKER_FAULT", "corrupt_result"}}));
    WorkerClient c(w.endpoint(), w.instance());
    WorkerReply rep = ask_compute(c, random_request(0, 2, 41));
    ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::result);
    EXPECT_EQ(rep.verify(), ErrorCode::bad_hash);
}

TEST(WorkerFault, ExitAfterDiesWithoutReplying) {
    std::string dir = test_dir("worker_fault_exit");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {}, {{"MOEZIP_WORKER_FAULT", "exit_after=1"}}));
    WorkerClient c(w.endpoint(), w.instance());
    EXPECT_EQ(ask_compute(c, random_request(0, 2, 51)).h.kind, (uint16_t) MsgKind::result);
    ComputeRequest r = random_request(0, 2, 52);
    c.send(compute_frames(compute_header(r, c.instance()), r));
    WorkerReply rep;
    EXPECT_FALSE(c.recv(rep, 1000)) << "a reply after the fault";
    EXPECT_EQ(w.wait_exit(5000), 1);
}

TEST(WorkerFault, DelayHoldsEachComputeReply) {
    std::string dir = test_dir("worker_fault_delay");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {}, {{"MOEZIP_WORKER_FAULT", "delay_ms=300"}}));
    WorkerClient c(w.endpoint(), w.instance());
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(ask_compute(c, random_request(0, 1, 61)).h.kind, (uint16_t) MsgKind::result);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GE(ms, 300.0);
}

TEST(Worker, SigtermAnswersTheRequestInFlightAndRefusesTheWaitingOnes) {
    // A worker stopped while a request was in flight closed its socket with the
    // reply still queued (linger 0), and the coordinator waited its whole timeout (5 s, 20 s).
    std::string dir = test_dir("worker_sigterm_in_flight");
    WorkerProcess w;
    const std::string held = dir + "/held";
    std::remove(held.c_str());
    ASSERT_TRUE(start_worker(w, dir, {}, {{"MOEZIP_WORKER_FAULT", "delay_ms=800,delay_marker=" + held}}));
    WorkerClient c(w.endpoint(), w.instance());
    ComputeRequest first = random_request(0, 1, 71), second = random_request(0, 1, 72);
    moezip::MsgHeader h1 = compute_header(first, c.instance()), h2 = compute_header(second, c.instance());
    h1.request_id = 1001;
    h2.request_id = 1002;
    c.send(compute_frames(h1, first));
    c.send(compute_frames(h2, second));
    ASSERT_TRUE(wait_for_file(held, 10000)) << "the first request is in its delay";
    EXPECT_EQ(read_file(held), "1001\n") << "only the first";
    int code = -1;
    std::thread stopper([&]() { code = w.stop(SIGTERM, 5000); });
    const auto t0 = std::chrono::steady_clock::now();
    WorkerReply a, b;
    ASSERT_TRUE(c.recv(a, 3000)) << "the request in flight was answered";
    ASSERT_TRUE(c.recv(b, 3000)) << "the waiting request was answered";
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stopper.join();
    EXPECT_EQ(a.h.request_id, 1001u);
    EXPECT_EQ(a.h.kind, (uint16_t) MsgKind::result);
    EXPECT_EQ(a.verify(), moezip::ErrorCode::ok);
    EXPECT_EQ(b.h.request_id, 1002u);
    EXPECT_EQ(b.h.kind, (uint16_t) MsgKind::error);
    EXPECT_EQ(b.h.status, (int32_t) moezip::ErrorCode::stopping) << b.text();
    EXPECT_NE(b.text().find("stopping"), std::string::npos) << b.text();
    EXPECT_LT(ms, 2000.0);
    EXPECT_EQ(code, 0) << w.stderr_text();
}

// The worker's scratch budget is checked from the header before anything is allocated, so the
// estimate (request_cost) must bound what the executor then really uses, for every FFN form the
// protocol carries: gpt-oss's three bias results and llama4's repeated and weighted input were left
// out before (a gpt-oss-120b-shaped layer needs ~37% more than the plain form).
TEST(Worker, TheScratchEstimateBoundsTheExecutorForEveryFfnForm) {
    for (const char * arch : {"qwen3moe", "gpt-oss", "llama4"}) {
        const std::string model = fixture_model({"--arch", arch, "--type", "f32"});
        ASSERT_FALSE(model.empty()) << arch;
        ReferenceModel m;
        ASSERT_TRUE(m.load(model)) << arch;
        int il = 0;
        while (il < 8 && m.tensor(il, "ffn_gate_exps.weight") == nullptr) ++il;
        ASSERT_LT(il, 8) << arch;
        ExpertWeights w = m.weights(il);
        w.gate_b = m.tensor(il, "ffn_gate_exps.bias");
        w.up_b = m.tensor(il, "ffn_up_exps.bias");
        w.down_b = m.tensor(il, "ffn_down_exps.bias");
        const bool oss = std::string(arch) == "gpt-oss", l4 = std::string(arch) == "llama4";
        ASSERT_EQ(w.down_b != nullptr, oss) << arch;
        if (oss) { w.glu_op = GGML_GLU_OP_SWIGLU_OAI; w.glu_alpha = 1.702f; w.glu_limit = 7.0f; }
        w.weight_before = l4;
        const int64_t E = w.gate_exps->ne[0], F = w.gate_exps->ne[1], n_expert = w.gate_exps->ne[2];
        const int64_t rows = 64, k = l4 ? 1 : 2;
        std::mt19937 rng(3);
        std::vector<float> hidden((size_t) (E * rows)), weights((size_t) (k * rows), 0.5f), out((size_t) (E * k * rows));
        std::vector<int32_t> ids((size_t) (k * rows));
        for (float & x : hidden) x = std::uniform_real_distribution<float>(-1, 1)(rng);
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = (int32_t) ((i * 7 + i / k) % (size_t) n_expert);
        MoeExecutor exec(reference_api(), 1);
        SlotBatch b;
        b.n_rows = rows;
        b.k = k;
        b.hidden = hidden.data();
        b.hidden_stride = (size_t) E * sizeof(float);
        b.ids = ids.data();
        b.weights = weights.data();
        Status st = exec.compute_slots(w, b, out.data());
        ASSERT_TRUE(st) << arch << ": " << st.to_string();
        MsgHeader h = msg_header_make(MsgKind::compute);
        h.n_embd = (int32_t) E;
        h.n_ff = (int32_t) F;
        h.n_used = (int32_t) k;
        h.n_rows = (int32_t) rows;
        h.reply = (uint16_t) moezip::ReplyKind::slots;
        h.ffn_flags = (l4 ? moezip::kFfnWeightBefore : 0u) | (oss ? (uint32_t) moezip::kFfnBiases : 0u);
        const moezip::RequestCost cost = moezip::request_cost(h, F);
        EXPECT_GE(cost.scratch_bytes, (int64_t) exec.scratch_bytes()) << arch << ": the budget check would let a request through "
                                                                      << "that needs more than it counted";
    }
}

// A flood of hellos from other peers (1500 connections saying hello in a loop) evicted a working
// coordinator's plan between its hello and its compute, until it refused the worker for the whole
// run. Hello-only connections now go first, and evictions are counted.
TEST(WorkerPlanTable, AFloodOfHellosDoesNotForgetAComputingConnection) {
    moezip::WorkerPlans plans;
    plans.set("coordinator", moezip::WorkerPlan{});
    ASSERT_NE(plans.find("coordinator"), nullptr);  // it computed
    for (int i = 0; i < 1500; ++i) plans.set("flood-" + std::to_string(i), moezip::WorkerPlan{});
    EXPECT_NE(plans.find("coordinator"), nullptr) << "the computing connection kept its plan";
    EXPECT_EQ(plans.size(), moezip::kMaxPlans);
    EXPECT_EQ(plans.evicted_idle(), 1500u + 1u - moezip::kMaxPlans);
    EXPECT_EQ(plans.evicted_active(), 0u);
    EXPECT_NE(plans.find("flood-1499"), nullptr) << "the newest hello is kept";
    EXPECT_EQ(plans.find("flood-0"), nullptr) << "the oldest hello-only one went first";
}

// Automatic shares say hello again at every slice change: a hello flood then took the
// plan of a coordinator that had computed for a whole run, because its new hello made it a
// hello-only connection again (its worker refused for the rest of the run). A connection that has
// computed stays one through its later hellos.
TEST(WorkerPlanTable, AComputingConnectionThatSaysHelloAgainKeepsItsPlanThroughAFlood) {
    moezip::WorkerPlans plans;
    plans.set("coordinator", moezip::WorkerPlan{});
    ASSERT_NE(plans.find("coordinator"), nullptr);  // it computed
    moezip::WorkerPlan changed;
    changed.mode = moezip::WorkerPlan::Mode::shard;
    changed.shares = {0.75, 0.25};
    changed.slice = 1;
    plans.set("coordinator", changed);  // a slice change: hello with the new plan
    for (int i = 0; i < 1500; ++i) plans.set("flood-" + std::to_string(i), moezip::WorkerPlan{});
    const moezip::WorkerPlan * kept = plans.find("coordinator");
    ASSERT_NE(kept, nullptr) << "the computing connection kept its plan";
    EXPECT_EQ(kept->shares, changed.shares) << "and it is the new one";
    EXPECT_EQ(plans.evicted_active(), 0u);
}
