#include "tools/moezip-report/compare.h"

#include <algorithm>

namespace moezip_report {

namespace {

std::string meaning(const std::string & schema) {
    return schema == schema_report ? "the hash of every graph's whole logits output"
                                   : "the hash of the logits row each step sampled from";
}

std::string shape(const LogitsEntry & e) {
    if (e.n_vocab < 0 && e.rows < 0) return "";
    std::string s = " (";
    if (e.rows >= 0) s += "rows " + std::to_string(e.rows) + (e.n_vocab >= 0 ? ", " : "");
    if (e.n_vocab >= 0) s += "n_vocab " + std::to_string(e.n_vocab);
    return s + ")";
}

std::string counts(const Document & a, const Document & b) {
    return "counts: " + a.path + " " + std::to_string(a.count) + ", " + b.path + " " + std::to_string(b.count) + "\n";
}

// Where the listed entries first differ: an index listed in one and not the other, or a hash.
// Returns false when every index listed in both agrees and the listings are the same length.
bool first_difference(const Document & a, const Document & b, size_t & ia, size_t & ib) {
    for (ia = 0, ib = 0; ia < a.entries.size() && ib < b.entries.size(); ++ia, ++ib) {
        const LogitsEntry & x = a.entries[ia];
        const LogitsEntry & y = b.entries[ib];
        if (x.index != y.index || x.xxh3 != y.xxh3) return true;
    }
    return ia < a.entries.size() || ib < b.entries.size();
}

std::string describe_difference(const Document & a, const Document & b, size_t ia, size_t ib) {
    const LogitsEntry * x = ia < a.entries.size() ? &a.entries[ia] : nullptr;
    const LogitsEntry * y = ib < b.entries.size() ? &b.entries[ib] : nullptr;
    uint64_t index = x && y ? std::min(x->index, y->index) : x ? x->index : y->index;
    std::string s = "differ: first difference at logits output " + std::to_string(index) + "\n";
    auto side = [&](const Document & d, const LogitsEntry * e) {
        if (e && e->index == index) return "  " + d.path + ": xxh3 " + hex16(e->xxh3) + shape(*e) + "\n";
        return "  " + d.path + ": " + (index < d.count ? "not listed" : "absent (only " + std::to_string(d.count) + " outputs)") + "\n";
    };
    return s + side(a, x) + side(b, y);
}

// Several engine contexts: each stream's (count, chain) must appear in the other run as often; the
// order in which contexts interleaved their graphs does not matter.
CompareResult compare_streams(const Document & a, const Document & b) {
    CompareResult r;
    auto sorted = [](std::vector<std::pair<uint64_t, uint64_t>> v) { std::sort(v.begin(), v.end()); return v; };
    const auto sa = sorted(a.streams), sb = sorted(b.streams);
    if (sa == sb && a.count == b.count) {
        r.code = exit_equal;
        r.out = "equal: " + std::to_string(a.count) + " logits outputs in " + std::to_string(sa.size()) +
                " streams (engine contexts), compared stream by stream\n";
        return r;
    }
    r.code = exit_differ;
    r.out = "differ: the runs' streams (engine contexts) are not the same sequences\n";
    for (const Document * d : {&a, &b}) {
        r.out += "  " + d->path + ":";
        for (const auto & s : d->streams) r.out += " [" + std::to_string(s.first) + " outputs, chain " + hex16(s.second) + "]";
        r.out += "\n";
    }
    r.out += counts(a, b);
    return r;
}

} // namespace

CompareResult compare_documents(const Document & a, const Document & b) {
    CompareResult r;
    if (a.schema != b.schema) {
        r.code = exit_error;
        r.notes = "cannot compare " + a.path + " (" + a.schema + ": " + meaning(a.schema) + ") with " + b.path + " (" +
                  b.schema + ": " + meaning(b.schema) + "): the sequences mean different things; compare two " +
                  schema_report + " reports or two " + schema_run + " outputs\n";
        return r;
    }
    for (const Document * d : {&a, &b}) {
        if (!d->complete) r.notes += "note: " + d->path + " is not complete (written before its run ended)\n";
        if (!d->chain_matches_entries) r.notes += "note: " + d->path + ": logits.chain_xxh3 does not match its graphs\n";
    }
    if (a.streams.size() > 1 || b.streams.size() > 1) {
        CompareResult s = compare_streams(a, b);
        s.notes = r.notes + s.notes;
        return s;
    }
    size_t ia = 0, ib = 0;
    bool differ = first_difference(a, b, ia, ib);
    if (!differ && a.count == b.count && a.chain == b.chain) {
        r.code = exit_equal;
        r.out = "equal: " + std::to_string(a.count) + " logits outputs, chain " + hex16(a.chain) + "\n";
        if (a.count == 0) r.notes += "note: neither file records any logits output\n";
        return r;
    }
    r.code = exit_differ;
    if (differ) r.out = describe_difference(a, b, ia, ib);
    else if (a.count != b.count) r.out = "differ: the first " + std::to_string(std::min(a.count, b.count)) + " listed outputs agree, the counts do not\n";
    else r.out = "differ: every listed output agrees but the chains differ (an unlisted output differs)\n";
    r.out += counts(a, b);
    r.out += "chains: " + hex16(a.chain) + " " + hex16(b.chain) + "\n";
    return r;
}

} // namespace moezip_report
