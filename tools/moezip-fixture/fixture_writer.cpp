#include "tools/moezip-fixture/fixture_writer.h"

#include "tools/moezip-fixture/fixture_arch.h"
#include "tools/moezip-fixture/fixture_fast_quant.h"
#include "tools/moezip-fixture/fixture_meta.h"
#include "tools/moezip-fixture/fixture_rng.h"
#include "tools/moezip-fixture/fixture_split.h"
#include "tools/moezip-fixture/fixture_tensors.h"
#include "tools/moezip-fixture/fixture_vocab.h"

#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>
#include <vector>

namespace moezip {

namespace {

using clock_type = std::chrono::steady_clock;

// f32 values generated and converted per step; bounds the memory of a write.
constexpr int64_t k_chunk_elements = 4 << 20;

/// Progress on stderr: silent for the first second, then at most one line per second.
class progress_meter {
public:
    explicit progress_meter(int64_t total) : total_(total), start_(clock_type::now()), last_(start_) {}

    void update(int64_t done, const std::string & tensor) {
        const auto now = clock_type::now();
        if (now - start_ < std::chrono::seconds(1) || now - last_ < std::chrono::seconds(1)) return;
        last_ = now;
        fprintf(stderr, "moezip-fixture: %5.1f%%  %.1f of %.1f MB  %s\n", 100.0 * (double) done / (double) total_,
                (double) done / 1e6, (double) total_ / 1e6, tensor.c_str());
    }

    double seconds() const { return std::chrono::duration<double>(clock_type::now() - start_).count(); }

    void finish(const std::string & path) const {
        const double s = seconds();
        if (s >= 1.0) fprintf(stderr, "moezip-fixture: wrote %s in %.1f s\n", path.c_str(), s);
    }

private:
    int64_t total_;
    clock_type::time_point start_, last_;
};

/// A FILE that records the first write error; closed at scope end, and removed there unless
/// close() succeeded (no half-written fixture is left behind).
class output_file {
public:
    explicit output_file(const std::string & path) : path_(path), f_(fopen(path.c_str(), "wb")) {
        struct stat st;
        if (!f_) err_ = errno;
        else regular_ = fstat(fileno(f_), &st) == 0 && S_ISREG(st.st_mode);
    }
    ~output_file() {
        if (f_) fclose(f_);
        if (!keep_ && regular_) remove(path_.c_str()); // never a device or pipe given as -o
    }
    output_file(const output_file &) = delete;
    output_file & operator=(const output_file &) = delete;

