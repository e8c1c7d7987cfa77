// moezip-ceiling: the tcp_block and tcp_busy_poll transports (sim_link.h): one plain TCP connection
// over loopback, TCP_NODELAY, the worker's only thread blocking in recv or polling with MSG_DONTWAIT.
#include "sim_link.h"
#include "spin.h"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace moezip_ceiling {

namespace {

/// Reads n bytes, polling without sleeping when poll is set; a blocking read ends at the socket's
/// SO_RCVTIMEO, a polling one after timeout_ms (< 0: never). False when the peer closed, an error
/// or the time ran out.
bool read_all(int fd, char * p, size_t n, bool poll, double timeout_ms = -1) {
    const auto t0 = clock_type::now();
    while (n > 0) {
        const ssize_t got = recv(fd, p, n, poll ? MSG_DONTWAIT : 0);
        if (got > 0) {
            p += got;
            n -= (size_t) got;
        } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            return false;
        } else if (!poll && errno != EINTR) {
            return false;  // SO_RCVTIMEO
        } else if (timeout_ms >= 0 && ms_since(t0) > timeout_ms) {
            return false;
        }
    }
    return true;
}

bool write_all(int fd, const char * p, size_t n) {
    while (n > 0) {
        const ssize_t put = send(fd, p, n, MSG_NOSIGNAL);
        if (put > 0) {
            p += put;
            n -= (size_t) put;
        } else if (put < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            return false;
        }
    }
    return true;
}

void set_nodelay(int fd) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

class TcpHostLink : public HostLink {
  public:
    explicit TcpHostLink(const std::string & endpoint) {
        const size_t colon = endpoint.rfind(':');
        sockaddr_in a{};
        a.sin_family = AF_INET;
        if (colon == std::string::npos || inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &a.sin_addr) != 1)
            throw std::runtime_error("bad endpoint " + endpoint);
        a.sin_port = htons((uint16_t) atoi(endpoint.c_str() + colon + 1));
        fd_ = socket(AF_INET, SOCK_STREAM, 0);
        if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + strerror(errno));
        if (connect(fd_, (const sockaddr *) &a, sizeof a) != 0) {
            const std::string why = strerror(errno);
            close(fd_);
            throw std::runtime_error("cannot connect to " + endpoint + ": " + why);
        }
        set_nodelay(fd_);
        timeval tv{k_reply_timeout_ms / 1000, (k_reply_timeout_ms % 1000) * 1000};
        setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    ~TcpHostLink() override { close(fd_); }
    void send(const SimHeader & h, const std::vector<char> & payload) override {
        out_bytes_ = h.out_bytes;
        if (!write_all(fd_, (const char *) &h, sizeof h) || !write_all(fd_, payload.data(), payload.size()))
            throw std::runtime_error("the worker closed the connection");
    }
    void recv(Wait wait) override {
        SimHeader h;
        reply_.resize(out_bytes_);
        const bool spin = wait == Wait::spin;
        if (!read_all(fd_, (char *) &h, sizeof h, spin, k_reply_timeout_ms) ||
            !read_all(fd_, reply_.data(), reply_.size(), spin, k_reply_timeout_ms))
            throw std::runtime_error("no reply within " + std::to_string(k_reply_timeout_ms) + " ms, or the worker closed the connection");
    }

  private:
    int fd_ = -1;
    uint32_t out_bytes_ = 0;
    std::vector<char> reply_;
};

/// Serves the accepted connection fd until a stop request; 0 or 1 as worker_serve.
int serve_connection(int fd, bool poll) {
    std::vector<char> in, out;
    for (;;) {
        SimHeader h;
        if (!read_all(fd, (char *) &h, sizeof h, poll)) return 0;  // the host went away
        if (h.in_bytes > k_max_sim_bytes || h.out_bytes > k_max_sim_bytes) {
            fprintf(stderr, "moezip-ceiling: error: tcp worker: a request of %u / %u bytes\n", h.in_bytes, h.out_bytes);
            return 1;
        }
        in.resize(h.in_bytes);
        if (!read_all(fd, in.data(), in.size(), poll)) return 0;
        if (h.stop) return 0;
        spin_ms(h.compute_ms);
        out.resize(h.out_bytes);
        if (!write_all(fd, (const char *) &h, sizeof h) || !write_all(fd, out.data(), out.size())) return 0;
    }
}

} // namespace

std::unique_ptr<HostLink> connect_tcp_host_link(const std::string & endpoint) {
    return std::make_unique<TcpHostLink>(endpoint);
}

int tcp_worker_serve(int ready_fd, bool poll) {
    const int ls = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (ls < 0 || bind(ls, (const sockaddr *) &a, sizeof a) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (sockaddr *) &a, &len) != 0) {
        fprintf(stderr, "moezip-ceiling: error: tcp worker: cannot listen: %s\n", strerror(errno));
        return 1;
    }
    const std::string ep = "127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "\n";
    if (write(ready_fd, ep.data(), ep.size()) != (ssize_t) ep.size()) return 1;
    close(ready_fd);
    const int fd = accept(ls, nullptr, nullptr);
    close(ls);
    if (fd < 0) {
        fprintf(stderr, "moezip-ceiling: error: tcp worker: accept: %s\n", strerror(errno));
        return 1;
    }
    set_nodelay(fd);
    const int rc = serve_connection(fd, poll);
    close(fd);
    return rc;
}

} // namespace moezip_ceiling
