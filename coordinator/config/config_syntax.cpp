// moezip: messages for TOML syntax errors. toml++ 3.3.0 (Debian) garbles some of its own texts
// (a duplicate quoted table name comes out doubled: ["rows"] twice -> '"rorows"') and reports an
// out-of-range integer at the end of its line, so the table name, key path and column are re-derived
// here from the source text; toml++'s wording is kept only as a detail for the remaining cases.
#include "coordinator/config/config_internal.h"

#include <cstdio>
#include <string>
#include <vector>

namespace moezip {

namespace {

std::string trim(const std::string & s) {
    size_t b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return "";
    size_t e = s.find_last_not_of(" \t\r");
    return s.substr(b, e - b + 1);
}

// Line `line` (1-based) of `text`, without its newline.
std::string source_line(const std::string & text, int line) {
    size_t pos = 0;
    for (int i = 1; i < line && pos != std::string::npos; ++i) {
        pos = text.find('\n', pos);
        if (pos != std::string::npos) ++pos;
    }
    if (pos == std::string::npos || pos > text.size()) return "";
    size_t end = text.find('\n', pos);
    return text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

// Splits a dotted TOML key ("a . \"b.c\"") into its parts without quotes; stops at `stop`
// (outside quotes) and returns the position there in `end`.
std::string dotted_key(const std::string & s, size_t start, char stop, size_t & end) {
    std::string out, part;
    char quote = 0;
    size_t i = start;
    for (; i < s.size(); ++i) {
        char c = s[i];
        if (quote) { if (c == quote) quote = 0; else part += c; continue; }
        if (c == '"' || c == '\'') { quote = c; continue; }
        if (c == stop || c == '#') break;
        if (c == '.') { out += (out.empty() ? "" : ".") + trim(part); part.clear(); continue; }
        part += c;
    }
    end = i;
    std::string last = trim(part);
    if (!last.empty()) out += (out.empty() ? "" : ".") + last;
    return out;
}

// A table header line: its name and whether it is "[[...]]". False when the line is no header.
bool header_of(const std::string & raw, std::string & name, bool & is_array) {
    std::string s = trim(raw);
    if (s.empty() || s[0] != '[') return false;
    is_array = s.size() > 1 && s[1] == '[';
    size_t end = 0;
    name = dotted_key(s, is_array ? 2 : 1, ']', end);
    return true;
}

// The key path of the table in force at `line`: "rows", "worker[1]" or "" (top level).
// One pass over the lines before it (a 1 MiB file of short lines took minutes line by line).
std::string table_at(const std::string & text, int line) {
    std::string current;
    std::vector<std::pair<std::string, int>> array_counts;
    size_t pos = 0;
    for (int l = 1; l < line && pos < text.size(); ++l) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string name;
        bool is_array = false;
        bool header = header_of(text.substr(pos, end - pos), name, is_array);
        pos = end + 1;
        if (!header) continue;
        if (!is_array) { current = name; continue; }
        int n = 0;
        for (auto & ac : array_counts) if (ac.first == name) n = ++ac.second;
        if (n == 0) array_counts.push_back({name, n = 1});
        current = name + "[" + std::to_string(n - 1) + "]";
    }
    return current;
}

// Key path of the key-value pair on `line` ("dispatch.timeout_ms"), "" when there is none.
std::string key_path_at(const std::string & text, int line) {
    std::string src = source_line(text, line);
    size_t end = 0;
    std::string key = dotted_key(src, 0, '=', end);
    if (end >= src.size() || src[end] != '=' || key.empty()) return "";
    std::string table = table_at(text, line);
    return table.empty() ? key : table + "." + key;
}

int first_column(const std::string & src) {
    size_t b = src.find_first_not_of(" \t");
    return b == std::string::npos ? 1 : (int) b + 1;
}

// The line for a message: trimmed, control characters and bytes that are not UTF-8 as '?', at most
// 80 characters.
std::string shown_line(const std::string & src) {
    std::string s = trim(src);
    std::vector<std::string> chars;
    for (size_t i = 0, len = 1; i < s.size(); i += len) {
        long cp = config_utf8_decode(s, i, len);
        chars.push_back(cp < 0x20 || cp == 0x7f ? std::string("?") : s.substr(i, len));
    }
    std::string clean;
    for (size_t k = 0; k < chars.size() && (chars.size() <= 80 || k < 77); ++k) clean += chars[k];
    return chars.size() > 80 ? clean + "..." : clean;
}

// A key path for a message, at most 80 characters.
std::string shown_key(const std::string & key) {
    return key.size() > 80 ? key.substr(0, 77) + "..." : key;
}

// toml++'s description without its "Error while parsing " prefix, on one line: toml++ echoes what
// it read, line breaks included ("expected 'true', saw 'tr<LF>'"), and a message is one line per problem.
std::string toml_detail(const std::string & d) {
    const std::string prefix = "Error while parsing ";
    const size_t from = d.compare(0, prefix.size(), prefix) == 0 ? prefix.size() : 0;
    std::string out;
    for (size_t i = from; i < d.size(); ++i) {
        const unsigned char c = (unsigned char) d[i];
        if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7f) { char e[8]; snprintf(e, sizeof e, "\\u%04x", c); out += e; }
        else out += (char) c;
    }
    return out;
}

std::string utf8_message(const std::string & where, int col) {
    return where + std::to_string(col) + ": not a UTF-8 text file (invalid byte sequence); expected TOML";
}

} // namespace

