// make bench: the hybrid emulation's summary (tools/bench/hybrid.sh): speeds, the share p of a decode
// step spent in the CPU experts, the Amdahl bound of one worker, the per-layer costs, and what they
// project for a GPU host with a worker on another machine.
//   node tools/bench/hybrid-summary.js OUT_DIR REPS COMMIT   (writes OUT_DIR/hybrid.json, prints Markdown)
//
// Run files in OUT_DIR/runs (names from hybrid.sh): VARIANT-REP.out (llama-bench -o json, a prompt
// test and a decode test), VARIANT-decode-REP.{out,report.json} (decode only, with the preload's
// report), text-VARIANT.out (llama-completion's greedy text).
"use strict";
const fs = require("fs");
const path = require("path");
const { read_json, median, bootstrap_ci, fmt, tidy } = require("./stats.js");
const { amdahl_bound } = require("./targets.js");
const { LINK_MBPS: LINK_MB_S } = require("./projection.js");  // TCP payload MB/s over the bench's tbf links

const VARIANTS = ["single", "local", "local_copy", "experts1"];
const LAYERS = 4;                                // a3b-L4-q8_0
// Shapes of the projection: compute per layer relative to the a3b fixture's (decode reads the experts'
// weights: n_embd x n_ff_exp x 3 x top-8) and wire bytes per token relative to it (they scale with
// n_embd); `assumed_tok_s`: one-node decode speeds of GPU hosts assumed besides this CPU's scaled one
const SHAPES = [
    { name: "Qwen3-30B-A3B", layers: 48, compute_scale: 1, wire_scale: 1, assumed_tok_s: [20, 50] },
    { name: "Qwen3-235B-A22B", layers: 94, compute_scale: 4, wire_scale: 2, assumed_tok_s: [5, 10] },
];
const P_GPU = 0.85;  // share of a GPU host's decode step in its CPU experts (0.8-0.9 on such hosts)

/// {prefill, decode} tok/s of a llama-bench JSON output, or null.
function bench_speeds(tests) {
    if (!Array.isArray(tests)) return null;
    const pp = tests.find((t) => t.n_prompt > 0 && t.n_gen === 0);
    const tg = tests.find((t) => t.n_gen > 0 && t.n_prompt === 0);
    return { prefill: pp ? pp.avg_ts : null, decode: tg ? tg.avg_ts : null };
}

/// ms per call of one layer of a report, the first call (which sets up the layer's plan) left out;
/// null with fewer than 2 calls.
function layer_ms_per_call(layer) {
    const calls = layer.calls || 0;
    if (calls < 2) return null;
    const first = (layer.first_call && layer.first_call.ms) || 0;
    return (layer.ms - first) / (calls - 1);
}

/// Sum over a report's layers of their ms per call: the CPU experts' time of one decode step (ms).
function step_expert_ms(report) {
    const per = (report.layers || []).map(layer_ms_per_call);
    return per.length && per.every(Number.isFinite) ? per.reduce((a, b) => a + b, 0) : null;
}

/// The first worker's decode wire: {bytes_out, bytes_in} per request and its one-row round trip (ms).
function worker_wire(report) {
    const w = (report.workers || [])[0];
    if (!w || !w.requests) return null;
    return { bytes_out: w.bytes_out / w.requests, bytes_in: w.bytes_in / w.requests,
             rtt_ms: w.rtt_ms_p50_one_row, rtt_minus_service_ms: w.rtt_minus_service_ms_p50 };
}

/// Amdahl's bound of splitting the share p of a step over two equal hosts (targets.js, experts1).
function amdahl2(p) {
    return amdahl_bound("experts1", "decode", p, 0.5);
}

