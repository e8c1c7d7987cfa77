// moezip-worker end to end: a child process on an ipc:// path (once on tcp://127.0.0.1:*), spoken to
// with a DEALER; results compared bit for bit with MoeExecutor run here on the same file's weights.
#include "coordinator/config/expert_range.h"
#include "coordinator/compute/moe_exec.h"
#include "coordinator/wire/protocol.h"
#include "provider_map/expert_digest.h"
#include "tests/support/test_support.h"
#include "tests/support/worker_harness.h"
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

constexpr int kEmbd = 64, kFf = 64, kExpert = 8, kUsed = 2;  // the tiny preset

std::string tiny_model() { return fixture_model({"--preset", "tiny", "--type", "q8_0"}); }

std::string hex16(uint64_t v) {
    char buf[17];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long) v);
    return buf;
}

// Random rows, each with kUsed distinct experts drawn from [0, n_choice), positive weights.
ComputeRequest random_request(int layer, int n_rows, uint32_t seed, int n_choice = kExpert) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> val(-1.0f, 1.0f), wt(0.05f, 1.0f);
    ComputeRequest r;
    r.request_id = seed;
    r.layer = layer;
    r.n_embd = kEmbd;
    r.n_ff = kFf;
    r.n_used = kUsed;
    r.n_rows = n_rows;
    for (int i = 0; i < kEmbd * n_rows; ++i) r.hidden.push_back(val(rng));
    for (int row = 0; row < n_rows; ++row) {
        int a = (int) (rng() % n_choice), b = (int) (rng() % (n_choice - 1));
        if (b >= a) ++b;
        r.ids.push_back(a);
        r.ids.push_back(b);
        r.weights.push_back(wt(rng));
        r.weights.push_back(wt(rng));
    }
    return r;
}

// The engine's computation of every slot (ids all >= 0): slots [n_embd, n_used, n_rows] and the row sums.
struct Expected {
    std::vector<float> slots, row_sums;
};

Expected reference_compute(const ReferenceModel & m, const ComputeRequest & r) {
    Expected e;
    e.slots.assign((size_t) kEmbd * r.n_used * r.n_rows, 0.0f);
    e.row_sums.assign((size_t) kEmbd * r.n_rows, 0.0f);
    MoeExecutor exec(reference_api(), 1);
    SlotBatch b;
    b.n_rows = r.n_rows;
    b.k = r.n_used;
    b.hidden = r.hidden.data();
    b.hidden_stride = kEmbd * sizeof(float);
    b.ids = r.ids.data();
    b.weights = r.weights.data();
    Status st = exec.compute_slots(m.weights(r.layer), b, e.slots.data());
    EXPECT_TRUE(st) << st.to_string();
    moe_sum_slots(e.slots.data(), kEmbd, r.n_used, r.n_rows, e.row_sums.data());
    return e;
}

bool same_bytes(const zmq::message_t & m, const std::vector<float> & v) {
    return m.size() == v.size() * sizeof(float) && (v.empty() || memcmp(m.data(), v.data(), m.size()) == 0);
}

WorkerReply ask(WorkerClient & c, std::vector<zmq::message_t> frames) {
    c.send(std::move(frames));
    WorkerReply rep;
    EXPECT_TRUE(c.recv(rep)) << "no reply within 10 s";
    return rep;
}

WorkerReply ask_compute(WorkerClient & c, const ComputeRequest & r) { return ask(c, compute_frames(compute_header(r, c.instance()), r)); }

