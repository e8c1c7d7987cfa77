#include "tests/support/test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <limits.h>
#include <poll.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char ** environ;

namespace moezip_test {

// <root>/<build>/bin/moezip-tests: the build folder is the one this test binary was built in
// (`make BUILD=dir` keeps separate trees apart).
static std::string self_dir_up(int levels) {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return ".";
    buf[n] = 0;
    std::string exe(buf);
    for (int i = 0; i < levels; ++i) exe = exe.substr(0, exe.rfind('/'));
    return exe;
}

std::string repo_root() {
    if (const char * r = getenv("MOEZIP_ROOT")) return r;
    return self_dir_up(3);
}

std::string build_dir() { return self_dir_up(2); }

std::string shared_dir() {
    if (const char * s = getenv("MOEZIP_SHARED")) return s;
    return repo_root() + "/../shared";
}

std::string bin_path(const std::string & name) { return build_dir() + "/bin/" + name; }
std::string preload_path() { return build_dir() + "/libmoezip.so"; }

std::string preload_env() { return preload_env_for(preload_path()); }

std::string preload_env_for(const std::string & library) {
    const char * first = getenv("MOEZIP_TEST_PRELOAD_FIRST");
    return first && *first ? std::string(first) + ":" + library : library;
}

std::string test_dir(const std::string & name) {
    std::string dir = build_dir() + "/test-out/" + name;
    run_command({"/bin/rm", "-rf", dir});
    run_command({"/bin/mkdir", "-p", dir});
    return dir;
}

// Reads what is there; false once the pipe is at its end (or broken). A read interrupted by a
// signal is not an end: taking it for one stopped capturing a child's output half way.
static bool drain(int fd, std::string & into) {
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) into.append(buf, (size_t) n);
    return n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN));
}

CommandResult run_tool(const std::string & tool, const std::vector<std::string> & args, int timeout_s) {
    std::vector<std::string> argv = {bin_path(tool)};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv, {}, timeout_s);
}

bool file_exists(const std::string & path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
}

void exec_child(const std::vector<std::string> & argv, const std::map<std::string, std::string> & env) {
    for (const auto & kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    std::vector<char *> args;
    for (const auto & a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    fprintf(stderr, "exec %s: %s\n", args[0], strerror(errno));
    _exit(127);
}

CommandResult run_command(const std::vector<std::string> & argv,
                          const std::map<std::string, std::string> & env, int timeout_s) {
    CommandResult res;
    int out_pipe[2], err_pipe[2];
    if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return res;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out_pipe[1], 1);
        dup2(err_pipe[1], 2);
        close(out_pipe[0]); close(err_pipe[0]); close(out_pipe[1]); close(err_pipe[1]);
        exec_child(argv, env);
    }
    close(out_pipe[1]); close(err_pipe[1]);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    bool out_open = true, err_open = true;
    while (out_open || err_open) {
        struct pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
        int r = poll(fds, 2, 1000);
        if (r > 0) {
            for (int i = 0; i < 2; ++i) {
                if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                    std::string & into = i == 0 ? res.out : res.err;
                    if (!drain(fds[i].fd, into)) (i == 0 ? out_open : err_open) = false;
                }
            }
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > timeout_s) {
            kill(pid, SIGKILL);
            break;
        }
    }
    close(out_pipe[0]); close(err_pipe[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return res;
}

static std::string fixture_name(const std::vector<std::string> & args) {
    std::string name;
    for (const auto & a : args) {
        std::string part = a;
        for (char & c : part) if (c == '-' || c == '/' || c == ' ' || c == ',') c = '_';
        name += part;
    }
    return name;
}

/// <prefix>-%05d-of-%05d.gguf for part k (0-based) of n.
static std::string part_name(const std::string & prefix, int k, int n) {
    char suffix[48];
    snprintf(suffix, sizeof suffix, "-%05d-of-%05d.gguf", k + 1, n);
    return prefix + suffix;
}

std::string split_part_path(const std::string & first, int k, int n) {
    const size_t suffix_len = part_name("", 0, n).size();
    return part_name(first.substr(0, first.size() - std::min(first.size(), suffix_len)), k, n);
}

std::string fixture_model_split(const std::vector<std::string> & args, int n_split) {
    const std::string dir = build_dir() + "/fixtures";
    const std::string name = fixture_name(args) + "_split" + std::to_string(n_split);
    const std::string prefix = dir + "/" + name;
    struct stat st;
    if (stat(part_name(prefix, n_split - 1, n_split).c_str(), &st) == 0 && st.st_size > 0) return part_name(prefix, 0, n_split);
    const std::string tmp = prefix + ".tmp";  // written there, then moved part by part: the last part appears last
    run_command({"/bin/rm", "-rf", tmp});
    run_command({"/bin/mkdir", "-p", tmp});
    std::vector<std::string> argv = {bin_path("moezip-fixture")};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--split-files", std::to_string(n_split), "-o", tmp + "/" + name + ".gguf"});
    CommandResult r = run_command(argv, {}, 900);
    if (r.exit_code != 0) {
        ADD_FAILURE() << "moezip-fixture --split-files failed (" << r.exit_code << "): " << r.err;
        return "";
    }
    for (int k = 0; k < n_split; ++k)
        rename(part_name(tmp + "/" + name, k, n_split).c_str(), part_name(prefix, k, n_split).c_str());
    run_command({"/bin/rm", "-rf", tmp});
    return part_name(prefix, 0, n_split);
}

std::string fixture_model(const std::vector<std::string> & args) {
    const std::string name = fixture_name(args);
    std::string dir = build_dir() + "/fixtures";
    std::string path = dir + "/" + name + ".gguf";
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && st.st_size > 0) return path;
    run_command({"/bin/mkdir", "-p", dir});
    std::vector<std::string> argv = {bin_path("moezip-fixture")};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back("-o");
    argv.push_back(path + ".tmp");
    CommandResult r = run_command(argv, {}, 900);
    if (r.exit_code != 0) {
        ADD_FAILURE() << "moezip-fixture failed (" << r.exit_code << "): " << r.err;
        return "";
    }
    rename((path + ".tmp").c_str(), path.c_str());
    return path;
}