/// A GPU host's decode projected from the measured per-layer costs. `m`: {expert_ms_layer (this
/// host's CPU experts per layer and token, one thread, a3b width), overhead_ms_layer (experts1's layer
/// time beyond half of that, on loopback: messaging, waiting, merging), wire_bytes (busier direction per
/// layer and token, a3b width)}. Per layer and token, one node takes g + c and experts1
/// g + c/2 + overhead + wire_bytes x wire_scale / link rate (the worker as fast as the host, a LAN round
/// trip as loopback's), where c is the CPU experts' time and g the rest (the GPU's): for the host
/// "measured", c = expert_ms_layer x compute_scale and g = c x (1 - P_GPU) / P_GPU; for a host assumed
/// to decode T tok/s alone, c = P_GPU x step / layers and g = (1 - P_GPU) x step / layers, step = 1000 / T.
/// Rows {shape, layers, host ("measured" or T), link, one_node_tok_s, experts1_tok_s, x, bound, of_bound}.
function gpu_host_projection(m) {
    const rows = [];
    for (const s of SHAPES) {
        for (const host of ["measured", ...s.assumed_tok_s]) {
            let c, g;
            if (host === "measured") {
                c = m.expert_ms_layer * s.compute_scale;
                g = (c * (1 - P_GPU)) / P_GPU;
            } else {
                c = (P_GPU * 1000) / host / s.layers;
                g = ((1 - P_GPU) * 1000) / host / s.layers;
            }
            for (const link of Object.keys(LINK_MB_S)) {
                const wire = (m.wire_bytes * s.wire_scale) / (LINK_MB_S[link] * 1000);
                const one = 1000 / (s.layers * (g + c));
                const e1 = 1000 / (s.layers * (g + c / 2 + m.overhead_ms_layer + wire));
                rows.push({ shape: s.name, layers: s.layers, host, link, one_node_tok_s: one, experts1_tok_s: e1,
                            x: e1 / one, bound: amdahl2(P_GPU), of_bound: e1 / one / amdahl2(P_GPU) });
            }
        }
    }
    return rows;
}

/// Ratio [95% interval] of paired values, or the point alone for one pair.
function paired(xs, ys) {
    const r = xs.map((x, i) => x / ys[i]).filter(Number.isFinite);
    const ci = bootstrap_ci(r, median);
    return ci ? { point: ci.point, lo: ci.lo, hi: ci.hi, n: r.length } : { point: median(r), lo: null, hi: null, n: r.length };
}

/// Whether two greedy texts agree as far as both were printed, beyond the prompt (llama-completion's
/// logger can drop its last lines at exit on a loaded machine).
function same_text(a, b, prompt) {
    const n = Math.min(a.length, b.length);
    return n > prompt.length + 16 && a.slice(0, n) === b.slice(0, n);
}

