#include "tools/moezip-slice/slice_writer.h"

#include "tools/moezip-worker/model/gguf_parts.h"
#include "tools/moezip-worker/model/slice_keys.h"

#include "ggml.h"
#include "gguf.h"
#include "llama.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <memory>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace moezip {

namespace {

// The engine's gguf functions as the worker's model reader takes them (GgufParts reads through a
// table): bound from the libggml-base this program is linked with.
Status bind_linked_api(GgmlApi & api, GgufReadApi & read) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(&ggml_nbytes), &info) == 0 || info.dli_fname == nullptr)
        return Status::io_error("cannot find the library that holds ggml_nbytes");
    void * h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (h == nullptr) return Status::io_error(std::string("dlopen ") + info.dli_fname + ": " + dlerror());
    Status st = ggml_api_bind_base(api, h);
    if (!st) return st;
    read.ggml = &api;
    read.split_prefix = &llama_split_prefix;
    read.split_path = &llama_split_path;
    read.get_val_u32 = &gguf_get_val_u32;
    read.get_val_u64 = &gguf_get_val_u64;
    read.get_val_str = &gguf_get_val_str;
    return Status::ok();
}

// "ffn_gate_exps.weight" etc.: the tensors a slice cuts; 2 for a bias (experts in ne[1]), 3 for
// weights (experts in ne[2]), 0 for any other tensor; -1 for an expert tensor of another layout.
int expert_dim_of(const char * name) {
    if (strncmp(name, "blk.", 4) != 0) return 0;
    const char * dot = strchr(name + 4, '.');
    if (dot == nullptr) return 0;
    const std::string suffix = dot + 1;
    if (suffix.find("_exps") == std::string::npos) return 0;
    for (const char * w : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"})
        if (suffix == w) return 3;
    for (const char * b : {"ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"})
        if (suffix == b) return 2;
    return -1;
}

struct CutTensor {
    GgufTensorLoc loc;     // in the source
    uint64_t first_byte;   // of expert `first`, relative to the tensor's start
    uint64_t bytes;        // of the owned experts
};

struct GgufFree {
    void operator()(gguf_context * g) const { gguf_free(g); }
};
struct GgmlFree {
    void operator()(ggml_context * c) const { ggml_free(c); }
};

Status write_all(int fd, const void * data, size_t n, const std::string & path) {
    const uint8_t * p = static_cast<const uint8_t *>(data);
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return Status::io_error("writing " + path + ": " + strerror(errno));
        p += w;
        n -= (size_t) w;
    }
    return Status::ok();
}

Status pad_to(int fd, uint64_t & at, uint64_t target, const std::string & path) {
    static const uint8_t zeros[4096] = {};
    while (at < target) {
        const size_t n = (size_t) std::min<uint64_t>(sizeof zeros, target - at);
        Status st = write_all(fd, zeros, n, path);
        if (!st) return st;
        at += n;
    }
    return Status::ok();
}

