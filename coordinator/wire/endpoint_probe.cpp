#include "coordinator/wire/endpoint_probe.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace moezip {

namespace {

// A non-blocking connect to addr, waited for at most timeout_ms: "" or the error.
std::string try_connect(int family, const sockaddr * addr, socklen_t len, int timeout_ms) {
    const int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return std::string("socket: ") + strerror(errno);
    std::string why;
    if (connect(fd, addr, len) != 0) {
        if (errno != EINPROGRESS) {
            why = strerror(errno);
        } else {
            pollfd p = {fd, POLLOUT, 0};
            int rc;
            do rc = poll(&p, 1, timeout_ms); while (rc < 0 && errno == EINTR);
            int err = 0;
            socklen_t el = sizeof err;
            if (rc == 0) why = "timed out after " + std::to_string(timeout_ms) + " ms";
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err != 0) why = strerror(err);
        }
    }
    close(fd);
    return why;
}

std::string probe_tcp(const std::string & rest, int timeout_ms) {
    std::string host, port;
    if (!rest.empty() && rest[0] == '[') {
        const size_t close_br = rest.find(']');
        if (close_br == std::string::npos || close_br + 1 >= rest.size() || rest[close_br + 1] != ':') return "malformed address";
        host = rest.substr(1, close_br - 1);
        port = rest.substr(close_br + 2);
    } else {
        const size_t colon = rest.rfind(':');
        if (colon == std::string::npos) return "no port";
        host = rest.substr(0, colon);
        port = rest.substr(colon + 1);
    }
    addrinfo hints = {};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo * res = nullptr;
    const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) return "host '" + host + "' does not resolve (" + gai_strerror(rc) + ")";
    std::string why = "no address";
    for (addrinfo * a = res; a != nullptr; a = a->ai_next) {
        why = try_connect(a->ai_family, a->ai_addr, a->ai_addrlen, timeout_ms);
        if (why.empty()) break;
    }
    freeaddrinfo(res);
    return why;
}

std::string probe_ipc(const std::string & path, int timeout_ms) {
    sockaddr_un a = {};
    a.sun_family = AF_UNIX;
    if (path.size() >= sizeof a.sun_path)
        return "path of " + std::to_string(path.size()) + " bytes, longer than the socket path limit of " +
               std::to_string(sizeof a.sun_path - 1);
    memcpy(a.sun_path, path.c_str(), path.size() + 1);
    std::string why = try_connect(AF_UNIX, reinterpret_cast<const sockaddr *>(&a), sizeof a, timeout_ms);
    return why.empty() ? why : why + " (" + path + ")";
}

} // namespace

std::string endpoint_unreachable_cause(const std::string & endpoint, int timeout_ms) {
    if (endpoint.rfind("tcp://", 0) == 0) return probe_tcp(endpoint.substr(6), timeout_ms);
    if (endpoint.rfind("ipc://", 0) == 0) return probe_ipc(endpoint.substr(6), timeout_ms);
    return "";
}

} // namespace moezip
