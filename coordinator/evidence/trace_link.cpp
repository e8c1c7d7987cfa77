#include "coordinator/evidence/trace_link.h"

#include "coordinator/evidence/trace.h"

namespace moezip {

namespace {

bool is_compute(const MsgHeader & h) {
    return h.kind == static_cast<uint16_t>(MsgKind::compute) || h.kind == static_cast<uint16_t>(MsgKind::result);
}

std::string layer_name(const char * what, const MsgHeader & h) {
    return is_compute(h) ? std::string(what) + " layer " + std::to_string(h.layer) : std::string(what) + " " + msg_kind_name(h.kind);
}

// layer and rows mean something only in compute requests and their results (a hello carries zeros)
nlohmann::json message_args(const std::string & endpoint, const MsgHeader & h) {
    nlohmann::json a = {{"worker", endpoint}, {"kind", msg_kind_name(h.kind)}, {"request_id", h.request_id}};
    if (is_compute(h)) {
        a["layer"] = h.layer;
        a["rows"] = h.n_rows;
    }
    return a;
}

void request_sent(const std::string & endpoint, const MsgHeader & h, uint64_t bytes, std::chrono::steady_clock::time_point t0) {
    Trace * t = trace_active();
    if (t == nullptr) return;
    nlohmann::json args = message_args(endpoint, h);
    args["bytes"] = bytes;
    t->add(layer_name("send", h), "send", trace_thread_id(), t0, Trace::clock::now(), std::move(args));
}

void reply_taken(const std::string & endpoint, const MsgHeader & rh, uint64_t bytes_in,
                 std::chrono::steady_clock::time_point sent, std::chrono::steady_clock::time_point wait0) {
    Trace * t = trace_active();
    if (t == nullptr) return;
    const auto now = Trace::clock::now();
    const double rtt_ms = std::chrono::duration<double, std::milli>(now - sent).count();
    const double service_ms = rh.service_us / 1000.0;
    nlohmann::json args = message_args(endpoint, rh);
    args["bytes_in"] = bytes_in;
    args["rtt_ms"] = rtt_ms;
    args["service_ms"] = service_ms;
    t->add(layer_name("reply", rh), "wait", trace_thread_id(), wait0, now, args);
    const int64_t track = t->worker_track(endpoint);
    t->add(layer_name("request", rh), "worker", track, sent, now, args);
    if (rh.kind == static_cast<uint16_t>(MsgKind::result))
        t->add("service (worker's own time; start assumed at send)", "service", track, sent,
               sent + std::chrono::microseconds(rh.service_us), {{"service_ms", service_ms}, {"layer", rh.layer}});
}

void reply_missing(const std::string & endpoint, const char * why, std::chrono::steady_clock::time_point wait0) {
    Trace * t = trace_active();
    if (t == nullptr) return;
    t->add(std::string("no reply: ") + why, "wait", trace_thread_id(), wait0, Trace::clock::now(), {{"worker", endpoint}});
}

} // namespace

// Recording must never fail a compute: an allocation failure loses the event, not the region.
void trace_request_sent(const std::string & endpoint, const MsgHeader & h, uint64_t bytes, std::chrono::steady_clock::time_point t0) {
    try { request_sent(endpoint, h, bytes, t0); } catch (const std::exception &) {}
}

void trace_reply_taken(const std::string & endpoint, const MsgHeader & rh, uint64_t bytes_in,
                       std::chrono::steady_clock::time_point sent, std::chrono::steady_clock::time_point wait0) {
    try { reply_taken(endpoint, rh, bytes_in, sent, wait0); } catch (const std::exception &) {}
}

void trace_reply_missing(const std::string & endpoint, const char * why, std::chrono::steady_clock::time_point wait0) {
    try { reply_missing(endpoint, why, wait0); } catch (const std::exception &) {}
}

} // namespace moezip
