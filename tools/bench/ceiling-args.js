// make bench: moezip-ceiling's flags for a model, from its `local` decode phase run: the MoE share p of
// a decode step, one slot's time (the MoE's ms per step over n_moe_layers * n_used: a slot with its
// share of the routing and combine), the MoE layers, n_used and n_embd (the report's provider_map).
//   node tools/bench/ceiling-args.js OUT MODEL
// Prints the flags on one line; exit 1 with a message when the model has no usable local decode run.
"use strict";
const { load_runs } = require("./runs.js");
const { phase_record } = require("./phase.js");

/// The flags for model from the newest sound local decode phase run in OUT/runs, or null when there
/// is none (or its report lacks the MoE layers, n_used or n_embd).
function ceiling_args(out, model) {
    const runs = load_runs(out).filter((r) => r.model === model && r.variant === "local" && r.kind === "decode" &&
                                              r.rc === 0 && r.run_json && r.report_json);
    if (!runs.length) return null;
    const r = runs[runs.length - 1];
    const ph = phase_record(r, r.run_json, r.report_json);
    const pm = (r.report_json.provider_map || [])[0] || {};
    if (!ph.n_moe_layers || !pm.n_used || !pm.n_embd || !(ph.moe_share > 0 && ph.moe_share < 1)) return null;
    const slot_ms = ph.moe_ms_per_step / (ph.n_moe_layers * pm.n_used);
    return `--slot-ms ${slot_ms.toFixed(4)} --moe-share ${ph.moe_share.toFixed(4)} --layers ${ph.n_moe_layers} ` +
           `--n-used ${pm.n_used} --n-embd ${pm.n_embd}`;
}

if (require.main === module) {
    const args = ceiling_args(process.argv[2], process.argv[3]);
    if (!args) {
        console.error(`ceiling-args: no local decode phase run of ${process.argv[3]} with a report in ${process.argv[2]}`);
        process.exit(1);
    }
    console.log(args);
}

module.exports = { ceiling_args };
