// moezip: Status, a success-or-error value (in the manner of leveldb::Status).
// Every fallible function in the core returns one instead of throwing, so nothing reachable
// from an engine hook can let an exception or an abort reach the host process.
#pragma once

#include <string>
#include <utility>

namespace moezip {

class Status {
public:
    /// Kinds of failure; `message()` carries the human-readable detail.
    enum class Code { ok, invalid_argument, not_found, corruption, io_error, unsupported, timeout, mismatch };

    Status() = default;
    static Status ok() { return Status(); }
    static Status invalid_argument(std::string m) { return Status(Code::invalid_argument, std::move(m)); }
    static Status not_found(std::string m)        { return Status(Code::not_found, std::move(m)); }
    static Status corruption(std::string m)       { return Status(Code::corruption, std::move(m)); }
    static Status io_error(std::string m)         { return Status(Code::io_error, std::move(m)); }
    static Status unsupported(std::string m)      { return Status(Code::unsupported, std::move(m)); }
    static Status timeout(std::string m)          { return Status(Code::timeout, std::move(m)); }
    static Status mismatch(std::string m)         { return Status(Code::mismatch, std::move(m)); }

    bool is_ok() const { return code_ == Code::ok; }
    explicit operator bool() const { return is_ok(); }
    Code code() const { return code_; }
    const std::string & message() const { return message_; }
    /// "ok" or "<kind>: <message>".
    std::string to_string() const;

private:
    Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
    Code code_ = Code::ok;
    std::string message_;
};

const char * status_code_name(Status::Code code);

} // namespace moezip
