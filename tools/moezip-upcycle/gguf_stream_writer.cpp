#include "tools/moezip-upcycle/gguf_stream_writer.h"

#include "gguf.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unistd.h>

using moezip::Status;

namespace moezip_upcycle {

namespace {

// Appends bytes to the open file, counting them; the first failure sticks.
struct counted_file {
    FILE * f = nullptr;
    uint64_t written = 0;
    bool ok = true;

    void write(const void * data, size_t n) {
        if (ok && n > 0 && fwrite(data, 1, n, f) != n) ok = false;
        written += n;
    }
    void pad_to(size_t alignment) {
        static const uint8_t zeros[256] = {0};
        while (written % alignment != 0) {
            const size_t n = std::min<size_t>(sizeof zeros, alignment - written % alignment);
            write(zeros, n);
        }
    }
};

Status write_all(const gguf_context * ctx, counted_file & out, const tensor_bytes_fn & produce,
                 const std::string & path) {
    std::vector<uint8_t> meta(gguf_get_meta_size(ctx));
    gguf_get_meta_data(ctx, meta.data());
    out.write(meta.data(), meta.size());
    const uint64_t data_start = out.written;
    const size_t alignment = gguf_get_alignment(ctx);
    std::vector<uint8_t> bytes;
    for (int64_t id = 0; id < gguf_get_n_tensors(ctx); ++id) {
        if (out.written - data_start != gguf_get_tensor_offset(ctx, id)) {
            return Status::corruption(path + ": internal error: tensor '" + gguf_get_tensor_name(ctx, id) +
                                      "' would not start at its recorded offset");
        }
        Status s = produce(id, bytes);
        if (!s) return s;
        if (bytes.size() != gguf_get_tensor_size(ctx, id)) {
            return Status::corruption(path + ": internal error: tensor '" + gguf_get_tensor_name(ctx, id) +
                                      "' produced " + std::to_string(bytes.size()) + " bytes, expected " +
                                      std::to_string(gguf_get_tensor_size(ctx, id)));
        }
        out.write(bytes.data(), bytes.size());
        out.pad_to(alignment);
        if (!out.ok) return Status::io_error(path + ": write failed: " + strerror(errno));
    }
    return Status::ok();
}

} // namespace

Status gguf_stream_write(const gguf_context * ctx, const std::string & path,
                         const tensor_bytes_fn & produce, uint64_t & n_bytes) {
    const std::string tmp = path + ".tmp";
    counted_file out;
    out.f = fopen(tmp.c_str(), "wb");
    if (!out.f) return Status::io_error(path + ": cannot create '" + tmp + "': " + strerror(errno));
    Status s = write_all(ctx, out, produce, path);
    if (fclose(out.f) != 0 && s) s = Status::io_error(path + ": write failed: " + strerror(errno));
    if (s && rename(tmp.c_str(), path.c_str()) != 0) {
        s = Status::io_error(path + ": cannot rename '" + tmp + "' to it: " + strerror(errno));
    }
    if (!s) {
        unlink(tmp.c_str());
        return s;
    }
    n_bytes = out.written;
    return Status::ok();
}

} // namespace moezip_upcycle
