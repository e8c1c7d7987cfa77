// moezip tests: a host that serves requests under the preload (moezip-test-host serve), started on
// a thread of the test and stopped as a server is, with SIGTERM.
#pragma once

#include <csignal>

#include "tests/support/cluster.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

namespace moezip_test {

/// moezip-test-host serve (tests/hosts/scenario_host.cpp) under the preload, on a thread of the
/// test: a server answering request after request until stop() sends it SIGTERM. Killed (SIGKILL)
/// when it goes out of scope still running.
class ServingHost {
public:
    ServingHost() = default;
    ~ServingHost();
    ServingHost(const ServingHost &) = delete;
    ServingHost & operator=(const ServingHost &) = delete;

    /// Starts it on `model` with config `cfg` and `n_predict` tokens per request; its files are
    /// <dir>/<name>-run.json (runs, counts), <name>.progress and <name>.pid. True once it serves
    /// (its pid written, at most 120 s); false (test failed, with its stderr) when it exited first.
    bool start(const std::string & model, const std::string & cfg, const std::string & dir, const std::string & name,
               int n_predict = 4);
    /// Requests answered so far, from its progress file: served, and failed (the host's request
    /// failed because a compute failed).
    int64_t served() const;
    int64_t failed() const;
    /// Waits until `done(served, failed)` holds, polling every 5 ms; false after timeout_s or once
    /// the host exited.
    bool wait_until(const std::function<bool(int64_t served, int64_t failed)> & done, double timeout_s = 60) const;
    bool running() const { return running_; }
    /// Sends `sig` (SIGTERM: a server told to stop; SIGINT: Ctrl-C) and waits for its exit; its
    /// status and output.
    const CommandResult & stop(int sig = SIGTERM);
    /// <dir>/<name>-run.json: its runs (each distinct output once) and "served", "failed".
    const std::string & json_path() const { return json_; }

private:
    std::string progress_, pid_path_, json_;
    int pid_ = -1;
    std::atomic<bool> running_{false};
    std::thread thread_;
    CommandResult result_;
};

} // namespace moezip_test
