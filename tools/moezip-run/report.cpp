#include "tools/moezip-run/report.h"

#include <ggml.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace moezip_run {

using moezip::Status;

static double tokens_per_s(int32_t n_tokens, double ms) { return ms > 0 ? n_tokens * 1000.0 / ms : 0.0; }

std::string report_summary_line(const generate_result & r) {
    char buf[256];
    snprintf(buf, sizeof buf, "prefill %d tokens %.2f ms %.2f tok/s, decode %d tokens %.2f ms %.2f tok/s",
             r.n_prefill, r.prefill_ms, tokens_per_s(r.n_prefill, r.prefill_ms),
             r.n_decode, r.decode_ms, tokens_per_s(r.n_decode, r.decode_ms));
    return buf;
}

static nlohmann::ordered_json settings_json(const run_options & o, uint32_t n_ctx) {
    nlohmann::ordered_json s = {
        {"threads", o.n_threads}, {"ubatch", o.n_ubatch}, {"ctx", n_ctx},
        {"no_repack", o.no_repack}, {"mmap", o.use_mmap}, {"n_predict", o.n_predict}, {"warmup", o.warmup},
        {"stop_at_eog", o.stop_at_eog}, {"seed", o.seed},
    };
    if (o.n_fixture > 0) s["fixture"] = o.n_fixture;
    else s["prompt"] = o.prompt;
    return s;
}

// tok_s is null for a phase with no token or no time (-n 0 or 1: no decode step): a rate of 0
// would read as a measured one.
static nlohmann::ordered_json timing_json(int32_t n_tokens, double ms) {
    nlohmann::ordered_json j = {{"tokens", n_tokens}, {"ms", ms}, {"tok_s", nullptr}};
    if (n_tokens > 0 && ms > 0) j["tok_s"] = tokens_per_s(n_tokens, ms);
    return j;
}

// The decode timing plus each step's ms and their median (mean of the middle two for an even
// count; null with no step).
static nlohmann::ordered_json decode_json(const generate_result & r) {
    nlohmann::ordered_json j = timing_json(r.n_decode, r.decode_ms);
    std::vector<double> sorted = r.decode_step_ms;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    if (n == 0) j["step_ms_median"] = nullptr;
    else j["step_ms_median"] = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    j["step_ms"] = r.decode_step_ms;
    return j;
}

nlohmann::ordered_json report_json(const run_report & rep) {
    std::vector<std::string> hashes;
    for (uint64_t h : rep.result.logits_xxh3) {
        char buf[17];
        snprintf(buf, sizeof buf, "%016" PRIx64, h);
        hashes.push_back(buf);
    }
    return {
        {"schema", "moezip-run/1"},
        {"model", rep.opts->model_path},
        {"model_bytes", rep.model_bytes},
        {"engine", {{"ggml_version", ggml_version()}, {"ggml_commit", ggml_commit()}}},
        {"n_vocab", rep.n_vocab},
        {"settings", settings_json(*rep.opts, rep.n_ctx)},
        {"prompt_tokens", rep.prompt_tokens},
        {"tokens", rep.result.tokens},
        {"text", rep.text},
        {"logits_xxh3", hashes},
        {"prefill", timing_json(rep.result.n_prefill, rep.result.prefill_ms)},
        {"decode", decode_json(rep.result)},
    };
}

Status report_write_json(const std::string & path, const nlohmann::ordered_json & json) {
    // Text cut inside a UTF-8 sequence (byte tokens) is written with U+FFFD rather than failing.
    const std::string body = json.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    FILE * f = fopen(tmp.c_str(), "wb");
    if (!f) return Status::io_error("cannot write --json file " + tmp + ": " + strerror(errno));
    bool ok = fwrite(body.data(), 1, body.size(), f) == body.size();
    ok = fflush(f) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (!ok) {
        unlink(tmp.c_str());
        return Status::io_error("cannot write --json file " + tmp + ": " + strerror(errno));
    }
    if (rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string err = strerror(errno);
        unlink(tmp.c_str());
        return Status::io_error("cannot rename " + tmp + " to --json file " + path + ": " + err);
    }
    return Status::ok();
}

} // namespace moezip_run
