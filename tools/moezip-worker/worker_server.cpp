#include "tools/moezip-worker/worker_server.h"

#include "coordinator/base/log.h"
#include "tools/moezip-worker/worker_compute.h"
#include "tools/moezip-worker/worker_hello.h"

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cerrno>
#include <csignal>
#include <memory>
#include <sys/random.h>
#include <unistd.h>
#include <vector>

namespace moezip {

namespace {

volatile sig_atomic_t g_stop = 0;

void on_signal(int) { g_stop = 1; }

constexpr int kPollMs = 100;

// One server: socket, compute state, counters.
class Server {
public:
    Server(zmq::socket_t & sock, const WorkerServerOptions & opt, const WorkerModel & model, const WorkerEngine & engine,
           WorkerCounters & c)
        : sock_(sock), opt_(opt), compute_(model, engine.api, opt.n_threads), hello_(worker_hello_json(model, engine, opt.instance)), c_(c) {}

    void handle(std::vector<zmq::message_t> & parts);

private:
    void handle_compute(zmq::message_t & identity, const MsgHeader & h, int n, const void * const * frames, const size_t * sizes);
    void send_error(zmq::message_t & identity, const MsgHeader * h, ErrorCode code, const std::string & message);
    void send_reply(zmq::message_t & identity, MsgHeader & h, zmq::message_t * data);

    zmq::socket_t & sock_;
    const WorkerServerOptions & opt_;
    WorkerCompute compute_;
    std::string hello_;
    WorkerCounters & c_;
    std::chrono::steady_clock::time_point received_at_;  // of the request being handled (service_us)
    int64_t computes_answered_ = 0;
};

void Server::send_reply(zmq::message_t & identity, MsgHeader & h, zmq::message_t * data) {
    h.instance = opt_.instance;  // every reply says which process answered
    c_.bytes_out += sizeof h + (data ? data->size() : 0);
    sock_.send(identity, zmq::send_flags::sndmore);
    sock_.send(zmq::const_buffer(&h, sizeof h), data ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (data) sock_.send(*data, zmq::send_flags::none);
}

void Server::send_error(zmq::message_t & identity, const MsgHeader * h, ErrorCode code, const std::string & message) {
    const int ci = static_cast<int>(code);
    if (ci >= 0 && ci < 16) ++c_.errors[ci];
    LOG_DEBUG("error reply %s: %s", error_code_name(code), message.c_str());
    MsgHeader r = msg_header_make(MsgKind::error);
    if (h) {
        r.request_id = h->request_id;
        r.layer = h->layer;
        r.row_offset = h->row_offset;
    }
    r.status = ci;
    zmq::message_t text(message.data(), message.size());
    msg_header_set_frame(r, 0, WireType::none, text.data(), text.size());
    send_reply(identity, r, &text);
}

void Server::handle_compute(zmq::message_t & identity, const MsgHeader & h, int n, const void * const * frames, const size_t * sizes) {
    ++c_.compute;
    if (opt_.faults.exit_after >= 0 && computes_answered_ >= opt_.faults.exit_after) {
        fprintf(stderr, "moezip-worker: fault exit_after=%lld: exiting without a reply\n", (long long) opt_.faults.exit_after);
        _exit(1);
    }
    ++computes_answered_;
    if (h.instance != opt_.instance)
        return send_error(identity, &h, ErrorCode::bad_instance,
                          "request for worker instance " + hex64(h.instance) + ", this is instance " + hex64(opt_.instance) +
                              " (restarted or replaced): say hello and verify it first");
    ErrorCode code = ErrorCode::ok;
    Status st = compute_.validate(h, n, frames, sizes, code);
    MsgHeader reply;
    zmq::message_t out;
    if (st) {
        st = compute_.compute(h, frames, reply, out);
        if (!st) code = ErrorCode::compute_failed;
    }
    if (opt_.faults.delay_ms > 0) usleep((useconds_t) opt_.faults.delay_ms * 1000);
    if (!st) return send_error(identity, &h, code, st.message());
    c_.rows += (uint64_t) h.n_rows;
    c_.pairs += (uint64_t) reply.n_pairs;
    if (opt_.faults.corrupt_result && out.size() > 0) static_cast<uint8_t *>(out.data())[out.size() / 2] ^= 0x01;
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - received_at_).count();
    reply.service_us = (uint32_t) std::min<int64_t>(us, UINT32_MAX);
    send_reply(identity, reply, &out);
}

void Server::handle(std::vector<zmq::message_t> & parts) {
    ++c_.requests;
    received_at_ = std::chrono::steady_clock::now();
    for (size_t i = 1; i < parts.size(); ++i) c_.bytes_in += parts[i].size();
    zmq::message_t & identity = parts[0];
    if (parts.size() < 2) return send_error(identity, nullptr, ErrorCode::bad_frames, "empty message");
    MsgHeader h;
    ErrorCode code = ErrorCode::ok;
    Status st = msg_header_parse(parts[1].data(), parts[1].size(), h, code);
    if (!st) return send_error(identity, parts[1].size() == sizeof h ? &h : nullptr, code, st.message());
    const int n = (int) parts.size() - 2;
    std::vector<const void *> frames((size_t) std::max(n, 1));
    std::vector<size_t> sizes((size_t) std::max(n, 1));
    for (int i = 0; i < n; ++i) {
        frames[i] = parts[i + 2].data();
        sizes[i] = parts[i + 2].size();
    }
    const MsgKind kind = static_cast<MsgKind>(h.kind);
    if (kind == MsgKind::compute) return handle_compute(identity, h, n, frames.data(), sizes.data());
    if (kind != MsgKind::hello && kind != MsgKind::ping)
        return send_error(identity, &h, ErrorCode::bad_kind, std::string("a worker does not accept '") + msg_kind_name(h.kind) + "' messages");
    st = msg_frames_verify(h, n, frames.data(), sizes.data(), code);
    if (!st) return send_error(identity, &h, code, st.message());
    MsgHeader r = msg_header_make(kind == MsgKind::hello ? MsgKind::hello_ok : MsgKind::pong);
    r.request_id = h.request_id;
    if (kind == MsgKind::ping) {
        ++c_.ping;
        return send_reply(identity, r, nullptr);
    }
    ++c_.hello;  // the coordinator's own identity (frame 0) is informational: it decides whether it accepts ours
    if (n > 0) LOG_DEBUG("hello from %.*s", (int) std::min<size_t>(sizes[0], 400), static_cast<const char *>(frames[0]));
    zmq::message_t json(hello_.data(), hello_.size());
    msg_header_set_frame(r, 0, WireType::none, json.data(), json.size());
    send_reply(identity, r, &json);
}

// Waits up to kPollMs for input; false when interrupted or nothing arrived.
bool wait_input(zmq::socket_t & sock) {
    zmq_pollitem_t item = {sock.handle(), 0, ZMQ_POLLIN, 0};
    int rc = zmq_poll(&item, 1, kPollMs);
    if (rc < 0 && zmq_errno() != EINTR) throw zmq::error_t();
    return rc > 0;
}

// Receives and answers every message that is waiting. A signal (EINTR) just returns.
void serve_pending(zmq::socket_t & sock, Server & server) {
    while (!g_stop) {
        std::vector<zmq::message_t> parts;
        try {
            if (!zmq::recv_multipart(sock, std::back_inserter(parts), zmq::recv_flags::dontwait)) return;
            server.handle(parts);
        } catch (const zmq::error_t & e) {
            if (e.num() != EINTR) throw;
        } catch (const std::bad_alloc &) {
            LOG_ERROR("out of memory while serving a request: dropped");
        }
    }
}

Status serve_loop(zmq::socket_t & sock, Server & server) {
    while (!g_stop)
        if (wait_input(sock)) serve_pending(sock, server);
    return Status::ok();
}

} // namespace

uint64_t worker_instance_new() {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t) sizeof v) v = 0;
    v ^= (uint64_t) std::chrono::steady_clock::now().time_since_epoch().count() * 0x9e3779b97f4a7c15ull ^ (uint64_t) getpid() << 32;
    return v != 0 ? v : 1;
}

