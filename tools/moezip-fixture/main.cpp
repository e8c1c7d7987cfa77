// moezip-fixture: writes a deterministic synthetic qwen3moe GGUF model that the engine loads and
// runs. See docs/fixtures.md. Exit status 0 on success, 1 on any error (one line on stderr),
// CLI11's own non-zero codes for malformed flags.
#include "tools/moezip-fixture/fixture_config.h"
#include "tools/moezip-fixture/fixture_vocab.h"
#include "tools/moezip-fixture/fixture_writer.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

using moezip::fixture_hparams;

/// One optional integer override of a preset field.
struct override_flag {
    const char * flags;
    const char * help;
    int64_t fixture_hparams::* field;
    int64_t value = 0;
    CLI::Option * option = nullptr;
};

/// The command line, as parsed.
struct cli_args {
    std::string output, preset = "tiny", type_name = "f32";
    uint64_t seed = 1;
    std::vector<override_flag> overrides = {
        {"--n-embd", "width of the residual stream", &fixture_hparams::n_embd},
        {"--n-layer", "number of layers (blocks)", &fixture_hparams::n_layer},
        {"--n-expert", "experts per layer", &fixture_hparams::n_expert},
        {"--n-expert-used", "experts each token uses (top-k)", &fixture_hparams::n_expert_used},
        {"--n-ff-exp", "hidden width of one expert", &fixture_hparams::n_ff_exp},
        {"--n-head", "query heads", &fixture_hparams::n_head},
        {"--n-head-kv", "key/value heads (divides --n-head)", &fixture_hparams::n_head_kv},
        {"--head-dim", "width of one attention head (even)", &fixture_hparams::head_dim},
        {"--n-ctx-train", "context_length written to the file", &fixture_hparams::n_ctx_train},
        {"--vocab-size", "tokens in the vocab: the built-in vocab padded with <extra_N> pieces", &fixture_hparams::n_vocab},
    };
};

const char * const k_description =
    "Writes a deterministic synthetic qwen3moe (MoE) GGUF model for tests and benchmarks.\n"
    "Same flags and seed give the same bytes. Presets:\n"
    "  tiny    n_embd 64, 2 layers, 8 experts top-2, n_ff_exp 64, 4/2 heads of 16\n"
    "  small   n_embd 256, 2 layers, 8 experts top-2, n_ff_exp 256, 4/2 heads of 64 (K-quant capable)\n"
    "  a3b-L4  Qwen3-30B-A3B shape: n_embd 2048, 128 experts top-8, n_ff_exp 768, 32/4 heads of 128, 4 layers\n"
    "  a3b-L8  the same with 8 layers\n"
    "Exit status: 0 ok, 1 error (one line on stderr), other non-zero for malformed flags.";

std::string join(const std::vector<std::string> & v) {
    std::string out;
    for (const auto & s : v) out += (out.empty() ? "" : ", ") + s;
    return out;
}

void add_flags(CLI::App & app, cli_args & a) {
    app.add_option("-o,--output", a.output, "GGUF file to write (replaced if it exists)")->required();
    app.add_option("--preset", a.preset, "model shape: " + join(moezip::fixture_preset_names()))->capture_default_str();
    app.add_option("--type", a.type_name,
                   "type of the expert, attention, token_embd and output matrices: " + join(moezip::fixture_type_names()) +
                       " (norms and the router ffn_gate_inp stay f32)")
        ->capture_default_str();
    app.add_option("--seed", a.seed, "seed of the random weights")->capture_default_str();
    for (auto & o : a.overrides) {
        std::string help = std::string(o.help) + " (overrides the preset)";
        if (o.field == &fixture_hparams::n_vocab) {
            help = std::string(o.help) + " (default and minimum " + std::to_string(moezip::fixture_vocab_base_size()) + ")";
        }
        o.option = app.add_option(o.flags, o.value, help);
    }
}

/// Resolves the flags into a config. Errors: unknown preset or type.
moezip::Status make_config(const cli_args & a, moezip::fixture_config & cfg) {
    cfg.preset = a.preset;
    cfg.seed = a.seed;
    moezip::Status st = moezip::fixture_preset_lookup(a.preset, cfg.hp);
    if (st) st = moezip::fixture_type_lookup(a.type_name, cfg.weight_type);
    for (const auto & o : a.overrides) {
        if (o.option->count() > 0) cfg.hp.*o.field = o.value;
    }
    return st;
}

int fail(const moezip::Status & st) {
    fprintf(stderr, "moezip-fixture: error: %s\n", st.message().c_str());
    return 1;
}

} // namespace

int main(int argc, char ** argv) {
    CLI::App app{k_description, "moezip-fixture"};
    cli_args args;
    add_flags(app, args);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        return app.exit(e);
    }
    try {
        moezip::fixture_config cfg;
        moezip::Status st = make_config(args, cfg);
        if (!st) return fail(st);
        moezip::fixture_write_result res;
        st = moezip::fixture_write(cfg, args.output, res);
        if (!st) return fail(st);
        printf("moezip-fixture: %s: preset %s, type %s, seed %llu, %lld tensors, vocab %lld, %lld bytes\n",
               args.output.c_str(), cfg.preset.c_str(), ggml_type_name(cfg.weight_type), (unsigned long long) cfg.seed,
               (long long) res.n_tensors, (long long) res.n_vocab, (long long) res.n_bytes);
    } catch (const std::exception & e) {
        return fail(moezip::Status::io_error(e.what())); // std::bad_alloc for a shape too large for memory
    }
    return 0;
}
