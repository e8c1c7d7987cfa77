#include "tools/moezip-fixture/fixture_split.h"

#include "llama.h"

#include <algorithm>
#include <vector>

namespace moezip {

std::vector<fixture_part> fixture_split_plan(const std::vector<uint64_t> & bytes, int64_t n_split) {
    const int64_t n = (int64_t) bytes.size();
    std::vector<uint64_t> start(bytes.size() + 1, 0);  // start[i]: data before tensor i
    for (size_t i = 0; i < bytes.size(); ++i) start[i + 1] = start[i] + bytes[i];
    std::vector<int64_t> first((size_t) n_split + 1, n);
    first[0] = 0;
    for (int64_t k = 1; k < n_split; ++k) {
        const uint64_t at = start[(size_t) n] / (uint64_t) n_split * (uint64_t) k;
        int64_t i = first[(size_t) k - 1] + 1;  // at least one tensor in the previous part
        while (i < n && start[(size_t) i] < at) ++i;
        first[(size_t) k] = std::min(i, n - (n_split - k));  // and at least one left for each later part
    }
    std::vector<fixture_part> parts;
    for (int64_t k = 0; k < n_split; ++k) {
        fixture_part p;
        p.no = k;
        p.count = n_split;
        p.first = first[(size_t) k];
        p.n = first[(size_t) k + 1] - p.first;
        p.n_total = n;
        parts.push_back(p);
    }
    return parts;
}

std::vector<std::string> fixture_split_paths(const std::string & output, int64_t n_split) {
    if (n_split <= 1) return {output};
    const std::string ext = ".gguf";
    std::string prefix = output;
    if (prefix.size() > ext.size() && prefix.compare(prefix.size() - ext.size(), ext.size(), ext) == 0)
        prefix.resize(prefix.size() - ext.size());
    std::vector<std::string> paths;
    std::vector<char> buf(prefix.size() + 64);
    for (int64_t k = 0; k < n_split; ++k) {
        const int32_t n = llama_split_path(buf.data(), buf.size(), prefix.c_str(), (int32_t) k, (int32_t) n_split);
        paths.emplace_back(buf.data(), (size_t) std::max(n, 0));
    }
    return paths;
}

Status fixture_split_validate(int64_t n_split, int64_t n_tensors) {
    const int64_t hi = std::min<int64_t>(n_tensors, 65535);
    if (n_split >= 1 && n_split <= hi) return Status::ok();
    return Status::invalid_argument("--split-files must be in 1.." + std::to_string(hi) + " (the model has " +
                                    std::to_string(n_tensors) + " tensors), got " + std::to_string(n_split));
}

} // namespace moezip
