#include "tools/moezip-worker/model/worker_model.h"
#include "tools/moezip-worker/model/load_jobs.h"

#include "coordinator/base/log.h"
#include "coordinator/wire/protocol.h"
#include "provider_map/expert_digest.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace moezip {

namespace {

// The most one pread or populate call reads while loading: progress is counted between them.
constexpr uint64_t kReadChunk = 64ull << 20;

// The expert tensors of one layer (tensor nullptr = absent).
struct LayerIds {
    GgufTensorLoc gate, up, down;
    GgufTensorLoc gate_b, up_b, down_b;
};

std::string shape_text(const ggml_tensor * t) {
    return "[" + std::to_string(t->ne[0]) + ", " + std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[2]) + ", " +
           std::to_string(t->ne[3]) + "]";
}

bool shape_is(const ggml_tensor * t, int64_t a, int64_t b, int64_t c) {
    return t->ne[0] == a && t->ne[1] == b && t->ne[2] == c && t->ne[3] == 1;
}

// "blk.12.ffn_up_exps.weight" -> il 12, suffix "ffn_up_exps.weight". False when not a block tensor.
bool split_block_name(const char * name, int & il, std::string & suffix) {
    if (strncmp(name, "blk.", 4) != 0) return false;
    char * end = nullptr;
    long n = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || n < 0 || n > 100000) return false;
    il = (int) n;
    suffix = end + 1;
    return true;
}

} // namespace

WorkerModel::~WorkerModel() {
    for (auto & m : maps_) munmap(m.first, m.second);
    for (ggml_backend_buffer_t b : repack_buffers_) repack_->buffer_free(b);
    if (ctx_ != nullptr) api_->ggml_free(ctx_);
}

Status WorkerModel::find_layers() {
    std::map<int, LayerIds> found;
    for (const GgufTensorLoc & t : parts_.tensors()) {
        const char * name = t.tensor->name;
        int il = 0;
        std::string suffix;
        if (!split_block_name(name, il, suffix) || suffix.find("_exps") == std::string::npos) continue;
        if (suffix == "ffn_gate_exps.weight") found[il].gate = t;
        else if (suffix == "ffn_up_exps.weight") found[il].up = t;
        else if (suffix == "ffn_down_exps.weight") found[il].down = t;
        else if (suffix == "ffn_gate_exps.bias") found[il].gate_b = t;
        else if (suffix == "ffn_up_exps.bias") found[il].up_b = t;
        else if (suffix == "ffn_down_exps.bias") found[il].down_b = t;
        else if (suffix == "ffn_gate_up_exps.weight")
            return Status::unsupported("model " + path_ + ": " + name + " is a fused gate+up expert tensor; moezip-worker "
                                       "needs separate ffn_gate_exps and ffn_up_exps");
        else
            return Status::unsupported("model " + path_ + ": expert tensor " + name +
                                       " (another expert layout) is not supported by moezip-worker");
    }
    for (const auto & kv : found) {
        const std::string blk = "model " + path_ + ": blk." + std::to_string(kv.first);
        const LayerIds & ids = kv.second;
        if (!ids.gate.tensor && ids.up.tensor)
            return Status::unsupported(blk + " has ffn_up_exps but no ffn_gate_exps (a gate-less MoE): not supported");
        if (!ids.gate.tensor || !ids.up.tensor || !ids.down.tensor)
            return Status::invalid_argument(blk + " lacks one of ffn_gate_exps/ffn_up_exps/ffn_down_exps.weight");
        WorkerLayer l;
        l.il = kv.first;
        l.gate_exps = ids.gate.tensor;
        l.up_exps = ids.up.tensor;
        l.down_exps = ids.down.tensor;
        l.gate_b = ids.gate_b.tensor;
        l.up_b = ids.up_b.tensor;
        l.down_b = ids.down_b.tensor;
        for (const GgufTensorLoc * t : {&ids.gate, &ids.up, &ids.down, &ids.gate_b, &ids.up_b, &ids.down_b})
            if (t->tensor) locs_[t->tensor] = *t;
        Status st = slice_.is_slice ? widen_slice_tensors(l) : Status::ok();
        if (st) st = check_layer(l);
        if (!st) return st;
        layers_.push_back(l);
    }
    if (layers_.empty())
        return Status::invalid_argument("model " + path_ + " has no MoE layer (no blk.N.ffn_gate_exps.weight)");
    return Status::ok();
}

