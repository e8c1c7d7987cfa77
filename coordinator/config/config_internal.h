// moezip: pieces shared by the config_*.cpp files (not part of the public API; see config.h).
#pragma once

#include "coordinator/base/quote.h"
#include "coordinator/config/config.h"
#include "coordinator/config/config_endpoint.h"

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
/// "FILE:LINE:COL: " ("FILE:LINE: " when col <= 0, position in the line unknown) + moezip's own wording (duplicate table/key and out-of-range integers are
/// re-derived from the source text, because toml++ 3.3.0 garbles them), plus the offending line.
std::string config_syntax_message(const std::string & text, const std::string & file,
                                  int line, int col, const std::string & description);

/// Where config_precheck stopped and why.
struct ConfigPrecheckIssue {
    int line = 0;             ///< 1-based
    int key_line = 0;         ///< line of the key-value pair the problem is in (may start above), 0: none
    int col = 0;              ///< 1-based, in code points (as toml++ counts)
    size_t offset = 0;        ///< byte offset of the offending character
    std::string description;  ///< what is wrong, without file or position
    bool not_utf8 = false;    ///< the bytes there are not valid UTF-8
};

/// A lexical check of the whole text before toml++ 3.3.0 sees it (config_precheck.cpp says why):
/// false, with the first offending position in `issue`, for any non-ASCII character outside strings
/// and comments (or after a backslash in a multi-line string), a table header whose name does not
/// start with a bare-key character or a quote ("[}"), a '}' where an array expects a value
/// ("[}", "[1, }"), a date-time without a digit after its 'T', a key of more than 16 dotted parts,
/// or arrays and inline tables nested more than 16 deep. Every input it passes can be parsed by toml++ 3.3.0 without ending the process.
bool config_precheck(const std::string & text, ConfigPrecheckIssue & issue);

/// The code point of the UTF-8 sequence at s[i] (len = its bytes), or -1 (len = 1) when the bytes
/// there are not valid UTF-8 (overlong, surrogate, above U+10FFFF, truncated).
long config_utf8_decode(const std::string & s, size_t i, size_t & len);

/// The message for a config_precheck issue: "FILE:LINE:COL: [KEY: ]not valid TOML (...) in line: ..."
/// (as config_syntax_message), or the UTF-8 message for invalid bytes.
std::string config_precheck_message(const std::string & text, const std::string & file, const ConfigPrecheckIssue & issue);

/// For tests: toml++ alone on `text` (no config_precheck), behind the guard that makes a failed
/// TOML_ASSERT an error: "" when it parses, else the message ("FILE:LINE: ..." for a failed check).
/// Never give it a non-ASCII character outside strings (config_precheck.cpp, rule 1).
std::string config_toml_only(const std::string & text, const std::string & name);

/// How many toml++ internal checks (TOML_ASSERT) failed in this process, including the repeated
/// ones that locate the line. config_precheck should keep this at 0; the fuzz target asserts it.
uint64_t config_toml_checks_failed();

/// Cross-field checks of a config whose fields are each valid (shares, ownership, endpoints).
/// Appends to `issues`.
void config_check_cross(const Config & cfg, std::vector<ConfigIssue> & issues);

/// "did you mean \"NAME\"? " for the known key closest to `typed` (a prefix of at least 4
/// characters, or at most 2 edits away), "" when none is close.
std::string config_did_you_mean(const std::string & typed, const std::vector<const char *> & known);

/// Shortest decimal text that reads back as exactly `v` ("0.5", "1", "0.10000000000000001" never).
std::string config_format_double(double v);

/// `s` as a TOML basic string with quotes ("a\"b"), control characters escaped (quote_text).
std::string config_quote(const std::string & s);

/// Line of a key path in cfg.lines, or `fallback` when the key was not written.
int config_line_of(const Config & cfg, const std::string & key, int fallback = 0);

} // namespace moezip
