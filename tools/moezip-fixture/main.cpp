// moezip-fixture: writes a deterministic synthetic MoE GGUF model (qwen3moe, or another arch of
// fixture_arch.h; one file or llama.cpp's split files) that the engine loads and runs. See
// docs/internals/fixtures.md. Exit status 0 on success, 1 on any error (one line on stderr),
// CLI11's own non-zero codes for malformed flags.
#include "tools/moezip-fixture/fixture_arch.h"
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
    std::string output, preset = "tiny", type_name = "f32", arch = "qwen3moe", n_expert_used;
    uint64_t seed = 1;
    int64_t n_split = 1;
    bool fast_quant = false;
    std::vector<override_flag> overrides = {
        {"--n-embd", "width of the residual stream", &fixture_hparams::n_embd},
        {"--n-layer", "number of layers (blocks)", &fixture_hparams::n_layer},
        {"--n-expert", "experts per layer", &fixture_hparams::n_expert},
        {"--n-ff-exp", "hidden width of one expert", &fixture_hparams::n_ff_exp},
        {"--n-head", "query heads", &fixture_hparams::n_head},
        {"--n-head-kv", "key/value heads (divides --n-head)", &fixture_hparams::n_head_kv},
        {"--head-dim", "width of one attention head (even)", &fixture_hparams::head_dim},
        {"--n-ctx-train", "context_length written to the file", &fixture_hparams::n_ctx_train},
        {"--vocab-size", "tokens in the vocab: the built-in vocab padded with <extra_N> pieces", &fixture_hparams::n_vocab},
    };
};

const char * const k_description =
    "Writes a deterministic synthetic MoE GGUF model for tests and benchmarks (qwen3moe by default).\n"
    "Same flags and seed give the same bytes. Presets (qwen3moe shapes; other archs derive their extra widths):\n"
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

std::string arch_help() {
    std::string help = "architecture (general.architecture):";
    for (const auto & name : moezip::fixture_arch_names())
        help += "\n  " + name + ": " + moezip::fixture_arch_find(name)->summary;
    return help;
}

void add_flags(CLI::App & app, cli_args & a) {
    app.add_option("-o,--output", a.output,
                   "GGUF file to write (replaced if it exists); with --split-files N the files are OUTPUT "
                   "without .gguf + -00001-of-0000N.gguf ...")->required();
    app.add_option("--arch", a.arch, arch_help())->capture_default_str();
    app.add_option("--split-files", a.n_split, "write the model as N files, llama.cpp's split convention")->capture_default_str();
    app.add_option("--n-expert-used", a.n_expert_used,
                   "experts each token uses (top-k), or one count per layer: 4,2,2 (overrides the preset)");
    app.add_option("--preset", a.preset, "model shape: " + join(moezip::fixture_preset_names()))->capture_default_str();
    app.add_option("--type", a.type_name,
                   "type of the expert, attention, token_embd and output matrices: " + join(moezip::fixture_type_names()) +
                       " (norms and the router ffn_gate_inp stay f32)")
        ->capture_default_str();
    app.add_option("--seed", a.seed, "seed of the random weights")->capture_default_str();
    app.add_flag("--fast-quant", a.fast_quant,
                 "q4_K and q8_0 tensors as random valid blocks drawn directly, not quantized from f32 values: "
                 "other bytes, about 100x faster for q4_K (a 48-layer Qwen3-30B-A3B shape in minutes)");
    for (auto & o : a.overrides) {
        std::string help = std::string(o.help) + " (overrides the preset)";
        if (o.field == &fixture_hparams::n_vocab) {
            help = std::string(o.help) + " (default and minimum " + std::to_string(moezip::fixture_vocab_base_size()) + ")";
        }
        o.option = app.add_option(o.flags, o.value, help);
    }
}

/// Resolves the flags into a config: the preset, adapted to the arch, then the overrides. Errors:
/// unknown preset, arch or type, a malformed --n-expert-used.
moezip::Status make_config(const cli_args & a, moezip::fixture_config & cfg) {
    cfg.preset = a.preset;
    cfg.seed = a.seed;
    cfg.arch = a.arch;
    cfg.n_split = a.n_split;
    cfg.fast_quant = a.fast_quant;
    moezip::Status st = moezip::fixture_preset_lookup(a.preset, cfg.hp);
    if (st) st = moezip::fixture_type_lookup(a.type_name, cfg.weight_type);
    if (!st) return st;
    const moezip::fixture_arch * arch = moezip::fixture_arch_find(a.arch);
    if (arch == nullptr)
        return moezip::Status::invalid_argument("unknown --arch '" + a.arch + "' (known: " + join(moezip::fixture_arch_names()) + ")");
    moezip::fixture_arch_adapt_preset(*arch, cfg.hp);
    for (const auto & o : a.overrides) {
        if (o.option->count() > 0) cfg.hp.*o.field = o.value;
    }
    if (!a.n_expert_used.empty()) return moezip::fixture_expert_used_parse(a.n_expert_used, cfg.hp);
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
        std::string files = res.paths.front();
        for (size_t k = 1; k < res.paths.size(); ++k) files += ", " + res.paths[k];
        printf("moezip-fixture: %s: arch %s, preset %s, type %s%s, seed %llu, %lld layers, %lld tensors, vocab %lld, %lld bytes\n",
               files.c_str(), cfg.arch.c_str(), cfg.preset.c_str(), ggml_type_name(cfg.weight_type),
               cfg.fast_quant ? " (fast-quant)" : "", (unsigned long long) cfg.seed, (long long) cfg.hp.n_layer, (long long) res.n_tensors, (long long) res.n_vocab,
               (long long) res.n_bytes);
    } catch (const std::exception & e) {
        return fail(moezip::Status::io_error(e.what())); // std::bad_alloc for a shape too large for memory
    }
    return 0;
}
