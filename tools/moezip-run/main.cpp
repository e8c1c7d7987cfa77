// moezip-run: a small, ordinary host of the engine's C API (llama.h) used as the project's test and
// benchmark harness. It loads a GGUF model, prefills a prompt (text or a seeded fixture of token
// ids), greedy-decodes a fixed number of tokens and reports ids, logits hashes and speed.
// It knows nothing about libmoezip: the preload library is tested by running this binary under it.
// Flags, JSON schema and exit codes: docs/internals/moezip-run.md.

#include "tools/moezip-run/engine.h"
#include "tools/moezip-run/generate.h"
#include "tools/moezip-run/prompt.h"
#include "tools/moezip-run/report.h"
#include "tools/moezip-run/run_options.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <memory>

using moezip::Status;
using namespace moezip_run;

namespace {

const char * const exit_codes_help =
    "Exit codes: 0 = done; 1 = runtime error (missing, truncated or non-GGUF model file, prompt\n"
    "longer than the context, engine failure, --json not writable); 2 = usage error (bad or\n"
    "missing flags).";

// Declares the flags of run_options on app.
void add_flags(CLI::App & app, run_options & o) {
    app.add_option("-m,--model", o.model_path, "GGUF model file")->required();
    CLI::Option_group * src = app.add_option_group("prompt source", "exactly one of -p or --fixture");
    src->add_option("-p,--prompt", o.prompt, "prompt text (BOS added as the model asks)");
    src->add_option("--fixture", o.n_fixture,
                    "N token ids from a seeded generator over the vocab, control tokens skipped")
        ->check(CLI::Range(1, 1 << 20));
    src->require_option(1);
    app.add_option("--seed", o.seed, "seed of --fixture")->capture_default_str();
    app.add_option("-n,--n-predict", o.n_predict, "greedy steps (generated tokens)")->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    app.add_flag("--warmup", o.warmup,
                 "before the timed run, evaluate the prompt and one decode step untimed and clear the KV cache "
                 "(as llama-bench warms up: first-touch of buffers and weights is not timed)");
    app.add_flag("--stop-at-eog", o.stop_at_eog, "stop early at an end-of-generation token (default: never)");
    app.add_option("-t,--threads", o.n_threads, "n_threads and n_threads_batch")->capture_default_str()
        ->check(CLI::Range(1, 1024));
    app.add_option("-b,--ubatch", o.n_ubatch, "n_ubatch and n_batch")->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("-c,--ctx", o.n_ctx, "context size in tokens (default: prompt + n-predict rounded up to 256)")
        ->check(CLI::Range(1, 1 << 24));
    app.add_flag("--no-repack", o.no_repack, "keep weights in GGUF layout (use_extra_bufts = false)");
    app.add_flag_callback("--no-mmap", [&o]() { o.use_mmap = false; },
                          "read the model into memory instead of mapping it");
    app.add_option("--json", o.json_path, "write a report to this file (atomically)");
    app.add_flag("--quiet", o.quiet, "print no text on stdout");
    app.add_flag("--verbose", o.verbose, "let llama.cpp and ggml log to stderr");
}

int fail(const Status & st) {
    fprintf(stderr, "moezip-run: error: %s\n", st.message().c_str());
    return exit_runtime;
}

// Context size: -c, or prompt + n_predict rounded up to a multiple of 256, at least 256.
uint32_t context_size(const run_options & o, int32_t n_prompt) {
    if (o.n_ctx > 0) return (uint32_t) o.n_ctx;
    const int64_t need = (int64_t) n_prompt + o.n_predict;
    return (uint32_t) std::max<int64_t>(256, (need + 255) / 256 * 256);
}

Status check_fits(const run_options & o, int32_t n_prompt, uint32_t n_ctx) {
    if ((uint32_t) n_prompt > n_ctx) {
        return Status::invalid_argument("prompt has " + std::to_string(n_prompt) +
                                        " tokens, longer than the context of " + std::to_string(n_ctx) + " tokens (-c)");
    }
    const int64_t need = (int64_t) n_prompt + std::max(o.n_predict - 1, 0);
    if (need > (int64_t) n_ctx) {
        return Status::invalid_argument("prompt (" + std::to_string(n_prompt) + " tokens) and -n " +
                                        std::to_string(o.n_predict) + " need " + std::to_string(need) +
                                        " positions, more than the context of " + std::to_string(n_ctx) + " tokens (-c)");
    }
    return Status::ok();
}

struct model_deleter { void operator()(llama_model * m) const { llama_model_free(m); } };
struct context_deleter { void operator()(llama_context * c) const { llama_free(c); } };

int run(const run_options & o) {
    engine_log_init(o.verbose);
    run_report rep;
    rep.opts = &o;
    Status st = model_file_check(o.model_path, &rep.model_bytes);
    if (st) st = engine_load_backends(nullptr);
    if (!st) return fail(st);

    llama_model * model_raw = nullptr;
    if (!(st = engine_load_model(o, &model_raw))) return fail(st);
    std::unique_ptr<llama_model, model_deleter> model(model_raw);
    const llama_vocab * vocab = llama_model_get_vocab(model.get());
    rep.n_vocab = llama_vocab_n_tokens(vocab);

    st = o.n_fixture > 0 ? prompt_from_fixture(vocab, o.n_fixture, o.seed, &rep.prompt_tokens)
                         : prompt_from_text(vocab, o.prompt, &rep.prompt_tokens);
    const int32_t n_prompt = (int32_t) rep.prompt_tokens.size();
    rep.n_ctx = context_size(o, n_prompt);
    if (st) st = check_fits(o, n_prompt, rep.n_ctx);
    if (!st) return fail(st);

    llama_context * ctx_raw = nullptr;
    if (!(st = engine_init_context(model.get(), o, rep.n_ctx, &ctx_raw))) return fail(st);
    std::unique_ptr<llama_context, context_deleter> ctx(ctx_raw);

    generate_params gp;
    gp.n_batch = o.n_ubatch;
    gp.n_predict = o.n_predict;
    gp.stop_at_eog = o.stop_at_eog;
    if (o.warmup && !(st = warm_up(ctx.get(), rep.prompt_tokens, gp))) return fail(st);
    if (!(st = generate_greedy(ctx.get(), rep.prompt_tokens, gp, &rep.result))) return fail(st);
    rep.text = tokens_to_text(vocab, rep.result.tokens);

    if (!o.quiet) {
        const std::string prompt_text = o.n_fixture > 0 ? tokens_to_text(vocab, rep.prompt_tokens) : o.prompt;
        fprintf(stdout, "%s%s\n", prompt_text.c_str(), rep.text.c_str());
        fflush(stdout);
    }
    fprintf(stderr, "moezip-run: %s\n", report_summary_line(rep.result).c_str());
    if (!o.json_path.empty() && !(st = report_write_json(o.json_path, report_json(rep)))) return fail(st);
    ctx.reset();
    model.reset();
    llama_backend_free();
    return exit_ok;
}

} // namespace

int main(int argc, char ** argv) {
    run_options opts;
    CLI::App app{"moezip-run: load a GGUF model with llama.cpp, prefill a prompt, greedy-decode, report."};
    app.footer(exit_codes_help);
    app.failure_message([](const CLI::App *, const CLI::Error & e) {
        return std::string("moezip-run: usage error: ") + e.what() + "\nRun with --help for more information.\n";
    });
    add_flags(app, opts);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        return app.exit(e) == 0 ? exit_ok : exit_usage;
    }
    try {
        return run(opts);
    } catch (const std::exception & e) {
        fprintf(stderr, "moezip-run: error: %s\n", e.what());
        return exit_runtime;
    }
}
