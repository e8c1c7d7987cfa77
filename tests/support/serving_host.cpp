#include "tests/support/serving_host.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace moezip_test {

ServingHost::~ServingHost() {
    if (pid_ > 0 && running_) kill(pid_, SIGKILL);
    if (thread_.joinable()) thread_.join();
}

bool ServingHost::start(const std::string & model, const std::string & cfg, const std::string & dir, const std::string & name,
                        int n_predict) {
    progress_ = dir + "/" + name + ".progress";
    pid_path_ = dir + "/" + name + ".pid";
    json_ = dir + "/" + name + "-run.json";
    for (const std::string & f : {progress_, pid_path_, json_}) std::remove(f.c_str());
    running_ = true;
    const std::vector<std::string> argv =
        test_host("serve", {model}, json_, {"-n", std::to_string(n_predict), "--progress", progress_, "--pid-file", pid_path_});
    thread_ = std::thread([this, argv, cfg]() {
        result_ = run_preloaded(argv, cfg, {}, 600);
        running_ = false;
    });
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (running_ && std::chrono::steady_clock::now() < until) {
        const std::string text = read_file(pid_path_);
        if (!text.empty() && text.back() == '\n') {
            pid_ = atoi(text.c_str());
            return pid_ > 0;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (running_) ADD_FAILURE() << "the serving host did not start within 120 s";
    else ADD_FAILURE() << "the serving host exited at start (status " << result_.exit_code << "): " << result_.err;
    return false;
}

int64_t ServingHost::served() const {
    const std::string p = read_file(progress_);
    return std::count(p.begin(), p.end(), 'o');
}

int64_t ServingHost::failed() const {
    const std::string p = read_file(progress_);
    return std::count(p.begin(), p.end(), 'f');
}

bool ServingHost::wait_until(const std::function<bool(int64_t, int64_t)> & done, double timeout_s) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds((int64_t) (timeout_s * 1000));
    while (running_ && std::chrono::steady_clock::now() < until) {
        const std::string p = read_file(progress_);
        if (done(std::count(p.begin(), p.end(), 'o'), std::count(p.begin(), p.end(), 'f'))) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
}

const CommandResult & ServingHost::stop(int sig) {
    if (pid_ > 0 && running_) kill(pid_, sig);
    if (thread_.joinable()) thread_.join();
    return result_;
}

} // namespace moezip_test
