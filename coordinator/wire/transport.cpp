#include "coordinator/wire/transport.h"

#include "coordinator/evidence/trace_link.h"
#include "coordinator/wire/endpoint_probe.h"
#include "coordinator/wire/zmq_eintr.h"

#include <algorithm>
#include <cstdint>
#include <atomic>
#include <random>
#include <cerrno>
#include <cstring>

namespace moezip {

namespace {

std::atomic<bool> g_stopping{false};

// The longest one poll may block: a wait re-checks g_stopping at least this often.
constexpr int kPollSliceMs = 50;

// Polls the link's socket for `events` and its disconnect monitor until `deadline`; EINTR (a signal
// the host handles) resumes the wait. Returns the socket's revents seen, or 0 at the deadline, when
// the process is exiting, or when the monitor has an event (`monitor_ready` set).
short poll_until(zmq::socket_t & sock, short events, std::chrono::steady_clock::time_point deadline, LinkMonitor & monitor,
                 bool & monitor_ready) {
    for (;;) {
        if (g_stopping.load(std::memory_order_relaxed)) return 0;
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() < 0) left = std::chrono::milliseconds(0);
        if (left.count() > kPollSliceMs) left = std::chrono::milliseconds(kPollSliceMs);
        zmq::pollitem_t items[2] = {{sock.handle(), 0, events, 0}, {nullptr, 0, ZMQ_POLLIN, 0}};
        const bool watch = monitor.active();
        if (watch) items[1].socket = monitor.socket().handle();
        try {
            zmq::poll(items, watch ? 2 : 1, left);
        } catch (const zmq::error_t & e) {
            if (e.num() == EINTR) continue;
            throw;
        }
        if (items[0].revents & events) return items[0].revents;
        if (watch && (items[1].revents & ZMQ_POLLIN)) {
            monitor_ready = true;
            return 0;
        }
        if (std::chrono::steady_clock::now() >= deadline) return 0;
    }
}

// How long a wait whose connection closed still looks for a reply: the worker may have sent it just
// before closing (a stopping worker answers the request in flight), and the reply and the monitor's
// event travel by different pipes.
constexpr int kReplyAfterDisconnectMs = 100;

// How long a send waits for a new connection once the worker closed the last one (see send()).
constexpr int kReconnectGraceMs = 250;

// How long one TCP connect may wait for the worker's host to answer before ZeroMQ gives it up and
// tries again after its reconnect interval (100 ms). Without it a connect made while the link is
// down waits out the kernel's SYN retries (1, 3, 7, 15 s after the first): a link restored after
// 10 s was connected 5 s later.
constexpr int kConnectAttemptMs = 1000;

} // namespace

void transport_stop_waiting() { g_stopping.store(true); }
bool transport_stopping() { return g_stopping.load(std::memory_order_relaxed); }

WorkerLink::WorkerLink(zmq::context_t & ctx, std::string endpoint, int timeout_ms, LinkKeys keys, int64_t max_reply_bytes)
    : ctx_(ctx), endpoint_(std::move(endpoint)), timeout_ms_(timeout_ms), keys_(std::move(keys)), max_reply_bytes_(max_reply_bytes) {
    std::random_device rd;
    routing_id_.resize(16);
    for (char & c : routing_id_) c = (char) (rd() & 0xff);
    routing_id_[0] = (char) (routing_id_[0] | 1);  // routing ids starting with a zero byte are reserved
    open();
}

WorkerLink::~WorkerLink() { close_socket(); }

bool WorkerLink::note_disconnects() {
    int handshakes = 0;
    const int n = monitor_.drain_disconnects(&handshakes);
    stats_.handshakes += (uint64_t) handshakes;
    if (n == 0) return false;
    stats_.disconnects += (uint64_t) n;
    peer_closed_ = true;
    closed_seen_ = std::chrono::steady_clock::now();
    return true;
}

void WorkerLink::close_socket() {
    monitor_.stop();
    if (sock_) sock_->close();
}

