// moezip tests: running moezip-worker as a child process and talking to it (tests/worker/),
// plus an in-process reference of the expert computation on weights read from the GGUF file.
#pragma once

#include "coordinator/compute/moe_exec.h"
#include "coordinator/wire/protocol.h"
#include "provider_map/engine_api.h"

#include <zmq.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gguf.h"

namespace moezip_test {

/// A moezip-worker child process. The destructor kills it (SIGKILL) and reaps it if it still runs,
/// so a failing test never leaves a stray worker behind.
class WorkerProcess {
public:
    WorkerProcess() = default;
    ~WorkerProcess();
    WorkerProcess(const WorkerProcess &) = delete;
    WorkerProcess & operator=(const WorkerProcess &) = delete;

    /// Another moezip-worker than bin/moezip-worker (one built for another engine); before start().
    void set_program(const std::string & path) { program_ = path; }
    /// Starts bin/moezip-worker with `args` (env added to ours), stderr to <dir>/worker.<n>.stderr,
    /// and waits up to 60 s for the ready line. False (with the reason in error()) when it exits
    /// or stays silent instead.
    bool start(const std::vector<std::string> & args, const std::string & dir,
               const std::map<std::string, std::string> & env = {});
    /// The endpoint from the ready line ("tcp://127.0.0.1:41234", "ipc:///...").
    const std::string & endpoint() const { return endpoint_; }
    const std::string & ready_line() const { return ready_line_; }
    /// The worker's process instance, from the ready line ("..., instance <16 hex digits>)").
    uint64_t instance() const { return instance_; }
    const std::string & error() const { return error_; }
    int pid() const { return pid_; }
    /// Everything the worker wrote to stderr so far.
    std::string stderr_text() const;
    /// Sends `sig` and waits up to timeout_ms for the exit; returns the exit status (128+signal when
    /// killed by one), -1 on timeout. `elapsed_ms` gets the time waited.
    int stop(int sig, int timeout_ms, double * elapsed_ms = nullptr);
    /// Waits up to timeout_ms for the process to exit by itself; exit status or -1.
    int wait_exit(int timeout_ms);
    /// Resource limits the child sets before exec (setrlimit), e.g. {RLIMIT_NOFILE, 128, 4096}.
    struct Limit {
        int resource;
        long soft, hard;
    };
    std::vector<Limit> limits;

private:
    int pid_ = -1;
    int out_fd_ = -1;
    std::string stderr_path_, program_;
    std::string endpoint_, ready_line_, error_;
    uint64_t instance_ = 0;
};

/// A received reply: header (parsed with msg_header_parse) and data frames.
struct WorkerReply {
    moezip::MsgHeader h{};
    std::vector<zmq::message_t> frames;
    /// msg_frames_verify of the frames against the header.
    moezip::ErrorCode verify() const;
    std::string text(size_t i = 0) const;
};

/// The plan a test client states in its hello (tools/moezip-worker/request/worker_plan.h): whole n_ff,
/// any served expert.
constexpr const char * kRowsPlan = R"({"mode":"rows"})";

/// A hello's JSON with `plan` (a JSON object as text).
std::string hello_json(const std::string & plan);

/// Client-side CURVE keys: both empty = plain.
struct ClientKeys {
    std::string server_public;  ///< the worker's public key (Z85)
    std::string public_key, secret_key;  ///< this client's pair (Z85)
};

/// A DEALER connected to a worker (linger 0; the socket is closed before the context).
class WorkerClient {
public:
    /// `instance`: the worker instance compute requests are addressed to (WorkerProcess::instance).
    /// With a non-empty `plan` the client says hello with it first and waits for hello_ok (the
    /// worker computes nothing for a connection without a plan); "" skips the hello.
    explicit WorkerClient(const std::string & endpoint, uint64_t instance = 0, const std::string & plan = kRowsPlan,
                          const ClientKeys & keys = ClientKeys());
    uint64_t instance() const { return instance_; }
    /// True when the constructor's hello was answered with hello_ok (or no hello was asked for).
    bool planned() const { return planned_; }
    ~WorkerClient();
    /// Sends the frames as one multipart message.
    void send(std::vector<zmq::message_t> frames);
    /// Waits up to timeout_ms for one reply; false on timeout or a malformed header.
    bool recv(WorkerReply & out, int timeout_ms = 10000);

private:
    zmq::context_t ctx_;
    std::unique_ptr<zmq::socket_t> sock_;
    uint64_t instance_ = 0;
    bool planned_ = true;
};

/// A worker impostor in this process: a ROUTER bound to `endpoint` ("tcp://127.0.0.1:*" picks a
/// free port) that answers every message carrying a header (frame 1 after the routing id) with the
/// frames `reply` builds for it, on its own thread until destroyed. Other messages are ignored.
/// For tests of what a hostile or broken worker can send.
class FakeWorkerSocket {
public:
    using Reply = std::function<std::vector<zmq::message_t>(const moezip::MsgHeader &)>;
    FakeWorkerSocket(const std::string & endpoint, Reply reply);
    ~FakeWorkerSocket();
    FakeWorkerSocket(const FakeWorkerSocket &) = delete;
    FakeWorkerSocket & operator=(const FakeWorkerSocket &) = delete;
    /// The bound endpoint, with the port chosen.
    const std::string & endpoint() const { return endpoint_; }

private:
    void serve();
    zmq::context_t ctx_;
    zmq::socket_t sock_;
    Reply reply_;
    std::string endpoint_;
    std::thread thread_;
    std::atomic<bool> stop_{false};
};

/// A compute request's fields and data, turned into frames by compute_frames().
struct ComputeRequest {
    uint64_t request_id = 1;
    int32_t layer = 0, n_embd = 0, n_ff = 0, n_used = 0, n_rows = 0;
    moezip::ReplyKind reply = moezip::ReplyKind::row_sums;
    uint32_t glu_op = GGML_GLU_OP_SWIGLU;
    std::vector<float> hidden;    ///< [n_embd, n_rows]
    std::vector<int32_t> ids;     ///< [n_used, n_rows]
    std::vector<float> weights;   ///< [n_used, n_rows]
};

/// The header of `r` addressed to worker `instance`, with frame sizes and hashes set.
moezip::MsgHeader compute_header(const ComputeRequest & r, uint64_t instance);
/// [header, hidden, ids, weights] for `h` (which may have been tampered with after compute_header).
std::vector<zmq::message_t> compute_frames(const moezip::MsgHeader & h, const ComputeRequest & r);
/// [header] + frames for a message without data (hello with JSON text when `json` is non-empty, ping).
std::vector<zmq::message_t> simple_frames(moezip::MsgKind kind, uint64_t request_id, const std::string & json = "");

/// The engine's ggml bound in this process, as the engine does it: ggml_backend_load_all_from_path
/// on libggml-base's directory, then the CPU variant that stays loaded. Once per process.
const moezip::GgmlApi & reference_api();
/// Computes all of `gf` with `api` on one thread, as the engine's CPU backend would without moezip:
/// the reference a piecewise run is compared with. GGML_STATUS_SUCCESS or the kernel's status.
ggml_status compute_whole_graph(const moezip::GgmlApi & api, ggml_cgraph * gf);
/// The name of that variant ("zen4") and its GNU build-id.
std::string reference_variant();
std::string reference_build_id();

/// A GGUF file read into memory in one piece, its tensors pointing into those bytes.
class ReferenceModel {
public:
    ~ReferenceModel();
    bool load(const std::string & path);
    /// blk.<il>.<suffix>, e.g. tensor(0, "ffn_gate_exps.weight"); nullptr when absent.
    ggml_tensor * tensor(int il, const char * suffix) const;
    moezip::ExpertWeights weights(int il) const;

private:
    std::string bytes_;
    gguf_context * gguf_ = nullptr;
    ggml_context * meta_ = nullptr;
};

} // namespace moezip_test
