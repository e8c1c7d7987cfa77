// moezip tests: an unmodified llama-server as a child process that a test keeps running across
// requests (kill a worker between two of them, stop it with a chosen signal, read its exit status).
// tools/server-check.sh covers the one-shot comparison of a whole set of requests.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace moezip_test {

/// One answer of llama-server's OpenAI-compatible /v1/completions.
struct ServerAnswer {
    int http_status = 0;   ///< 0 when curl got no HTTP answer at all
    std::string text;      ///< choices[0].text when the answer has one
    std::string body;      ///< the raw body (the error object of a failed request)
};

/// llama-server listening on a unix socket in the test's folder (no port to collide), stdout and
/// stderr to <dir>/<name>.out and <dir>/<name>.err. The destructor kills it (SIGKILL) and reaps it.
class LlamaServer {
public:
    LlamaServer() = default;
    ~LlamaServer();
    LlamaServer(const LlamaServer &) = delete;
    LlamaServer & operator=(const LlamaServer &) = delete;

    /// Starts `program` with `args` plus --host <socket> (env added to ours) and waits up to
    /// timeout_s for /health to answer "ok". False (with the last stderr lines in error()) when it
    /// exits or never gets ready.
    bool start(const std::string & program, const std::vector<std::string> & args, const std::string & dir,
               const std::string & name, const std::map<std::string, std::string> & env = {}, int timeout_s = 120);
    /// POST /v1/completions: `prompt`, temperature 0, seed 42, `max_tokens`; waits up to timeout_s.
    ServerAnswer complete(const std::string & prompt, int max_tokens, int timeout_s = 120) const;
    /// Sends `sig` and waits up to timeout_s for the exit: its status (128+signal when killed by
    /// one), -1 on timeout (the process is then killed).
    int stop(int sig, int timeout_s = 60);
    /// Everything the server wrote to stderr so far.
    std::string stderr_text() const;
    int pid() const { return pid_; }
    const std::string & error() const { return error_; }

private:
    int pid_ = -1;
    std::string socket_, err_path_, error_;
};

} // namespace moezip_test
