// moezip: why a worker endpoint cannot be reached, in the operating system's words. ZeroMQ
// connects in the background and retries quietly, so a coordinator that waited in vain only knows
// "not connected"; this probe, run on that failure path only, asks the OS directly.
#pragma once

#include <string>

namespace moezip {

/// The cause that keeps `endpoint` from accepting a connection now, or "" when a connection
/// succeeds (the peer then did not speak ZeroMQ in time). tcp://HOST:PORT: the host does not
/// resolve (getaddrinfo's message), or connect(2)'s error ("Connection refused", "No route to
/// host", "timed out after N ms"). ipc://PATH: connect(2)'s error on the socket file ("No such file
/// or directory": no worker bound it; "Connection refused": a stale file). Waits at most timeout_ms.
std::string endpoint_unreachable_cause(const std::string & endpoint, int timeout_ms);

} // namespace moezip