/// The summary object of a hybrid.sh output folder.
function summarize(dir, reps) {
    const runs = path.join(dir, "runs");
    const speeds = {};
    for (const v of VARIANTS) {
        speeds[v] = { prefill: [], decode: [] };
        for (let r = 1; r <= reps; ++r) {
            const s = bench_speeds(read_json(path.join(runs, `${v}-${r}.out`))) || { prefill: null, decode: null };
            speeds[v].prefill.push(s.prefill);
            speeds[v].decode.push(s.decode);
        }
    }
    // p per repetition: the CPU experts' ms of a decode step over the step's ms, both of the same run
    const p_of = (v) => {
        const p = [], layer = [];
        for (let r = 1; r <= reps; ++r) {
            const rep = read_json(path.join(runs, `${v}-decode-${r}.report.json`));
            const sp = bench_speeds(read_json(path.join(runs, `${v}-decode-${r}.out`)));
            const ms = rep && step_expert_ms(rep);
            if (Number.isFinite(ms) && sp && sp.decode) {
                p.push(ms / (1000 / sp.decode));
                layer.push(ms / LAYERS);
            }
        }
        return { point: median(p), runs: p, ci: bootstrap_ci(p, median), expert_ms_layer: median(layer) };
    };
    const p_plain = p_of("local"), p_copy = p_of("local_copy");
    const e1_layer = [], wires = [];
    for (let r = 1; r <= reps; ++r) {
        const e1 = read_json(path.join(runs, `experts1-decode-${r}.report.json`));
        const e1_ms = e1 && step_expert_ms(e1);
        if (Number.isFinite(e1_ms)) e1_layer.push(e1_ms / LAYERS);
        const w = e1 && worker_wire(e1);
        if (w) wires.push(w);
    }
    const text = {};
    for (const v of VARIANTS) {
        try { text[v] = fs.readFileSync(path.join(runs, `text-${v}.out`), "utf8"); } catch (e) { text[v] = ""; }
    }
    const ratios = {};
    for (const v of VARIANTS.slice(1))
        ratios[v] = { decode: paired(speeds[v].decode, speeds.single.decode), prefill: paired(speeds[v].prefill, speeds.single.prefill) };
    // what distributing gains apart from the memory kind: experts1 over one node computing from the same kind
    const over_copy = { decode: paired(speeds.experts1.decode, speeds.local_copy.decode),
                        prefill: paired(speeds.experts1.prefill, speeds.local_copy.prefill) };
    const bound = p_copy.point === null ? null : amdahl2(p_copy.point);
    const m = {
        expert_ms_layer: p_copy.expert_ms_layer,
        overhead_ms_layer: median(e1_layer) - p_copy.expert_ms_layer / 2,
        wire_bytes: median(wires.map((w) => Math.max(w.bytes_out, w.bytes_in))),
    };
    const e1_decode = median(speeds.experts1.decode);
    return {
        reps,
        speeds: Object.fromEntries(VARIANTS.map((v) => [v, { prefill: median(speeds[v].prefill), decode: median(speeds[v].decode),
                                                              prefill_runs: speeds[v].prefill, decode_runs: speeds[v].decode }])),
        ratios, over_copy,
        p_plain, p: p_copy,
        bound,
        of_bound: bound === null ? null : over_copy.decode.point / bound,
        plain_bound: p_plain.point === null ? null : amdahl2(p_plain.point),
        per_layer: { ...m, experts1_ms_layer: median(e1_layer), rtt_ms: median(wires.map((w) => w.rtt_ms)),
                     rtt_minus_service_ms: median(wires.map((w) => w.rtt_minus_service_ms)),
                     bytes_out: median(wires.map((w) => w.bytes_out)), bytes_in: median(wires.map((w) => w.bytes_in)) },
        round_trip_share: e1_decode ? (LAYERS * m.overhead_ms_layer) / (1000 / e1_decode) : null,
        identical: Object.fromEntries(VARIANTS.slice(1).map((v) => [v, same_text(text[v], text.single, "Once upon a time")])),
        projection: [m.expert_ms_layer, m.overhead_ms_layer, m.wire_bytes].every(Number.isFinite) ? gpu_host_projection(m) : [],
    };
}

function ratio_text(r) {
    return r.lo === null ? `${fmt(r.point, 3)} (one pair)` : `${fmt(r.point, 3)} [${fmt(r.lo, 3)}, ${fmt(r.hi, 3)}]`;
}

