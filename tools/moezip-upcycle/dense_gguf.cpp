#include "tools/moezip-upcycle/dense_gguf.h"

#include "ggml.h"
#include "gguf.h"

#include <cerrno>
#include <cstring>
#include <sys/stat.h>

using moezip::Status;

namespace moezip_upcycle {

namespace {

// gguf reports why a header is bad through ggml's logger; keep its text for our one message
// instead of letting it print raw lines of its own.
struct log_capture {
    ggml_log_callback prev_cb = nullptr;
    void * prev_ud = nullptr;
    std::string text;

    log_capture() {
        ggml_log_get(&prev_cb, &prev_ud);
        ggml_log_set(&log_capture::collect, this);
    }
    ~log_capture() { ggml_log_set(prev_cb, prev_ud); }

    static void collect(ggml_log_level level, const char * msg, void * ud) {
        if (level != GGML_LOG_LEVEL_ERROR && level != GGML_LOG_LEVEL_WARN && level != GGML_LOG_LEVEL_CONT) return;
        auto * self = static_cast<log_capture *>(ud);
        if (self->text.size() < 2000) self->text += msg;
    }
    // The captured lines on one line, without trailing newlines.
    std::string one_line() const {
        std::string s = text;
        for (char & c : s) if (c == '\n') c = ' ';
        while (!s.empty() && s.back() == ' ') s.pop_back();
        return s;
    }
};

} // namespace

bool gguf_get_uint(const gguf_context * ctx, const char * key, uint64_t & out) {
    const int64_t id = gguf_find_key(ctx, key);
    if (id < 0) return false;
    int64_t v = -1;
    switch (gguf_get_kv_type(ctx, id)) {
        case GGUF_TYPE_UINT8:  v = gguf_get_val_u8(ctx, id);  break;
        case GGUF_TYPE_INT8:   v = gguf_get_val_i8(ctx, id);  break;
        case GGUF_TYPE_UINT16: v = gguf_get_val_u16(ctx, id); break;
        case GGUF_TYPE_INT16:  v = gguf_get_val_i16(ctx, id); break;
        case GGUF_TYPE_UINT32: v = gguf_get_val_u32(ctx, id); break;
        case GGUF_TYPE_INT32:  v = gguf_get_val_i32(ctx, id); break;
        case GGUF_TYPE_UINT64: out = gguf_get_val_u64(ctx, id); return true;
        case GGUF_TYPE_INT64:  v = gguf_get_val_i64(ctx, id); break;
        default: return false;
    }
    if (v < 0) return false;
    out = (uint64_t) v;
    return true;
}

dense_gguf::~dense_gguf() {
    if (file_) fclose(file_);
    if (gguf_) gguf_free(gguf_);
    if (meta_) ggml_free(meta_);
}

Status dense_gguf::open(const std::string & path) {
    path_ = path;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return Status::io_error(where() + "cannot open: " + strerror(errno));
    if (!S_ISREG(st.st_mode)) return Status::io_error(where() + "not a regular file");
    file_ = fopen(path.c_str(), "rb");
    if (!file_) return Status::io_error(where() + "cannot open: " + strerror(errno));
    Status s = check_file_magic();
    if (s) s = parse_header();
    if (s) s = check_tensor_extents((uint64_t) st.st_size);
    if (s) s = check_architecture();
    if (s) s = find_ffn_layers();
    return s;
}

Status dense_gguf::check_file_magic() const {
    char magic[4] = {0, 0, 0, 0};
    const size_t n = fread(magic, 1, 4, file_);
    if (n < 4 || memcmp(magic, "GGUF", 4) != 0) {
        return Status::corruption(where() + "not a GGUF file (no \"GGUF\" magic at the start)");
    }
    return Status::ok();
}

Status dense_gguf::parse_header() {
    log_capture log;
    gguf_init_params params = {/*no_alloc =*/ true, /*ctx =*/ &meta_};
    gguf_ = gguf_init_from_file(path_.c_str(), params);
    if (!gguf_) {
        return Status::corruption(where() + "corrupt or truncated GGUF header" +
                                  (log.text.empty() ? std::string() : " (gguf: " + log.one_line() + ")"));
    }
    return Status::ok();
}

Status dense_gguf::check_tensor_extents(uint64_t file_size) const {
    const uint64_t data = gguf_get_data_offset(gguf_);
    for (int64_t id = 0; id < gguf_get_n_tensors(gguf_); ++id) {
        const uint64_t end = data + gguf_get_tensor_offset(gguf_, id) + gguf_get_tensor_size(gguf_, id);
        if (end > file_size) {
            return Status::corruption(where() + "truncated: tensor '" + gguf_get_tensor_name(gguf_, id) +
                                      "' ends at byte " + std::to_string(end) + " but the file has " +
                                      std::to_string(file_size) + " bytes");
        }
    }
    return Status::ok();
}

Status dense_gguf::check_architecture() {
    const int64_t arch_id = gguf_find_key(gguf_, "general.architecture");
    if (arch_id < 0 || gguf_get_kv_type(gguf_, arch_id) != GGUF_TYPE_STRING) {
        return Status::unsupported(where() + "no general.architecture string: not a llama model");
    }
    const std::string arch = gguf_get_val_str(gguf_, arch_id);
    if (arch != "llama") return Status::unsupported(where() + "architecture is '" + arch + "', not 'llama'");
    uint64_t v = 0;
    if (gguf_get_uint(gguf_, "llama.expert_count", v) && v > 0) {
        return Status::unsupported(where() + "already a MoE model (llama.expert_count = " + std::to_string(v) + ")");
    }
    if (!gguf_get_uint(gguf_, "llama.block_count", v) || v == 0 || v > 100000) {
        return Status::unsupported(where() + "llama.block_count missing or not a positive integer");
    }
    n_layer_ = (int64_t) v;
    if (!gguf_get_uint(gguf_, "llama.embedding_length", v) || v == 0 || v > (1u << 20)) {
        return Status::unsupported(where() + "llama.embedding_length missing or not a positive integer");
    }
    n_embd_ = (int64_t) v;
    for (int64_t id = 0; id < gguf_get_n_kv(gguf_); ++id) {
        // gguf_set_kv (used to copy the metadata) cannot copy arrays of arrays.
        if (gguf_get_kv_type(gguf_, id) == GGUF_TYPE_ARRAY && gguf_get_arr_type(gguf_, id) == GGUF_TYPE_ARRAY) {
            return Status::unsupported(where() + "metadata key '" + gguf_get_key(gguf_, id) + "' is a nested array");
        }
    }
    return Status::ok();
}

Status dense_gguf::check_ffn_tensor(const char * name, int64_t id, int64_t ne0, int64_t ne1) const {
    const int64_t * ne = gguf_get_tensor_ne(gguf_, id);
    if (ne[0] != ne0 || ne[1] != ne1 || ne[2] != 1 || ne[3] != 1) {
        return Status::unsupported(where() + "tensor '" + name + "' has shape [" + std::to_string(ne[0]) + ", " +
                                   std::to_string(ne[1]) + ", " + std::to_string(ne[2]) + ", " + std::to_string(ne[3]) +
                                   "], expected [" + std::to_string(ne0) + ", " + std::to_string(ne1) + "]");
    }
    const ggml_type type = gguf_get_tensor_type(gguf_, id);
    const ggml_type_traits * traits = ggml_get_type_traits(type);
    if (type != GGML_TYPE_F32 && (!traits || !traits->to_float)) {
        return Status::unsupported(where() + "tensor '" + name + "' has type " + ggml_type_name(type) +
                                   ", which cannot be dequantized");
    }
    return Status::ok();
}

Status dense_gguf::find_ffn_layers() {
    layers_.assign((size_t) n_layer_, dense_layer_ids());
    for (int64_t il = 0; il < n_layer_; ++il) {
        const std::string blk = "blk." + std::to_string(il) + ".";
        dense_layer_ids & ids = layers_[(size_t) il];
        ids.gate = gguf_find_tensor(gguf_, (blk + "ffn_gate.weight").c_str());
        ids.up   = gguf_find_tensor(gguf_, (blk + "ffn_up.weight").c_str());
        ids.down = gguf_find_tensor(gguf_, (blk + "ffn_down.weight").c_str());
        if (il == 0 && ids.gate < 0 && ids.up < 0 && ids.down < 0) {
            return Status::unsupported(where() + "no dense FFN tensors (blk.0.ffn_gate/ffn_up/ffn_down.weight)");
        }
        for (const char * moe : {"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
            const std::string w = blk + moe + ".weight";  // would collide with the tensors we add
            if (gguf_find_tensor(gguf_, w.c_str()) >= 0) {
                return Status::unsupported(where() + "already has MoE tensor '" + w + "'");
            }
        }
        for (const char * part : {"ffn_gate", "ffn_up", "ffn_down"}) {
            const std::string w = blk + part + ".weight", b = blk + part + ".bias";
            if (gguf_find_tensor(gguf_, w.c_str()) < 0) return Status::unsupported(where() + "missing tensor '" + w + "'");
            if (gguf_find_tensor(gguf_, b.c_str()) >= 0) {
                return Status::unsupported(where() + "tensor '" + b + "': FFN biases are not supported by llama MoE layers");
            }
        }
        if (il == 0) n_ff_ = gguf_get_tensor_ne(gguf_, ids.gate)[1];
        Status s = check_ffn_tensor((blk + "ffn_gate.weight").c_str(), ids.gate, n_embd_, n_ff_);
        if (s) s = check_ffn_tensor((blk + "ffn_up.weight").c_str(), ids.up, n_embd_, n_ff_);
        if (s) s = check_ffn_tensor((blk + "ffn_down.weight").c_str(), ids.down, n_ff_, n_embd_);
        if (!s) return s;
    }
    if (n_ff_ < 1) return Status::unsupported(where() + "n_ff is 0");
    return Status::ok();
}

int64_t dense_gguf::ffn_layer_of(int64_t id) const {
    for (size_t il = 0; il < layers_.size(); ++il) {
        const dense_layer_ids & l = layers_[il];
        if (id == l.gate || id == l.up || id == l.down) return (int64_t) il;
    }
    return -1;
}

Status dense_gguf::read_raw(int64_t id, std::vector<uint8_t> & out) const {
    const uint64_t offset = gguf_get_data_offset(gguf_) + gguf_get_tensor_offset(gguf_, id);
    out.resize(gguf_get_tensor_size(gguf_, id));
    if (fseeko(file_, (off_t) offset, SEEK_SET) != 0 || fread(out.data(), 1, out.size(), file_) != out.size()) {
        return Status::io_error(where() + "cannot read tensor '" + gguf_get_tensor_name(gguf_, id) + "'");
    }
    return Status::ok();
}

Status dense_gguf::read_f32(int64_t id, std::vector<float> & out) const {
    std::vector<uint8_t> raw;
    Status s = read_raw(id, raw);
    if (!s) return s;
    const int64_t * ne = gguf_get_tensor_ne(gguf_, id);
    const int64_t n = ne[0] * ne[1] * ne[2] * ne[3];
    out.resize((size_t) n);
    const ggml_type type = gguf_get_tensor_type(gguf_, id);
    if (type == GGML_TYPE_F32) {
        memcpy(out.data(), raw.data(), (size_t) n * sizeof(float));
    } else {
        ggml_get_type_traits(type)->to_float(raw.data(), out.data(), n);
    }
    return Status::ok();
}

Status dense_gguf::read_ffn(int64_t il, dense_ffn & out) const {
    out.n_embd = n_embd_;
    out.n_ff = n_ff_;
    const dense_layer_ids & ids = layers_[(size_t) il];
    Status s = read_f32(ids.gate, out.gate);
    if (s) s = read_f32(ids.up, out.up);
    if (s) s = read_f32(ids.down, out.down);
    return s;
}

} // namespace moezip_upcycle
