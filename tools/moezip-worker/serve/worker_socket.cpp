#include "tools/moezip-worker/serve/worker_socket.h"

#include <climits>
#include <sys/resource.h>

namespace moezip {

void worker_socket_configure(zmq::socket_t & sock, const WorkerSocketOptions & o) {
    sock.set(zmq::sockopt::linger, 0);
    if (o.bind.rfind("tcp://[", 0) == 0) sock.set(zmq::sockopt::ipv6, 1);  // tcp://[::1]:port
    if (o.max_frame_bytes > 0) sock.set(zmq::sockopt::maxmsgsize, o.max_frame_bytes);
    sock.set(zmq::sockopt::handshake_ivl, o.handshake_ms);
    // dead peers are the kernel's to find (worker_socket.h): a ZMTP heartbeat here aborts the
    // process after a link outage on libzmq 4.3.4
    sock.set(zmq::sockopt::tcp_keepalive, 1);
    sock.set(zmq::sockopt::tcp_keepalive_idle, kKeepaliveIdleS);
    sock.set(zmq::sockopt::tcp_keepalive_intvl, kKeepaliveIntervalS);
    sock.set(zmq::sockopt::tcp_keepalive_cnt, kKeepaliveProbes);
    sock.set(zmq::sockopt::tcp_maxrt, kPeerSilenceMaxMs);
    sock.set(zmq::sockopt::backlog, kListenBacklog);
    sock.set(zmq::sockopt::router_handover, 1);  // a coordinator that reconnects (same routing id) takes its id over
    if (!o.key.secret_key.empty()) {
        sock.set(zmq::sockopt::curve_server, 1);
        sock.set(zmq::sockopt::curve_secretkey, o.key.secret_key);
        sock.set(zmq::sockopt::zap_domain, "moezip");
    }
}

long worker_raise_fd_limit() {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit raised = rl;
        raised.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
    }
    return rl.rlim_cur > (rlim_t) LONG_MAX ? LONG_MAX : (long) rl.rlim_cur;
}

bool worker_endpoint_is_loopback(const std::string & e) {
    auto starts = [&](const char * p) { return e.rfind(p, 0) == 0; };
    return starts("ipc://") || starts("inproc://") || starts("tcp://127.") || starts("tcp://localhost:") || starts("tcp://[::1]:");
}

} // namespace moezip
