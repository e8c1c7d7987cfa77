// make bench: ratios taken within pairs (a variant's timed run and its reference's, run side by side
// on the same core placement), their bootstrap intervals, bimodal run sets and stalled runs.
// Why pairs: a shared VM's speed drifts ±20-50% over minutes; two runs a few seconds apart share most
// of the drift, so their ratio is far steadier than a ratio of medians over the whole bench.
"use strict";
const { median, bootstrap_ci, bimodal } = require("./stats.js");

/// Pairs (or runs per side) needed for an interval: with 2 or 3 the resamples can only reproduce the
/// values themselves, and the "interval" would be their range.
const MIN_PAIRS = 4;

/// The variant a variant's runs are paired with: llama-bench's one-node run for the rpc_* variants,
/// the unhooked engine at its defaults (repacking on) for the others; "" for the references themselves.
function REFERENCE_OF(variant) {
    if (variant === "single" || variant === "rpc_single") return "";
    return variant.startsWith("rpc_") ? "rpc_single" : "single";
}

/// For the finished runs of one group and phase ("prefill" | "decode"): {paired (ratios, one per pair),
/// paired_ratio_median, ci95 ({point, lo, hi, n} of the median ratio, bootstrap; lo and hi null below
/// MIN_PAIRS pairs, ci95 null without pairs),
/// resolved_5pct (the interval within ±5% of its median), bimodal (two clusters of tok/s, or null)}.
/// by_pair: "model|pair" -> the runs of that pair.
function pair_ratios(runs, by_pair, ref_variant, ph) {
    const paired = [];
    if (ref_variant) {
        for (const r of runs) {
            const mates = by_pair.get(`${r.model}|${r.pair}`) || [];
            const ref = mates.find((x) => x.variant === ref_variant && x.rc === 0 && x.run_json);
            if (ref && r.pair) paired.push(r.run_json[ph].tok_s / ref.run_json[ph].tok_s);
        }
    }
    // below MIN_PAIRS a percentile bootstrap only returns the runs' own range: a ratio without an
    // interval, shown as such and given no verdict
    const ci95 = paired.length >= MIN_PAIRS ? bootstrap_ci(paired)
               : paired.length ? { point: median(paired), lo: null, hi: null, n: paired.length } : null;
    return {
        paired,
        paired_ratio_median: median(paired),
        ci95,
        resolved_5pct: ci95 && ci95.lo !== null ? ci95.hi - ci95.lo <= 0.1 * ci95.point : false,
        bimodal: bimodal(runs.map((r) => r.run_json[ph].tok_s)),
    };
}

/// A run stalled when any worker's round-trip p99 is at least 5x its p50 (the preload's report): a
/// few descheduled milliseconds on either side, which a mean would spread over every step. Taken
/// over the one-row requests (decode calls) where the report has them: a timed run's prompt calls
/// (hundreds of ms) would otherwise be the p99 of every run. A worker request that timed out is a
/// stall too (it never enters the percentiles). null when the run has no workers to tell (unhooked
/// runs, llama-bench).
function run_stalled(r) {
    const ws = ((r.report_json && r.report_json.workers) || []).filter((w) => w.endpoint && (w.rtt_ms_p50 > 0 || w.timeouts > 0));
    if (!ws.length) return null;
    // a request that timed out never enters the percentiles: it is a stall by itself
    return ws.some((w) => w.timeouts > 0 || (w.one_row_requests > 0 ? w.rtt_ms_p99_one_row >= 5 * w.rtt_ms_p50_one_row
                                                                      : w.rtt_ms_p99 >= 5 * w.rtt_ms_p50));
}

module.exports = { REFERENCE_OF, pair_ratios, run_stalled };

/// a / b for two independent run sets (e.g. experts1 and rpc_experts on the same link and placement):
/// {point (median(a) / median(b)), lo, hi} from resampling both sets (lo, hi null when either has fewer
/// than MIN_PAIRS runs); null when either has none.
function ratio_of_medians_ci(a, b, B = 4000, seed = 777) {
    const va = a.filter(Number.isFinite), vb = b.filter(Number.isFinite);
    if (!va.length || !vb.length) return null;
    if (va.length < MIN_PAIRS || vb.length < MIN_PAIRS) return { point: median(va) / median(vb), lo: null, hi: null, n: Math.min(va.length, vb.length) };
    // resample the pair of sets by resampling an index set of both at once
    let s = seed >>> 0;
    const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296);
    const pick = (v) => v.map(() => v[Math.floor(rnd() * v.length)]);
    const stats = [];
    for (let i = 0; i < B; ++i) stats.push(median(pick(va)) / median(pick(vb)));
    stats.sort((x, y) => x - y);
    return { point: median(va) / median(vb), lo: stats[Math.floor(0.025 * B)], hi: stats[Math.floor(0.975 * B) - 1] };
}

module.exports.ratio_of_medians_ci = ratio_of_medians_ci;
