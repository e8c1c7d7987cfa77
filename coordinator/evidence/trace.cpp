#include "coordinator/evidence/trace.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sys/syscall.h>
#include <unistd.h>

namespace moezip {

namespace {

// Never freed: threads of the host may still record while the process exits.
std::atomic<Trace *> g_trace{nullptr};

nlohmann::json metadata(const char * what, int pid, int64_t tid, const std::string & name) {
    return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

} // namespace

Trace::Trace(size_t max_events) : origin_(clock::now()), max_events_(std::max<size_t>(max_events, 1)), pid_(getpid()) {
    events_.reserve(std::min<size_t>(max_events_, 4096));
}

void Trace::add(std::string name, const char * cat, int64_t tid, clock::time_point t0, clock::time_point t1, nlohmann::json args) {
    const double ts = to_us(t0);
    const double dur = std::max(0.0, to_us(t1) - ts);
    std::lock_guard<std::mutex> lock(mu_);
    if (events_.size() >= max_events_) {
        if (dropped_++ == 0) first_drop_us_ = ts;
        return;
    }
    events_.push_back(TraceEvent{std::move(name), cat, ts, dur, tid, std::move(args)});
}

int64_t Trace::worker_track(const std::string & endpoint) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = worker_tracks_.find(endpoint);
    if (it != worker_tracks_.end()) return it->second;
    const int64_t tid = kWorkerTrackBase + (int64_t) worker_tracks_.size();
    worker_tracks_[endpoint] = tid;
    track_names_[tid] = "worker " + endpoint;
    return tid;
}

void Trace::name_thread(int64_t tid, const std::string & name) {
    std::lock_guard<std::mutex> lock(mu_);
    track_names_.emplace(tid, name);
}

size_t Trace::size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_.size();
}

uint64_t Trace::dropped() const {
    std::lock_guard<std::mutex> lock(mu_);
    return dropped_;
}

nlohmann::json Trace::to_json() const {
    std::vector<TraceEvent> ev;
    std::map<int64_t, std::string> names;
    uint64_t dropped;
    double first_drop;
    {
        std::lock_guard<std::mutex> lock(mu_);
        ev = events_;
        names = track_names_;
        dropped = dropped_;
        first_drop = first_drop_us_;
    }
    // Events are added when they end; a viewer wants them by start, parents before their children.
    std::stable_sort(ev.begin(), ev.end(), [](const TraceEvent & a, const TraceEvent & b) {
        return a.ts_us != b.ts_us ? a.ts_us < b.ts_us : a.dur_us > b.dur_us;
    });
    nlohmann::json out = nlohmann::json::array();
    out.push_back(metadata("process_name", pid_, 0, "moezip coordinator (pid " + std::to_string(pid_) + ")"));
    for (const TraceEvent & e : ev)
        if (names.find(e.tid) == names.end()) names[e.tid] = "engine thread " + std::to_string(e.tid);
    for (const auto & kv : names) out.push_back(metadata("thread_name", pid_, kv.first, kv.second));
    for (const TraceEvent & e : ev) {
        nlohmann::json j = {{"name", e.name}, {"cat", e.cat}, {"ph", "X"}, {"ts", e.ts_us}, {"dur", e.dur_us},
                            {"pid", pid_}, {"tid", e.tid}};
        if (e.args.is_object()) j["args"] = e.args;
        out.push_back(std::move(j));
    }
    if (dropped > 0) {
        out.push_back({{"name", "dropped " + std::to_string(dropped) + " events (trace_max_events = " + std::to_string(max_events_) + ")"},
                       {"cat", "dropped"}, {"ph", "i"}, {"s", "g"}, {"ts", first_drop}, {"pid", pid_}, {"tid", 0},
                       {"args", {{"dropped_events", dropped}, {"max_events", max_events_}}}});
    }
    return {{"traceEvents", std::move(out)},
            {"displayTimeUnit", "ms"},
            {"otherData", {{"producer", "moezip"}, {"schema", "moezip-trace/1"}, {"max_events", max_events_},
                           {"events", ev.size()}, {"dropped_events", dropped}}}};
}

Status Trace::write(const std::string & path) const {
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    try {
        std::ofstream f(tmp, std::ios::trunc);
        if (!f) return Status::io_error("cannot write trace " + tmp);
        // replace, not throw: an error text in an event may quote bytes of the model (tensor names)
        f << to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
        if (!f.flush()) return Status::io_error("cannot write trace " + tmp);
    } catch (const std::exception & e) {  // out of memory for a large trace: the host's exit goes on
        unlink(tmp.c_str());
        return Status::io_error("cannot write trace " + path + ": " + e.what());
    }
    if (rename(tmp.c_str(), path.c_str()) != 0) {
        unlink(tmp.c_str());
        return Status::io_error("cannot rename trace to " + path);
    }
    return Status::ok();
}

void trace_start(size_t max_events) {
    if (g_trace.load(std::memory_order_acquire) != nullptr) return;
    Trace * t = new Trace(max_events);
    Trace * expected = nullptr;
    if (!g_trace.compare_exchange_strong(expected, t)) delete t;  // another thread was first
}

Trace * trace_active() { return g_trace.load(std::memory_order_acquire); }

int64_t trace_thread_id() {
    thread_local int64_t tid = (int64_t) syscall(SYS_gettid);
    return tid;
}

TraceSpan::TraceSpan(const char * name, const char * cat) : trace_(trace_active()), cat_(cat) {
    if (trace_ == nullptr) return;
    name_ = name;
    t0_ = Trace::clock::now();
}

TraceSpan::~TraceSpan() {
    if (trace_ == nullptr) return;
    try {
        trace_->add(std::move(name_), cat_, trace_thread_id(), t0_, Trace::clock::now(),
                    args_.is_object() ? std::move(args_) : nlohmann::json(nullptr));
    } catch (const std::exception &) {
        // out of memory while tracing: this event is lost, the compute goes on (a destructor must not throw)
    }
}

} // namespace moezip