// zmq_connect first runs the socket's pending commands, and that wait returns EINTR when a signal
// the host handles (without SA_RESTART) arrives: nothing was connected, so the whole open is done
// again. Links are opened lazily inside the engine's compute, on whatever thread decodes.
void WorkerLink::open() {
    for (;;) {
        try {
            open_once();
            return;
        } catch (const zmq::error_t & e) {
            if (e.num() != EINTR) throw;
        }
    }
}

void WorkerLink::open_once() {
    close_socket();
    sock_.reset(new zmq::socket_t(ctx_, zmq::socket_type::dealer));
    sock_->set(zmq::sockopt::linger, 0);
    sock_->set(zmq::sockopt::immediate, 1);  // queue only to completed connections
    sock_->set(zmq::sockopt::routing_id, zmq::const_buffer(routing_id_.data(), routing_id_.size()));
    sock_->set(zmq::sockopt::maxmsgsize, max_reply_bytes_);
    if (endpoint_.rfind("tcp://", 0) == 0) sock_->set(zmq::sockopt::connect_timeout, kConnectAttemptMs);
    open_max_reply_bytes_ = max_reply_bytes_;
    if (keys_.curve()) {
        sock_->set(zmq::sockopt::curve_serverkey, keys_.server_public);
        sock_->set(zmq::sockopt::curve_publickey, keys_.client.public_key);
        sock_->set(zmq::sockopt::curve_secretkey, keys_.client.secret_key);
    }
    monitor_.start(ctx_, *sock_);
    sock_->connect(endpoint_);
}

// One message, part by part: at most kMaxMessageParts parts kept, the rest received and freed.
Status WorkerLink::recv_parts(std::vector<zmq::message_t> & parts) {
    uint64_t dropped = 0;
    for (;;) {
        zmq::message_t m;
        if (!recv_part_through_signals(*sock_, m, zmq::recv_flags::none)) break;
        const bool more = m.more();
        if (parts.size() < (size_t) kMaxMessageParts) parts.push_back(std::move(m));
        else ++dropped;
        if (!more) break;
    }
    if (dropped == 0) return Status::ok();
    stats_.parts_dropped += dropped;
    ++stats_.errors;
    return Status::corruption(endpoint_ + ": reply of " + std::to_string(parts.size() + dropped) + " parts, at most " +
                              std::to_string(kMaxMessageParts) + ": dropped");
}

void WorkerLink::reset() {
    close_socket();
    ++stats_.reconnects;
    open();
}

