#include "tests/support/worker_harness.h"

#include "preload/engine_locate.h"
#include "tests/support/test_support.h"

#include <zmq_addon.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <poll.h>
#include <sstream>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace moezip_test {

FakeWorkerSocket::FakeWorkerSocket(const std::string & endpoint, Reply reply)
    : ctx_(1), sock_(ctx_, zmq::socket_type::router), reply_(std::move(reply)) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.bind(endpoint);
    endpoint_ = sock_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this]() { serve(); });
}

FakeWorkerSocket::~FakeWorkerSocket() {
    stop_ = true;
    thread_.join();
    sock_.close();
    ctx_.close();
}

void FakeWorkerSocket::serve() {
    while (!stop_) {
        zmq::pollitem_t item = {sock_.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(20));  // short: the destructor waits for this loop
        if (!(item.revents & ZMQ_POLLIN)) continue;
        std::vector<zmq::message_t> parts;
        (void) zmq::recv_multipart(sock_, std::back_inserter(parts));
        if (parts.size() < 2 || parts[1].size() != sizeof(moezip::MsgHeader)) continue;
        moezip::MsgHeader h;
        memcpy(&h, parts[1].data(), sizeof h);
        std::vector<zmq::message_t> out = reply_(h);
        sock_.send(parts[0], zmq::send_flags::sndmore);
        for (size_t i = 0; i < out.size(); ++i)
            sock_.send(out[i], i + 1 < out.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
}

using namespace moezip;

// ---- WorkerProcess ----

WorkerProcess::~WorkerProcess() {
    if (pid_ > 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
}

std::string WorkerProcess::stderr_text() const { return read_file(stderr_path_); }

bool WorkerProcess::start(const std::vector<std::string> & args, const std::string & dir,
                          const std::map<std::string, std::string> & env) {
    static int n_started = 0;
    stderr_path_ = dir + "/worker." + std::to_string(n_started++) + ".stderr";
    int out_pipe[2];
    if (pipe(out_pipe) != 0) return false;
    std::vector<std::string> argv = {program_.empty() ? bin_path("moezip-worker") : program_};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
        dup2(out_pipe[1], 1);
        int err = open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (err >= 0) dup2(err, 2);
        close(out_pipe[0]);
        close(out_pipe[1]);
        for (const Limit & l : limits) {
            struct rlimit rl = {(rlim_t) l.soft, (rlim_t) l.hard};
            if (setrlimit(l.resource, &rl) != 0) _exit(126);
        }
        exec_child(argv, env);
    }
    close(out_pipe[1]);
    out_fd_ = out_pipe[0];
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
        struct pollfd p = {out_fd_, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        char buf[4096];
        ssize_t n = read(out_fd_, buf, sizeof buf);
        if (n <= 0) break;  // the worker exited
        out.append(buf, (size_t) n);
        size_t pos = out.find("moezip-worker: serving ");
        if (pos != std::string::npos && out.find('\n', pos) != std::string::npos) {
            ready_line_ = out.substr(pos, out.find('\n', pos) - pos);
            std::istringstream words(ready_line_);
            std::string w1, w2;
            words >> w1 >> w2 >> endpoint_;
            const size_t at = ready_line_.rfind("instance ");
            if (at != std::string::npos) instance_ = strtoull(ready_line_.c_str() + at + 9, nullptr, 16);
            return true;
        }
    }
    error_ = "no ready line from moezip-worker (stdout: '" + out + "', stderr: '" + stderr_text() + "')";
    return false;
}

int WorkerProcess::wait_exit(int timeout_ms) {
    const auto start = std::chrono::steady_clock::now();
    while (pid_ > 0) {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(timeout_ms)) return -1;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
}

int WorkerProcess::stop(int sig, int timeout_ms, double * elapsed_ms) {
    if (pid_ <= 0) return -1;
    const auto start = std::chrono::steady_clock::now();
    kill(pid_, sig);
    int rc = wait_exit(timeout_ms);
    if (elapsed_ms)
        *elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return rc;
}

// ---- WorkerClient ----

ErrorCode WorkerReply::verify() const {
    std::vector<const void *> data;
    std::vector<size_t> sizes;
    for (const auto & f : frames) {
        data.push_back(f.data());
        sizes.push_back(f.size());
    }
    ErrorCode code = ErrorCode::ok;
    msg_frames_verify(h, (int) frames.size(), data.data(), sizes.data(), code);
    return code;
}

std::string WorkerReply::text(size_t i) const {
    return i < frames.size() ? std::string(static_cast<const char *>(frames[i].data()), frames[i].size()) : "";
}

std::string hello_json(const std::string & plan) {
    return std::string(R"({"protocol":)") + std::to_string(kProtocolVersion) + R"(,"ggml_commit":"test","plan":)" + plan + "}";
}

WorkerClient::WorkerClient(const std::string & endpoint, uint64_t instance, const std::string & plan, const ClientKeys & keys)
    : ctx_(1), instance_(instance) {
    sock_.reset(new zmq::socket_t(ctx_, zmq::socket_type::dealer));
    sock_->set(zmq::sockopt::linger, 0);
    if (!keys.server_public.empty()) {
        sock_->set(zmq::sockopt::curve_serverkey, keys.server_public);
        sock_->set(zmq::sockopt::curve_publickey, keys.public_key);
        sock_->set(zmq::sockopt::curve_secretkey, keys.secret_key);
    }
    sock_->connect(endpoint);
    if (plan.empty()) return;
    send(simple_frames(MsgKind::hello, 0x4e110, hello_json(plan)));
    WorkerReply rep;
    planned_ = recv(rep, 10000) && rep.h.kind == static_cast<uint16_t>(MsgKind::hello_ok);
}

WorkerClient::~WorkerClient() {
    sock_->close();
    ctx_.close();
}

void WorkerClient::send(std::vector<zmq::message_t> frames) {
    for (size_t i = 0; i < frames.size(); ++i)
        sock_->send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

bool WorkerClient::recv(WorkerReply & out, int timeout_ms) {
    zmq::pollitem_t item = {sock_->handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) <= 0) return false;
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(*sock_, std::back_inserter(parts)) || parts.empty()) return false;
    ErrorCode code;
    if (!msg_header_parse(parts[0].data(), parts[0].size(), out.h, code)) return false;
    out.frames.clear();
    for (size_t i = 1; i < parts.size(); ++i) out.frames.push_back(std::move(parts[i]));
    return true;
}

// ---- requests ----

MsgHeader compute_header(const ComputeRequest & r, uint64_t instance) {
    MsgHeader h = msg_header_make(MsgKind::compute);
    h.instance = instance;
    h.request_id = r.request_id;
    h.layer = r.layer;
    h.n_embd = r.n_embd;
    h.n_ff = r.n_ff;
    h.n_used = r.n_used;
    h.n_rows = r.n_rows;
    h.reply = static_cast<uint16_t>(r.reply);
    h.glu_op = r.glu_op;
    msg_header_set_frame(h, 0, WireType::f32, r.hidden.data(), r.hidden.size() * sizeof(float));
    msg_header_set_frame(h, 1, WireType::i32, r.ids.data(), r.ids.size() * sizeof(int32_t));
    msg_header_set_frame(h, 2, WireType::f32, r.weights.data(), r.weights.size() * sizeof(float));
    return h;
}

std::vector<zmq::message_t> compute_frames(const MsgHeader & h, const ComputeRequest & r) {
    std::vector<zmq::message_t> f;
    f.emplace_back(&h, sizeof h);
    f.emplace_back(r.hidden.data(), r.hidden.size() * sizeof(float));
    f.emplace_back(r.ids.data(), r.ids.size() * sizeof(int32_t));
    f.emplace_back(r.weights.data(), r.weights.size() * sizeof(float));
    return f;
}

std::vector<zmq::message_t> simple_frames(MsgKind kind, uint64_t request_id, const std::string & json) {
    MsgHeader h = msg_header_make(kind);
    h.request_id = request_id;
    if (!json.empty()) msg_header_set_frame(h, 0, WireType::none, json.data(), json.size());
    std::vector<zmq::message_t> f;
    f.emplace_back(&h, sizeof h);
    if (!json.empty()) f.emplace_back(json.data(), json.size());
    return f;
}

// ---- reference ----

namespace {

struct Reference {
    GgmlApi api;
    std::string cpu_path;
};

Reference & reference() {
    static Reference ref;
    static std::once_flag once;
    std::call_once(once, [] {
        std::string base = loaded_object_path("libggml-base");
        ggml_backend_load_all_from_path(base.substr(0, base.rfind('/')).c_str());
        ref.cpu_path = loaded_object_path("libggml-cpu-");
        if (!ggml_api_bind_base(ref.api, loaded_object_handle(base)) || !ggml_api_bind_cpu(ref.api, loaded_object_handle(ref.cpu_path)))
            ref.api = GgmlApi();
    });
    return ref;
}

} // namespace

const GgmlApi & reference_api() { return reference().api; }

std::string reference_variant() {
    std::string file = reference().cpu_path.substr(reference().cpu_path.rfind('/') + 1);
    return file.substr(12, file.find(".so") - 12);
}

std::string reference_build_id() { return loaded_object_build_id(reference().cpu_path); }

ReferenceModel::~ReferenceModel() {
    if (gguf_) gguf_free(gguf_);
    if (meta_) ggml_free(meta_);
}

bool ReferenceModel::load(const std::string & path) {
    bytes_ = read_file(path);
    gguf_init_params params = {/*no_alloc =*/ true, /*ctx =*/ &meta_};
    gguf_ = gguf_init_from_file(path.c_str(), params);
    if (gguf_ == nullptr || bytes_.empty()) return false;
    for (int64_t id = 0; id < gguf_get_n_tensors(gguf_); ++id) {
        ggml_tensor * t = ggml_get_tensor(meta_, gguf_get_tensor_name(gguf_, id));
        const size_t off = gguf_get_data_offset(gguf_) + gguf_get_tensor_offset(gguf_, id);
        if (off + ggml_nbytes(t) > bytes_.size()) return false;
        t->data = &bytes_[off];
    }
    return true;
}

ggml_tensor * ReferenceModel::tensor(int il, const char * suffix) const {
    return ggml_get_tensor(meta_, ("blk." + std::to_string(il) + "." + suffix).c_str());
}

ExpertWeights ReferenceModel::weights(int il) const {
    ExpertWeights w;
    w.gate_exps = tensor(il, "ffn_gate_exps.weight");
    w.up_exps = tensor(il, "ffn_up_exps.weight");
    w.down_exps = tensor(il, "ffn_down_exps.weight");
    w.glu_op = GGML_GLU_OP_SWIGLU;
    return w;
}

ggml_status compute_whole_graph(const moezip::GgmlApi & api, ggml_cgraph * gf) {
    ggml_cplan plan = api.ggml_graph_plan(gf, 1, nullptr);
    std::vector<uint8_t> work(plan.work_size);
    plan.work_data = work.data();
    return api.ggml_graph_compute(gf, &plan);
}

} // namespace moezip_test
