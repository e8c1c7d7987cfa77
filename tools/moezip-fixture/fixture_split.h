// moezip-fixture: a model written as several GGUF files, as large models are published
// (model-00001-of-00003.gguf, ...). The convention is llama.cpp's: file names from
// llama_split_path (include/llama.h: "<prefix>-%05d-of-%05d.gguf", numbered from 1), the first file
// holding every metadata key, every file split.no / split.count / split.tensors.count
// (src/llama-model-loader.cpp finds the other files from the first one's name and checks them).
#pragma once

#include "provider_map/status.h"
#include "tools/moezip-fixture/fixture_meta.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moezip {

/// The files of a model cut into `n_split` files by size, as gguf-split --split-max-size does:
/// contiguous runs of the tensor plan, part k starting at the first tensor that starts at or after
/// k/n_split of the tensor data (so a layer's expert tensors may lie in two files), every part
/// holding at least one tensor. `bytes` are the tensors' sizes in plan order. `n_split` 1 gives
/// one part without split keys. Precondition: 1 <= n_split <= bytes.size().
std::vector<fixture_part> fixture_split_plan(const std::vector<uint64_t> & bytes, int64_t n_split);

/// The file names for `-o output`: output itself for one file; otherwise output without a trailing
/// ".gguf" as the prefix of llama_split_path's names (`m.gguf` -> `m-00001-of-00003.gguf`, ...).
std::vector<std::string> fixture_split_paths(const std::string & output, int64_t n_split);

/// Checks --split-files: 1..min(n_tensors, 65535) (split.count is a u16). Errors: invalid_argument.
Status fixture_split_validate(int64_t n_split, int64_t n_tensors);

} // namespace moezip