std::string config_syntax_message(const std::string & text, const std::string & file,
                                  int line, int col, const std::string & description) {
    std::string src = source_line(text, line);
    std::string where = file + ":" + std::to_string(line) + ":";
    std::string header;
    bool is_array = false;
    bool is_header = header_of(src, header, is_array);
    if (description.find("cannot redefine existing") != std::string::npos && is_header) {
        std::string shown = is_array ? "[[" + header + "]]" : "[" + header + "]";
        return where + std::to_string(first_column(src)) + ": " + header + ": duplicate table " + shown +
               " (the name is already defined above, as a table, array or key)";
    }
    if (description.find("cannot redefine existing") != std::string::npos) {
        std::string key = key_path_at(text, line);
        if (!key.empty()) {
            return where + std::to_string(first_column(src)) + ": " + key +
                   ": duplicate key (already set above in the same table)";
        }
    }
    if (description.find("not representable in 64 bits") != std::string::npos) {
        size_t q1 = description.find('\'');
        size_t q2 = q1 == std::string::npos ? q1 : description.find('\'', q1 + 1);
        std::string token = q2 == std::string::npos ? "" : description.substr(q1 + 1, q2 - q1 - 1);
        size_t at = token.empty() ? std::string::npos : src.find(token);
        int token_col = at == std::string::npos ? col : (int) at + 1;
        std::string key = key_path_at(text, line);
        return where + std::to_string(token_col) + ": " + (key.empty() ? "" : key + ": ") +
               "integer " + (token.empty() ? "value" : token) + " does not fit in 64 bits";
    }
    if (description.find("invalid utf-8") != std::string::npos) return utf8_message(where, col);
    std::string key = shown_key(key_path_at(text, line));
    return where + (col > 0 ? std::to_string(col) + ":" : "") + " " + (key.empty() ? "" : key + ": ") +
           "not valid TOML (" + toml_detail(description) + ") in line: " + shown_line(src);
}

std::string config_precheck_message(const std::string & text, const std::string & file, const ConfigPrecheckIssue & issue) {
    std::string where = file + ":" + std::to_string(issue.line) + ":";
    if (issue.not_utf8) return utf8_message(where, issue.col);
    std::string key = issue.key_line > 0 ? shown_key(key_path_at(text, issue.key_line)) : "";
    return where + std::to_string(issue.col) + ": " + (key.empty() ? "" : key + ": ") + "not valid TOML (" +
           issue.description + ") in line: " + shown_line(source_line(text, issue.line));
}

} // namespace moezip
