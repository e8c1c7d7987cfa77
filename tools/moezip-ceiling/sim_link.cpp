// moezip-ceiling: the transports by name (sim_link.h); each lives in its own file.
#include "sim_link.h"

namespace moezip_ceiling {

std::unique_ptr<HostLink> connect_zmq_host_link(const std::string & endpoint);  // zmq_link.cpp
std::unique_ptr<HostLink> connect_tcp_host_link(const std::string & endpoint);  // tcp_link.cpp
int zmq_worker_serve(int ready_fd, bool poll);
int tcp_worker_serve(int ready_fd, bool poll);

namespace {

struct TransportName {
    Transport t;
    const char * name;
};

constexpr TransportName k_transports[] = {
    {Transport::zeromq, "zeromq"}, {Transport::zeromq_poll, "zeromq_poll"},
    {Transport::tcp_block, "tcp_block"}, {Transport::tcp_busy_poll, "tcp_busy_poll"}};

bool over_zmq(Transport t) { return t == Transport::zeromq || t == Transport::zeromq_poll; }
bool polls(Transport t) { return t == Transport::zeromq_poll || t == Transport::tcp_busy_poll; }

} // namespace

const char * transport_name(Transport t) {
    for (const TransportName & n : k_transports)
        if (n.t == t) return n.name;
    return "?";
}

bool transport_from_name(const std::string & name, Transport & t) {
    for (const TransportName & n : k_transports)
        if (name == n.name) {
            t = n.t;
            return true;
        }
    return false;
}

const char * wait_name(Wait w) { return w == Wait::spin ? "spin" : "block"; }

std::unique_ptr<HostLink> connect_host_link(Transport t, const std::string & endpoint) {
    return over_zmq(t) ? connect_zmq_host_link(endpoint) : connect_tcp_host_link(endpoint);
}

int worker_serve(Transport t, int ready_fd) {
    return over_zmq(t) ? zmq_worker_serve(ready_fd, polls(t)) : tcp_worker_serve(ready_fd, polls(t));
}

} // namespace moezip_ceiling
