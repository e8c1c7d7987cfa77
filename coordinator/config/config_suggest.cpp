// moezip: "did you mean" for unknown config keys.
#include "coordinator/config/config_internal.h"

#include <algorithm>
#include <string>
#include <vector>

namespace moezip {

namespace {

// Levenshtein distance, for "did you mean" on unknown keys.
size_t edit_distance(const std::string & a, const std::string & b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

// How likely `known` is what was meant by `typed`: 1 when one is a prefix of the other ("timeout",
// "timeout_ms"), else the edit distance. Suggestions need a score <= 2.
size_t misspelling_score(const std::string & typed, const std::string & known) {
    size_t n = std::min(typed.size(), known.size());
    if (n >= 4 && typed.compare(0, n, known, 0, n) == 0) return 1;
    return edit_distance(typed, known);
}

} // namespace

std::string config_did_you_mean(const std::string & typed, const std::vector<const char *> & known) {
    std::string guess;
    size_t best = 3;
    for (const char * name : known) {
        size_t score = misspelling_score(typed, name);
        if (score < best) {
            best = score;
            guess = std::string("did you mean \"") + name + "\"? ";
        }
    }
    return guess;
}

} // namespace moezip
