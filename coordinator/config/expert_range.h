// moezip: sets of expert ids written as ranges ("0-3,8,10-11"), as the config file and the worker
// use them to say which experts a host owns. An expert id is the index into the third dimension of
// `blk.N.ffn_*_exps.weight` [n_embd, n_ff, n_expert] (src/llama-graph.cpp, build_moe_ffn), 0-based.
#pragma once

#include "provider_map/status.h"

#include <string>
#include <vector>

namespace moezip {

/// Largest expert id a range may name (a sanity bound far above any real model's n_expert).
constexpr int expert_id_max = 65535;

/// Inclusive range of expert ids [first, last], 0 <= first <= last <= expert_id_max.
struct ExpertRange {
    int first = 0;
    int last  = 0;
    bool operator==(const ExpertRange & o) const { return first == o.first && last == o.last; }
};

/// Parses "a-b,c,..." (spaces around items allowed; "" = the empty set) into ranges in the order
/// written. Errors (invalid_argument, message without location, for example
/// `"5-2": range start 5 is above its end 2`): malformed items, negative or too large ids,
/// a > b, and ranges of one list that overlap each other.
Status expert_ranges_parse(const std::string & text, std::vector<ExpertRange> & out);

/// Canonical text of a set: "0-3,8" (single ids without "-"); "" for the empty set.
std::string expert_ranges_format(const std::vector<ExpertRange> & ranges);

/// True when `expert` lies in one of the ranges.
bool expert_ranges_contains(const std::vector<ExpertRange> & ranges, int expert);

/// First expert id present in both sets, or -1 when they are disjoint.
int expert_ranges_first_common(const std::vector<ExpertRange> & a, const std::vector<ExpertRange> & b);

/// Number of expert ids in the set.
int expert_ranges_count(const std::vector<ExpertRange> & ranges);

} // namespace moezip