    bool opened() const { return f_ != nullptr; }
    void write(const void * data, size_t n) {
        if (err_ == 0 && fwrite(data, 1, n, f_) != n) err_ = errno ? errno : EIO;
        pos_ += (int64_t) n;
    }
    void pad_to(int64_t offset) {
        static const char zeros[256] = {};
        while (pos_ < offset) write(zeros, (size_t) std::min<int64_t>(offset - pos_, (int64_t) sizeof zeros));
    }
    int64_t pos() const { return pos_; }
    /// Closes the file; ok when every write and the close succeeded (then the file is kept).
    Status close() {
        if (fclose(f_) != 0 && err_ == 0) err_ = errno ? errno : EIO;
        f_ = nullptr;
        if (err_ != 0) return error("cannot write");
        keep_ = true;
        return Status::ok();
    }
    Status error(const char * what) const {
        return Status::io_error(std::string(what) + " " + path_ + ": " + strerror(err_));
    }
    bool failed() const { return err_ != 0; }

private:
    std::string path_;
    FILE * f_;
    int err_ = 0;
    int64_t pos_ = 0;
    bool keep_ = false;
    bool regular_ = false;
};

/// Draws tensor `t`'s quantized blocks directly (fixture_fast_quant.h), chunk by chunk, into `out`.
void write_fast_quant_data(const fixture_tensor & t, uint64_t seed, output_file & out, progress_meter & meter,
                           int64_t & done) {
    fixture_fast_quant gen(t, seed);
    const int64_t rows_per_chunk = std::max<int64_t>(1, k_chunk_elements / t.ne[0]);
    std::vector<uint8_t> converted;
    for (int64_t row = 0; row < t.n_rows() && !out.failed(); row += rows_per_chunk) {
        converted.clear();
        gen.next_rows(std::min(rows_per_chunk, t.n_rows() - row), converted);
        out.write(converted.data(), converted.size());
        done += (int64_t) converted.size();
        meter.update(done, t.name);
    }
}

/// Generates tensor `t` chunk by chunk, converts it to t.type and appends it to `out`.
void write_tensor_data(const fixture_tensor & t, uint64_t seed, bool fast_quant, output_file & out,
                       progress_meter & meter, int64_t & done) {
    if (fast_quant && fixture_fast_quant_supports(t)) return write_fast_quant_data(t, seed, out, meter, done);
    fixture_rng rng(seed, t.name);
    const float amplitude = std::sqrt(3.0f) * t.std; // uniform(-a, a) has std a/sqrt(3)
    const int64_t rows_per_chunk = std::max<int64_t>(1, k_chunk_elements / t.ne[0]);
    const size_t row_size = ggml_row_size(t.type, t.ne[0]);
    std::vector<float> values;
    std::vector<uint8_t> converted;
    for (int64_t row = 0; row < t.n_rows() && !out.failed(); row += rows_per_chunk) {
        const int64_t n_rows = std::min(rows_per_chunk, t.n_rows() - row);
        values.resize((size_t) (n_rows * t.ne[0]));
        for (float & v : values) v = t.center + amplitude * rng.next_symmetric();
        converted.resize(row_size * (size_t) n_rows);
        ggml_quantize_chunk(t.type, values.data(), converted.data(), 0, n_rows, t.ne[0], nullptr);
        out.write(converted.data(), converted.size());
        done += (int64_t) converted.size();
        meter.update(done, t.name);
    }
}

/// One file of the model: its header and the plan entries it holds.
struct file_job {
    std::string path;
    fixture_part part;
    fixture_meta meta;
    std::vector<uint8_t> header;
    int64_t size = 0;  ///< header + padded data
};

file_job make_job(const fixture_config & cfg, const fixture_arch & arch, const fixture_dims & d, const fixture_vocab & vocab,
                  const std::vector<fixture_tensor> & plan, const fixture_part & part, const std::string & path) {
    file_job job;
    job.path = path;
    job.part = part;
    job.meta = fixture_meta_build(cfg, arch, d, vocab, plan, part);
    const gguf_context * g = job.meta.gguf.get();
    job.header.resize(gguf_get_meta_size(g));
    gguf_get_meta_data(g, job.header.data());
    const int64_t last = part.n - 1;
    const int64_t data_size = part.n == 0 ? 0 :
        (int64_t) GGML_PAD(gguf_get_tensor_offset(g, last) + gguf_get_tensor_size(g, last), gguf_get_alignment(g));
    job.size = (int64_t) job.header.size() + data_size;  // the header is padded to the alignment
    return job;
}

/// Writes one file: its header, then each tensor's data at its offset, padded to the alignment.
Status write_job(const file_job & job, const std::vector<fixture_tensor> & plan, const fixture_config & cfg,
                 progress_meter & meter, int64_t & done) {
    const gguf_context * g = job.meta.gguf.get();
    const int64_t data_offset = (int64_t) job.header.size();
    output_file out(job.path);
    if (!out.opened()) return out.error("cannot create");
    out.write(job.header.data(), job.header.size());
    done += (int64_t) job.header.size();
    for (int64_t i = 0; i < job.part.n && !out.failed(); ++i) {
        out.pad_to(data_offset + (int64_t) gguf_get_tensor_offset(g, i));
        write_tensor_data(plan[(size_t) (job.part.first + i)], cfg.seed, cfg.fast_quant, out, meter, done);
    }
    out.pad_to(job.size);
    return out.close();
}

/// The shape after the arch's rules and the plan; errors name the flag or the tensor.
Status resolve(const fixture_config & cfg, const fixture_arch *& arch, fixture_dims & d, std::vector<fixture_tensor> & plan,
               int64_t & n_vocab) {
    arch = fixture_arch_find(cfg.arch);
    if (arch == nullptr) return Status::invalid_argument("unknown --arch '" + cfg.arch + "'");
    Status st = fixture_hparams_validate(cfg.hp, fixture_vocab_base_size());
    if (st) st = fixture_arch_resolve(*arch, cfg.hp, d);
    if (!st) return st;
    n_vocab = cfg.hp.n_vocab ? cfg.hp.n_vocab : fixture_vocab_base_size();
    plan = fixture_tensor_plan(cfg, *arch, d, n_vocab);
    st = fixture_tensor_plan_validate(plan);
    if (st) st = fixture_split_validate(cfg.n_split, (int64_t) plan.size());
    return st;
}

} // namespace

Status fixture_write(const fixture_config & cfg, const std::string & path, fixture_write_result & result) {
    const fixture_arch * arch = nullptr;
    fixture_dims d;
    std::vector<fixture_tensor> plan;
    int64_t n_vocab = 0;
    Status st = resolve(cfg, arch, d, plan, n_vocab);
    if (!st) return st;

    const fixture_vocab vocab = fixture_vocab_build(n_vocab);
    const std::vector<std::string> paths = fixture_split_paths(path, cfg.n_split);
    std::vector<file_job> jobs;
    int64_t total = 0;
    std::vector<uint64_t> bytes;
    for (const fixture_tensor & t : plan) bytes.push_back(ggml_row_size(t.type, t.ne[0]) * (uint64_t) t.n_rows());
    for (const fixture_part & part : fixture_split_plan(bytes, cfg.n_split)) {
        jobs.push_back(make_job(cfg, *arch, d, vocab, plan, part, paths[(size_t) part.no]));
        total += jobs.back().size;
    }
    progress_meter meter(total);
    int64_t done = 0;
    for (size_t k = 0; k < jobs.size(); ++k) {
        st = write_job(jobs[k], plan, cfg, meter, done);
        if (!st) {
            for (size_t j = 0; j < k; ++j) remove(jobs[j].path.c_str());  // no partial model is left behind
            return st;
        }
    }
    meter.finish(path);
    result.n_tensors = (int64_t) plan.size();
    result.n_vocab = n_vocab;
    result.n_bytes = total;
    result.paths = paths;
    result.seconds = meter.seconds();
    return Status::ok();
}

} // namespace moezip
