// moezip: how a region's work is divided between this host and the workers.
#pragma once

#include "coordinator/config/config.h"

#include <cstdint>
#include <vector>

namespace moezip {

/// A contiguous block of rows [first, first + count).
struct RowBlock {
    int64_t first = 0;
    int64_t count = 0;
};

/// Rows mode: splits n_rows by shares (shares[0] = this host, then one per worker; they sum to 1).
/// Largest-remainder rounding of n_rows * share, so counts add up to n_rows exactly and a share of
/// 0 gets no rows. This host gets the first block, workers the following blocks in config order.
std::vector<RowBlock> split_rows(int64_t n_rows, const std::vector<double> & shares);

/// Consecutive blocks of `counts[i]` units each, the first starting at 0 (automatic shares).
std::vector<RowBlock> split_counts(const std::vector<int64_t> & counts);

/// Shard mode: splits n_ff into slices by shares (as split_rows) in whole blocks of `block` units
/// (the down weights' ggml_blck_size), so every slice starts and ends on a quantization block.
/// n_ff must be a multiple of block. A share too small for one block may get none.
std::vector<RowBlock> split_ff(int64_t n_ff, int64_t block, const std::vector<double> & shares);

/// Experts mode: owner of every expert id: -1 = this host (the coordinator) owns it, also when
/// workers hold replicas of it (experts.replicas); else i >= 0, the first worker that owns it.
/// Experts nobody owns get -2 (config_check_expert_coverage reports them before any dispatch).
/// So -1 means "resident here", >= 0 "this host may drop it" (memory release, model mapping).
std::vector<int> expert_owners(const Config & cfg, int n_expert);

/// Experts mode: every owner of every expert id, this host (-1) first, then workers in file order.
/// One owner each unless experts.replicas; empty for an expert nobody owns.
std::vector<std::vector<int>> expert_owner_sets(const Config & cfg, int n_expert);

} // namespace moezip
