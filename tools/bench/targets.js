// make bench: the Amdahl bound of each mode and the targets of the performance issue.
//
// MoE share p (per model and phase) = sum over layers of the report's `ms` in a local-mode phase run
// / the step time of that run (prefill: the prompt's llama_decode; decode: the mean decode step).
// Bounds on the speedup over one node, with no transfer cost and perfect overlap:
//   observe, local         1 (nothing runs in parallel)
//   rows1 prefill          1 / ((1 - p) + p * max(s, 1 - s)), s = the coordinator's row share
//   rows1 decode           1 (one row per region is below rows.min_rows: computed locally)
//   experts1               1 / ((1 - p) + p / 2) (the experts split in halves between two cores)
//   experts1_curve         the same (CURVE costs transfer time, not compute)
//   experts1_map           the same (both hosts compute from the page cache instead of copies)
//   experts1_verify        1 (not computed: one worker result in N is computed here as well)
//   experts2               1 (both workers share one core while the coordinator's core waits)
//   shard1                 1 / ((1 - p) + p * max(s, 1 - s)) in prefill and decode: every expert's n_ff split by s
//   experts1_plan, experts1_repl   1 / ((1 - p) + p / 2), as experts1 (placement changes how close a run
//                          gets to it, not the bound)
//   rows1_slow, rows1_auto_slow, shard1_slow, shard1_auto_slow: the worker runs at r = its CPU quota (a
//                          fraction of a core) of the coordinator's speed. The bound is the ideal split's,
//                          whatever the variant's shares: the coordinator takes 1 / (1 + r) of the work,
//                          the worker r / (1 + r), both finish together: 1 / ((1 - p) + p / (1 + r)) (rows:
//                          prefill only, decode 1). Fixed shares s give at most 1 / ((1 - p) + p * max(s, (1 - s) / r)).
//
// The same memory kind. An experts-mode coordinator computes its own experts from a copy with huge
// pages (experts.copy_local) and so does each worker, while the unhooked engine reads 4 KiB pages of
// its file mapping; on the 2-core Debian 12 VM of docs/history/bench-runs.md that alone made a decode step 2.3-3.4x faster. So the experts1 variants
// get a second bound that starts from one node computing from such a copy (`local_copy`): its paired
// speed over `single` times the bound above with p_c, the MoE share of local_copy's phase runs. What
// a variant reaches of it is what distributing gains; the first bound mixes in the memory kind.
// Without local_copy runs it is null.
"use strict";

/// The MoE share of a step in the phase run of `variant` (local or local_copy); null without one.
function moe_share(phases, model, phase, variant = "local") {
    const r = phases.find((p) => p.model === model && p.variant === variant && p.net === "lo" && p.phase === phase);
    return r ? r.moe_share : null;
}

/// The speedup bound of a variant in a phase for MoE share p, rows share s and the worker's speed r
/// relative to this host (its CPU quota: 1 when not throttled).
function amdahl_bound(variant, phase, p, s, r = 1) {
    if (p === null) return null;
    if (variant.endsWith("_slow")) {
        if (variant.startsWith("rows1") && phase === "decode") return 1;
        return 1 / (1 - p + p / (1 + r));
    }
    if (variant === "experts1_plan" || variant === "experts1_repl") return 1 / (1 - p + p / 2);
    if (variant === "rows1" && phase === "prefill") return 1 / (1 - p + p * Math.max(s, 1 - s));
    if (variant === "experts1" || variant === "experts1_curve" || variant === "experts1_map") return 1 / (1 - p + p / 2);
    if (variant === "shard1") return 1 / (1 - p + p * Math.max(s, 1 - s));
    return 1;
}

function amdahl_rows(groups, phases) {
    const out = [];
    for (const g of groups) {
        if (g.variant === "single" || g.variant === "single_nr" || g.variant === "single_anon" || g.variant === "single_thp" || g.variant === "observe" || g.variant === "local" || g.variant === "local_copy" ||
            g.engine === "llama-bench") continue;  // bound 1 (see targets), or not moezip
        for (const ph of ["prefill", "decode"]) {
            const p = moe_share(phases, g.model, ph);
            const bound = amdahl_bound(g.variant, ph, p, g.rows_share, g.throttle_pct ? g.throttle_pct / 100 : 1);
            const measured = g[ph].ratio_to_single;
            // the same memory kind (local_copy) for the experts1 variants, whose hosts all compute from huge-page copies
            const lc = groups.find((x) => x.model === g.model && x.variant === "local_copy" && x.net === "lo" && x.placement === g.placement);
            const pc = moe_share(phases, g.model, ph, "local_copy");
            const lc_speed = lc && lc[ph].ci95 ? lc[ph].ci95.point : null;
            const bound_copy = g.variant.startsWith("experts1") && g.variant !== "experts1_verify" && g.variant !== "experts1_map" &&
                               lc_speed !== null && pc !== null
                ? lc_speed * amdahl_bound(g.variant, ph, pc, g.rows_share) : null;
            // of it: the variant over local_copy (summary.js: a ratio of medians, both sets resampled)
            const over_copy = bound_copy ? g[ph].vs_local_copy || null : null;
            const split = bound_copy ? bound_copy / lc_speed : null;  // the Amdahl factor with p_c
            out.push({ model: g.model, variant: g.variant, net: g.net, placement: g.placement, phase: ph,
                       moe_share: p, bound, measured,
                       fraction_of_bound: bound && measured !== null ? measured / bound : null,
                       // the paired ratio's 95% interval over the bound
                       fraction_ci95: bound && g[ph].ci95 && g[ph].ci95.lo !== null
                           ? { point: g[ph].ci95.point / bound, lo: g[ph].ci95.lo / bound, hi: g[ph].ci95.hi / bound } : null,
                       moe_share_copy: bound_copy ? pc : null, local_copy_speed: bound_copy ? lc_speed : null, bound_copy,
                       fraction_ci95_copy: over_copy && over_copy.lo !== null
                           ? { point: over_copy.point / split, lo: over_copy.lo / split, hi: over_copy.hi / split } : null });
        }
    }
    return out;
}

