#include "tools/moezip-worker/serve/worker_server.h"

#include "coordinator/base/log.h"
#include "coordinator/base/micros.h"
#include "tools/moezip-worker/request/worker_compute.h"
#include "tools/moezip-worker/serve/worker_hello.h"
#include "tools/moezip-worker/request/worker_plan.h"
#include "tools/moezip-worker/serve/worker_socket.h"
#include "coordinator/wire/zmq_eintr.h"

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <sys/random.h>
#include <unistd.h>
#include <vector>
#include <xxhash.h>

namespace moezip {

namespace {

volatile sig_atomic_t g_stop = 0;
constexpr int kStopLingerMs = 1000;   // at exit: how long queued replies may take to leave
constexpr int kStopRefuseMax = 1024;  // at exit: waiting messages answered with `stopping`, at most

void on_signal(int) { g_stop = 1; }

constexpr int kPollMs = 100;

// What hello_ok states this process may use: its own limits, or a test's (cpu_quota_pct).
CpuCapacity stated_capacity(const WorkerFaults & f) {
    CpuCapacity c = cpu_capacity_self();
    if (f.cpu_quota_pct > 0) c.quota_cores = f.cpu_quota_pct / 100.0;
    return c;
}

/// One received message: the peer's routing id and at most kMaxMessageParts parts.
struct Incoming {
    zmq::message_t identity;
    std::vector<zmq::message_t> parts;
    uint64_t dropped = 0;  ///< parts beyond kMaxMessageParts (read and freed one by one)
    uint64_t bytes = 0;    ///< of every part, dropped ones included
};

/// A message this large makes the worker return freed heap memory to the system afterwards.
constexpr uint64_t kReleaseAfterBytes = 16u << 20;

// One server: socket, compute state, per-connection plans, counters.
class Server {
public:
    Server(zmq::socket_t & sock, const WorkerServerOptions & opt, const WorkerModel & model, const WorkerEngine & engine,
           WorkerCounters & c)
        : sock_(sock), opt_(opt), compute_(model, engine.api, opt.n_threads, !opt.keep_unsliced,
                   opt.faults.unsliced_keep_ms >= 0 ? opt.faults.unsliced_keep_ms : SliceResidency::kKeepMs),
          hello_(worker_hello_json(model, engine, opt.instance, budget_describe(opt.budget), stated_capacity(opt.faults), opt.n_threads)), c_(c) {}

    void handle(Incoming & in);
    /// The worker is exiting: answers a message that was waiting with error `stopping`, so its
    /// sender computes the part itself now instead of waiting its timeout.
    void refuse_stopping(Incoming & in);
    /// Nothing came for a poll period: shard mode may give back originals no request needs now.
    void idle();
    /// Packs one slice queued by a shard hello (WorkerCompute::queue_prepack); false when none is left.
    bool pack_ahead();
    bool packs_queued() const { return compute_.packs_queued(); }

private:
    void handle_hello(Incoming & in, const MsgHeader & h, const void * frame, size_t size);
    void handle_compute(Incoming & in, const MsgHeader & h, int n, const void * const * frames, const size_t * sizes);
    Status compute_checked(const MsgHeader & h, const void * const * frames, MsgHeader & reply, zmq::message_t & out, ErrorCode & code);
    void apply_result_faults(MsgHeader & reply, zmq::message_t & out);
    void send_error(zmq::message_t & identity, const MsgHeader * h, ErrorCode code, const std::string & message);
    void send_reply(zmq::message_t & identity, MsgHeader & h, zmq::message_t * data);

