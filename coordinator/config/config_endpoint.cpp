#include "coordinator/config/config_endpoint.h"

#include <algorithm>
#include <cctype>

namespace moezip {

namespace {

constexpr size_t host_name_max = 253;  // longest DNS name (RFC 1035, without the final dot)

bool all_digits(const std::string & s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return isdigit((unsigned char) c); });
}

// A character for a message: 'x', or "a space", or its code.
std::string shown_char(char c) {
    if (c == ' ') return "a space";
    if ((unsigned char) c < 0x20 || (unsigned char) c >= 0x7f) return "byte " + std::to_string((unsigned char) c);
    return std::string("'") + c + "'";
}

bool fail(std::string & why, std::string text) {
    why = std::move(text);
    return false;
}

bool ipc_path_valid(const std::string & path, std::string & why) {
    if (path.empty()) return fail(why, "empty ipc path");
    if (path.size() > config_ipc_path_max)
        return fail(why, "ipc path is " + std::to_string(path.size()) + " bytes; a Unix socket path holds at most " +
                         std::to_string(config_ipc_path_max));
    return true;
}

bool ipv6_host_valid(const std::string & host, std::string & why) {  // "[...]"
    const std::string inner = host.substr(1, host.size() - 2);
    if (inner.empty() || inner.find(':') == std::string::npos) return fail(why, "bad IPv6 address " + host);
    for (char c : inner)
        if (!isalnum((unsigned char) c) && c != ':' && c != '.' && c != '%')
            return fail(why, "IPv6 address " + host + " contains " + shown_char(c));
    return true;
}

bool host_valid(const std::string & host, bool for_bind, std::string & why) {
    if (host.empty()) return fail(why, "empty host");
    if (host == "*") return for_bind || fail(why, "host \"*\" is only valid for bind");
    if (host.front() == '[') return ipv6_host_valid(host, why);
    if (host.find(':') != std::string::npos) return fail(why, "an IPv6 address needs brackets, as in tcp://[::1]:5601");
    for (char c : host)
        if (!isalnum((unsigned char) c) && c != '.' && c != '-' && c != '_')
            return fail(why, "host \"" + host + "\" contains " + shown_char(c));
    if (host.size() > host_name_max)
        return fail(why, "host is " + std::to_string(host.size()) + " characters, the limit is " + std::to_string(host_name_max));
    return true;
}

bool port_valid(const std::string & port, bool for_bind, std::string & why) {
    if (for_bind && port == "*") return true;
    if (port.empty()) return fail(why, "missing port after ':'; port must be 1..65535");
    if (!all_digits(port) || port.size() > 5 || std::stoi(port) < 1 || std::stoi(port) > 65535)
        return fail(why, "port must be 1..65535, got \"" + port + "\"");
    return true;
}

bool tcp_address_valid(const std::string & addr, bool for_bind, std::string & why) {
    size_t colon = addr.rfind(':');
    if (!addr.empty() && addr.front() == '[') {  // [IPv6]:port
        size_t close = addr.find(']');
        if (close == std::string::npos) return fail(why, "'[' of an IPv6 address without ']'");
        colon = close + 1 < addr.size() && addr[close + 1] == ':' ? close + 1 : std::string::npos;
    }
    if (colon == std::string::npos) return fail(why, "missing \":port\"; port must be 1..65535");
    return host_valid(addr.substr(0, colon), for_bind, why) && port_valid(addr.substr(colon + 1), for_bind, why);
}

} // namespace

bool config_endpoint_valid(const std::string & ep, bool for_bind, std::string & why) {
    for (char c : ep)
        if ((unsigned char) c < 0x20 || c == 0x7f) return fail(why, "the endpoint contains a control character (" + shown_char(c) + ")");
    if (ep.compare(0, 6, "ipc://") == 0) return ipc_path_valid(ep.substr(6), why);
    if (ep.compare(0, 6, "tcp://") == 0) return tcp_address_valid(ep.substr(6), for_bind, why);
    return fail(why, "unknown transport (tcp:// or ipc://)");
}

} // namespace moezip
