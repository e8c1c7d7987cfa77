// moezip-slice: writes a GGUF holding only the routed experts one worker serves, so that a worker
// host stores and reads its share of a MoE model instead of the whole file
// (tools/moezip-slice/slice_writer.h; docs/worker.md "Serving a slice"). Exit status 0 on success,
// 1 on any error (one line on stderr naming the file), CLI11's own non-zero codes for malformed flags.
#include "coordinator/config/expert_range.h"
#include "tools/moezip-slice/slice_writer.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace {

const char * const kDescription =
    "Writes an expert slice of a GGUF MoE model: every metadata key of MODEL and, of every MoE layer,\n"
    "blk.N.ffn_{gate,up,down}_exps (and their biases) cut to the experts of --experts, bytes as they are.\n"
    "moezip-worker --model SLICE serves it (with --experts equal to its range, or without --experts);\n"
    "coordinators check it with the same per-expert content digests as the whole file.\n"
    "MODEL may be the first part of a split model (-00001-of-0000N.gguf): every part is read.\n"
    "Exit status: 0 ok, 1 error (one line on stderr), other non-zero for malformed flags.";

} // namespace

int main(int argc, char ** argv) {
    CLI::App app{kDescription, "moezip-slice"};
    std::string model, experts, output;
    app.add_option("model", model, "GGUF MoE model, or the first part of a split model")->required();
    app.add_option("--experts", experts, "one range FIRST-LAST of expert ids of the full model, e.g. 64-127")->required();
    app.add_option("-o,--output", output, "the slice file to write (written to OUTPUT.tmp, then renamed)")->required();
    CLI11_PARSE(app, argc, argv);

    std::vector<moezip::ExpertRange> ranges;
    moezip::Status st = moezip::expert_ranges_parse(experts, ranges);
    if (!st) {
        fprintf(stderr, "moezip-slice: --experts %s: %s\n", experts.c_str(), st.message().c_str());
        return 1;
    }
    // a worker maps expert e to slot e - first: one run of experts per slice
    if (ranges.size() != 1) {
        fprintf(stderr, "moezip-slice: --experts %s: a slice holds one range FIRST-LAST (cut one slice per range, and run one "
                        "worker per slice)\n", experts.c_str());
        return 1;
    }
    moezip::SliceRequest req{model, ranges[0].first, ranges[0].last, output};
    moezip::SliceResult res;
    st = moezip::slice_write(req, res);
    if (!st) {
        fprintf(stderr, "moezip-slice: %s\n", st.message().c_str());
        return 1;
    }
    printf("moezip-slice: wrote %s: experts %d-%d of %lld, %d MoE layers, %d tensors, %.1f MiB (the model: %.1f MiB, tensor table %s)\n",
           output.c_str(), req.first, req.last, (long long) res.n_expert, res.n_layers, res.n_tensors,
           (double) res.bytes / (1 << 20), (double) res.source_bytes / (1 << 20), res.source_table.c_str());
    return 0;
}