function check(list, target, threshold, row, value) {
    if (value === null || value === undefined) return;
    list.push(Object.assign({ target, threshold, value, met: value >= threshold, verdict: value >= threshold ? "met" : "missed" }, row));
}

/// A target on a ratio with a 95% interval c ({point, lo, hi}): met when the whole interval is at or
/// above the threshold, missed when it is entirely below, else not resolved (more pairs needed).
function check_ci(list, target, threshold, row, c) {
    if (!c || c.lo === null) return;  // one pair: no interval, no verdict
    const verdict = c.lo >= threshold ? "met" : c.hi < threshold ? "missed" : "not resolved";
    list.push(Object.assign({ target, threshold, value: c.point, lo: c.lo, hi: c.hi, met: verdict === "met", verdict }, row));
}

/// One row per (target, case): value, threshold and met (value >= threshold, or <= for the byte targets).
function target_rows(groups, phases, amdahl) {
    const t = [];
    for (const g of groups) {
        const row = { model: g.model, variant: g.variant, net: g.net, placement: g.placement };
        for (const ph of ["prefill", "decode"]) {
            const at = Object.assign({ phase: ph }, row);
            if ((g.variant === "observe" || g.variant === "local") && g.net === "lo")
                check_ci(t, "observe/local >= 0.98x unhooked (paired)", 0.98, at, g[ph].ci95);
            if (g.variant === "experts1" && g.net === "1g") {
                check_ci(t, `experts1 over 1 Gbit/s: ${ph} >= ${ph === "decode" ? "1.3" : "1.4"}x one node (engine default, paired)`,
                         ph === "decode" ? 1.3 : 1.4, at, g[ph].ci95);
                // judged two ways (summary.js): on the raw tok/s of the two programs (moezip-run and
                // llama-bench time one node differently) and on each one's speed-up over its own one node
                check_ci(t, `experts1 over 1 Gbit/s: ${ph} >= 1.6x llama.cpp RPC experts-on-server (tok/s)`, 1.6, at, g[ph].vs_rpc_experts);
                check_ci(t, `experts1 over 1 Gbit/s: ${ph} >= 1.6x llama.cpp RPC experts-on-server (speed-ups over each one node)`, 1.6, at,
                         g[ph].vs_rpc_experts_paired);
            }
        }
        if (g.variant.startsWith("experts") && g.net === "lo")
            check_ci(t, "experts mode on loopback: decode >= 0.9x single node (paired)", 0.9, Object.assign({ phase: "decode" }, row),
                     g.decode.ci95);
    }
    for (const a of amdahl) {
        const at = { model: a.model, variant: a.variant, net: a.net, placement: a.placement, phase: a.phase };
        if (a.variant === "experts1_repl" && a.net === "lo" && a.phase === "decode") {
            check_ci(t, "experts, every expert on both hosts (balanced dispatch): decode >= 95% of the Amdahl bound (paired)",
                     0.95, at, a.fraction_ci95);
            check_ci(t, "experts, every expert on both hosts (balanced dispatch): decode >= 95% of the bound from one node with the same memory (local_copy)",
                     0.95, at, a.fraction_ci95_copy);
        }
        if ((a.variant === "rows1_auto_slow" && a.phase === "prefill") || a.variant === "shard1_auto_slow")
            check_ci(t, `${a.variant.startsWith("rows") ? "rows" : "shard"} mode, throttled worker, automatic shares: ${a.phase} ` +
                     ">= 90% of the ideal split's bound (paired)", 0.9, at, a.fraction_ci95);
        if (a.variant === "rows1" && a.phase === "prefill")
            check(t, "rows mode, one worker: prefill >= 90% of the Amdahl bound", 0.9,
                  { model: a.model, variant: a.variant, net: a.net, placement: a.placement, phase: "prefill" },
                  a.fraction_of_bound);
    }
    for (const p of phases) {
        if (p.bytes_vs_needed === null || !p.workers.length) continue;
        const row = { model: p.model, variant: p.variant, net: p.net, placement: p.placement, phase: p.phase };
        t.push(Object.assign({ target: "bytes per token per layer <= 1.1x the mode's payload (app bytes)", threshold: 1.1,
                               value: p.bytes_vs_needed, met: p.bytes_vs_needed <= 1.1 }, row));
        if (p.veth_vs_needed !== null)
            t.push(Object.assign({ target: "bytes per token per layer <= 1.1x the mode's payload (veth frames)", threshold: 1.1,
                                   value: p.veth_vs_needed, met: p.veth_vs_needed <= 1.1 }, row));
    }
    return t;
}

module.exports = { amdahl_rows, target_rows, amdahl_bound };
