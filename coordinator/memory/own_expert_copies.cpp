#include "coordinator/memory/own_expert_copies.h"

#include "coordinator/base/log.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace moezip {

namespace {

// True when t is [.., .., n_expert] in the dense GGUF layout ggml gives a new tensor of its type,
// with nothing the CPU backend attached (a repacked tensor's extra).
bool dense(const GgmlApi & api, const ggml_tensor * t) {
    if (t == nullptr || t->data == nullptr || t->extra != nullptr) return false;
    const size_t row = api.ggml_row_size(t->type, t->ne[0]);
    return t->nb[0] == api.ggml_type_size(t->type) && t->nb[1] == row && t->nb[2] == row * (size_t) t->ne[1] &&
           t->nb[3] == t->nb[2] * (size_t) t->ne[2];
}

} // namespace

const OwnExpertCopies::Copy * OwnExpertCopies::made_from(uint64_t key, const ExpertWeights & orig) const {
    auto it = copies_.find(key);
    if (it == copies_.end()) return nullptr;
    const Copy & c = *it->second;
    return c.src[0] == orig.gate_exps->data && c.src[1] == orig.up_exps->data && c.src[2] == orig.down_exps->data ? &c : nullptr;
}

void OwnExpertCopies::prepare(uint64_t key, const ExpertWeights & orig, const std::vector<bool> & own) {
    if (!not_copied_.empty()) return;
    const Copy * c = made_from(key, orig);
    if (c != nullptr && c->held == own) return;
    copies_.erase(key);  // the old copy goes first: one per key at any time
    auto fresh = std::make_unique<Copy>();
    if (!make(*fresh, orig, own)) return;
    copies_.emplace(key, std::move(fresh));
    max_bytes_ = std::max(max_bytes_, bytes());
}

const ExpertWeights * OwnExpertCopies::get(uint64_t key, const ExpertWeights & orig, const int32_t * ids, int64_t n_ids) const {
    const Copy * c = made_from(key, orig);
    if (c == nullptr) return nullptr;
    for (int64_t i = 0; i < n_ids; ++i)
        if (ids[i] < 0 || ids[i] >= (int64_t) c->held.size() || !c->held[ids[i]]) return nullptr;
    return &c->weights;
}

bool OwnExpertCopies::make(Copy & c, const ExpertWeights & orig, const std::vector<bool> & own) {
    const ggml_tensor * src[3] = {orig.gate_exps, orig.up_exps, orig.down_exps};
    for (const ggml_tensor * t : src) {
        if (!dense(api_, t)) {
            not_copied_ = std::string("the expert weights ") + (t && t->extra ? "are repacked by the CPU backend" : "are not densely laid out") +
                          ": computed where the engine put them";
            LOG_INFO("experts: %s", not_copied_.c_str());
            return false;
        }
        if (t->ne[2] != (int64_t) own.size()) return false;  // owners sized for another model: the caller's next call fixes it
    }
    const std::vector<MemoryMapping> maps = memory_mappings_parse(proc_self_maps());
    for (const ggml_tensor * t : src) {
        std::string file;
        Status st = file_backed_read_only(maps, t->data, api_.ggml_nbytes(t), file);
        if (!st) {
            // only a mapping whose pages can be dropped after the copy gains from one
            not_copied_ = st.message().find("anonymous memory") != std::string::npos
                              ? "the expert weights are in anonymous memory already (the engine ran with --no-mmap?)"
                              : "the mapped expert weights could not be given back after a copy: " + st.message();
            LOG_INFO("experts: computing this host's experts where the engine put them: %s", not_copied_.c_str());
            return false;
        }
    }
    std::vector<int> experts;
    for (size_t e = 0; e < own.size(); ++e)
        if (own[e]) experts.push_back((int) e);
    if (experts.empty()) return false;
    const auto t0 = std::chrono::steady_clock::now();
    c.held = own;
    c.weights = orig;
    for (int i = 0; i < 3; ++i) {
        const ggml_tensor * t = src[i];
        Status st = c.mem[i].reserve(api_.ggml_nbytes(t), std::string("a copy of ") + t->name);
        if (!st) {
            not_copied_ = st.message();
            LOG_ERROR("experts: %s; computing from the mapped weights", st.message().c_str());
            return false;
        }
        ByteRanges ranges;
        st = expert_slice_ranges(t, experts, ranges);
        if (!st) return false;
        for (const auto & r : ranges) {
            memcpy(static_cast<uint8_t *>(c.mem[i].data()) + r.first, static_cast<const uint8_t *>(t->data) + r.first, r.second - r.first);
            c.bytes += r.second - r.first;
        }
        // the mapped pages of what was just copied leave this process one tensor at a time: the
        // peak is one tensor's share above what it holds after
        dropped_.release({{t, ranges}}, "", "the mapped pages of this host's copied experts");
        c.src[i] = t->data;
        c.tensor[i] = *t;
        c.tensor[i].data = c.mem[i].data();
        c.tensor[i].buffer = nullptr;  // not the engine's buffer; no extra (dense() checked)
    }
    c.weights.gate_exps = &c.tensor[0];
    c.weights.up_exps = &c.tensor[1];
    c.weights.down_exps = &c.tensor[2];
    ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (layers_++ == 0)
        LOG_INFO("experts: this host's %zu experts per layer are computed from a copy in anonymous memory (%.1f MiB per layer); "
                 "their mapped pages are dropped", experts.size(), (double) c.bytes / (1 << 20));
    return true;
}

uint64_t OwnExpertCopies::bytes() const {
    uint64_t n = 0;
    for (const auto & kv : copies_) n += kv.second->bytes;
    return n;
}

void OwnExpertCopies::add_to(nlohmann::json & j) const {
    j["own_copy_bytes"] = bytes();
    j["own_copy_bytes_max"] = max_bytes_;
    j["own_copy_layers"] = layers_;
    j["own_copy_ms"] = ms_;
    j["own_copy_dropped_bytes"] = dropped_.advised_bytes;
    j["own_copy_rss_dropped_bytes"] = dropped_.rss_dropped_bytes;
    if (!not_copied_.empty()) j["own_copy_not_made"] = not_copied_;
    if (!dropped_.not_released.empty()) j["own_copy_mapped_pages_kept"] = dropped_.not_released;
}

} // namespace moezip
