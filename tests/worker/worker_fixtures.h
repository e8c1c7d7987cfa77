// moezip tests: what the moezip-worker tests share (tests/worker/worker_*_test.cpp): the tiny and the
// shard fixture models, random compute requests, the in-process reference of a request (MoeExecutor on
// the file's weights, as the engine computes it), and asking a worker and waiting for its reply.
#pragma once

#include "tests/support/worker_harness.h"

#include <zmq.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moezip_test {

/// The tiny preset of moezip-fixture: n_embd 64, n_ff 64, 8 experts, top-2.
constexpr int kEmbd = 64, kFf = 64, kExpert = 8, kUsed = 2;

/// Path of the tiny preset in q8_0 (written once per test run by moezip-fixture).
std::string tiny_model();

/// `n_rows` random rows of layer `layer` (hidden in [-1, 1], kUsed distinct experts from
/// [0, n_choice) each, weights in [0.05, 1]), request id `seed`; the tiny preset's shape.
ComputeRequest random_request(int layer, int n_rows, uint32_t seed, int n_choice = kExpert);

/// The engine's computation of every slot of `r` (ids all >= 0): slots [n_embd, n_used, n_rows] and
/// their row sums [n_embd, n_rows], f32.
struct Expected {
    std::vector<float> slots, row_sums;
};
Expected reference_compute(const ReferenceModel & m, const ComputeRequest & r);

/// True when the frame holds exactly the bytes of `v`.
bool same_bytes(const zmq::message_t & m, const std::vector<float> & v);

/// Sends `frames` and waits up to 10 s for the reply (a test failure when none comes).
WorkerReply ask(WorkerClient & c, std::vector<zmq::message_t> frames);
/// ask() with `r` as a whole-n_ff compute request of the worker instance the client verified.
WorkerReply ask_compute(WorkerClient & c, const ComputeRequest & r);

/// Starts a worker of the tiny model on ipc://<dir>/w.sock with extra flags and environment; a test
/// failure (and false) when it does not come up.
bool start_worker(WorkerProcess & w, const std::string & dir, std::vector<std::string> flags,
                  const std::map<std::string, std::string> & env = {});

// ---- shard mode (tools/moezip-worker/model/worker_slices.h, slice_residency.h) ----

/// VmRSS of a process, bytes (0 when unreadable).
uint64_t rss_bytes(int pid);

/// The shard fixture: n_embd 256, n_ff 512, q8_0, 8 experts, 2 layers. One expert's gate, up or down
/// is 512 x 272 = 139264 bytes (34 pages), one tensor 1114112 bytes (272 pages, page-aligned in its
/// own mapping).
constexpr int64_t kShardEmbd = 256, kShardFf = 512;
constexpr uint64_t kShardOriginals = 2 * 3 * 8 * 139264;  ///< every expert tensor of both layers, bytes
std::string shard_model();

/// random_request(layer, 3, seed) reshaped to the shard fixture.
ComputeRequest shard_request(int layer, uint32_t seed);

/// A shard request: [header, hidden, ids, weights, ff_slice (first, count)], the slice frame
/// `slice_bytes` long (8 for a well-formed one).
std::vector<zmq::message_t> shard_frames(const ComputeRequest & r, uint64_t instance, int32_t first, int32_t count,
                                         int32_t slice_bytes = 8);

/// Which part of n_ff a shard request asks for: units [0, 256), [256, 512), or all of n_ff.
enum class FfPart { lo, hi, whole };
std::vector<zmq::message_t> part_frames(const ComputeRequest & r, uint64_t instance, FfPart p);

/// Hellos of a coordinator that gives the worker the low or the high half of n_ff.
constexpr const char * kPlanLo = R"({"mode":"shard","shares":[0,0.5,0.5],"slice":1})";  // units [0, 256)
constexpr const char * kPlanHi = R"({"mode":"shard","shares":[0,0.5,0.5],"slice":2})";  // units [256, 512)

/// Reads "originals given back N bytes (read again M)" from a worker's exit line; false when absent.
bool given_back(const std::string & text, unsigned long long & given, unsigned long long & again);

} // namespace moezip_test