// Copies `bytes` bytes at `offset` of `in` to `out`, in chunks of 64 MiB.
Status copy_range(const GgufPart & in, uint64_t offset, uint64_t bytes, int out, const std::string & out_path) {
    std::vector<uint8_t> buf((size_t) std::min<uint64_t>(bytes, 64ull << 20));
    uint64_t done = 0;
    while (done < bytes) {
        const size_t want = (size_t) std::min<uint64_t>(buf.size(), bytes - done);
        ssize_t n = pread(in.fd, buf.data(), want, (off_t) (offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return Status::io_error("reading " + in.path + ": " + (n < 0 ? strerror(errno) : "unexpected end of file"));
        Status st = write_all(out, buf.data(), (size_t) n, out_path);
        if (!st) return st;
        done += (uint64_t) n;
    }
    return Status::ok();
}

// The part of `parts` that `path` is (the same file: its device and inode, so a symlink, a hard link
// or another spelling of the path is found too); -1 when it is none of them or does not exist.
int part_named_by(const GgufParts & parts, const std::string & path) {
    struct stat target;
    if (stat(path.c_str(), &target) != 0) return -1;
    for (size_t k = 0; k < parts.parts().size(); ++k) {
        struct stat st;
        if (fstat(parts.parts()[k].fd, &st) == 0 && st.st_dev == target.st_dev && st.st_ino == target.st_ino) return (int) k;
    }
    return -1;
}

std::string base_name(const std::string & path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

} // namespace

Status slice_write(const SliceRequest & req, SliceResult & out) {
    out = SliceResult{};
    GgmlApi api;
    GgufReadApi read;
    Status st = bind_linked_api(api, read);
    if (!st) return st;
    GgufParts parts;
    st = parts.open(req.model, read);
    if (!st) return st;
    const std::string where = "model " + req.model + ": ";
    // the output is renamed over, and its .tmp truncated: either being the model (or a part of it)
    // would destroy the source
    for (const std::string & o : {req.output, req.output + ".tmp"}) {
        const int k = part_named_by(parts, o);
        if (k < 0) continue;
        return Status::invalid_argument("-o " + req.output + ": " + o + " is the model's file " + parts.parts()[(size_t) k].path +
                                        " itself: writing the slice there would destroy the model; name another file");
    }
    SliceInfo already;
    st = slice_info_read(read, parts.parts()[0].gguf, req.model, already);
    if (!st) return st;
    if (already.is_slice)
        return Status::invalid_argument(where + "is itself a slice (" + already.describe() + "): cut slices from the whole model");

    // the source's identity, and its expert tensors
    SliceTableDigest table;
    std::vector<GgufTensorLoc> experts;
    for (const GgufTensorLoc & t : parts.tensors()) {
        table.add(t.tensor);
        const int dim = expert_dim_of(t.tensor->name);
        if (dim < 0)
            return Status::invalid_argument(where + t.tensor->name + " is an expert tensor of a layout moezip-worker does not serve "
                                            "(fused gate+up, or another): no slice");
        if (dim == 0) continue;
        const int64_t n = dim == 3 ? t.tensor->ne[2] : t.tensor->ne[1];
        if (out.n_expert != 0 && n != out.n_expert)
            return Status::invalid_argument(where + t.tensor->name + " holds " + std::to_string(n) + " experts, an earlier expert tensor " +
                                            std::to_string(out.n_expert));
        out.n_expert = n;
        experts.push_back(t);
    }
    if (experts.empty()) return Status::invalid_argument(where + "has no MoE layer (no blk.N.ffn_gate_exps.weight): nothing to slice");
    if (req.first < 0 || req.first > req.last || req.last >= out.n_expert)
        return Status::invalid_argument("--experts " + std::to_string(req.first) + "-" + std::to_string(req.last) + ": the model has " +
                                        std::to_string(out.n_expert) + " experts, 0-" + std::to_string(out.n_expert - 1));
    for (const GgufPart & p : parts.parts()) out.source_bytes += p.size;
    out.source_table = table.hex();
    const int n_owned = req.last - req.first + 1;

    // metadata: the source's keys, then the slice's
    std::unique_ptr<gguf_context, GgufFree> g(gguf_init_empty());
    gguf_set_kv(g.get(), parts.parts()[0].gguf);
    for (const char * k : {"split.no", "split.count", "split.tensors.count", "general.alignment"}) gguf_remove_key(g.get(), k);
    gguf_set_val_u32(g.get(), kSliceKeyVersion, kSliceVersion);
    gguf_set_val_str(g.get(), kSliceKeyExperts, (std::to_string(req.first) + "-" + std::to_string(req.last)).c_str());
    gguf_set_val_u32(g.get(), kSliceKeyNExpert, (uint32_t) out.n_expert);
    gguf_set_val_str(g.get(), kSliceKeySource, base_name(req.model).c_str());
    gguf_set_val_u64(g.get(), kSliceKeySourceBytes, out.source_bytes);
    gguf_set_val_str(g.get(), kSliceKeySourceTable, out.source_table.c_str());

    // the cut tensors' descriptions (no data: it is copied from the source below)
    ggml_init_params ip = {experts.size() * ggml_tensor_overhead(), nullptr, /*no_alloc =*/ true};
    std::unique_ptr<ggml_context, GgmlFree> ctx(ggml_init(ip));
    if (!ctx) return Status::io_error("ggml_init failed");
    std::vector<CutTensor> cuts;
    for (const GgufTensorLoc & t : experts) {
        const ggml_tensor * s = t.tensor;
        const bool bias = expert_dim_of(s->name) == 2;
        ggml_tensor * c = bias ? ggml_new_tensor_2d(ctx.get(), s->type, s->ne[0], n_owned)
                               : ggml_new_tensor_3d(ctx.get(), s->type, s->ne[0], s->ne[1], n_owned);
        ggml_set_name(c, s->name);
        const uint64_t slot = bias ? s->nb[1] : s->nb[2];
        if (slot * (uint64_t) out.n_expert != ggml_nbytes(s) || slot * (uint64_t) n_owned != ggml_nbytes(c))
            return Status::invalid_argument(where + s->name + " is not densely laid out");
        gguf_add_tensor(g.get(), c);
        cuts.push_back({t, (uint64_t) req.first * slot, slot * (uint64_t) n_owned});
    }

    // header, then each tensor's bytes at its offset, padded to the alignment
    std::vector<uint8_t> header(gguf_get_meta_size(g.get()));
    gguf_get_meta_data(g.get(), header.data());
    const std::string tmp = req.output + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Status::io_error("cannot create " + tmp + ": " + strerror(errno));
    uint64_t at = 0;
    st = write_all(fd, header.data(), header.size(), tmp);
    at = header.size();
    const uint64_t data_offset = header.size();  // gguf_get_meta_size includes the padding to the alignment
    for (size_t i = 0; st && i < cuts.size(); ++i) {
        st = pad_to(fd, at, data_offset + gguf_get_tensor_offset(g.get(), (int64_t) i), tmp);
        const GgufPart & part = parts.parts()[(size_t) cuts[i].loc.part];
        if (st) st = copy_range(part, cuts[i].loc.offset + cuts[i].first_byte, cuts[i].bytes, fd, tmp);
        at += cuts[i].bytes;
    }
    if (st) st = pad_to(fd, at, GGML_PAD(at, gguf_get_alignment(g.get())), tmp);
    if (st && fsync(fd) != 0) st = Status::io_error("fsync " + tmp + ": " + strerror(errno));
    if (close(fd) != 0 && st) st = Status::io_error("closing " + tmp + ": " + strerror(errno));
    if (st && rename(tmp.c_str(), req.output.c_str()) != 0) st = Status::io_error("rename " + tmp + " to " + req.output + ": " + strerror(errno));
    if (!st) {
        unlink(tmp.c_str());
        return st;
    }
    out.bytes = at;
    out.n_tensors = (int) cuts.size();
    for (const CutTensor & c : cuts)
        if (strstr(c.loc.tensor->name, "ffn_gate_exps.weight") != nullptr) ++out.n_layers;
    return Status::ok();
}

} // namespace moezip