Status WorkerLink::send(MsgHeader & h, const std::vector<std::pair<WireType, FrameRef>> & frames, bool corrupt_after_hash) {
    h.n_frames = 0;
    h.instance = instance_;
    last_error_ = ErrorCode::ok;
    for (size_t i = 0; i < frames.size(); ++i)
        msg_header_set_frame(h, (int) i, frames[i].first, frames[i].second.data, frames[i].second.bytes);
    sent_at_ = std::chrono::steady_clock::now();
    sent_rows_ = h.n_rows;
    try {
        // Copies, made before anything is queued: ZeroMQ owns what it sends (see the file comment).
        std::vector<zmq::message_t> parts;
        parts.reserve(frames.size() + 1);
        parts.emplace_back(&h, sizeof h);
        for (const auto & f : frames) parts.emplace_back(f.second.data, f.second.bytes);
        if (corrupt_after_hash && parts.size() > 1 && parts[1].size() > 0) static_cast<uint8_t *>(parts[1].data())[0] ^= 0x5a;
        // With ZMQ_IMMEDIATE a DEALER accepts messages only once connected: wait for that, bounded.
        // Disconnects seen before the wait belong to connections that cannot carry this request;
        // after one, a new connection gets kReconnectGraceMs (a worker that exited is not waited
        // for until the timeout, a restarted one on the same endpoint is back within it).
        note_disconnects();
        const auto deadline = sent_at_ + std::chrono::milliseconds(timeout_ms_);
        short got = 0;
        for (;;) {
            const auto until = peer_closed_ ? std::min(deadline, std::max(sent_at_, closed_seen_) + std::chrono::milliseconds(kReconnectGraceMs))
                                            : deadline;
            bool monitor_ready = false;
            got = poll_until(*sock_, ZMQ_POLLOUT, until, monitor_, monitor_ready);
            if (!monitor_ready) break;
            note_disconnects();
        }
        if (!(got & ZMQ_POLLOUT)) {
            if (g_stopping) return Status::io_error(endpoint_ + ": not sent, the process is exiting");
            const std::string cause = endpoint_unreachable_cause(endpoint_, std::min(timeout_ms_, 250));
            if (peer_closed_) {  // the worker went away: its failure, not a timeout
                trace_reply_missing(endpoint_, "disconnected", sent_at_);
                return Status::io_error(endpoint_ + ": the worker closed its connection and no new one opened within " +
                                        std::to_string(std::min(timeout_ms_, kReconnectGraceMs)) + " ms" +
                                        (cause.empty() ? std::string() : ": " + cause));
            }
            ++stats_.timeouts;
            const char * why = keys_.curve() ? " (it accepts connections but the CURVE handshake did not complete: is public_key this "
                                               "worker's, and this host's public key in its --allow list?)"
                                             : " (it accepts connections but did not complete ZeroMQ's handshake: the worker is "
                                               "stopped or busy, or it requires keys and this [[worker]] has no public_key)";
            return Status::timeout(endpoint_ + ": not connected within " + std::to_string(timeout_ms_) + " ms" +
                                   (cause.empty() ? std::string(why) : ": " + cause));
        }
        peer_closed_ = false;  // a connection is up (it may be one that is closing: then the reply's wait sees it)
        uint64_t bytes = 0;
        for (size_t i = 0; i < parts.size(); ++i) {
            bytes += parts[i].size();
            auto flags = i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
            if (!send_part_through_signals(*sock_, parts[i], flags | zmq::send_flags::dontwait))
                return Status::io_error(endpoint_ + ": send queue full (worker not connected?)");
        }
        ++stats_.requests;
        stats_.bytes_out += bytes;
        trace_request_sent(endpoint_, h, bytes, sent_at_);
    } catch (const zmq::error_t & e) {
        return Status::io_error(endpoint_ + ": send: " + e.what());
    }
    return Status::ok();
}

