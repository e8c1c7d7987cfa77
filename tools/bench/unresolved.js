// make bench: which paired ratios of one model are not resolved yet, so the driver can add pairs
// (the targets ask decode ratios on a3b resolved to ±5%; a shared VM's decode spreads ±20-50% between runs).
//   node tools/bench/unresolved.js OUT MODEL PHASE MAX_PAIRS
// Prints one line "variant net placement" per timed group of MODEL (a variant with a reference it is
// paired with) whose PHASE ("prefill" | "decode") ratio's bootstrap 95% interval is wider than ±5% of
// its median (pairs.js resolved_5pct) and that has fewer than MAX_PAIRS pairs. Groups with fewer
// pairs come first, then the narrower intervals (closest to resolved): a limited budget of extra
// pairs then resolves as many ratios as it can. Exit 0 (also when nothing is left), 2 on bad usage.
"use strict";
const { load_runs, runs_by_pair } = require("./runs.js");
const { pair_ratios, REFERENCE_OF } = require("./pairs.js");

function main() {
    const [out, model, phase, max_arg] = process.argv.slice(2);
    const max_pairs = Number(max_arg);
    if (!out || !model || !["prefill", "decode"].includes(phase) || !(max_pairs > 0)) {
        console.error("usage: unresolved.js OUT MODEL prefill|decode MAX_PAIRS");
        process.exit(2);
    }
    const timed = load_runs(out).filter((r) => r.kind === "timed" && r.model === model);
    const by_pair = runs_by_pair(timed);
    const groups = new Map();  // "variant net placement" -> finished runs
    for (const r of timed) {
        if (!REFERENCE_OF(r.variant) || r.rc !== 0 || !r.run_json) continue;
        const k = `${r.variant} ${r.net} ${r.placement}`;
        groups.set(k, (groups.get(k) || []).concat([r]));
    }
    const todo = [];
    for (const [k, rs] of groups) {
        const p = pair_ratios(rs, by_pair, REFERENCE_OF(rs[0].variant), phase);
        if (p.resolved_5pct || p.paired.length >= max_pairs) continue;
        const width = p.ci95 && p.ci95.lo !== null ? (p.ci95.hi - p.ci95.lo) / p.ci95.point : Infinity;
        todo.push({ k, n: p.paired.length, width });
    }
    todo.sort((a, b) => a.n - b.n || a.width - b.width);
    for (const t of todo) console.log(t.k);
}

main();
