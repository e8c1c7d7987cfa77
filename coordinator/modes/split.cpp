#include "coordinator/modes/split.h"

#include <algorithm>
#include <cmath>

namespace moezip {

std::vector<RowBlock> split_rows(int64_t n_rows, const std::vector<double> & shares) {
    const size_t n = shares.size();
    std::vector<RowBlock> blocks(n);
    std::vector<std::pair<double, size_t>> remainders;
    int64_t assigned = 0;
    for (size_t i = 0; i < n; ++i) {
        double exact = n_rows * shares[i];
        blocks[i].count = (int64_t) std::floor(exact);
        assigned += blocks[i].count;
        if (shares[i] > 0) remainders.push_back({exact - (double) blocks[i].count, i});
    }
    // the rows lost to flooring go to the largest remainders (ties: the earlier block)
    std::stable_sort(remainders.begin(), remainders.end(),
                     [](const std::pair<double, size_t> & a, const std::pair<double, size_t> & b) { return a.first > b.first; });
    for (size_t j = 0; assigned < n_rows && !remainders.empty(); j = (j + 1) % remainders.size()) {
        ++blocks[remainders[j].second].count;
        ++assigned;
    }
    int64_t first = 0;
    for (RowBlock & b : blocks) {
        b.first = first;
        first += b.count;
    }
    return blocks;
}

std::vector<RowBlock> split_counts(const std::vector<int64_t> & counts) {
    std::vector<RowBlock> blocks(counts.size());
    int64_t first = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
        blocks[i] = {first, counts[i]};
        first += counts[i];
    }
    return blocks;
}

std::vector<RowBlock> split_ff(int64_t n_ff, int64_t block, const std::vector<double> & shares) {
    std::vector<RowBlock> slices = split_rows(n_ff / block, shares);
    for (RowBlock & s : slices) {
        s.first *= block;
        s.count *= block;
    }
    return slices;
}

std::vector<int> expert_owners(const Config & cfg, int n_expert) {
    std::vector<int> owner(n_expert, -2);
    const std::vector<std::vector<int>> sets = expert_owner_sets(cfg, n_expert);
    for (int e = 0; e < n_expert; ++e)
        if (!sets[e].empty()) owner[e] = sets[e][0];
    return owner;
}

std::vector<std::vector<int>> expert_owner_sets(const Config & cfg, int n_expert) {
    std::vector<std::vector<int>> sets(n_expert > 0 ? n_expert : 0);
    for (int e = 0; e < n_expert; ++e) {
        if (expert_ranges_contains(cfg.experts.local, e)) sets[e].push_back(-1);
        for (size_t w = 0; w < cfg.workers.size(); ++w)
            if (expert_ranges_contains(cfg.workers[w].experts, e)) sets[e].push_back((int) w);
    }
    return sets;
}

} // namespace moezip