Status WorkerLink::recv(uint64_t request_id, MsgHeader & h, zmq::message_t & data) {
    const auto deadline = sent_at_ + std::chrono::milliseconds(timeout_ms_);
    const auto wait0 = std::chrono::steady_clock::now();  // for the trace: when this host began to wait
    try {
        // set once the connection that carried the request closed: from then on only a reply already
        // on its way is awaited (kReplyAfterDisconnectMs), never the rest of the timeout
        std::chrono::steady_clock::time_point lost_at{};
        for (;;) {
            bool monitor_ready = false;
            const auto until = lost_at == std::chrono::steady_clock::time_point{}
                                   ? deadline
                                   : std::min(deadline, lost_at + std::chrono::milliseconds(kReplyAfterDisconnectMs));
            const short got = poll_until(*sock_, ZMQ_POLLIN, until, monitor_, monitor_ready);
            if (monitor_ready) {
                if (note_disconnects() && lost_at == std::chrono::steady_clock::time_point{}) lost_at = std::chrono::steady_clock::now();
                continue;
            }
            if (!(got & ZMQ_POLLIN) && lost_at != std::chrono::steady_clock::time_point{} && !g_stopping &&
                std::chrono::steady_clock::now() < deadline) {
                trace_reply_missing(endpoint_, "disconnected", wait0);
                return Status::io_error(endpoint_ + ": connection closed while the request was in flight (the worker "
                                        "stopped, crashed or restarted, or its reply had a frame over this link's " +
                                        std::to_string(open_max_reply_bytes_) + "-byte limit); not waiting the rest of the " +
                                        std::to_string(timeout_ms_) + " ms timeout");
            }
            if (!(got & ZMQ_POLLIN)) {
                if (g_stopping) return Status::io_error(endpoint_ + ": no reply taken, the process is exiting");
                ++stats_.timeouts;
                trace_reply_missing(endpoint_, "timeout", wait0);
                return Status::timeout(endpoint_ + ": no reply within " + std::to_string(timeout_ms_) + " ms");
            }
            std::vector<zmq::message_t> parts;
            Status capped = recv_parts(parts);
            if (!capped) return capped;
            std::vector<const void *> ptrs;
            std::vector<size_t> sizes;
            uint64_t bytes_in = 0;
            for (auto & p : parts) {
                bytes_in += p.size();
                ptrs.push_back(p.data());
                sizes.push_back(p.size());
                stats_.bytes_in += p.size();
            }
            ErrorCode code;
            Status st = msg_decode((int) parts.size(), ptrs.data(), sizes.data(), h, code);
            if (!st) {
                if (code == ErrorCode::bad_hash) ++stats_.hash_failed; else ++stats_.errors;
                return Status::corruption(endpoint_ + ": reply " + st.message());
            }
            if (h.request_id != request_id) {
                ++stats_.stale;  // a reply to a request we gave up on
                continue;
            }
            if (instance_ != 0 && h.instance != instance_) {
                ++stats_.foreign_instance;
                return Status::mismatch(endpoint_ + ": reply from worker instance " + hex64(h.instance) +
                                        ", but instance " + hex64(instance_) +
                                        " was verified (the worker restarted or was replaced): discarded");
            }
            stats_.hash_ok += parts.size() - 1;
            // The worker's own time is its word: a request is never served longer than its round
            // trip, so more is clamped there for every reader (the report, the balancers). A
            // fake worker said 2^32-1 us: negative transfer times, and automatic shares it steered.
            // Both in whole us, converted alike, so round trip minus service is never below 0.
            const int64_t rtt_us = std::max<int64_t>(
                std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - sent_at_).count(), 0);
            if ((int64_t) h.service_us > rtt_us) h.service_us = (uint32_t) std::min<int64_t>(rtt_us, UINT32_MAX);
            if (h.setup_us > h.service_us) h.setup_us = h.service_us;  // a part of the service, never more
            const float rtt = (float) (rtt_us / 1000.0);
            stats_.rtt_ms.push_back(rtt);
            if (sent_rows_ == 1) stats_.rtt_ms_one_row.push_back(rtt);
            if (h.kind == static_cast<uint16_t>(MsgKind::result)) {
                const float service = (float) (h.service_us / 1000.0);
                stats_.service_us_total += h.service_us;
                stats_.setup_us_total += h.setup_us;
                stats_.service_ms.push_back(service);
                stats_.rtt_minus_service_ms.push_back(rtt - service);
            }
            trace_reply_taken(endpoint_, h, bytes_in, sent_at_, wait0);
            if (parts.size() > 1) data = std::move(parts[1]); else data.rebuild(0);
            if (h.kind == static_cast<uint16_t>(MsgKind::error)) {
                ++stats_.errors;
                const ErrorCode code = static_cast<ErrorCode>(h.status);
                const std::string text = endpoint_ + ": worker error " + error_code_name(code) + ": " +
                                         std::string(static_cast<const char *>(data.data()), data.size());
                last_error_ = code;
                if (code == ErrorCode::bad_plan || code == ErrorCode::model_changed) return Status::mismatch(text);
                if (code == ErrorCode::over_budget) return Status::invalid_argument(text);
                return Status::io_error(text);
            }
            return Status::ok();
        }
    } catch (const zmq::error_t & e) {
        ++stats_.errors;
        return Status::io_error(endpoint_ + ": recv: " + e.what());
    }
}

} // namespace moezip
