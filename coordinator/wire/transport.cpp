#include "coordinator/wire/transport.h"

#include <cstring>

namespace moezip {

namespace {
// zmq frees nothing: the frames point at buffers the dispatcher owns and keeps alive.
void no_free(void *, void *) {}
} // namespace

WorkerLink::WorkerLink(zmq::context_t & ctx, std::string endpoint, int timeout_ms)
    : ctx_(ctx), endpoint_(std::move(endpoint)), timeout_ms_(timeout_ms) {
    open();
}

WorkerLink::~WorkerLink() {
    if (sock_) sock_->close();
}

void WorkerLink::open() {
    sock_.reset(new zmq::socket_t(ctx_, zmq::socket_type::dealer));
    sock_->set(zmq::sockopt::linger, 0);
    sock_->set(zmq::sockopt::immediate, 1);  // queue only to completed connections
    sock_->connect(endpoint_);
}

void WorkerLink::reset() {
    if (sock_) sock_->close();
    ++stats_.reconnects;
    open();
}

Status WorkerLink::send(MsgHeader & h, const std::vector<std::pair<WireType, FrameRef>> & frames, bool corrupt_after_hash) {
    h.n_frames = 0;
    for (size_t i = 0; i < frames.size(); ++i)
        msg_header_set_frame(h, (int) i, frames[i].first, frames[i].second.data, frames[i].second.bytes);
    if (corrupt_after_hash && !frames.empty() && frames[0].second.bytes > 0)
        const_cast<uint8_t *>(static_cast<const uint8_t *>(frames[0].second.data))[0] ^= 0x5a;
    sent_at_ = std::chrono::steady_clock::now();
    try {
        // With ZMQ_IMMEDIATE a DEALER accepts messages only once connected: wait for that, bounded.
        zmq::pollitem_t out_item = {sock_->handle(), 0, ZMQ_POLLOUT, 0};
        zmq::poll(&out_item, 1, std::chrono::milliseconds(timeout_ms_));
        if (!(out_item.revents & ZMQ_POLLOUT)) {
            ++stats_.timeouts;
            return Status::timeout(endpoint_ + ": not connected within " + std::to_string(timeout_ms_) + " ms");
        }
        zmq::message_t head(&h, sizeof h);  // copied: the header is a local
        auto more = frames.empty() ? zmq::send_flags::dontwait : zmq::send_flags::sndmore | zmq::send_flags::dontwait;
        if (!sock_->send(head, more)) return Status::io_error(endpoint_ + ": send queue full (worker not connected?)");
        uint64_t bytes = sizeof h;
        for (size_t i = 0; i < frames.size(); ++i) {
            zmq::message_t m(const_cast<void *>(frames[i].second.data), frames[i].second.bytes, no_free, nullptr);
            auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
            sock_->send(m, flags | zmq::send_flags::dontwait);
            bytes += frames[i].second.bytes;
        }
        ++stats_.requests;
        stats_.bytes_out += bytes;
    } catch (const zmq::error_t & e) {
        return Status::io_error(endpoint_ + ": send: " + e.what());
    }
    return Status::ok();
}

Status WorkerLink::recv(uint64_t request_id, MsgHeader & h, zmq::message_t & data) {
    const auto deadline = sent_at_ + std::chrono::milliseconds(timeout_ms_);
    try {
        for (;;) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() < 0) left = std::chrono::milliseconds(0);
            zmq::pollitem_t item = {sock_->handle(), 0, ZMQ_POLLIN, 0};
            zmq::poll(&item, 1, left);
            if (!(item.revents & ZMQ_POLLIN)) {
                ++stats_.timeouts;
                return Status::timeout(endpoint_ + ": no reply within " + std::to_string(timeout_ms_) + " ms");
            }
            std::vector<zmq::message_t> parts;
            for (;;) {
                zmq::message_t m;
                if (!sock_->recv(m, zmq::recv_flags::none)) break;
                bool more = m.more();
                parts.push_back(std::move(m));
                if (!more) break;
            }
            uint64_t bytes = 0;
            for (auto & p : parts) bytes += p.size();
            stats_.bytes_in += bytes;
            ErrorCode code;
            if (parts.empty() || !msg_header_parse(parts[0].data(), parts[0].size(), h, code)) {
                ++stats_.errors;
                return Status::corruption(endpoint_ + ": malformed reply header");
            }
            if (h.request_id != request_id) {
                ++stats_.stale;  // a reply to a request we gave up on
                continue;
            }
            std::vector<const void *> ptrs;
            std::vector<size_t> sizes;
            for (size_t i = 1; i < parts.size(); ++i) {
                ptrs.push_back(parts[i].data());
                sizes.push_back(parts[i].size());
            }
            Status st = msg_frames_verify(h, (int) ptrs.size(), ptrs.data(), sizes.data(), code);
            if (!st) {
                if (code == ErrorCode::bad_hash) ++stats_.hash_failed; else ++stats_.errors;
                return Status::corruption(endpoint_ + ": reply " + st.message());
            }
            stats_.hash_ok += ptrs.size();
            const float rtt = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - sent_at_).count();
            if (stats_.rtt_ms.size() < 1000000) stats_.rtt_ms.push_back(rtt);
            if (h.kind == static_cast<uint16_t>(MsgKind::result)) {
                const float service = (float) (h.service_us / 1000.0);
                stats_.service_ms_total += service;
                if (stats_.service_ms.size() < 1000000) {
                    stats_.service_ms.push_back(service);
                    stats_.rtt_minus_service_ms.push_back(rtt - service);
                }
            }
            if (parts.size() > 1) data = std::move(parts[1]); else data.rebuild(0);
            if (h.kind == static_cast<uint16_t>(MsgKind::error)) {
                ++stats_.errors;
                return Status::io_error(endpoint_ + ": worker error " + error_code_name(static_cast<ErrorCode>(h.status)) + ": " +
                                        std::string(static_cast<const char *>(data.data()), data.size()));
            }
            return Status::ok();
        }
    } catch (const zmq::error_t & e) {
        ++stats_.errors;
        return Status::io_error(endpoint_ + ": recv: " + e.what());
    }
}

} // namespace moezip