// A worker on ipc://<dir>/w.sock with extra flags; fails the test when it does not come up.
bool start_worker(WorkerProcess & w, const std::string & dir, std::vector<std::string> flags,
                  const std::map<std::string, std::string> & env = {}) {
    std::vector<std::string> args = {"--model", tiny_model(), "--bind", "ipc://" + dir + "/w.sock"};
    args.insert(args.end(), flags.begin(), flags.end());
    bool ok = w.start(args, dir, env);
    EXPECT_TRUE(ok) << w.error();
    return ok;
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

// Shard mode: [header, hidden, ids, weights, ff_slice (first, count)].
std::vector<zmq::message_t> shard_frames(const ComputeRequest & r, uint64_t instance, int32_t first, int32_t count, int32_t slice_bytes = 8) {
    MsgHeader h = compute_header(r, instance);
    const int32_t ff[2] = {first, count};
    msg_header_set_frame(h, 3, WireType::i32, ff, (size_t) slice_bytes);
    std::vector<zmq::message_t> f = compute_frames(h, r);
    f.emplace_back(ff, (size_t) slice_bytes);
    return f;
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
    EXPECT_EQ(w.stop(SIGTERM, 5000, &ms), 0);
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

// ---- shard mode: packed slices, and the originals given back (worker_slices.h, slice_residency.h) ----

namespace {

// VmRSS of a process, bytes (0 when unreadable).
uint64_t rss_bytes(int pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return (uint64_t) std::stoull(line.substr(6)) * 1024;
    return 0;
}

// n_embd 256, n_ff 512, q8_0, 8 experts, 2 layers: one expert's gate, up or down is 512 x 272 =
// 139264 bytes (34 pages), one tensor 1114112 bytes (272 pages, page-aligned in its own mapping).
constexpr int64_t kShardEmbd = 256, kShardFf = 512;
constexpr uint64_t kShardOriginals = 2 * 3 * 8 * 139264;  // every expert tensor of both layers

std::string shard_model() {
    return fixture_model({"--preset", "tiny", "--type", "q8_0", "--n-embd", "256", "--n-ff-exp", "512"});
}

ComputeRequest shard_request(int layer, uint32_t seed) {
    ComputeRequest r = random_request(layer, 3, seed);
    r.n_embd = (int32_t) kShardEmbd;
    r.n_ff = (int32_t) kShardFf;
    std::mt19937 rng(seed);
    r.hidden.resize((size_t) (kShardEmbd * r.n_rows));
    for (float & x : r.hidden) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    return r;
}

// A request of layer `layer`: the low half of n_ff, the high half, or whole n_ff.
enum class Part { lo, hi, whole };
std::vector<zmq::message_t> part_frames(const ComputeRequest & r, uint64_t instance, Part p) {
    if (p == Part::lo) return shard_frames(r, instance, 0, (int32_t) kShardFf / 2);
    if (p == Part::hi) return shard_frames(r, instance, (int32_t) kShardFf / 2, (int32_t) kShardFf / 2);
    return compute_frames(compute_header(r, instance), r);
}

constexpr const char * kPlanLo = R"({"mode":"shard","shares":[0,0.5,0.5],"slice":1})";  // units [0, 256)
constexpr const char * kPlanHi = R"({"mode":"shard","shares":[0,0.5,0.5],"slice":2})";  // units [256, 512)

// "originals given back N bytes (read again M)" from a worker's exit line; false when absent.
bool given_back(const std::string & text, unsigned long long & given, unsigned long long & again) {
    const size_t at = text.find("originals given back ");
    return at != std::string::npos && sscanf(text.c_str() + at, "originals given back %llu bytes (read again %llu)", &given, &again) == 2;
}

} // namespace

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
    auto both = [&](Part p) {
        ++step;
        WorkerClient & ca = p == Part::lo ? a_lo : p == Part::hi ? a_hi : a_all;
        WorkerClient & cb = p == Part::lo ? b_lo : p == Part::hi ? b_hi : b_all;
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
    both(Part::lo);     // packed from the originals, which then go
    const uint64_t rss_a = rss_bytes(a.pid()), rss_b = rss_bytes(b.pid());
    EXPECT_GT(rss_b, rss_a + kShardOriginals / 2) << "A " << rss_a << " B " << rss_b << " bytes";
    both(Part::hi);     // packed from the file
    both(Part::whole);  // the originals read again
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    both(Part::lo);     // only this slice in the last 300 ms, its copies held: given back again
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    both(Part::hi);     // its copies still held (two slices per layer)
    both(Part::whole);  // read again
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
    // A breaker ran three coordinators with different shares on one worker that kept two slices per
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
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // idle: the queue is packed
        ASSERT_EQ(a.stop(SIGTERM, 5000), 0);
        EXPECT_NE(a.stderr_text().find(bytes(shared ? 128 + 256 : 256)), std::string::npos) << a.stderr_text();
        EXPECT_NE(a.stderr_text().find(shared ? "4 shard slices packed ahead" : "2 shard slices packed ahead"), std::string::npos)
            << a.stderr_text();
    }
}

TEST(WorkerShard, HellosAloneNeverPushOutTheCopiesARequestUses) {
    // A breaker's 600 connections said hello with random shard plans and never computed: the slices
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

TEST(WorkerShard, AModelFileChangedOnDiskIsNeverReadAgain) {
    // Once the originals are given back, new slices and whole requests read the file: if it changed
    // since load, its bytes are not the ones hello_ok's digests named. Refused, by name. A worker
    // that maps the file (--mmap) would compute from the changed bytes at once: it refuses every
    // request after the change (a breaker found --mmap computing from a changed file with a clean report).
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
        ASSERT_EQ(ask(lo, part_frames(r, a.instance(), Part::lo)).h.kind, (uint16_t) MsgKind::result);  // originals given back
        ASSERT_EQ(run_command({"/usr/bin/touch", "-d", "2001-01-01", model}).exit_code, 0);  // the file "changed"
        if (!mapped) plan_hi_and_all();
        std::vector<Part> refused = {Part::hi, Part::whole};
        if (mapped) refused.push_back(Part::lo);
        for (Part p : refused) {
            WorkerReply rep = ask(p == Part::hi ? *hi : p == Part::lo ? lo : *all, part_frames(r, a.instance(), p));
            ASSERT_EQ(rep.h.kind, (uint16_t) MsgKind::error) << rep.text();
            EXPECT_NE(rep.text().find("changed on disk since this worker loaded it"), std::string::npos) << rep.text();
            EXPECT_NE(rep.text().find(model), std::string::npos) << rep.text();
        }
        if (!mapped) {
            EXPECT_EQ(ask(lo, part_frames(r, a.instance(), Part::lo)).h.kind, (uint16_t) MsgKind::result)
                << "the slice packed (into its own memory) before the change is still served";
        }
    }
}

TEST(Worker, AMappedModelRewrittenWithItsModificationTimeSetBackIsRefusedAndARenameIsNot) {
    // Found by a breaker: a --mmap worker compared size and modification time only; the same bytes
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
        // a breaker found its hello still answered hello_ok, so the coordinator probed it every
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
    // A breaker's suspected race: a --mmap worker reads the file as it is while the kernels run. A
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
    ASSERT_TRUE(w.start({"--model", model, "--bind", "ipc://" + dir + "/w.sock", "--mmap"}, dir, {{"MOEZIP_WORKER_FAULT", "delay_ms=1500"}}))
        << w.error();
    WorkerClient c(w.endpoint(), w.instance());
    const ComputeRequest r = random_request(0, 2, 92);
    const WorkerReply before = ask_compute(c, r);
    ASSERT_EQ(before.h.kind, (uint16_t) MsgKind::result) << before.text();
    struct stat st0;
    ASSERT_EQ(stat(model.c_str(), &st0), 0);
    bool rewritten = false;
    std::thread rewrite([&]() {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));  // inside the 1.5 s the request holds
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
    // A breaker: a --mmap worker packed its slices after a hello while the file was being tampered
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
    const WorkerReply expected = ask(ref_hi, part_frames(r, ref.instance(), Part::hi));
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
    const WorkerReply got = ask(hi, part_frames(r, w.instance(), Part::hi));
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
    ASSERT_EQ(ask(lo, part_frames(r, a.instance(), Part::lo)).h.kind, (uint16_t) MsgKind::result);  // originals given back
    struct stat before;
    ASSERT_EQ(stat(model.c_str(), &before), 0);
    ASSERT_EQ(run_command({"/bin/cp", tiny_model(), dir + "/other.gguf"}).exit_code, 0);
    ASSERT_EQ(rename((dir + "/other.gguf").c_str(), model.c_str()), 0);
    // a new slice, packed after its hello from the (old) file
    WorkerClient hi(a.endpoint(), a.instance(), kPlanHi);
    WorkerReply rep = ask(hi, part_frames(r, a.instance(), Part::hi));
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
    const WorkerReply k_rep = ask(k_hi, part_frames(r, k.instance(), Part::hi));
    ASSERT_EQ(k_rep.h.kind, (uint16_t) MsgKind::result) << k_rep.text();
    ASSERT_EQ(k_rep.frames[0].size(), rep.frames[0].size());
    EXPECT_EQ(memcmp(k_rep.frames[0].data(), rep.frames[0].data(), rep.frames[0].size()), 0) << "the same bits as the other worker's";
}

TEST(Worker, SigtermAnswersTheRequestInFlightAndRefusesTheWaitingOnes) {
    // Found by a breaker: a worker stopped while a request was in flight closed its socket with the
    // reply still queued (linger 0), and the coordinator waited its whole timeout (5 s, 20 s).
    std::string dir = test_dir("worker_sigterm_in_flight");
    WorkerProcess w;
    ASSERT_TRUE(start_worker(w, dir, {}, {{"MOEZIP_WORKER_FAULT", "delay_ms=800"}}));
    WorkerClient c(w.endpoint(), w.instance());
    ComputeRequest first = random_request(0, 1, 71), second = random_request(0, 1, 72);
    moezip::MsgHeader h1 = compute_header(first, c.instance()), h2 = compute_header(second, c.instance());
    h1.request_id = 1001;
    h2.request_id = 1002;
    c.send(compute_frames(h1, first));
    c.send(compute_frames(h2, second));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the first is being answered (its delay)
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

// Automatic shares say hello again at every slice change: a breaker's hello flood then took the
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