function markdown(s, commit) {
    const L = [];
    L.push(`Hybrid emulation (a3b-L4-q8_0, ${s.reps} repetitions, commit ${commit}): llama-bench -rpc -ngl 99 -ncmoe 99 -t 1, ` +
           "512-token prompt and 64 decode steps; the host on core 0, the ggml-rpc-server (the accelerator) and the worker on core 1. " +
           "The worker shares this machine's memory bandwidth: the figure shows the mechanism, not the gain of a second machine.");
    L.push("");
    L.push("| variant | prefill tok/s | x plain [95% CI] | decode tok/s | x plain [95% CI] | answer = plain |");
    L.push("|---|---|---|---|---|---|");
    for (const v of VARIANTS) {
        const x = s.ratios[v];
        L.push(`| ${v === "single" ? "plain hybrid (no preload)" : v} | ${fmt(s.speeds[v].prefill, 1)} | ${x ? ratio_text(x.prefill) : "1"} | ` +
               `${fmt(s.speeds[v].decode, 2)} | ${x ? ratio_text(x.decode) : "1"} | ${v === "single" ? "-" : s.identical[v] ? "yes" : "NO"} |`);
    }
    L.push("");
    const ci = (p) => (p.ci ? ` [${fmt(p.ci.lo, 3)}, ${fmt(p.ci.hi, 3)}]` : "");
    L.push(`p, the share of a decode step in the CPU experts (decode-only runs' reports): ${fmt(s.p.point, 3)}${ci(s.p)} from ` +
           `huge-page copies (local_copy), ${fmt(s.p_plain.point, 3)}${ci(s.p_plain)} from the engine's mapping (local). ` +
           `Amdahl bound of one worker 1/((1-p)+p/2) = ${fmt(s.bound, 3)} (${fmt(s.plain_bound, 3)} for the mapping's p).`);
    L.push(`experts1 over local_copy (the same memory kind on every host): decode ${ratio_text(s.over_copy.decode)}, ` +
           `${fmt(100 * s.of_bound, 1)}% of the bound (target 85%); prefill ${ratio_text(s.over_copy.prefill)}.`);
    const pl = s.per_layer;
    L.push(`Per layer and decode token: CPU experts ${fmt(pl.expert_ms_layer, 3)} ms (one thread), experts1 ${fmt(pl.experts1_ms_layer, 3)} ms ` +
           `(overhead beyond half the experts ${fmt(pl.overhead_ms_layer, 3)} ms; worker round trip ${fmt(pl.rtt_ms, 3)} ms, ` +
           `of which ${fmt(pl.rtt_minus_service_ms, 3)} ms not computing; ${fmt(pl.bytes_out, 0)} B out, ${fmt(pl.bytes_in, 0)} B back); ` +
           `that overhead is ${fmt(100 * s.round_trip_share, 1)}% of an experts1 decode step.`);
    L.push("");
    L.push(`A GPU host projected from these per-layer costs: p = ${P_GPU} of its decode step in the CPU experts, a worker as fast ` +
           "on another machine, a LAN round trip as loopback's, the overhead per layer as measured here; the host either this " +
           "CPU's one thread (the shape's experts scaled from the fixture's) or one assumed to decode at the given speed alone:");
    L.push("");
    L.push("| shape | host | link | one node tok/s | experts1 tok/s | x one node | Amdahl bound | of bound |");
    L.push("|---|---|---|---|---|---|---|---|");
    for (const r of s.projection)
        L.push(`| ${r.shape} (${r.layers} layers) | ${r.host === "measured" ? "one thread here" : `${r.host} tok/s alone`} | ` +
               `${r.link === "1g" ? "1 Gbit/s" : "10 Gbit/s"} | ${fmt(r.one_node_tok_s, 1)} | ` +
               `${fmt(r.experts1_tok_s, 1)} | ${fmt(r.x, 2)}x | ${fmt(r.bound, 2)}x | ${fmt(100 * r.of_bound, 0)}% |`);
    return L.join("\n");
}

module.exports = { gpu_host_projection, step_expert_ms, layer_ms_per_call, amdahl2, summarize, P_GPU };

if (require.main === module) {
    const [dir, reps, commit] = [process.argv[2], Number(process.argv[3]), process.argv[4] || "unknown"];
    const s = summarize(dir, reps);
    fs.writeFileSync(path.join(dir, "hybrid.json"), JSON.stringify(tidy({ commit, ...s }), null, 1) + "\n");
    console.log(markdown(s, commit));
    const bad = [];
    for (const v of VARIANTS.slice(1)) if (!s.identical[v]) bad.push(`${v}'s answer differs from the plain hybrid run's`);
    for (const v of VARIANTS) if (s.speeds[v].decode === null) bad.push(`${v} has no decode runs`);
    if (s.p.point === null) bad.push("no local_copy decode run gave p");
    for (const b of bad) console.error(`hybrid: error: ${b}`);
    process.exit(bad.length ? 1 : 0);
}
