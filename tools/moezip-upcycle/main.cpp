// moezip-upcycle: dense llama GGUF -> MoE llama GGUF from the trained weights (MoEfication).
//
//   moezip-upcycle -i dense.gguf -o moe.gguf [--n-expert 8] [--n-expert-used 8]
//                  [--type same|f32|f16|q8_0|...] [--split contiguous|interleave|cluster]
//                  [--router-scale 0.1] [--experts split|replicate|none]
//
// --n-expert-used equal to --n-expert (the default) is the exact mode: the MoE model computes the
// dense FFN up to float summation order. Fewer used experts give a sparse top-k MoE (MoEfication).
// --experts replicate makes every expert a whole copy of the FFN (routing is real, text is dense).
// --type same (the default) writes each expert tensor in its dense tensor's type, so a quantized
// model's exact upcycle keeps its text. --experts none writes the dense model itself with its
// matrices converted to --type (llama-quantize's rules): a quantized dense model to compare with.
// See docs/internals/upcycle.md. Exit status 0 on success, 1 on any error (one message on stderr), 2 for
// bad command-line syntax.
#include "tools/moezip-upcycle/upcycle.h"

#include <CLI/CLI.hpp>

#include <cstdio>

using namespace moezip_upcycle;

namespace {

void print_summary(const upcycle_params & p, const upcycle_summary & s) {
    if (p.experts == expert_kind::none) {
        printf("moezip-upcycle: wrote %s (%llu bytes, %lld tensors): the dense model, %lld tensors converted to %s\n",
               p.output.c_str(), (unsigned long long) s.n_bytes, (long long) s.n_tensors, (long long) s.n_converted,
               type_choice_name(p.type).c_str());
        return;
    }
    const std::string types = std::string(ggml_type_name(s.exps_type[0])) + "/" + ggml_type_name(s.exps_type[1]) + "/" +
                              ggml_type_name(s.exps_type[2]);
    printf("moezip-upcycle: wrote %s (%llu bytes, %lld tensors): %lld layers, n_embd %lld, "
           "n_ff %lld -> %lld %s experts x n_ff_exp %lld (%lld padding units/layer), %lld used (%s), "
           "split %s, router %s, down x %g, experts %s (gate/up/down%s)\n",
           p.output.c_str(), (unsigned long long) s.n_bytes, (long long) s.n_tensors, (long long) s.n_layer,
           (long long) s.n_embd, (long long) s.n_ff, (long long) p.n_expert, expert_kind_name(p.experts), (long long) s.n_ff_exp,
           (long long) s.n_padding, (long long) p.n_expert_used,
           s.router == router_kind::zero ? "exact" : "routed", split_kind_name(p.split),
           router_kind_name(s.router), (double) s.down_scale, types.c_str(), p.type.same ? " of layer 0, as the dense model's" : "");
}

} // namespace

int main(int argc, char ** argv) {
    CLI::App app{"moezip-upcycle: turn a dense llama GGUF into a MoE llama GGUF from its trained weights"};
    upcycle_params p;
    std::string type_name = "same", split_name = "contiguous", experts_name = "split";
    int64_t n_expert_used = 0;
    app.add_option("-i,--input", p.input, "dense llama GGUF to read")->required();
    app.add_option("-o,--output", p.output, "MoE GGUF to write")->required();
    app.add_option("--n-expert", p.n_expert, "experts per layer (E)")->capture_default_str();
    app.add_option("--n-expert-used", n_expert_used, "experts used per token (K); default E = exact mode");
    std::string type_names;
    for (const auto & n : type_choice_names()) type_names += (type_names.empty() ? "" : ", ") + n;
    app.add_option("--type", type_name, "type of the expert tensors: " + type_names +
                   "; same = each its dense tensor's type (experts none: the type of the dense matrices)")
        ->capture_default_str();
    app.add_option("--split", split_name, "grouping of hidden units into experts")
        ->check(CLI::IsMember({"contiguous", "interleave", "cluster"}))->capture_default_str();
    app.add_option("--router-scale", p.router_scale, "factor on the gate_mean router rows (softmax temperature)")
        ->capture_default_str();
    app.add_option("--experts", experts_name, "split: experts partition the FFN; replicate: each expert is all of it; "
                   "none: write the dense model with its matrices converted to --type")
        ->check(CLI::IsMember({"split", "replicate", "none"}))->capture_default_str();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError & e) {
        return app.exit(e) == 0 ? 0 : 2;  // --help: 0; bad syntax: CLI11 printed why
    }

    p.n_expert_used = app.count("--n-expert-used") ? n_expert_used : p.n_expert;
    const moezip::Status ts = type_choice_parse(type_name, p.type);
    if (!ts) {
        fprintf(stderr, "moezip-upcycle: error: %s\n", ts.message().c_str());
        return 1;
    }
    split_kind_from_name(split_name, p.split);
    expert_kind_from_name(experts_name, p.experts);

    upcycle_summary summary;
    const moezip::Status s = upcycle_run(p, summary);
    if (!s) {
        fprintf(stderr, "moezip-upcycle: error: %s\n", s.message().c_str());
        return 1;
    }
    print_summary(p, summary);
    if (summary.graph_nodes_estimate > summary.graph_nodes_budget) {
        fprintf(stderr, "moezip-upcycle: warning: --n-expert-used %lld needs about %lld graph nodes, more than the %lld "
                "llama.cpp allocates (src/llama-context.cpp graph_max_nodes); the engine may abort when it loads %s\n",
                (long long) p.n_expert_used, (long long) summary.graph_nodes_estimate,
                (long long) summary.graph_nodes_budget, p.output.c_str());
    }
    return 0;
}
