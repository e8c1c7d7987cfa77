#include "tools/moezip-worker/serve/worker_auth.h"

#include "coordinator/base/log.h"
#include "coordinator/wire/zmq_eintr.h"

#include <zmq_addon.hpp>

#include <array>
#include <cerrno>
#include <cstring>
#include <pthread.h>
#include <signal.h>

namespace moezip {

namespace {

constexpr const char * kZapEndpoint = "inproc://zeromq.zap.01";   // fixed by RFC 27 and libzmq
constexpr const char * kMonitorEndpoint = "inproc://moezip-worker-monitor";
constexpr int kZapPollMs = 50;

void add(std::string & s, const char * name, uint64_t v) {
    if (v == 0) return;
    s += std::string(s.empty() ? "" : ", ") + name + " " + std::to_string(v);
}

} // namespace

std::string auth_counters_text(const AuthCounters & c) {
    std::string hs, conn;
    add(hs, "key accepted", c.zap_accepted.load());
    add(hs, "key refused", c.zap_refused.load());
    add(hs, "failed protocol (plain peer, wrong worker key or junk)", c.handshake_failed_protocol);
    add(hs, "timed out", c.handshake_timed_out);
    add(hs, "closed by the peer", c.handshake_peer_closed);
    add(hs, "failed other", c.handshake_failed_other);
    if (c.handshake_failed_other) hs += std::string(" (last: ") + strerror(c.handshake_other_errno) + ")";
    add(conn, "accepted", c.accepted);
    add(conn, "accept failed", c.accept_failed);
    add(conn, "closed", c.disconnected);
    std::string s;
    if (!hs.empty()) s += "handshakes: " + hs;
    if (!conn.empty()) s += std::string(s.empty() ? "" : "; ") + "connections: " + conn;
    return s;
}

// ---- ZapHandler ----

ZapHandler::ZapHandler(zmq::context_t & ctx, const std::vector<std::string> & allowed_z85, AuthCounters & counters)
    : ctx_(ctx), counters_(counters), sock_(ctx, zmq::socket_type::rep) {
    for (const std::string & z : allowed_z85) {
        uint8_t key[32];
        if (z.size() == 40 && zmq_z85_decode(key, z.c_str())) allowed_.insert(std::string(reinterpret_cast<char *>(key), 32));
    }
}

ZapHandler::~ZapHandler() { stop(); }

Status ZapHandler::start() {
    try {
        sock_.set(zmq::sockopt::linger, 0);
        sock_.bind(kZapEndpoint);
    } catch (const zmq::error_t & e) {
        return Status::io_error(std::string("ZAP handler: ") + e.what());
    }
    thread_ = std::thread([this]() {
        // Signals go to the serving thread, whose loop ends on them: here an EINTR in the middle of
        // recv_multipart would leave the REP socket half through a request and every later CURVE
        // handshake unanswered. (libzmq's own threads block every signal the same way.)
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, nullptr);
        pthread_setname_np(pthread_self(), "moezip-zap");  // in top -H, gdb and /proc/PID/task/*/comm
        run();
    });
    return Status::ok();
}

void ZapHandler::stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (sock_) sock_.close();
}

// Request (RFC 27): version, request id, domain, address, routing id, mechanism, credentials...
// Reply: version, request id, status code, status text, user id, metadata.
void ZapHandler::answer(std::vector<zmq::message_t> & req) {
    const bool curve = req.size() >= 7 && req[5].to_string() == "CURVE" && req[6].size() == 32;
    const bool ok = curve && allowed_.count(req[6].to_string()) > 0;
    char user[41] = "";
    if (curve) zmq_z85_encode(user, static_cast<const uint8_t *>(req[6].data()), 32);
    (ok ? counters_.zap_accepted : counters_.zap_refused)++;
    if (!ok) LOG_DEBUG("ZAP: refused %s client %s from %s", req.size() >= 6 ? req[5].to_string().c_str() : "?", user,
                       req.size() >= 4 ? req[3].to_string().c_str() : "?");
    const std::string request_id = req.size() >= 2 ? req[1].to_string() : "";
    std::array<zmq::const_buffer, 6> reply = {zmq::str_buffer("1.0"), zmq::buffer(request_id),
                                              ok ? zmq::str_buffer("200") : zmq::str_buffer("400"),
                                              ok ? zmq::str_buffer("OK") : zmq::str_buffer("key not allowed"),
                                              zmq::const_buffer(user, ok ? 40 : 0), zmq::const_buffer(nullptr, 0)};
    (void) zmq::send_multipart(sock_, reply);
}

