// moezip: pieces shared by the config_*.cpp files (not part of the public API; see config.h).
#pragma once

#include "coordinator/config/config.h"

#include <string>
#include <vector>

namespace moezip {

/// One problem found in a config file; sorted by line before they are reported.
struct ConfigIssue {
    int line = 0;        ///< 1-based; 0 = no line (only for whole-file problems)
    std::string text;    ///< "KEY: expected ..., got ..." (without the file name)
};

/// "FILE:LINE: TEXT" lines of the issues in line order (stable for one line), joined by '\n'.
std::string config_issues_join(const std::string & file, std::vector<ConfigIssue> issues);

/// The message for a toml++ syntax error at line:col with toml++'s `description`:
/// "FILE:LINE:COL: " + moezip's own wording (duplicate table/key and out-of-range integers are
/// re-derived from the source text, because toml++ 3.3.0 garbles them), plus the offending line.
std::string config_syntax_message(const std::string & text, const std::string & file,
                                  int line, int col, const std::string & description);

/// Rejects what toml++ 3.3.0 does not survive: a table header whose name starts with a character
/// that is neither a bare-key character nor a quote (for example "[}" or "[.]") trips an assert
/// in its parse_key() (parser.inl) and aborts the process. Lines inside multi-line strings or arrays
/// that look like such a header are rejected too; no valid moezip config contains one.
/// False with `message` = "FILE:LINE:COL: ..." when such a line exists.
bool config_precheck_headers(const std::string & text, const std::string & file, std::string & message);

/// Cross-field checks of a config whose fields are each valid (shares, ownership, endpoints).
/// Appends to `issues`.
void config_check_cross(const Config & cfg, std::vector<ConfigIssue> & issues);

/// Checks an endpoint: "tcp://host:port" (port 1..65535) or "ipc:///path". With `for_bind`,
/// host "*" and port "*" are allowed too. On failure `why` says what is wrong.
bool config_endpoint_valid(const std::string & endpoint, bool for_bind, std::string & why);

/// Shortest decimal text that reads back as exactly `v` ("0.5", "1", "0.10000000000000001" never).
std::string config_format_double(double v);

/// `s` as a TOML basic string with quotes ("a\"b").
std::string config_quote(const std::string & s);

/// Line of a key path in cfg.lines, or `fallback` when the key was not written.
int config_line_of(const Config & cfg, const std::string & key, int fallback = 0);

} // namespace moezip
