#include "coordinator/memory/own_expert_copies.h"

#include "coordinator/base/log.h"
#include "coordinator/base/test_fault.h"
#include "coordinator/memory/page_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace moezip {

namespace {

constexpr int64_t kMemoryMargin = 512ll << 20;  // left to everything else when a layer's copy is made

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
    if (c != nullptr && c->wanted == own) return;  // made, or decided against, for these weights
    copies_.erase(key);  // the old copy goes first: one per key at any time
    auto fresh = std::make_unique<Copy>();
    fresh->src[0] = orig.gate_exps->data;
    fresh->src[1] = orig.up_exps->data;
    fresh->src[2] = orig.down_exps->data;
    fresh->wanted = own;
    if (std::none_of(own.begin(), own.end(), [](bool b) { return b; })) ++without_own_;
    else make(*fresh, orig, own);  // bytes stays 0 when no copy is made
    copies_.emplace(key, std::move(fresh));  // remembered either way: decided once per plan
    max_bytes_ = std::max(max_bytes_, bytes());
}

const std::vector<bool> * OwnExpertCopies::held(uint64_t key, const ExpertWeights & orig) const {
    const Copy * c = made_from(key, orig);
    return c != nullptr && c->bytes > 0 ? &c->wanted : nullptr;
}

ExpertWeights OwnExpertCopies::weights(uint64_t key, const ExpertWeights & orig) const {
    ExpertWeights w = orig;
    const Copy * c = made_from(key, orig);
    if (c != nullptr && c->bytes > 0) {
        w.gate_exps = &c->tensor[0];
        w.up_exps = &c->tensor[1];
        w.down_exps = &c->tensor[2];
    }
    return w;
}

void OwnExpertCopies::skip(const std::string & why) {
    if (skipped_++ == 0) {
        skipped_why_ = why;
        LOG_INFO("experts: computing a layer's own experts from the mapping: %s", why.c_str());
    }
}

void OwnExpertCopies::refuse(const std::string & why) {
    if (layers_ > 0) {  // layers copied before keep their copies: only this one and later ones are refused
        skip(why);
        return;
    }
    not_copied_ = why;
    LOG_INFO("experts: computing this host's experts where the engine put them: %s", why.c_str());
}

bool OwnExpertCopies::make(Copy & c, const ExpertWeights & orig, const std::vector<bool> & own) {
    const ggml_tensor * src[3] = {orig.gate_exps, orig.up_exps, orig.down_exps};
    for (const ggml_tensor * t : src) {
        if (!gguf_dense_layout(api_, t)) {
            skip(std::string(t->name) + (t->extra ? " is repacked by the CPU backend" : " is not densely laid out"));
            return false;
        }
        if (t->ne[2] != (int64_t) own.size()) {
            skip(std::string(t->name) + " has " + std::to_string(t->ne[2]) + " experts, the owners " + std::to_string(own.size()));
            return false;
        }
    }
    // what holds for the whole model file: before any copy is made, decided once for the run;
    // after (a model split over files, one of them elsewhere), for this layer
    const std::vector<MemoryMapping> maps = memory_mappings_parse(proc_self_maps());
    std::string file, stays, why;
    for (const ggml_tensor * t : src) {
        Status st = file_backed_read_only(maps, t->data, api_.ggml_nbytes(t), file);
        if (!st) {
            // only a mapping whose pages can be dropped after the copy gains from one
            why = st.message().find("anonymous memory") != std::string::npos
                      ? "the expert weights are in anonymous memory already (the engine ran with --no-mmap?)"
                      : "the mapped expert weights could not be given back after a copy: " + st.message();
        } else if (!(stays = file_held_in_memory(file)).empty()) {
            why = stays + ": its pages stay in memory when dropped, so a copy would hold them twice";
        } else if (proc_status_kib("VmLck") > 0) {
            why = "memory is locked (--mlock?): the mapped pages could not be dropped, a copy would hold them twice";
        }
        if (!why.empty()) {
            refuse(why);
            return false;
        }
    }
    std::vector<int> experts;
    for (size_t e = 0; e < own.size(); ++e)
        if (own[e]) experts.push_back((int) e);
    const uint64_t need = (uint64_t) experts.size() * (src[0]->nb[2] + src[1]->nb[2] + src[2]->nb[2]);
    const int64_t avail_kib = proc_file_kib("/proc/meminfo", "MemAvailable");
    const int64_t avail = avail_kib < 0 ? -1 : avail_kib * 1024;
    if (avail >= 0 && (int64_t) need + kMemoryMargin > avail) {
        skip("its copy (" + std::to_string(need >> 20) + " MiB) does not fit in MemAvailable (" + std::to_string(avail >> 20) +
             " MiB, less a 512 MiB margin)");
        return false;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 3; ++i) {
        const ggml_tensor * t = src[i];
        Status st = c.mem[i].reserve(api_.ggml_nbytes(t), std::string("a copy of ") + t->name);
        ByteRanges ranges;
        if (st) st = expert_slice_ranges(t, experts, ranges);
        if (!st) {
            skip(st.message());
            for (AnonymousMemory & m : c.mem) m.reset();
            return false;
        }
        for (const auto & r : ranges)
            memcpy(static_cast<uint8_t *>(c.mem[i].data()) + r.first, static_cast<const uint8_t *>(t->data) + r.first, r.second - r.first);
        // the mapped pages of what was just copied leave this process one tensor at a time: the
        // peak is one tensor's share above what it holds after
        if (!dropped_.release({{t, ranges}}, "", "the mapped pages of this host's copied experts")) {
            refuse("the mapped pages of the copied experts could not be dropped (" + dropped_.not_released + "): a copy would hold them twice");
            for (AnonymousMemory & m : c.mem) m.reset();
            return false;
        }
        c.tensor[i] = *t;
        c.tensor[i].data = c.mem[i].data();
        c.tensor[i].buffer = nullptr;  // not the engine's buffer; no extra (gguf_dense_layout checked)
    }
    // test-only: a byte of the first copied expert changed, so a test sees that the copy is what is read
    if (test_fault("corrupt_local_copy")) static_cast<uint8_t *>(c.mem[0].data())[(size_t) experts[0] * src[0]->nb[2] + 7] ^= 0x5a;
    c.bytes = need;
    ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (layers_++ == 0)
        LOG_INFO("experts: this host's %zu experts per layer are computed from a copy in anonymous memory (%.1f MiB per layer); "
                 "their mapped pages are dropped", experts.size(), (double) need / (1 << 20));
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
    if (skipped_ > 0) {
        j["own_copy_layers_skipped"] = skipped_;
        j["own_copy_skipped_why"] = skipped_why_;
    }
    if (without_own_ > 0) j["own_copy_layers_without_own"] = without_own_;
}

} // namespace moezip