void ZapHandler::run() {
    while (!stop_) {
        try {
            zmq::pollitem_t item = {sock_.handle(), 0, ZMQ_POLLIN, 0};
            zmq::poll(&item, 1, std::chrono::milliseconds(kZapPollMs));
            if (!(item.revents & ZMQ_POLLIN)) continue;
            std::vector<zmq::message_t> req;
            if (!zmq::recv_multipart(sock_, std::back_inserter(req))) continue;
            answer(req);
        } catch (const zmq::error_t & e) {
            if (e.num() == ETERM) return;
            if (e.num() != EINTR) LOG_ERROR("ZAP handler: %s", e.what());
        }
    }
}

// ---- SocketMonitor ----

SocketMonitor::SocketMonitor(zmq::context_t & ctx, zmq::socket_t & sock, AuthCounters & counters)
    : watched_(sock), pair_(ctx, zmq::socket_type::pair), counters_(counters) {
    const int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_ACCEPT_FAILED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
    if (zmq_socket_monitor(sock.handle(), kMonitorEndpoint, events) != 0) throw zmq::error_t();
    pair_.set(zmq::sockopt::linger, 0);
    pair_.connect(kMonitorEndpoint);
}

SocketMonitor::~SocketMonitor() { close(); }

void SocketMonitor::close() {
    if (!pair_) return;
    zmq_socket_monitor(watched_.handle(), nullptr, 0);
    pair_.close();
}

// libzmq (stream_engine_base.cpp) reports a handshake that ends without a protocol or auth
// verdict with the errno it saw: EAGAIN when its handshake timer fired, ECONNRESET or EPIPE when
// the peer went away first (a port scan, a coordinator that gave up, a health check).
void SocketMonitor::count_no_detail(uint32_t err) {
    if (err == EAGAIN || err == ETIMEDOUT) ++counters_.handshake_timed_out;
    else if (err == ECONNRESET || err == EPIPE || err == 0) ++counters_.handshake_peer_closed;
    else {
        ++counters_.handshake_failed_other;
        counters_.handshake_other_errno = (int) err;
    }
}

void SocketMonitor::drain() {
    for (;;) {
        zmq::message_t event, address;
        if (!recv_part_through_signals(pair_, event, zmq::recv_flags::dontwait)) return;
        if (event.more()) (void) recv_part_through_signals(pair_, address, zmq::recv_flags::dontwait);
        if (event.size() < 6) continue;
        uint16_t id;
        uint32_t value;  // for the handshake events: errno where libzmq saw the failure
        memcpy(&id, event.data(), sizeof id);
        memcpy(&value, static_cast<const char *>(event.data()) + sizeof id, sizeof value);
        switch (id) {
            case ZMQ_EVENT_ACCEPTED: ++counters_.accepted; break;
            case ZMQ_EVENT_ACCEPT_FAILED: ++counters_.accept_failed; break;
            case ZMQ_EVENT_DISCONNECTED: ++counters_.disconnected; break;
            case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL: ++counters_.handshake_failed_protocol; break;
            case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: ++counters_.handshake_failed_auth; break;
            case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: count_no_detail(value); break;
            default: break;
        }
    }
}

} // namespace moezip
