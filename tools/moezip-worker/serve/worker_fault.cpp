#include "tools/moezip-worker/serve/worker_fault.h"

#include <sys/time.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <thread>
#include <csignal>
#include <cstdlib>
#include <sstream>
#include <string>

namespace moezip {

namespace {

bool parse_count(const std::string & text, int64_t max, int64_t & out) {
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
    errno = 0;
    long long v = strtoll(text.c_str(), nullptr, 10);
    if (errno != 0 || v > max) return false;
    out = v;
    return true;
}

} // namespace

Status worker_faults_parse(const char * text, WorkerFaults & out) {
    out = WorkerFaults();
    if (text == nullptr) return Status::ok();
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        const size_t eq = item.find('=');
        const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
        int64_t n = 0;
        if (key == "corrupt_result" && eq == std::string::npos) {
            out.corrupt_result = true;
        } else if (key == "tamper_result" && eq == std::string::npos) {
            out.tamper_result = true;
        } else if (key == "nudge_result" && eq == std::string::npos) {
            out.nudge_result = true;
        } else if (key == "exit_after" && parse_count(value, INT64_MAX, n)) {
            out.exit_after = n;
        } else if (key == "delay_ms" && parse_count(value, 600000, n)) {
            out.delay_ms = (int) n;
        } else if (key == "delay_marker" && !value.empty()) {
            out.delay_marker = value;
        } else if (key == "slow" && parse_count(value, 100, n) && n >= 1) {
            out.slow = (int) n;
        } else if (key == "slow_prefill" && parse_count(value, 100, n) && n >= 1) {
            out.slow_prefill = (int) n;
        } else if (key == "prepack_delay_ms" && parse_count(value, 600000, n)) {
            out.prepack_delay_ms = (int) n;
        } else if (key == "unsliced_keep_ms" && parse_count(value, 600000, n)) {
            out.unsliced_keep_ms = (int) n;
        } else if (key == "cpu_quota_pct" && parse_count(value, 100000, n) && n >= 1) {
            out.cpu_quota_pct = (int) n;
        } else if (key == "signal_every_us" && parse_count(value, 1000000, n) && n >= 50) {
            out.signal_every_us = (int) n;
        } else {
            return Status::invalid_argument(std::string(kWorkerFaultEnv) + ": bad item '" + item +
                                            "' (known: corrupt_result, tamper_result, nudge_result, exit_after=N, delay_ms=0..600000, delay_marker=PATH, slow=1..100, slow_prefill=1..100, prepack_delay_ms=0..600000, unsliced_keep_ms=0..600000, cpu_quota_pct=1..100000, signal_every_us=50..1000000)");
        }
    }
    if (!out.delay_marker.empty() && out.delay_ms == 0)
        return Status::invalid_argument(std::string(kWorkerFaultEnv) + ": delay_marker=" + out.delay_marker +
                                        " marks a delay: it needs delay_ms=N (N > 0)");
    if (!out.delay_marker.empty() && !std::ofstream(out.delay_marker, std::ios::app))
        return Status::invalid_argument(std::string(kWorkerFaultEnv) + ": delay_marker=" + out.delay_marker + ": cannot write it");
    return Status::ok();
}

void fault_sleep_us(int64_t us) {
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));  // libstdc++ resumes nanosleep after EINTR
}

namespace {

void ignore_signal(int) {}

} // namespace

void worker_fault_signal_timer(int every_us) {
    if (every_us > 0) {
        struct sigaction sa = {};
        sa.sa_handler = ignore_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = 0;  // no SA_RESTART: the point is that calls return EINTR
        sigaction(SIGALRM, &sa, nullptr);
    }
    struct itimerval t = {};
    t.it_interval.tv_sec = every_us / 1000000;
    t.it_interval.tv_usec = every_us % 1000000;
    t.it_value = t.it_interval;
    setitimer(ITIMER_REAL, &t, nullptr);
}

} // namespace moezip
