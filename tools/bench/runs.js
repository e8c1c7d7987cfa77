// make bench: reads the runs the driver wrote (OUT/runs/*.meta.json with their moezip-run JSON and
// the preload's report), for summary.js and unresolved.js.
"use strict";
const fs = require("fs");
const path = require("path");
const { read_json } = require("./stats.js");

/// Every run of OUT/runs, oldest first: its meta.json with run_json (moezip-run's or llama-bench's
/// JSON, null when missing) and report_json (the preload's report, null for unhooked runs).
function load_runs(out) {
    const dir = path.join(out || ".", "runs");
    let names = [];
    try { names = fs.readdirSync(dir).filter((n) => n.endsWith(".meta.json")).sort(); } catch (e) { names = []; }
    return names.map((n) => {
        const meta = read_json(path.join(dir, n));
        if (!meta) return null;
        meta.run_json = read_json(path.join(dir, meta.run));
        meta.report_json = meta.report ? read_json(path.join(dir, meta.report)) : null;
        return meta;
    }).filter(Boolean);
}

/// "model|pair" -> the timed runs of that pair (a variant's run and its reference's).
function runs_by_pair(runs) {
    const by_pair = new Map();
    for (const r of runs) {
        if (r.kind !== "timed" || !r.pair) continue;
        const k = `${r.model}|${r.pair}`;
        by_pair.set(k, (by_pair.get(k) || []).concat([r]));
    }
    return by_pair;
}

module.exports = { load_runs, runs_by_pair };
