// moezip-ceiling: the transports by name (sim_link.h); each lives in its own file.
#include "sim_link.h"

namespace moezip_ceiling {

std::unique_ptr<HostLink> connect_zmq_host_link(const std::string & endpoint);  // zmq_link.cpp
std::unique_ptr<HostLink> connect_tcp_host_link(const std::string & endpoint);  // tcp_poll_link.cpp
int zmq_worker_serve(int ready_fd);
int tcp_worker_serve(int ready_fd);

const char * transport_name(Transport t) { return t == Transport::zeromq ? "zeromq" : "tcp_busy_poll"; }

const char * wait_name(Wait w) { return w == Wait::spin ? "spin" : "block"; }

std::unique_ptr<HostLink> connect_host_link(Transport t, const std::string & endpoint) {
    return t == Transport::zeromq ? connect_zmq_host_link(endpoint) : connect_tcp_host_link(endpoint);
}

int worker_serve(Transport t, int ready_fd) {
    return t == Transport::zeromq ? zmq_worker_serve(ready_fd) : tcp_worker_serve(ready_fd);
}

} // namespace moezip_ceiling
