#include "tests/support/llama_server.h"

#include "tests/support/test_support.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace moezip_test {

namespace {

/// Exit status of a reaped child: its code, or 128+signal.
int exit_status(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

/// The last `n` lines of `text`.
std::string last_lines(const std::string & text, int n) {
    size_t pos = text.size();
    while (n-- > 0 && pos > 0) pos = text.rfind('\n', pos - 1);
    return pos == std::string::npos || pos == 0 ? text : text.substr(pos + 1);
}

} // namespace

LlamaServer::~LlamaServer() {
    if (pid_ > 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }
}

std::string LlamaServer::stderr_text() const { return read_file(err_path_); }

bool LlamaServer::start(const std::string & program, const std::vector<std::string> & args, const std::string & dir,
                        const std::string & name, const std::map<std::string, std::string> & env, int timeout_s) {
    socket_ = dir + "/" + name + ".sock";
    err_path_ = dir + "/" + name + ".err";
    const std::string out_path = dir + "/" + name + ".out";
    unlink(socket_.c_str());
    std::vector<std::string> argv = {program};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--host", socket_});
    pid_ = fork();
    if (pid_ == 0) {
        int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out >= 0) dup2(out, 1);
        if (err >= 0) dup2(err, 2);
        exec_child(argv, env);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            error_ = name + " exited at start (status " + std::to_string(exit_status(status)) + "):\n" +
                     last_lines(stderr_text(), 15);
            return false;
        }
        CommandResult h = run_command({"curl", "-s", "--max-time", "2", "--unix-socket", socket_, "http://localhost/health"}, {}, 10);
        if (h.out.find("\"ok\"") != std::string::npos) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    error_ = name + " not ready after " + std::to_string(timeout_s) + " s:\n" + last_lines(stderr_text(), 15);
    return false;
}

ServerAnswer LlamaServer::complete(const std::string & prompt, int max_tokens, int timeout_s) const {
    const nlohmann::json body = {{"prompt", prompt}, {"temperature", 0}, {"seed", 42}, {"max_tokens", max_tokens}};
    CommandResult r = run_command({"curl", "-sS", "--max-time", std::to_string(timeout_s), "--unix-socket", socket_, "-H",
                                   "Content-Type: application/json", "-d", body.dump(), "-w", "\n%{http_code}",
                                   "http://localhost/v1/completions"},
                                  {}, timeout_s + 10);
    ServerAnswer a;
    const size_t nl = r.out.rfind('\n');
    if (nl == std::string::npos) return a;
    a.body = r.out.substr(0, nl);
    a.http_status = std::atoi(r.out.c_str() + nl + 1);
    const nlohmann::json j = nlohmann::json::parse(a.body, nullptr, false);
    if (j.is_object() && j.contains("choices") && !j["choices"].empty() && j["choices"][0].contains("text"))
        a.text = j["choices"][0]["text"].get<std::string>();
    return a;
}

int LlamaServer::stop(int sig, int timeout_s) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            return exit_status(status);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return -1;
}

} // namespace moezip_test
