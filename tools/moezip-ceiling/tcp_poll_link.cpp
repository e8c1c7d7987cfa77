// moezip-ceiling: the tcp_busy_poll transport (sim_link.h): one plain TCP connection over loopback,
// TCP_NODELAY, the worker's only thread polling its socket with MSG_DONTWAIT between requests.
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
#include <unistd.h>

namespace moezip_ceiling {

namespace {

/// Reads n bytes; polls without sleeping when poll is set. False when the peer closed or an error.
bool read_all(int fd, char * p, size_t n, bool poll) {
    while (n > 0) {
        const ssize_t got = recv(fd, p, n, poll ? MSG_DONTWAIT : 0);
        if (got > 0) {
            p += got;
            n -= (size_t) got;
        } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
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
        a.sin_port = htons((uint16_t) std::stoi(endpoint.substr(colon + 1)));
        if (colon == std::string::npos || inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &a.sin_addr) != 1)
            throw std::runtime_error("tcp_busy_poll: bad endpoint " + endpoint);
        fd_ = socket(AF_INET, SOCK_STREAM, 0);
        if (fd_ < 0 || connect(fd_, (const sockaddr *) &a, sizeof a) != 0)
            throw std::runtime_error("tcp_busy_poll: cannot connect to " + endpoint + ": " + strerror(errno));
        set_nodelay(fd_);
    }
    ~TcpHostLink() override { close(fd_); }
    void send(const SimHeader & h, const std::vector<char> & payload) override {
        out_bytes_ = h.out_bytes;
        if (!write_all(fd_, (const char *) &h, sizeof h) || !write_all(fd_, payload.data(), payload.size()))
            throw std::runtime_error("tcp_busy_poll: the worker closed the connection");
    }
    void recv(Wait wait) override {
        reply_.resize(out_bytes_);
        if (!read_all(fd_, reply_.data(), reply_.size(), wait == Wait::spin))
            throw std::runtime_error("tcp_busy_poll: the worker closed the connection");
    }

  private:
    int fd_ = -1;
    uint32_t out_bytes_ = 0;
    std::vector<char> reply_;
};

/// Serves the accepted connection fd until a stop request; 0 or 1 as worker_serve.
int serve_connection(int fd) {
    std::vector<char> in, out;
    for (;;) {
        SimHeader h;
        if (!read_all(fd, (char *) &h, sizeof h, true)) return 0;  // the host went away
        if (h.in_bytes > k_max_sim_bytes || h.out_bytes > k_max_sim_bytes) {
            fprintf(stderr, "moezip-ceiling: error: tcp_busy_poll worker: a request of %u / %u bytes\n", h.in_bytes, h.out_bytes);
            return 1;
        }
        in.resize(h.in_bytes);
        if (!read_all(fd, in.data(), in.size(), true)) return 0;
        if (h.stop) return 0;
        spin_ms(h.compute_ms);
        out.resize(h.out_bytes);
        if (!write_all(fd, out.data(), out.size())) return 0;
    }
}

} // namespace

std::unique_ptr<HostLink> connect_tcp_host_link(const std::string & endpoint) {
    return std::make_unique<TcpHostLink>(endpoint);
}

int tcp_worker_serve(int ready_fd) {
    const int ls = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (ls < 0 || bind(ls, (const sockaddr *) &a, sizeof a) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (sockaddr *) &a, &len) != 0) {
        fprintf(stderr, "moezip-ceiling: error: tcp_busy_poll worker: cannot listen: %s\n", strerror(errno));
        return 1;
    }
    const std::string ep = "127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "\n";
    if (write(ready_fd, ep.data(), ep.size()) != (ssize_t) ep.size()) return 1;
    close(ready_fd);
    const int fd = accept(ls, nullptr, nullptr);
    close(ls);
    if (fd < 0) {
        fprintf(stderr, "moezip-ceiling: error: tcp_busy_poll worker: accept: %s\n", strerror(errno));
        return 1;
    }
    set_nodelay(fd);
    const int rc = serve_connection(fd);
    close(fd);
    return rc;
}

} // namespace moezip_ceiling