// A slice's tensors hold n_owned experts; their descriptions become the full model's (ne of the
// expert dimension n_expert, strides above it to match), and slot_bytes_ keeps what one expert
// takes, so that expert e is read from the slice's bytes [(e - first) * slot, ...).
Status WorkerModel::widen_slice_tensors(WorkerLayer & l) {
    const std::string where = "slice " + path_ + " (" + slice_.describe() + "): ";
    for (ggml_tensor * t : {l.gate_exps, l.up_exps, l.down_exps}) {
        if (t->ne[2] != slice_.n_owned() || t->ne[3] != 1)
            return Status::invalid_argument(where + t->name + " is " + shape_text(t) + ": it must hold the " +
                                            std::to_string(slice_.n_owned()) + " experts its keys name in its last dimension");
        slot_bytes_[t] = t->nb[2];
        t->ne[2] = slice_.n_expert;
        t->nb[3] = t->nb[2] * (size_t) t->ne[2];
    }
    for (ggml_tensor * t : {l.gate_b, l.up_b, l.down_b}) {
        if (t == nullptr) continue;
        if (t->ne[1] != slice_.n_owned() || t->ne[2] != 1 || t->ne[3] != 1)
            return Status::invalid_argument(where + t->name + " is " + shape_text(t) + ": it must hold one column for each of the " +
                                            std::to_string(slice_.n_owned()) + " experts its keys name");
        slot_bytes_[t] = t->nb[1];
        t->ne[1] = slice_.n_expert;
        t->nb[2] = t->nb[1] * (size_t) t->ne[1];
        t->nb[3] = t->nb[2];
    }
    return Status::ok();
}

uint64_t WorkerModel::shift(const ggml_tensor * t) const {
    auto it = slot_bytes_.find(t);
    return it == slot_bytes_.end() ? 0 : (uint64_t) slice_.first * it->second;
}

uint64_t WorkerModel::stored_bytes(const ggml_tensor * t) const {
    auto it = slot_bytes_.find(t);
    return it == slot_bytes_.end() ? (uint64_t) api_->ggml_nbytes(t) : (uint64_t) slice_.n_owned() * it->second;
}

// --experts given with a slice must be exactly its range: another range would name experts the
// file does not hold, or leave some of it unserved while the coordinator's plan counts on them.
Status WorkerModel::check_served_against_slice(const std::vector<ExpertRange> & asked) const {
    const std::vector<ExpertRange> held = {{slice_.first, slice_.last}};
    if (asked.empty() || expert_ranges_format(asked) == expert_ranges_format(held)) return Status::ok();
    return Status::invalid_argument("--experts " + expert_ranges_format(asked) + ": model " + path_ + " is a slice holding only " +
                                    slice_.describe() + "; serve it with --experts " + expert_ranges_format(held) +
                                    " (or without --experts), or cut a slice of these experts with moezip-slice");
}

Status WorkerModel::check_layer(WorkerLayer & l) {
    l.n_embd = l.gate_exps->ne[0];
    l.n_ff = l.gate_exps->ne[1];
    l.n_expert = l.gate_exps->ne[2];
    const std::string where = "model " + path_ + ": ";
    if (!shape_is(l.gate_exps, l.n_embd, l.n_ff, l.n_expert) || !shape_is(l.up_exps, l.n_embd, l.n_ff, l.n_expert) ||
        !shape_is(l.down_exps, l.n_ff, l.n_embd, l.n_expert))
        return Status::invalid_argument(where + "expert tensor shapes disagree: " + l.gate_exps->name + " " +
                                        shape_text(l.gate_exps) + ", " + l.up_exps->name + " " + shape_text(l.up_exps) +
                                        ", " + l.down_exps->name + " " + shape_text(l.down_exps) +
                                        " (expected [n_embd, n_ff, n_expert] x2 and [n_ff, n_embd, n_expert])");
    if (n_expert_ != 0 && l.n_expert != n_expert_)
        return Status::invalid_argument(where + l.gate_exps->name + " has " + std::to_string(l.n_expert) +
                                        " experts, an earlier layer " + std::to_string(n_expert_));
    n_expert_ = l.n_expert;
    for (ggml_tensor * t : {l.gate_exps, l.up_exps, l.down_exps}) {  // GgufParts checked that each lies inside its file
        if (t->nb[2] * (size_t) t->ne[2] != api_->ggml_nbytes(t))
            return Status::invalid_argument(where + t->name + " is not densely laid out");
    }
    // biases as build_moe_ffn adds them (ggml_add_id): f32, one column per expert
    const ggml_tensor * biases[3] = {l.gate_b, l.up_b, l.down_b};
    const int64_t rows[3] = {l.n_ff, l.n_ff, l.n_embd};
    for (int i = 0; i < 3; ++i) {
        const ggml_tensor * b = biases[i];
        if (b == nullptr) continue;
        if (b->type != GGML_TYPE_F32 || !shape_is(b, rows[i], l.n_expert, 1))
            return Status::invalid_argument(where + b->name + " is " + api_->ggml_type_name(b->type) + " " + shape_text(b) +
                                            ", expected f32 [" + std::to_string(rows[i]) + ", " + std::to_string(l.n_expert) +
                                            ", 1, 1] (one bias column per expert)");
    }
    return Status::ok();
}

