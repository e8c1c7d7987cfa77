#include "tools/moezip-report/report_file.h"

#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

using moezip::Status;

namespace moezip_report {

const char * const schema_report = "moezip-report/1";
const char * const schema_run = "moezip-run/1";

std::string hex16(uint64_t v) {
    char buf[17];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long) v);
    return buf;
}

uint64_t logits_chain(const std::vector<LogitsEntry> & entries) {
    uint64_t chain = 0;
    for (const LogitsEntry & e : entries) chain = XXH3_64bits_withSeed(&e.xxh3, sizeof e.xxh3, chain);
    return chain;
}

namespace {

// Parses exactly 16 hex digits.
bool parse_hex16(const nlohmann::json & j, uint64_t & out) {
    if (!j.is_string()) return false;
    const std::string & s = j.get_ref<const std::string &>();
    if (s.size() != 16) return false;
    out = 0;
    for (char c : s) {
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        out = out << 4 | (uint64_t) d;
    }
    return true;
}

Status bad(const Document & d, const std::string & what) {
    return Status::corruption(d.path + ": " + what);
}

std::string shown(const nlohmann::json & j) {
    std::string s = j.dump();
    return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

int64_t int_or(const nlohmann::json & obj, const char * key) {
    auto it = obj.find(key);
    return it != obj.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

Status load_report_logits(Document & d) {
    auto it = d.json.find("logits");
    if (it == d.json.end() || !it->is_object()) return bad(d, "no \"logits\" object");
    const nlohmann::json & lg = *it;
    auto count = lg.find("count");
    if (count == lg.end() || !count->is_number_unsigned()) return bad(d, "logits.count: expected a non-negative integer");
    d.count = count->get<uint64_t>();
    if (!lg.contains("chain_xxh3") || !parse_hex16(lg["chain_xxh3"], d.chain)) {
        return bad(d, "logits.chain_xxh3: expected 16 hex digits");
    }
    auto graphs = lg.find("graphs");
    if (graphs == lg.end() || !graphs->is_array()) return bad(d, "logits.graphs: expected an array");
    for (size_t i = 0; i < graphs->size(); ++i) {
        const nlohmann::json & g = (*graphs)[i];
        std::string at = "logits.graphs[" + std::to_string(i) + "]";
        LogitsEntry e;
        if (!g.is_object() || !g.contains("index") || !g["index"].is_number_unsigned()) return bad(d, at + ".index: expected a non-negative integer");
        e.index = g["index"].get<uint64_t>();
        if (!g.contains("xxh3") || !parse_hex16(g["xxh3"], e.xxh3)) return bad(d, at + ".xxh3: expected 16 hex digits");
        if (!d.entries.empty() && e.index <= d.entries.back().index) return bad(d, at + ".index: not increasing");
        if (e.index >= d.count) return bad(d, at + ".index: " + std::to_string(e.index) + " is not below logits.count " + std::to_string(d.count));
        e.n_vocab = int_or(g, "n_vocab");
        e.rows = int_or(g, "rows");
        e.stream = g.contains("stream") && g["stream"].is_number_unsigned() ? g["stream"].get<uint64_t>() : 0;
        d.entries.push_back(e);
    }
    auto streams = lg.find("streams");
    if (streams != lg.end()) {
        if (!streams->is_array()) return bad(d, "logits.streams: expected an array");
        for (size_t i = 0; i < streams->size(); ++i) {
            const nlohmann::json & st = (*streams)[i];
            std::string at = "logits.streams[" + std::to_string(i) + "]";
            uint64_t chain = 0;
            if (!st.is_object() || !st.contains("count") || !st["count"].is_number_unsigned()) return bad(d, at + ".count: expected a non-negative integer");
            if (!st.contains("chain_xxh3") || !parse_hex16(st["chain_xxh3"], chain)) return bad(d, at + ".chain_xxh3: expected 16 hex digits");
            d.streams.push_back({st["count"].get<uint64_t>(), chain});
        }
    }
    if (d.entries.size() == d.count) d.chain_matches_entries = logits_chain(d.entries) == d.chain;
    auto complete = d.json.find("complete");
    d.complete = complete == d.json.end() || !complete->is_boolean() || complete->get<bool>();
    return Status::ok();
}

Status load_run_logits(Document & d) {
    auto it = d.json.find("logits_xxh3");
    if (it == d.json.end() || !it->is_array()) return bad(d, "logits_xxh3: expected an array of hex strings");
    for (size_t i = 0; i < it->size(); ++i) {
        LogitsEntry e;
        e.index = i;
        if (!parse_hex16((*it)[i], e.xxh3)) {
            return bad(d, "logits_xxh3[" + std::to_string(i) + "]: expected 16 hex digits, got " + shown((*it)[i]));
        }
        e.n_vocab = int_or(d.json, "n_vocab");
        d.entries.push_back(e);
    }
    d.count = d.entries.size();
    d.chain = logits_chain(d.entries);
    return Status::ok();
}

// "[json.exception.parse_error.101] parse error at line 1, column 1: ..." -> "parse error at ...".
std::string clean_json_error(const std::string & what) {
    size_t close = what.rfind("] ", what.find("parse error"));
    return close == std::string::npos ? what : what.substr(close + 2);
}

} // namespace

Status document_load(const std::string & path, Document & out) {
    out = Document();
    out.path = path;
    std::ifstream f(path, std::ios::binary);
    if (!f) return Status::io_error(path + ": cannot read: " + strerror(errno));
    std::stringstream ss;
    ss << f.rdbuf();
    if (f.bad()) return Status::io_error(path + ": cannot read: " + strerror(errno));
    try {
        out.json = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception & e) {
        return Status::corruption(path + ": not JSON: " + clean_json_error(e.what()));
    }
    if (!out.json.is_object()) return bad(out, "not a JSON object");
    auto schema = out.json.find("schema");
    if (schema == out.json.end() || !schema->is_string()) {
        return bad(out, std::string("no \"schema\" string (expected \"") + schema_report + "\" or \"" + schema_run + "\")");
    }
    out.schema = schema->get<std::string>();
    if (out.schema == schema_report) return load_report_logits(out);
    if (out.schema == schema_run) return load_run_logits(out);
    return bad(out, "unknown schema \"" + out.schema + "\" (expected \"" + schema_report + "\" or \"" + schema_run + "\")");
}

} // namespace moezip_report