std::string stories_model() {
    static const char * const sha256 = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d";
    const std::string path = shared_dir() + "/fixtures/stories260K.gguf";
    const std::string sha = sha256_file(path);
    if (sha.empty()) {
        ADD_FAILURE() << "cannot read " << path << " (set MOEZIP_SHARED to the shared folder)";
        return "";
    }
    if (sha != sha256) {
        ADD_FAILURE() << path << " has sha256 " << sha << ", expected " << sha256
                      << " (see fixtures/SOURCES.md in the shared folder): wrong or damaged copy";
        return "";
    }
    return path;
}

std::string no_large_folios_here(const std::string & path) {
    if (read_file("/sys/kernel/mm/transparent_hugepage/enabled").find("[never]") != std::string::npos)
        return "transparent huge pages are \"never\"";
    struct utsname u;
    int major = 0, minor = 0;
    if (uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 && (major < 6 || (major == 6 && minor < 16))) {
        CommandResult r = run_command({"stat", "-f", "-c", "%T", path});
        if (r.out.find("ext2/ext3") != std::string::npos || r.out.find("ext4") != std::string::npos)
            return std::string("ext4 on Linux ") + u.release + " has no large folios (6.16 and later)";
    }
    return "";
}

std::string proactive_reclaim_here() {
    const std::string root = "/sys/kernel/mm/damon/admin/kdamonds/";
    for (int k = 0; k < 16; ++k) {
        const std::string d = root + std::to_string(k);
        if (read_file(d + "/state").find("on") != 0) continue;
        for (int c = 0; c < 4; ++c)
            for (int s = 0; s < 8; ++s)
                if (read_file(d + "/contexts/" + std::to_string(c) + "/schemes/" + std::to_string(s) + "/action").find("pageout") == 0)
                    return "DAMON kdamond " + std::to_string(k) + " runs a pageout scheme (proactive reclaim)";
    }
    return "";
}

std::string sha256_file(const std::string & path) {
    CommandResult r = run_command({"sha256sum", path});
    if (r.exit_code != 0) return "";
    return r.out.substr(0, 64);
}

std::string read_file(const std::string & path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

bool wait_for_file(const std::string & path, int timeout_ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
        struct stat st;
        if (stat(path.c_str(), &st) == 0 && st.st_size > 0) return true;
        if (std::chrono::steady_clock::now() >= until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

std::string upcycled_stories(int n_expert, int n_used, const std::string & experts) {
    const std::string src = shared_dir() + "/fixtures/stories260K.gguf";
    EXPECT_EQ(sha256_file(src), "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d")
        << "wrong or missing " << src << " (see ../shared/fixtures/SOURCES.md)";
    std::string out = build_dir() + "/fixtures/stories260K-moe" + std::to_string(n_expert) + "top" + std::to_string(n_used) +
                      (experts == "split" ? "" : "-" + experts) + ".gguf";
    if (sha256_file(out).empty()) {
        run_command({"/bin/mkdir", "-p", build_dir() + "/fixtures"});
        CommandResult r = run_command({bin_path("moezip-upcycle"), "-i", src, "-o", out, "--n-expert", std::to_string(n_expert),
                                       "--n-expert-used", std::to_string(n_used), "--experts", experts});
        EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    return out;
}

} // namespace moezip_test
