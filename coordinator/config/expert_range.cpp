#include "coordinator/config/expert_range.h"

#include "coordinator/base/quote.h"

#include <algorithm>
#include <cctype>

namespace moezip {

static std::string trim(const std::string & s) {
    size_t b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    size_t e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
}

// Parses a non-negative decimal id (digits only) into `out`; false when malformed or too large.
static bool parse_id(const std::string & s, int & out) {
    if (s.empty() || s.size() > 6) return false;
    for (char c : s) if (!isdigit((unsigned char) c)) return false;
    out = std::stoi(s);
    return out <= expert_id_max;
}

static Status parse_item(const std::string & item, ExpertRange & r) {
    if (item.empty()) return Status::invalid_argument("empty item (two commas, or a comma at an end)");
    size_t dash = item.find('-', 1);   // from 1: a leading '-' is a negative number, not a range
    std::string a = trim(item.substr(0, dash));
    std::string b = dash == std::string::npos ? a : trim(item.substr(dash + 1));
    if (!a.empty() && a[0] == '-') return Status::invalid_argument(quote_text(item) + ": expert ids are non-negative");
    if (!parse_id(a, r.first) || !parse_id(b, r.last)) {
        return Status::invalid_argument(quote_text(item) + ": expected an expert id 0.." +
                                        std::to_string(expert_id_max) + " or a range \"a-b\"");
    }
    if (r.first > r.last) {
        return Status::invalid_argument(quote_text(item) + ": range start " + std::to_string(r.first) +
                                        " is above its end " + std::to_string(r.last));
    }
    return Status::ok();
}

Status expert_ranges_parse(const std::string & text, std::vector<ExpertRange> & out) {
    out.clear();
    if (trim(text).empty()) return Status::ok();
    size_t pos = 0;
    while (true) {
        size_t comma = text.find(',', pos);
        ExpertRange r;
        Status st = parse_item(trim(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)), r);
        if (!st) return st;
        int common = expert_ranges_first_common(out, {r});
        if (common >= 0) {
            return Status::invalid_argument("expert " + std::to_string(common) + " is listed twice");
        }
        out.push_back(r);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return Status::ok();
}

std::string expert_ranges_format(const std::vector<ExpertRange> & ranges) {
    std::string s;
    for (const auto & r : ranges) {
        if (!s.empty()) s += ",";
        s += std::to_string(r.first);
        if (r.last != r.first) s += "-" + std::to_string(r.last);
    }
    return s;
}

bool expert_ranges_contains(const std::vector<ExpertRange> & ranges, int expert) {
    for (const auto & r : ranges) if (expert >= r.first && expert <= r.last) return true;
    return false;
}

int expert_ranges_first_common(const std::vector<ExpertRange> & a, const std::vector<ExpertRange> & b) {
    int best = -1;
    for (const auto & ra : a) {
        for (const auto & rb : b) {
            int lo = std::max(ra.first, rb.first);
            int hi = std::min(ra.last, rb.last);
            if (lo <= hi && (best < 0 || lo < best)) best = lo;
        }
    }
    return best;
}

int expert_ranges_count(const std::vector<ExpertRange> & ranges) {
    int n = 0;
    for (const auto & r : ranges) n += r.last - r.first + 1;
    return n;
}

} // namespace moezip
