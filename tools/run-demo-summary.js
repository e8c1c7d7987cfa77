// make run (tools/run-demo.sh): the evidence summary of a distributed run's moezip report.
//   node tools/run-demo-summary.js DISTRIBUTED.json
// Prints what the preload saw and did (schema moezip-report/1, written by libmoezip.so; fields in
// coordinator/evidence/evidence.cpp and coordinator/dispatch/dispatcher.cpp): MoE layers in the provider map, calls per
// layer, requests / bytes / result-hash checks / round trips per worker, provider identity checks.
// Exit 0 when every check holds; 1 (with the failing checks named on stderr) when the report shows
// an unhandled region, a fallback, a failed hash or identity check, a worker error or a worker that
// got nothing; 2 when the file is unreadable.
"use strict";
const fs = require("fs");

function load(path) {
    try {
        return JSON.parse(fs.readFileSync(path, "utf8"));
    } catch (err) {
        console.error(`run: error: cannot read report ${path}: ${err.message}`);
        process.exit(2);
    }
}

function sum(items, key) {
    return items.reduce((acc, x) => acc + (Number(x[key]) || 0), 0);
}

function kib(n) {
    return (Number(n) / 1024).toFixed(1) + " KiB";
}

// Lines of the summary and the list of failed checks.
function summarise(r) {
    const lines = [];
    const failed = [];
    const pm = r.provider_map || [];
    const layers = r.layers || [];
    const workers = r.workers || [];
    const checks = r.checks || {};
    const n_disp = pm.filter((e) => e.dispatchable).length;
    lines.push(`  mode ${r.config && r.config.mode}, state ${r.state}, cpu ${r.engine && r.engine.cpu_variant}, ` +
               `abi ${r.engine && r.engine.abi}`);
    lines.push(`  provider map: ${pm.length} MoE layers, ${n_disp} dispatchable` +
               (pm.length ? ` (${pm[0].n_expert} experts, top-${pm[0].n_used})` : ""));
    lines.push(`  MoE calls per layer: ` + layers.map((l) => `${l.il}:${l.calls}`).join(" ") +
               `; remote slots ${sum(layers, "remote_slots")}, local slots ${sum(layers, "local_slots")}, ` +
               `passthrough ${sum(layers, "passthrough")}, fallbacks ${sum(layers, "fallbacks")}`);
    workers.forEach((w, i) => {
        lines.push(`  worker ${i} ${w.endpoint} (experts ${w.identity ? w.identity.experts : "?"}): ` +
                   `${w.requests} requests, ${w.slots} expert slots, out ${kib(w.bytes_out)}, in ${kib(w.bytes_in)}, ` +
                   `hash checks ${w.hash_ok} ok / ${w.hash_failed} failed, rtt p50 ${w.rtt_ms_p50 == null ? "-" : Number(w.rtt_ms_p50).toFixed(3) + " ms"}, ` +
                   `errors ${w.errors}, timeouts ${w.timeouts}, fallbacks ${w.fallbacks}, ` +
                   (w.curve ? "CURVE (encrypted, keys checked)" : "plain") +
                   (w.verify && w.verify.checked ? `, ${w.verify.checked} results verified here, ${w.verify.mismatches} wrong` : ""));
        if (!(w.requests > 0)) failed.push(`worker ${i} (${w.endpoint}) got no requests`);
        if (w.hash_failed > 0) failed.push(`worker ${i}: ${w.hash_failed} result hash checks failed`);
        if (w.untrusted) failed.push(`worker ${i}: ${w.untrusted}`);
        if (w.errors > 0 || w.timeouts > 0 || w.fallbacks > 0 || w.refused)
            failed.push(`worker ${i}: errors ${w.errors}, timeouts ${w.timeouts}, fallbacks ${w.fallbacks}` +
                        (w.refused ? ", refused" : ""));
    });
    lines.push(`  provider identity checks: ${checks.identity_passed} passed, ${checks.identity_failed} failed; ` +
               `regions handled ${checks.regions_handled}, passthrough ${checks.regions_passthrough}`);
    lines.push(`  logits: ${r.logits && r.logits.count} outputs, chain ${r.logits && r.logits.chain_xxh3}; ` +
               `errors ${r.errors ? r.errors.count : "?"}`);
    if (r.state !== "active") failed.push(`preload state ${r.state}: ${r.passthrough_reason || ""}`);
    if (pm.length === 0 || n_disp !== pm.length) failed.push(`${pm.length - n_disp} MoE layers not dispatchable`);
    if (layers.some((l) => !(l.calls > 0))) failed.push("a MoE layer had no calls");
    if (sum(layers, "passthrough") > 0) failed.push("MoE regions were passed through to the engine");
    if (sum(layers, "fallbacks") > 0) failed.push("MoE regions fell back to local compute");
    if (workers.length === 0) failed.push("no workers in the report");
    if (checks.identity_failed > 0) failed.push(`${checks.identity_failed} provider identity checks failed`);
    if (r.errors && r.errors.count > 0) failed.push(`report errors: ${JSON.stringify(r.errors.first)}`);
    return { lines, failed };
}

const path = process.argv[2];
if (!path) {
    console.error("usage: node tools/run-demo-summary.js DISTRIBUTED.json");
    process.exit(2);
}
const { lines, failed } = summarise(load(path));
console.log(lines.join("\n"));
for (const f of failed) console.error(`run: check failed: ${f}`);
process.exit(failed.length ? 1 : 0);