uint32_t WorkerLayer::bias_flags() const {
    return (gate_b ? kFfnGateBias : 0u) | (up_b ? kFfnUpBias : 0u) | (down_b ? kFfnDownBias : 0u);
}

void WorkerLayer::use_tensors(const std::array<ggml_tensor *, 6> & t) {
    weights.gate_exps = t[0];
    weights.up_exps = t[1];
    weights.down_exps = t[2];
    weights.gate_b = t[3];
    weights.up_b = t[4];
    weights.down_b = t[5];
}

const WorkerLayer * WorkerModel::layer(int il) const {
    for (const WorkerLayer & l : layers_)
        if (l.il == il) return &l;
    return nullptr;
}

std::vector<WorkerFile> WorkerModel::files() const {
    std::vector<WorkerFile> out;
    for (const GgufPart & p : parts_.parts()) out.push_back({p.path, {}});
    for (const WorkerLayer & l : layers_) {
        for (const ggml_tensor * t : {l.gate_exps, l.up_exps, l.down_exps}) {
            std::vector<int> & layers = out[(size_t) loc(t).part].layers;
            if (layers.empty() || layers.back() != l.il) layers.push_back(l.il);
        }
    }
    return out;
}

Status WorkerModel::place_mmap() {
    std::vector<uint8_t *> bases;
    for (const GgufPart & p : parts_.parts()) {
        void * base = mmap(nullptr, p.size, PROT_READ, MAP_SHARED, p.fd, 0);
        if (base == MAP_FAILED) return Status::io_error("model " + p.path + ": mmap failed: " + strerror(errno));
        maps_.emplace_back(base, p.size);
        // where the file is not cached yet, faults then read 2 MiB folios ahead, mapped by one PMD
        // entry each (coordinator/memory/page_cache.h); a hint, fails harmlessly without THP
        madvise(base, p.size, MADV_HUGEPAGE);
        bases.push_back(static_cast<uint8_t *>(base));
    }
    const uint64_t page = (uint64_t) sysconf(_SC_PAGESIZE);
    std::vector<std::function<Status()>> jobs;  // one per expert tensor: fault its served slices in, hash them
    for (WorkerLayer & l : layers_) {
        for (ggml_tensor * t : {l.gate_b, l.up_b, l.down_b}) {  // small: read whole when first used
            if (t == nullptr) continue;
            t->data = slice_.is_slice ? map_window(t) : bases[(size_t) loc(t).part] + loc(t).offset;
            if (t->data == nullptr) return Status::io_error("model " + path_ + ": mapping " + t->name + " failed: " + strerror(errno));
        }
        for (ggml_tensor * t : {l.gate_exps, l.up_exps, l.down_exps}) {
            uint8_t * base = bases[(size_t) loc(t).part];
            uint64_t off = loc(t).offset;
            t->data = base + off;
            if (slice_.is_slice) {  // the window's pages are the file's, at the full layout's offsets
                uint8_t * data = map_window(t);
                if (data == nullptr) return Status::io_error("model " + path_ + ": mapping " + t->name + " failed: " + strerror(errno));
                t->data = data;
                base = data;
                off = 0;
            }
            jobs.push_back([this, t, base, off, page]() {
                for (const ExpertRange & r : served_) {  // read the served slices in now, a chunk at a time (progress)
                    const uint64_t first = off + (uint64_t) r.first * t->nb[2], end = off + (uint64_t) (r.last + 1) * t->nb[2];
                    for (uint64_t at = first; at < end; at += kReadChunk) {
                        const uint64_t until = std::min<uint64_t>(end, at + kReadChunk);
                        // page-aligned addresses (a slice's data is not page-aligned: its window's start is)
                        uintptr_t a = reinterpret_cast<uintptr_t>(base + at);
                        const uintptr_t b = reinterpret_cast<uintptr_t>(base + until);
                        a -= a % page;
                        // by faults, so readahead builds the folios the advice above asks for; MADV_WILLNEED
                        // would read them at the minimum folio order (4 KiB: mm/readahead.c, force_page_cache_ra).
                        // Before Linux 5.14 (no MADV_POPULATE_READ) the pages come in at first use.
                        madvise(reinterpret_cast<void *>(a), b - a, MADV_POPULATE_READ);
                        if (progress_ != nullptr) progress_->add(until - at);
                    }
                }
                hash_served_slices(t);
                return Status::ok();
            });
        }
    }
    return run_load_jobs(jobs);
}

