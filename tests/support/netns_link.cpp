#include "tests/support/netns_link.h"

#include "tests/support/test_support.h"

#include <unistd.h>

namespace moezip_test {

std::string ip_program() {
    for (const char * p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
        if (access(p, X_OK) == 0) return p;
    return "";
}

bool NetnsLink::ip(const std::vector<std::string> & args) {
    std::vector<std::string> argv = {ip_program()};
    argv.insert(argv.end(), args.begin(), args.end());
    const CommandResult r = run_command(argv, {}, 30);
    if (r.exit_code == 0) return true;
    std::string cmd;
    for (const std::string & a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    why_ = cmd + ": exit " + std::to_string(r.exit_code) + ": " + r.err;
    return false;
}

NetnsLink::NetnsLink(const std::string & tag) {
    const std::string pid = std::to_string(getpid());
    host_ns_ = tag + "-h" + pid;
    worker_ns_ = tag + "-w" + pid;
    if (ip_program().empty()) {
        why_ = "no iproute2 `ip` program";
        return;
    }
    if (geteuid() != 0) {
        why_ = "network namespaces need root (euid " + std::to_string(geteuid()) + ")";
        return;
    }
    made_host_ = ip({"netns", "add", host_ns_});
    made_worker_ = made_host_ && ip({"netns", "add", worker_ns_});
    // each end is made inside its namespace: no interface ever appears in the root namespace
    ok_ = made_worker_ && ip({"link", "add", "mzo-h", "netns", host_ns_, "type", "veth", "peer", "name", "mzo-w", "netns", worker_ns_}) &&
          ip({"-n", host_ns_, "addr", "add", std::string(kHostAddress) + "/30", "dev", "mzo-h"}) &&
          ip({"-n", worker_ns_, "addr", "add", std::string(kWorkerAddress) + "/30", "dev", "mzo-w"}) &&
          ip({"-n", host_ns_, "link", "set", "mzo-h", "up"}) && ip({"-n", worker_ns_, "link", "set", "mzo-w", "up"}) &&
          ip({"-n", host_ns_, "link", "set", "lo", "up"}) && ip({"-n", worker_ns_, "link", "set", "lo", "up"});
}

NetnsLink::~NetnsLink() {
    if (made_worker_) ip({"netns", "del", worker_ns_});
    if (made_host_) ip({"netns", "del", host_ns_});
}

std::vector<std::string> NetnsLink::exec_in(const std::string & ns) const { return {ip_program(), "netns", "exec", ns}; }

bool NetnsLink::blackhole(bool on) {
    const std::string verb = on ? "add" : "del";
    return ip({"-n", host_ns_, "route", verb, "blackhole", std::string(kWorkerAddress) + "/32"}) &&
           ip({"-n", worker_ns_, "route", verb, "blackhole", std::string(kHostAddress) + "/32"});
}

} // namespace moezip_test
