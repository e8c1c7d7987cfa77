// moezip tests: two network namespaces joined by a veth pair, for tests that cut the link between a
// host and a worker without touching the machine's own network (nothing is added to the root
// namespace, so tests of several checkouts at once do not meet). Needs root and iproute2.
#pragma once

#include <string>
#include <vector>

namespace moezip_test {

/// The path of iproute2's `ip` program ("" when none is installed).
std::string ip_program();

/// Namespaces "<tag>-h<pid>" (the host side, 10.98.0.1/30) and "<tag>-w<pid>" (the worker side,
/// 10.98.0.2/30) joined by a veth pair, both ends and loopback up. The destructor deletes both
/// namespaces (and so the pair) in every path; processes still running inside keep theirs until
/// they exit, so callers stop them first (declare this before them).
class NetnsLink {
public:
    /// `tag`: a short name (at most 6 characters) for the namespaces.
    explicit NetnsLink(const std::string & tag);
    ~NetnsLink();
    NetnsLink(const NetnsLink &) = delete;
    NetnsLink & operator=(const NetnsLink &) = delete;

    /// False when the namespaces or the pair could not be made (not root, no iproute2, no veth);
    /// why() says which command failed and its message.
    bool ok() const { return ok_; }
    const std::string & why() const { return why_; }

    const std::string & host_ns() const { return host_ns_; }
    const std::string & worker_ns() const { return worker_ns_; }
    static constexpr const char * kHostAddress = "10.98.0.1";
    static constexpr const char * kWorkerAddress = "10.98.0.2";

    /// `ip netns exec <ns>`: put before an argv to run it inside that namespace (ip execs the program,
    /// so the child's pid is the program's).
    std::vector<std::string> exec_in(const std::string & ns) const;

    /// Adds (true) or removes (false) a blackhole route to the other end in both namespaces: every
    /// packet between them is dropped without an error reaching the peer, as behind a switch that
    /// reboots. False with why() set when an `ip route` command failed.
    bool blackhole(bool on);

private:
    bool ip(const std::vector<std::string> & args);
    std::string host_ns_, worker_ns_;
    bool made_host_ = false, made_worker_ = false, ok_ = false;
    std::string why_;
};

} // namespace moezip_test
