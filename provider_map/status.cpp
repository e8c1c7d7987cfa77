#include "provider_map/status.h"

namespace moezip {

const char * status_code_name(Status::Code code) {
    switch (code) {
        case Status::Code::ok:               return "ok";
        case Status::Code::invalid_argument: return "invalid argument";
        case Status::Code::not_found:        return "not found";
        case Status::Code::corruption:       return "corruption";
        case Status::Code::io_error:         return "io error";
        case Status::Code::unsupported:      return "unsupported";
        case Status::Code::timeout:          return "timeout";
        case Status::Code::mismatch:         return "mismatch";
    }
    return "unknown";
}

std::string Status::to_string() const {
    if (is_ok()) return "ok";
    return std::string(status_code_name(code_)) + ": " + message_;
}

} // namespace moezip