// A slice's tensor mapped where its full-model layout puts it: a reservation of the full size
// (PROT_NONE, never touched outside the owned experts) with the file's pages of the owned experts
// mapped over it (MAP_FIXED) at the address of expert `first`. File offsets are page-aligned only
// after rounding down, so the reservation is placed such that the page holding the tensor's first
// byte lands on a page boundary. nullptr when a mapping failed (errno set).
uint8_t * WorkerModel::map_window(const ggml_tensor * t) {
    const uint64_t page = (uint64_t) sysconf(_SC_PAGESIZE);
    const GgufPart & part = parts_.parts()[(size_t) loc(t).part];
    const uint64_t off = loc(t).offset, lead = off % page, full = (uint64_t) api_->ggml_nbytes(t), before = shift(t);
    const size_t reserve = (size_t) (full + 3 * page);
    void * r = mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return nullptr;
    maps_.emplace_back(r, reserve);
    const uintptr_t lo = reinterpret_cast<uintptr_t>(r);
    const uintptr_t window = (lo + before + page) / page * page;  // page-aligned, >= lo + before - lead
    uint8_t * data = reinterpret_cast<uint8_t *>(window + lead - before);
    void * w = mmap(reinterpret_cast<void *>(window), (size_t) (lead + stored_bytes(t)), PROT_READ, MAP_SHARED | MAP_FIXED, part.fd,
                    (off_t) (off - lead));
    if (w == MAP_FAILED) return nullptr;
    madvise(w, (size_t) (lead + stored_bytes(t)), MADV_HUGEPAGE);  // a hint, as for whole files
    return data;
}

Status WorkerModel::read_range(const ggml_tensor * t, uint8_t * base, uint64_t start, uint64_t want) const {
    return read_into(t, start, want, base + start);
}