    zmq::socket_t & sock_;
    const WorkerServerOptions & opt_;
    WorkerCompute compute_;
    std::string hello_;
    WorkerCounters & c_;
    WorkerPlans plans_;
    std::chrono::steady_clock::time_point received_at_;  // of the request being handled (service_us)
    int64_t computes_answered_ = 0;
    bool packing_ = false;  // slices queued by a hello are being packed between requests
    int packed_ahead_ = 0;
    std::chrono::steady_clock::time_point packing_since_{};
    // a request's buffers beyond kScratchKeepBytes are kept kScratchHoldMs after it (the next layers
    // and ubatches of a prompt reuse them), then released (release_stale_scratch)
    bool scratch_held_ = false;
    std::chrono::steady_clock::time_point scratch_used_at_{};
    void release_stale_scratch(std::chrono::steady_clock::time_point now);
};

void Server::send_reply(zmq::message_t & identity, MsgHeader & h, zmq::message_t * data) {
    h.instance = opt_.instance;  // every reply says which process answered
    c_.bytes_out += sizeof h + (data ? data->size() : 0);
    send_part_through_signals(sock_, identity, zmq::send_flags::sndmore);
    send_part_through_signals(sock_, zmq::const_buffer(&h, sizeof h), data ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (data) send_part_through_signals(sock_, *data, zmq::send_flags::none);
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

// Allocation failures of a validated request (a budget larger than this host's memory) are an
// error reply, never the end of the process.
Status Server::compute_checked(const MsgHeader & h, const void * const * frames, MsgHeader & reply, zmq::message_t & out, ErrorCode & code) {
    try {
        Status st = compute_.compute(h, frames, reply, out);
        if (!st) code = compute_.model().file_changed() ? ErrorCode::model_changed : ErrorCode::compute_failed;
        return st;
    } catch (const std::bad_alloc &) {
    } catch (const zmq::error_t & e) {
        if (e.num() != ENOMEM) throw;
    }
    out = zmq::message_t();
    compute_.trim(0);
    budget_release_heap();
    code = ErrorCode::out_of_memory;
    return Status::io_error("out of memory computing this request (lower the worker's --max-scratch-mib or --max-out-mib)");
}

void Server::apply_result_faults(MsgHeader & reply, zmq::message_t & out) {
    if (opt_.faults.tamper_result && out.size() >= sizeof(float)) {
        float v;
        char * p = static_cast<char *>(out.data()) + (out.size() / sizeof(float) / 2) * sizeof(float);
        memcpy(&v, p, sizeof v);
        v += 0.5f;
        memcpy(p, &v, sizeof v);
        msg_header_set_frame(reply, 0, WireType::f32, out.data(), out.size());  // consistent: the hash cannot tell
    }
    if (opt_.faults.nudge_result && out.size() >= sizeof(float)) {
        uint8_t * p = static_cast<uint8_t *>(out.data()) + (out.size() / sizeof(float) / 2) * sizeof(float);
        p[0] ^= 0x01;  // little-endian: the last bit of the mantissa
        msg_header_set_frame(reply, 0, WireType::f32, out.data(), out.size());
    }
    if (opt_.faults.corrupt_result && out.size() > 0) static_cast<uint8_t *>(out.data())[out.size() / 2] ^= 0x01;
}

void Server::handle_compute(Incoming & in, const MsgHeader & h, int n, const void * const * frames, const size_t * sizes) {
    ++c_.compute;
    if (opt_.faults.exit_after >= 0 && computes_answered_ >= opt_.faults.exit_after) {
        fprintf(stderr, "moezip-worker: fault exit_after=%lld: exiting without a reply\n", (long long) opt_.faults.exit_after);
        _exit(1);
    }
    ++computes_answered_;
    if (h.instance != opt_.instance)
        return send_error(in.identity, &h, ErrorCode::bad_instance,
                          "request for worker instance " + hex64(h.instance) + ", this is instance " + hex64(opt_.instance) +
                              " (restarted or replaced): say hello and verify it first");
    const WorkerPlan * plan = plans_.find(in.identity.to_string());
    if (plan == nullptr)
        return send_error(in.identity, &h, ErrorCode::bad_plan, "no hello with a plan on this connection: say hello first");
    release_stale_scratch(received_at_);  // a stream of small requests does not keep a prompt's buffers
    ErrorCode code = ErrorCode::ok;
    RequestCost cost;
    Status st = compute_.validate(h, n, frames, sizes, *plan, opt_.budget, cost, code);
    MsgHeader reply;
    zmq::message_t out;
    const auto t_compute = std::chrono::steady_clock::now();
    if (st) st = compute_checked(h, frames, reply, out, code);
    const int slow = h.n_rows > 8 ? std::max(opt_.faults.slow, opt_.faults.slow_prefill) : opt_.faults.slow;
    if (slow > 1) {  // the compute slower, not the packing (setup_us), which a slower CPU would not make setup
        const int64_t us = micros_since(t_compute);
        fault_sleep_us(std::max<int64_t>(us - (st ? (int64_t) reply.setup_us : 0), 0) * (slow - 1));
    }
    if (opt_.faults.delay_ms > 0) {
        if (!opt_.faults.delay_marker.empty()) std::ofstream(opt_.faults.delay_marker, std::ios::app) << h.request_id << "\n";
        fault_sleep_us((int64_t) opt_.faults.delay_ms * 1000);
    }
    // A mapping reads the file as it is while the kernels run: a change during the compute (even one
    // written back before the next request, its modification time set back) may be in the result,
    // which no digest covers. It is dropped; the next request or hello checks the file again.
    if (st && compute_.model().mapped() && compute_.model().file_stamp_moved()) {
        code = ErrorCode::compute_failed;
        st = Status::io_error("model " + compute_.model().path() + " changed on disk (size, modification or status-change "
                              "time) while this request was computed from its mapping: the result is dropped");
    }
    c_.shard_packed_max = compute_.slices().max_bytes();
    c_.shard_evicted = compute_.slices().evicted();
    c_.shard_ahead_skipped = compute_.slices().ahead_skipped();
    c_.unsliced_released = compute_.residency().released_bytes();
    c_.unsliced_reread = compute_.residency().reread_bytes();
    if (st) {
        c_.rows += (uint64_t) h.n_rows;
        c_.pairs += (uint64_t) reply.n_pairs;
        apply_result_faults(reply, out);
        reply.service_us = micros_since(received_at_);
        send_reply(in.identity, reply, &out);
    } else {
        send_error(in.identity, &h, code, st.message());
    }
    if (cost.scratch_bytes > kScratchKeepBytes) {  // kept for the prompt's next calls, not for life
        out = zmq::message_t();
        in.parts.clear();
        scratch_held_ = true;
        scratch_used_at_ = std::chrono::steady_clock::now();
    }
}

// Released at once, a prompt's buffers were faulted in afresh by each of its requests: the worker
// computed its slice of a 512-row layer 1.7x slower than the coordinator did the same amount in
// buffers it kept (docs/history/bench-runs.md, 2026-12-02, commit a645010).
void Server::release_stale_scratch(std::chrono::steady_clock::time_point now) {
    if (!scratch_held_ || now - scratch_used_at_ < std::chrono::milliseconds(opt_.scratch_hold_ms)) return;
    compute_.trim((size_t) kScratchKeepBytes);
    budget_release_heap();
    ++c_.trims;
    scratch_held_ = false;
}

void Server::handle_hello(Incoming & in, const MsgHeader & h, const void * frame, size_t size) {
    ++c_.hello;
    const char * text = static_cast<const char *>(frame);
    if (size > 0) LOG_DEBUG("hello from %.*s", (int) std::min<size_t>(size, 400), text);
    nlohmann::json j = nlohmann::json::parse(text, text + size, nullptr, false);
    WorkerPlan plan;
    ErrorCode code = ErrorCode::ok;
    // not JSON at all (a NaN, a truncated text) is said as such, not as a hello without a plan
    Status st = Status::ok();
    if (j.is_discarded()) {
        code = ErrorCode::bad_plan;
        st = Status::invalid_argument("hello: not JSON");
    } else {
        st = worker_plan_parse(j, compute_.shape(), plan, code);
    }
    // a mapped model whose file changed is refused here too, not only at its first compute: the
    // coordinator then counts a refusal of this instance instead of probing it every back-off
    if (st && compute_.model().mapped()) {
        st = compute_.model().file_unchanged();
        if (!st) code = compute_.model().file_changed() ? ErrorCode::model_changed : ErrorCode::compute_failed;  // fstat failed: maybe passing
    }
    const std::string who = in.identity.to_string();  // before a reply is sent: sending takes the identity frame
    compute_.withdraw_prepack(who);  // whatever this hello says, the earlier plan is gone
    if (!st) {
        plans_.erase(who);  // a refused plan leaves no earlier one behind
        return send_error(in.identity, &h, code, st.message());
    }
    const bool shard_plan = plan.mode == WorkerPlan::Mode::shard;
    const WorkerPlan to_pack = shard_plan ? plan : WorkerPlan();
    plans_.set(who, std::move(plan));
    c_.plans_evicted_idle = plans_.evicted_idle();
    c_.plans_evicted_active = plans_.evicted_active();
    MsgHeader r = msg_header_make(MsgKind::hello_ok);
    r.request_id = h.request_id;
    zmq::message_t json(hello_.data(), hello_.size());
    msg_header_set_frame(r, 0, WireType::none, json.data(), json.size());
    send_reply(in.identity, r, &json);
    // a shard plan's slices are packed between the requests that follow (serve_loop), one at a time
    if (shard_plan) {
        if (opt_.faults.prepack_delay_ms > 0) fault_sleep_us((int64_t) opt_.faults.prepack_delay_ms * 1000);
        const int queued = compute_.queue_prepack(to_pack, who);
        if (queued > 0) {
            if (!packing_) packing_since_ = std::chrono::steady_clock::now(), packed_ahead_ = 0;
            packing_ = true;
            LOG_DEBUG("shard plan (%s): %d slices to pack ahead of its requests", worker_plan_describe(to_pack).c_str(), queued);
        }
    }
}

bool Server::pack_ahead() {
    const bool packed = compute_.pack_one_queued(plans_);
    c_.shard_packed_max = compute_.slices().max_bytes();
    c_.shard_evicted = compute_.slices().evicted();
    c_.shard_ahead_skipped = compute_.slices().ahead_skipped();  // counted by passing over, too
    if (!packed) {
        if (packing_)
            LOG_INFO("%d shard slices packed ahead of their requests, between requests, over %.0f ms", packed_ahead_,
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - packing_since_).count());
        packing_ = false;
        return false;
    }
    ++packed_ahead_;
    return true;
}

void Server::handle(Incoming & in) {
    ++c_.requests;
    received_at_ = std::chrono::steady_clock::now();
    for (const zmq::message_t & p : in.parts) c_.bytes_in += p.size();
    if (in.parts.empty()) return send_error(in.identity, nullptr, ErrorCode::bad_frames, "empty message");
    MsgHeader h;
    ErrorCode code = ErrorCode::ok;
    Status st = msg_header_parse(in.parts[0].data(), in.parts[0].size(), h, code);
    if (!st) return send_error(in.identity, in.parts[0].size() == sizeof h ? &h : nullptr, code, st.message());
    if (in.dropped > 0)
        return send_error(in.identity, &h, ErrorCode::bad_frames,
                          "message of " + std::to_string(in.parts.size() + in.dropped) + " parts: at most " +
                              std::to_string(kMaxMessageParts) + " (header and " + std::to_string(kMaxDataFrames) + " data frames)");
    const int n = (int) in.parts.size() - 1;
    const void * frames[kMaxDataFrames] = {};
    size_t sizes[kMaxDataFrames] = {};
    for (int i = 0; i < n; ++i) {
        frames[i] = in.parts[i + 1].data();
        sizes[i] = in.parts[i + 1].size();
    }
    const MsgKind kind = static_cast<MsgKind>(h.kind);
    if (kind == MsgKind::compute) return handle_compute(in, h, n, frames, sizes);
    if (kind != MsgKind::hello && kind != MsgKind::ping)
        return send_error(in.identity, &h, ErrorCode::bad_kind, std::string("a worker does not accept '") + msg_kind_name(h.kind) + "' messages");
    st = msg_frames_verify(h, n, frames, sizes, code);
    if (!st) return send_error(in.identity, &h, code, st.message());
    if (kind == MsgKind::hello) return handle_hello(in, h, n > 0 ? frames[0] : "", n > 0 ? sizes[0] : 0);
    ++c_.ping;
    MsgHeader r = msg_header_make(MsgKind::pong);
    r.request_id = h.request_id;
    send_reply(in.identity, r, nullptr);
}

void Server::idle() {
    release_stale_scratch(std::chrono::steady_clock::now());
    compute_.idle();
    c_.unsliced_released = compute_.residency().released_bytes();
}

void Server::refuse_stopping(Incoming & in) {
    ++c_.requests;
    if (in.parts.empty()) return;
    MsgHeader h;
    ErrorCode code = ErrorCode::ok;
    if (!msg_header_parse(in.parts[0].data(), in.parts[0].size(), h, code)) return;
    send_error(in.identity, &h, ErrorCode::stopping, "the worker is stopping (SIGTERM or SIGINT): not computed");
}

// Reads one waiting message without blocking: false when none is waiting. Parts beyond
// kMaxMessageParts are received and freed at once (libzmq hands over a multipart message only once
// it has all of it, so this bounds what the worker keeps, not what libzmq held).
bool recv_capped(zmq::socket_t & sock, Incoming & in, WorkerCounters & c) {
    if (!recv_part_through_signals(sock, in.identity, zmq::recv_flags::dontwait)) return false;
    bool more = in.identity.more();
    while (more) {
        zmq::message_t part;
        if (!recv_part_through_signals(sock, part, zmq::recv_flags::dontwait)) break;  // never: the rest of a message is there
        more = part.more();
        in.bytes += part.size();
        if (in.parts.size() < (size_t) kMaxMessageParts) in.parts.push_back(std::move(part));
        else { ++in.dropped; ++c.parts_dropped; }
    }
    return true;
}

// Receives and answers every message that is waiting. A signal (EINTR) just returns.
void serve_pending(zmq::socket_t & sock, Server & server, WorkerCounters & c) {
    while (!g_stop) {
        Incoming in;
        try {
            if (!recv_capped(sock, in, c)) return;
            server.handle(in);
            if (in.bytes >= kReleaseAfterBytes) {  // a large message (or many dropped parts) is not kept for life
                in = Incoming();
                budget_release_heap();
            }
        } catch (const zmq::error_t & e) {
            if (e.num() != EINTR) throw;
        } catch (const std::bad_alloc &) {
            LOG_ERROR("out of memory while serving a request: dropped");
        }
    }
}

// After a stop signal: every message already waiting is answered with error `stopping` (bounded:
// a flood does not hold the exit). The request being computed when the signal came was answered.
void refuse_pending(zmq::socket_t & sock, Server & server, WorkerCounters & c) {
    for (int i = 0; i < kStopRefuseMax; ++i) {
        Incoming in;
        try {
            if (!recv_capped(sock, in, c)) return;
            server.refuse_stopping(in);
        } catch (const zmq::error_t & e) {
            if (e.num() != EINTR) return;
        }
    }
}

Status serve_loop(zmq::socket_t & sock, SocketMonitor & monitor, Server & server, WorkerCounters & c) {
    while (!g_stop) {
        zmq_pollitem_t items[2] = {{sock.handle(), 0, ZMQ_POLLIN, 0}, {monitor.socket().handle(), 0, ZMQ_POLLIN, 0}};
        const int rc = zmq_poll(items, 2, server.packs_queued() ? 0 : kPollMs);
        if (rc < 0 && zmq_errno() != EINTR) throw zmq::error_t();
        if (rc == 0 && server.pack_ahead()) continue;  // no message waits: one queued slice, then look again
        if (rc == 0) server.idle();
        if (rc <= 0) continue;
        if (items[1].revents & ZMQ_POLLIN) monitor.drain();
        if (items[0].revents & ZMQ_POLLIN) serve_pending(sock, server, c);
    }
    refuse_pending(sock, server, c);
    monitor.drain();
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
    const bool curve = !opt.key.secret_key.empty();
    ZapHandler zap(ctx, opt.allow, counters.auth);
    if (curve) st = zap.start();  // before the socket binds: a CURVE server without a handler admits every key
    if (st) {
        zmq::socket_t sock(ctx, zmq::socket_type::router);
        std::unique_ptr<SocketMonitor> monitor;
        try {
            worker_socket_configure(sock, {opt.bind, opt.key, opt.budget.max_in_bytes, opt.handshake_ms});
            monitor.reset(new SocketMonitor(ctx, sock, counters.auth));
            sock.bind(opt.bind);
            Server server(sock, opt, model, engine, counters);
            on_ready(sock.get(zmq::sockopt::last_endpoint));
            worker_fault_signal_timer(opt.faults.signal_every_us);
            st = serve_loop(sock, *monitor, server, counters);
        } catch (const zmq::error_t & e) {
            st = Status::io_error(opt.bind + ": " + e.what());
        }
        if (opt.faults.signal_every_us > 0) worker_fault_signal_timer(0);
        if (monitor) monitor->close();
        // Replies already queued (the request computed when the signal came, the `stopping` answers)
        // may take up to kStopLingerMs to leave; then the socket closes whatever is left.
        try {
            sock.set(zmq::sockopt::linger, kStopLingerMs);
        } catch (const zmq::error_t &) {
        }
        sock.close();  // sockets before the context
    }
    zap.stop();
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
    const std::string auth = auth_counters_text(c.auth);
    return "requests " + std::to_string(c.requests) + " (hello " + std::to_string(c.hello) + ", compute " +
           std::to_string(c.compute) + ", ping " + std::to_string(c.ping) + "), rows " + std::to_string(c.rows) + ", pairs " +
           std::to_string(c.pairs) + ", bytes in " + std::to_string(c.bytes_in) + " out " + std::to_string(c.bytes_out) +
           ", errors " + std::to_string(n_errors) + (by_code.empty() ? "" : " (" + by_code + ")") +
           (c.parts_dropped ? ", parts dropped " + std::to_string(c.parts_dropped) : "") +
           (c.trims ? ", buffers released " + std::to_string(c.trims) : "") +
           (c.shard_packed_max ? ", shard slices packed " + std::to_string(c.shard_packed_max) + " bytes at most" +
                                     (c.shard_evicted ? " (" + std::to_string(c.shard_evicted) + " copies dropped for other slices)" : "") +
                                     (c.shard_ahead_skipped ? " (" + std::to_string(c.shard_ahead_skipped) +
                                                                  " not packed ahead: no place but slices in use)" : "")
                               : "") +
           (c.unsliced_released ? ", originals given back " + std::to_string(c.unsliced_released) + " bytes (read again " +
                                      std::to_string(c.unsliced_reread) + ")"
                                : "") +
           (c.plans_evicted_idle + c.plans_evicted_active
                ? ", plans forgotten (table full) " + std::to_string(c.plans_evicted_idle) + " hello-only, " +
                      std::to_string(c.plans_evicted_active) + " computing"
                : "") +
           (auth.empty() ? "" : "; " + auth);
}

} // namespace moezip
