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

module.exports = { read_json, median, summary, sum, fmt, tidy };
