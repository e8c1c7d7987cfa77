#include "tests/worker/worker_fixtures.h"

#include "coordinator/compute/moe_exec.h"
#include "coordinator/wire/protocol.h"
#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

using namespace moezip;

namespace moezip_test {

std::string tiny_model() { return fixture_model({"--preset", "tiny", "--type", "q8_0"}); }

ComputeRequest random_request(int layer, int n_rows, uint32_t seed, int n_choice) {
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

bool start_worker(WorkerProcess & w, const std::string & dir, std::vector<std::string> flags,
                  const std::map<std::string, std::string> & env) {
    std::vector<std::string> args = {"--model", tiny_model(), "--bind", "ipc://" + dir + "/w.sock"};
    args.insert(args.end(), flags.begin(), flags.end());
    bool ok = w.start(args, dir, env);
    EXPECT_TRUE(ok) << w.error();
    return ok;
}

std::vector<zmq::message_t> shard_frames(const ComputeRequest & r, uint64_t instance, int32_t first, int32_t count, int32_t slice_bytes) {
    MsgHeader h = compute_header(r, instance);
    const int32_t ff[2] = {first, count};
    msg_header_set_frame(h, 3, WireType::i32, ff, (size_t) slice_bytes);
    std::vector<zmq::message_t> f = compute_frames(h, r);
    f.emplace_back(ff, (size_t) slice_bytes);
    return f;
}

uint64_t rss_bytes(int pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return (uint64_t) std::stoull(line.substr(6)) * 1024;
    return 0;
}

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

std::vector<zmq::message_t> part_frames(const ComputeRequest & r, uint64_t instance, FfPart p) {
    if (p == FfPart::lo) return shard_frames(r, instance, 0, (int32_t) kShardFf / 2);
    if (p == FfPart::hi) return shard_frames(r, instance, (int32_t) kShardFf / 2, (int32_t) kShardFf / 2);
    return compute_frames(compute_header(r, instance), r);
}

bool given_back(const std::string & text, unsigned long long & given, unsigned long long & again) {
    const size_t at = text.find("originals given back ");
    return at != std::string::npos && sscanf(text.c_str() + at, "originals given back %llu bytes (read again %llu)", &given, &again) == 2;
}

} // namespace moezip_test
