// moezip: the check of a ZeroMQ endpoint as a config file or `moezip-worker --bind` writes it, done
// before anything is connected or bound, so that a bad endpoint is named with its key at load time.
// Only the form is checked: whether a host name resolves is a run-time matter.
#pragma once

#include <sys/un.h>

#include <cstddef>
#include <string>

namespace moezip {

/// Longest ipc:// path a Unix socket can take: sizeof(sockaddr_un::sun_path) - 1 (107 on Linux).
constexpr size_t config_ipc_path_max = sizeof(sockaddr_un::sun_path) - 1;

/// Checks an endpoint. Accepted: "tcp://HOST:PORT" with HOST a host name or IPv4 address (letters,
/// digits, '.', '-', '_'; at most 253 characters) or a bracketed IPv6 address ("[::1]") and PORT
/// 1..65535; "ipc://PATH" with a PATH of 1..config_ipc_path_max bytes. With `for_bind`, HOST "*" and
/// PORT "*" are allowed too. No control characters anywhere. On failure `why` says what is wrong
/// (e.g. "ipc path is 130 bytes; a Unix socket path holds at most 107",
/// "port must be 1..65535, got \"abc\"", "empty host").
bool config_endpoint_valid(const std::string & endpoint, bool for_bind, std::string & why);

} // namespace moezip