Status WorkerModel::read_into(const ggml_tensor * t, uint64_t start, uint64_t want, uint8_t * dst) const {
    const GgufPart & part = parts_.parts()[(size_t) loc(t).part];
    const uint64_t before = shift(t);
    // a slice holds bytes [before, before + stored) of the full layout; anything else is not in the file
    if (start < before || start + want > before + stored_bytes(t))
        return Status::invalid_argument("model " + path_ + ": bytes " + std::to_string(start) + "+" + std::to_string(want) + " of " +
                                        t->name + " lie outside what the file holds" +
                                        (slice_.is_slice ? " (a slice of " + slice_.describe() + ")" : std::string()));
    const uint64_t off = loc(t).offset - before;
    uint64_t done = 0;
    while (done < want) {
        // in chunks, so that progress is counted while a tensor's gigabyte is read
        const uint64_t chunk = std::min<uint64_t>(want - done, kReadChunk);
        ssize_t n = pread(part.fd, dst + done, chunk, (off_t) (off + start + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return Status::io_error("model " + part.path + ": reading " + t->name + ": " +
                                    (n < 0 ? strerror(errno) : "unexpected end of file"));
        done += (uint64_t) n;
        if (progress_ != nullptr) progress_->add((uint64_t) n);
    }
    return Status::ok();
}

uint64_t WorkerModel::give_back(const ggml_tensor * t, uint64_t start, uint64_t bytes) const {
    const uint64_t page = (uint64_t) sysconf(_SC_PAGESIZE);
    const uintptr_t base = reinterpret_cast<uintptr_t>(t->data);
    uintptr_t a = base + start, b = base + start + bytes;
    a = (a + page - 1) / page * page;  // only pages wholly inside: the neighbours' bytes stay
    b = b / page * page;
    if (b <= a) return 0;
    if (madvise(reinterpret_cast<void *>(a), b - a, MADV_DONTNEED) != 0) return 0;
    return b - a;
}

static bool same_time(const struct timespec & a, const struct timespec & b) {
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

bool WorkerModel::file_stamp_moved() const {
    const auto & parts = parts_.parts();
    for (size_t i = 0; i < parts.size() && i < file_stamps_.size(); ++i) {
        struct stat st;
        if (fstat(parts[i].fd, &st) != 0) return true;
        const FileStamp & f = file_stamps_[i];
        if ((int64_t) st.st_size != f.size || !same_time(st.st_mtim, f.mtime) || !same_time(st.st_ctim, f.ctime)) return true;
    }
    return false;
}

Status WorkerModel::file_unchanged() const {
    if (!file_changed_.empty()) return Status::io_error(file_changed_);
    const auto & parts = parts_.parts();
    bool status_moved = false;
    std::vector<struct timespec> ctimes(parts.size());
    for (size_t i = 0; i < parts.size() && i < file_stamps_.size(); ++i) {
        struct stat st;
        if (fstat(parts[i].fd, &st) != 0) return Status::io_error("model " + parts[i].path + ": fstat: " + strerror(errno));
        const FileStamp & f = file_stamps_[i];
        if ((int64_t) st.st_size != f.size || !same_time(st.st_mtim, f.mtime)) {
            file_changed_ = "model " + parts[i].path + " changed on disk since this worker loaded it (size or modification time): "
                            "its bytes are no longer the ones hello_ok's digests name; restart the worker";
            return Status::io_error(file_changed_);
        }
        ctimes[i] = st.st_ctim;
        status_moved = status_moved || !same_time(st.st_ctim, f.ctime);
    }
    if (!status_moved) return Status::ok();
    // The content may or may not have changed: the served experts are hashed again from the file,
    // once per status change (its whole served bytes, read from the page cache or the disk).
    const auto t0 = std::chrono::steady_clock::now();
    const std::string differs = file_digests_differ();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!differs.empty()) {
        file_changed_ = "model " + path_ + ": its status-change time moved since this worker loaded it and " + differs +
                        " (a rewrite with its modification time set back, or bytes that cannot be checked): they are no longer "
                        "known to be the ones hello_ok's digests name; restart the worker";
        LOG_ERROR("%s", file_changed_.c_str());
        return Status::io_error(file_changed_);
    }
    LOG_INFO("model %s: its status-change time moved (renamed, linked, chmod'ed?): its %.1f MiB of served experts hashed "
             "again in %.0f ms, unchanged; serving goes on", path_.c_str(), (double) served_bytes_ / (1 << 20), ms);
    for (size_t i = 0; i < parts.size() && i < file_stamps_.size(); ++i) file_stamps_[i].ctime = ctimes[i];
    return Status::ok();
}

std::string WorkerModel::file_digests_differ() const {
    const auto & parts = parts_.parts();
    std::vector<std::pair<void *, size_t>> maps;  // each part, read-only, for this check only
    auto unmap_all = [&]() { for (const auto & m : maps) munmap(m.first, m.second); };
    for (const GgufPart & part : parts) {
        struct stat st;
        void * p = fstat(part.fd, &st) == 0 && st.st_size > 0 ? mmap(nullptr, (size_t) st.st_size, PROT_READ, MAP_SHARED, part.fd, 0)
                                                               : MAP_FAILED;
        if (p == MAP_FAILED) {
            unmap_all();
            return part.path + " could not be mapped to hash it: " + strerror(errno);
        }
        maps.emplace_back(p, (size_t) st.st_size);
    }
    std::string differs;
    for (const WorkerLayer & l : layers_) {
        // a repacked layer's digests are of the repacked bytes: the file cannot vouch for them
        if (l.repacked) { differs = "layer " + std::to_string(l.il) + " is repacked: its digests cannot be checked against the file"; break; }
        const auto file = l.file_tensors();
        std::array<ggml_tensor, 6> at{};
        std::array<const ggml_tensor *, 6> t{};
        for (size_t i = 0; i < file.size(); ++i) {
            if (file[i] == nullptr) continue;
            auto it = locs_.find(file[i]);
            if (it == locs_.end()) { differs = std::string(file[i]->name) + " has no place in the file"; break; }
            at[i] = *file[i];  // a slice's: slot e - first is expert e (every tensor of the layer alike)
            at[i].data = static_cast<uint8_t *>(maps[(size_t) it->second.part].first) + it->second.offset;
            t[i] = &at[i];
        }
        if (!differs.empty()) break;
        for (const auto & kv : l.digests)
            if (expert_identity_digest_of(t[0], t[1], t[2], t[3], t[4], t[5], kv.first - (slice_.is_slice ? slice_.first : 0)) != kv.second) {
                differs = "layer " + std::to_string(l.il) + ", expert " + std::to_string(kv.first) + " no longer has the digest hello_ok named";
                break;
            }
        if (!differs.empty()) break;
    }
    unmap_all();
    return differs;
}

// What was read while the file's stamp moved may be of another content, even if the file is written
// back before the next check: an error, and the caller keeps nothing of it.
Status WorkerModel::read_checked(Status st, const ggml_tensor * t) const {
    if (st && file_stamp_moved())
        return Status::io_error("model " + path_ + " changed on disk while " + t->name + " was read from it: what was read is not used");
    return st;
}

Status WorkerModel::read_file(const ggml_tensor * t, uint64_t start, uint64_t bytes, void * dst) const {
    Status st = file_unchanged();
    if (!st) return st;
    return read_checked(read_into(t, start, bytes, static_cast<uint8_t *>(dst)), t);
}

Status WorkerModel::read_again(const ggml_tensor * t, uint64_t start, uint64_t bytes) const {
    Status st = file_unchanged();
    if (!st || mapped_) return st;  // the mapping reads the file by itself
    madvise(t->data, api_->ggml_nbytes(t), MADV_HUGEPAGE);  // as at load; fails harmlessly without THP
    return read_checked(read_range(t, static_cast<uint8_t *>(t->data), start, bytes), t);
}

void WorkerModel::no_huge_pages(const ggml_tensor * t) const {
    if (!mapped_) madvise(t->data, api_->ggml_nbytes(t), MADV_NOHUGEPAGE);
}

uint64_t WorkerModel::bytes_to_read(bool use_mmap) const {
    uint64_t bytes = 0;
    for (const WorkerLayer & l : layers_) {
        for (const ggml_tensor * t : {l.gate_exps, l.up_exps, l.down_exps}) bytes += (uint64_t) expert_ranges_count(served_) * t->nb[2];
        for (const ggml_tensor * t : {l.gate_b, l.up_b, l.down_b})
            if (t != nullptr && !use_mmap) bytes += stored_bytes(t);  // mapped biases are read at first use
    }
    return bytes;
}

Status WorkerModel::read_slices(ggml_tensor * t, uint8_t * base) {
    for (const ExpertRange & r : served_) {
        Status st = read_range(t, base, (uint64_t) r.first * t->nb[2], (uint64_t) (r.last - r.first + 1) * t->nb[2]);
        if (!st) return st;
    }
    return Status::ok();
}

void WorkerModel::hash_served_slices(const ggml_tensor * t) {
    auto it = slice_digests_.find(t);
    if (it == slice_digests_.end()) return;
    for (const ExpertRange & r : served_)
        for (int e = r.first; e <= r.last; ++e)
            it->second[(size_t) e] = expert_content_digest(static_cast<const uint8_t *>(t->data) + (size_t) e * t->nb[2], t->nb[2]);
}

Status WorkerModel::run_load_jobs(const std::vector<std::function<Status()>> & jobs) const {
    return load_jobs_run(jobs, load_jobs_threads());
}

Status WorkerModel::place_anonymous() {
    std::vector<std::function<Status()>> jobs;  // one per expert tensor: read its served slices, hash them
    for (WorkerLayer & l : layers_) {
        for (ggml_tensor * t : {l.gate_exps, l.up_exps, l.down_exps}) {
            const size_t bytes = api_->ggml_nbytes(t);
            void * p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED)
                return Status::io_error("reserving " + std::to_string(bytes) + " bytes for " + t->name + ": " + strerror(errno));
            maps_.emplace_back(p, bytes);
            madvise(p, bytes, MADV_HUGEPAGE);  // a hint; fails harmlessly without THP
            t->data = p;
            jobs.push_back([this, t]() {
                Status st = read_slices(t, static_cast<uint8_t *>(t->data));
                if (st) hash_served_slices(t);
                return st;
            });
        }
        for (ggml_tensor * t : {l.gate_b, l.up_b, l.down_b}) {
            if (t == nullptr) continue;
            const size_t bytes = api_->ggml_nbytes(t);
            void * p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                return Status::io_error("reserving " + std::to_string(bytes) + " bytes for " + t->name + ": " + strerror(errno));
            maps_.emplace_back(p, bytes);
            t->data = p;
            Status st = read_range(t, static_cast<uint8_t *>(p), shift(t), stored_bytes(t));  // a slice's own columns
            if (!st) return st;
        }
    }
    return run_load_jobs(jobs);
}

void WorkerModel::compute_digests() {
    for (WorkerLayer & l : layers_) {
        const ExpertWeights & w = l.weights;
        const bool hashed = !l.repacked && l.local_of.empty() && slice_digests_.count(l.gate_exps) && slice_digests_.count(l.up_exps) &&
                            slice_digests_.count(l.down_exps);
        for (const ExpertRange & r : served_)
            for (int e = r.first; e <= r.last; ++e)
                l.digests[e] = hashed ? expert_identity_digest_with_biases(
                                            expert_identity_digest(slice_digests_.at(l.gate_exps)[(size_t) e], slice_digests_.at(l.up_exps)[(size_t) e],
                                                                   slice_digests_.at(l.down_exps)[(size_t) e]),
                                            w.gate_b, w.up_b, w.down_b, e)
                                      : expert_identity_digest_of(w.gate_exps, w.up_exps, w.down_exps, w.gate_b, w.up_b, w.down_b,
                                                                  l.local_of.empty() ? e : l.local_of[(size_t) e]);
    }
    slice_digests_.clear();
}

// A no_alloc tensor like src with only the served experts (its last dimension n_served: ne[2] of
// expert weights, ne[1] of biases) and its content in GGUF layout: src's served slices in expert order.
ggml_tensor * WorkerModel::served_copy(const ggml_tensor * src, bool bias, int64_t n_served, std::vector<uint8_t> & bytes) {
    ggml_tensor * t = bias ? api_->ggml_new_tensor_2d(ctx_, src->type, src->ne[0], n_served)
                           : api_->ggml_new_tensor_3d(ctx_, src->type, src->ne[0], src->ne[1], n_served);
    api_->ggml_set_name(t, src->name);
    const size_t slice = bias ? src->nb[1] : src->nb[2];
    bytes.resize(slice * (size_t) n_served);
    size_t at = 0;
    for (int64_t e = 0; e < n_expert_; ++e) {
        if (!served_mask_[(size_t) e]) continue;
        memcpy(bytes.data() + at, static_cast<const uint8_t *>(src->data) + (size_t) e * slice, slice);
        at += slice;
    }
    return t;
}

Status WorkerModel::place_plain(ggml_tensor * t, const std::vector<uint8_t> & bytes) {
    void * p = mmap(nullptr, bytes.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Status::io_error("reserving " + std::to_string(bytes.size()) + " bytes for " + t->name + ": " + strerror(errno));
    maps_.emplace_back(p, bytes.size());
    memcpy(p, bytes.data(), bytes.size());
    t->data = p;
    return Status::ok();
}

// Unmaps the anonymous reservation of src (its served slices were copied).
void WorkerModel::release_source(ggml_tensor * src) {
    for (size_t i = 0; i < maps_.size(); ++i)
        if (maps_[i].first == src->data) {
            munmap(maps_[i].first, maps_[i].second);
            maps_.erase(maps_.begin() + (long) i);
            break;
        }
    src->data = nullptr;
}

Status WorkerModel::repack_layers(const WorkerRepackApi & rp) {
    repack_ = &rp;
    const int64_t n_served = expert_ranges_count(served_);
    std::vector<int32_t> local_of((size_t) n_expert_, -1);
    int32_t next = 0;
    for (int64_t e = 0; e < n_expert_; ++e)
        if (served_mask_[(size_t) e]) local_of[(size_t) e] = next++;
    const size_t n_tensors = layers_.size() * 6;
    ggml_init_params ip = {n_tensors * api_->ggml_tensor_overhead(), nullptr, /*no_alloc =*/ true};
    ctx_ = api_->ggml_init(ip);
    if (ctx_ == nullptr) return Status::io_error("ggml_init failed");
    std::vector<uint8_t> bytes;
    for (WorkerLayer & l : layers_) {
        std::array<ggml_tensor *, 6> local = {};
        const std::array<ggml_tensor *, 6> src = l.file_tensors();
        for (int i = 0; i < 6; ++i) {
            if (src[i] == nullptr) continue;
            local[i] = served_copy(src[i], /*bias =*/ i >= 3, n_served, bytes);
            RepackedTensor rt;
            Status st = i < 3 ? worker_repack_tensor(rp, local[i], bytes.data(), bytes.size(), rt) : Status::ok();  // biases: plain f32
            if (!st) return st;
            if (rt.repacked) {
                repack_buffers_.push_back(rt.buffer);
                l.repacked = true;
            } else {
                st = place_plain(local[i], bytes);
                if (!st) return st;
            }
            release_source(src[i]);
        }
        l.use_tensors(local);
        l.local_of = local_of;
    }
    return Status::ok();
}

Status WorkerModel::load(const WorkerModelOptions & opt, const GgufReadApi & api) {
    api_ = api.ggml;
    path_ = opt.path;
    Status st = parts_.open(opt.path, api);
    if (st) st = slice_info_read(api, parts_.parts()[0].gguf, path_, slice_);
    if (st && slice_.is_slice && parts_.parts().size() > 1)
        st = Status::invalid_argument("slice " + path_ + " is split into several files: moezip-slice writes one file");
    if (st) st = find_layers();
    if (st && slice_.is_slice) st = check_served_against_slice(opt.experts);
    if (!st) return st;
    served_ = !opt.experts.empty() ? opt.experts
              : slice_.is_slice    ? std::vector<ExpertRange>{{slice_.first, slice_.last}}
                                   : std::vector<ExpertRange>{{0, (int) n_expert_ - 1}};
    served_mask_.assign((size_t) n_expert_, false);
    for (const ExpertRange & r : served_) {
        if (r.last >= n_expert_)
            return Status::invalid_argument("--experts " + expert_ranges_format(served_) + ": expert " +
                                            std::to_string(std::max(r.first, (int) n_expert_)) + " does not exist (model " + path_ + " has " +
                                            std::to_string(n_expert_) + " experts, 0-" + std::to_string(n_expert_ - 1) + ")");
        for (int e = r.first; e <= r.last; ++e) served_mask_[e] = true;
    }
    for (const WorkerLayer & l : layers_)
        for (const ggml_tensor * t : {l.gate_exps, l.up_exps, l.down_exps})
            served_bytes_ += (uint64_t) expert_ranges_count(served_) * t->nb[2];
    for (const WorkerLayer & l : layers_)
        for (const ggml_tensor * t : {l.gate_b, l.up_b, l.down_b})
            if (t) served_bytes_ += api_->ggml_nbytes(t);
    if (opt.repack != nullptr && opt.use_mmap)
        return Status::invalid_argument("--repack copies the served experts into the CPU backend's layout: --mmap does not apply");
    if (opt.repack != nullptr && opt.repack->buft == nullptr)
        return Status::unsupported("--repack: this engine's CPU backend has no CPU_REPACK buffer type (no repacked kernels "
                                   "for this CPU or build), so its host does not repack either");
    for (const GgufPart & p : parts_.parts()) {  // what file_unchanged() compares with
        struct stat fs;
        if (fstat(p.fd, &fs) != 0) return Status::io_error("model " + p.path + ": fstat: " + strerror(errno));
        file_stamps_.push_back({(int64_t) fs.st_size, fs.st_mtim, fs.st_ctim});
    }
    if (opt.repack == nullptr)  // the file's bytes are what is served: hashed by the threads that read them
        for (const WorkerLayer & l : layers_)
            for (const ggml_tensor * t : {l.gate_exps, l.up_exps, l.down_exps}) slice_digests_[t].assign((size_t) n_expert_, 0);
    LoadProgress progress(bytes_to_read(opt.use_mmap), opt.progress_interval_ms, opt.progress_out);
    progress_ = &progress;
    st = opt.use_mmap ? place_mmap() : place_anonymous();
    progress_ = nullptr;
    progress.finish_reading();
    mapped_ = opt.use_mmap;
    if (!st) return st;
    for (WorkerLayer & l : layers_) l.use_tensors(l.file_tensors());
    auto t0 = std::chrono::steady_clock::now();
    auto seconds_since = [](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    };
    if (opt.repack != nullptr) {
        st = repack_layers(*opt.repack);
        if (!st) return st;
        progress.add_phase(LoadPhase::repack, seconds_since(t0));
    }
    t0 = std::chrono::steady_clock::now();
    compute_digests();
    progress.add_phase(LoadPhase::digests, seconds_since(t0));
    load_summary_ = progress.summary();
    return Status::ok();
}

} // namespace moezip
