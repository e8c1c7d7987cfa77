// make bench (tools/run-bench.sh): small helpers shared by the bench scripts.
"use strict";
const fs = require("fs");

/// JSON of a file, or null when it is missing or unreadable (a failed run may leave none).
function read_json(path) {
    try {
        return JSON.parse(fs.readFileSync(path, "utf8"));
    } catch (err) {
        return null;
    }
}

/// Median of the finite numbers in xs; null when there are none.
function median(xs) {
    const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
    if (v.length === 0) return null;
    const h = Math.floor(v.length / 2);
    return v.length % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

/// {n, median, min, max, spread_pct}: spread_pct = half the min..max range in % of the median.
function summary(xs) {
    const v = xs.filter((x) => Number.isFinite(x));
    const med = median(v);
    if (med === null) return { n: 0, median: null, min: null, max: null, spread_pct: null };
    const min = Math.min(...v), max = Math.max(...v);
    return { n: v.length, median: med, min, max, spread_pct: med > 0 ? (50 * (max - min)) / med : null };
}

function sum(items, key) {
    return items.reduce((acc, x) => acc + (Number(x[key]) || 0), 0);
}

/// Number with `digits` decimals, or "-" for null/NaN.
function fmt(x, digits) {
    return x === null || x === undefined || !Number.isFinite(x) ? "-" : x.toFixed(digits);
}

/// Rounds every float in a JSON-able value to 4 significant decimals (keeps bench.json readable).
function tidy(value) {
    if (typeof value === "number" && !Number.isInteger(value)) return Number(value.toPrecision(6));
    if (Array.isArray(value)) return value.map(tidy);
    if (value && typeof value === "object") {
        const out = {};
        for (const k of Object.keys(value)) out[k] = tidy(value[k]);
        return out;
    }
    return value;
}

/// A seeded PRNG (mulberry32): the same runs give the same intervals in every summary.
function prng(seed) {
    let a = seed >>> 0;
    return () => {
        a = (a + 0x6d2b79f5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

/// Percentile-bootstrap interval of `stat` (default: the median) over the finite xs: {point, lo, hi}
/// for level 0.95 by default, from B resamples with replacement. null for fewer than 2 values (a
/// single run has no interval).
function bootstrap_ci(xs, stat = median, level = 0.95, B = 4000, seed = 12345) {
    const v = xs.filter((x) => Number.isFinite(x));
    if (v.length < 2) return null;
    const rnd = prng(seed);
    const stats = [];
    const sample = new Array(v.length);
    for (let b = 0; b < B; ++b) {
        for (let i = 0; i < v.length; ++i) sample[i] = v[Math.floor(rnd() * v.length)];
        stats.push(stat(sample));
    }
    stats.sort((a, b) => a - b);
    const q = (f) => stats[Math.min(B - 1, Math.max(0, Math.floor(f * B)))];
    return { point: stat(v), lo: q((1 - level) / 2), hi: q(1 - (1 - level) / 2), n: v.length };
}

/// Two clusters in xs, or null: the largest gap between sorted neighbours is wider than 15% of the
/// median and than twice the wider cluster's own range, with at least 2 values on each side. A run
/// set like that is reported as two modes (e.g. a VM that switched speed), not as one median.
function bimodal(xs) {
    const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
    if (v.length < 4) return null;
    let best = -1, at = -1;
    for (let i = 2; i <= v.length - 2; ++i) if (v[i] - v[i - 1] > best) { best = v[i] - v[i - 1]; at = i; }
    const low = v.slice(0, at), high = v.slice(at);
    const spread = Math.max(low[low.length - 1] - low[0], high[high.length - 1] - high[0]);
    if (best <= 0.15 * median(v) || best <= 2 * spread) return null;
    return { low: median(low), n_low: low.length, high: median(high), n_high: high.length };
}

module.exports = { read_json, median, summary, sum, fmt, tidy, bootstrap_ci, bimodal };