void worker_install_signal_handlers() {
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: zmq_poll returns EINTR at once
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
}

Status worker_serve(const WorkerServerOptions & opt, const WorkerModel & model, const WorkerEngine & engine,
                    const std::function<void(const std::string &)> & on_ready, WorkerCounters & counters) {
    zmq::context_t ctx(1);
    Status st = Status::ok();
    {
        zmq::socket_t sock(ctx, zmq::socket_type::router);
        sock.set(zmq::sockopt::linger, 0);
        if (opt.bind.rfind("tcp://[", 0) == 0) sock.set(zmq::sockopt::ipv6, 1);  // tcp://[::1]:port
        // Largest legal data frame: ids/weights [kMaxUsed, kMaxRows] or hidden [n_embd, kMaxRows], 4 bytes each.
        int64_t max_embd = kMaxUsed;
        for (const WorkerLayer & l : model.layers()) max_embd = std::max<int64_t>(max_embd, l.n_embd);
        sock.set(zmq::sockopt::maxmsgsize, max_embd * kMaxRows * 4);
        try {
            sock.bind(opt.bind);
            Server server(sock, opt, model, engine, counters);
            on_ready(sock.get(zmq::sockopt::last_endpoint));
            st = serve_loop(sock, server);
        } catch (const zmq::error_t & e) {
            st = Status::io_error(opt.bind + ": " + e.what());
        }
        sock.close();  // sockets before the context (linger 0: nothing queued is kept)
    }
    ctx.close();
    return st;
}

std::string worker_counters_text(const WorkerCounters & c) {
    uint64_t n_errors = 0;
    std::string by_code;
    for (int i = 1; i < 16; ++i) {
        if (c.errors[i] == 0) continue;
        n_errors += c.errors[i];
        by_code += std::string(by_code.empty() ? "" : ", ") + error_code_name(static_cast<ErrorCode>(i)) + " " + std::to_string(c.errors[i]);
    }
    return "requests " + std::to_string(c.requests) + " (hello " + std::to_string(c.hello) + ", compute " +
           std::to_string(c.compute) + ", ping " + std::to_string(c.ping) + "), rows " + std::to_string(c.rows) + ", pairs " +
           std::to_string(c.pairs) + ", bytes in " + std::to_string(c.bytes_in) + " out " + std::to_string(c.bytes_out) +
           ", errors " + std::to_string(n_errors) + (by_code.empty() ? "" : " (" + by_code + ")");
}

bool worker_endpoint_is_loopback(const std::string & e) {
    auto starts = [&](const char * p) { return e.rfind(p, 0) == 0; };
    return starts("ipc://") || starts("inproc://") || starts("tcp://127.") || starts("tcp://localhost:") || starts("tcp://[::1]:");
}

} // namespace moezip
