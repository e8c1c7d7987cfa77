// make bench: the full-size projection — tok/s of one node, moezip experts mode (one worker) and
// llama.cpp RPC (experts on the server) for real model depths and links, from the per-layer costs
// measured on the 4-layer Qwen3-30B-A3B-shaped fixture (a3b-L4-q8_0).
//
// Model (every assumption is printed with the table, docs/performance.md):
//  - per-layer step time of one node = moezip-run's single (median of its timed runs on loopback, both
//    placements) / the fixture's 4 layers; of a distributed variant = that over the variant's speed-up
//    measured within its pairs (experts1 over moezip-run's single, rpc_experts over llama-bench's
//    rpc_single): the two programs time one node differently, so each is held to its own. The
//    attention, router, norms and output head are
//    spread over the layers (the head does not grow with depth, so deeper models are slightly
//    over-costed on every variant alike);
//  - a deeper model of the same layer shape (Qwen3-30B-A3B: 48 layers) costs depth x that;
//  - a wider shape (94 layers, n_embd 4096, n_ff_exp 1536, 128 experts, top-8, 64/4 heads of 128:
//    the Qwen3-235B-A22B layout) reads 4x the weights per layer in its experts and attention, so
//    its per-layer compute is 4x (decode is bound by weight reads on CPUs) and its per-token wire
//    bytes 2x (they scale with n_embd);
//  - a link adds, per layer and token, the serialisation of the busier direction's bytes at the
//    link's TCP payload rate (117.5 MB/s at 1 Gbit/s, 1175 MB/s at 10 Gbit/s, measured here) and the
//    round trips' latency beyond loopback's (LAN_RTT_MS each); the emulated links of the bench add no
//    delay and pass a decode message below the tbf bucket at once, so they cannot show either;
//  - moezip experts (exact combine): 1 round trip per layer; out 8.4 kB, back 32 kB per token (a3b);
//  - llama.cpp RPC with the experts on the server: 3 round trips per layer (set_tensor of the input,
//    graph_compute, get_tensor of the output: ggml-rpc's commands are synchronous), 8.2 kB each way
//    per token (the hidden state in, the MoE output out, f32; ids and weights 64 B);
//  - no overlap of transfer and compute beyond what the loopback measurement already holds.
"use strict";

const LAN_RTT_MS = 0.1;                         // an assumed switched-LAN round trip (loopback here: ~0.1 ms too, measured 0.107)
const LINK_MBPS = { "1g": 117.5, "10g": 1175 };  // TCP payload MB/s measured over the tbf links (docs/performance.md)
const SHAPES = [
    { name: "Qwen3-30B-A3B (48 layers, n_embd 2048, 128 experts top-8)", layers: 48, compute_scale: 1, wire_scale: 1 },
    { name: "94 layers, n_embd 4096, n_ff_exp 1536, 128 experts top-8 (Qwen3-235B-A22B layout)", layers: 94, compute_scale: 4, wire_scale: 2 },
];
// busier-direction bytes per token per layer (a3b width) and round trips per layer, per kind of step
const WIRE = {
    experts1: { decode: { bytes: 32768, rtts: 1 }, prefill: { bytes: 23800, rtts: 1 / 512 } },
    rpc_experts: { decode: { bytes: 8256, rtts: 3 }, prefill: { bytes: 8256, rtts: 3 / 512 } },
    single: { decode: { bytes: 0, rtts: 0 }, prefill: { bytes: 0, rtts: 0 } },
};
const FIXTURE = "a3b-L4-q8_0", FIXTURE_LAYERS = 4;

function median(xs) {
    const v = xs.filter(Number.isFinite).sort((a, b) => a - b);
    if (!v.length) return null;
    const h = v.length >> 1;
    return v.length % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

/// ms per layer per token on loopback of the fixture's one node (moezip-run's single; prefill: per
/// prompt token), or null.
function single_per_layer_ms(groups, phase) {
    const tok = median(groups.filter((g) => g.model === FIXTURE && g.variant === "single" && g.net === "lo")
                             .map((g) => g[phase] && g[phase].median));
    return tok ? 1000 / tok / FIXTURE_LAYERS : null;
}

/// A variant's speed-up over its own program's one-node run on loopback (median over the placements
/// of the median ratio within pairs), or null without pairs.
function paired_speedup(groups, variant, phase) {
    return median(groups.filter((g) => g.model === FIXTURE && g.variant === variant && g.net === "lo")
                        .map((g) => g[phase] && g[phase].paired_ratio_median));
}

/// Rows {shape, link, phase, tok_s: {single, experts1, rpc_experts}, x_single: {...}}; [] without the
/// fixture's single, experts1 and rpc_experts runs.
function projection_rows(groups) {
    const out = [];
    for (const phase of ["decode", "prefill"]) {
        const one = single_per_layer_ms(groups, phase);
        const base = { single: one };
        for (const v of ["experts1", "rpc_experts"]) {
            const x = paired_speedup(groups, v, phase);
            base[v] = one !== null && x ? one / x : null;
        }
        if (Object.values(base).some((x) => x === null)) continue;
        for (const s of SHAPES) {
            for (const link of ["1g", "10g"]) {
                const tok_s = {};
                for (const v of Object.keys(base)) {
                    const w = WIRE[v][phase];
                    const wire_ms = (w.bytes * s.wire_scale) / (LINK_MBPS[link] * 1000) + w.rtts * LAN_RTT_MS;
                    tok_s[v] = 1000 / (s.layers * (base[v] * s.compute_scale + (v === "single" ? 0 : wire_ms)));
                }
                out.push({ shape: s.name, layers: s.layers, link, phase, tok_s,
                           x_single: { experts1: tok_s.experts1 / tok_s.single, rpc_experts: tok_s.rpc_experts / tok_s.single },
                           experts1_x_rpc: tok_s.experts1 / tok_s.rpc_experts });
            }
        }
    }
    return out;
}

const ASSUMPTIONS = [
    `per-layer cost of one node = moezip-run's median step on ${FIXTURE} (loopback, both placements) / ${FIXTURE_LAYERS} layers; ` +
        "of experts1 and rpc_experts = that over their speed-up within pairs, each over its own program's one-node run",
    "same layer shape as Qwen3-30B-A3B for 48 layers; the 94-layer shape reads 4x the weights per layer (compute x4) and moves 2x the bytes",
    `links add the busier direction's bytes at ${LINK_MBPS["1g"]} / ${LINK_MBPS["10g"]} MB/s and ${LAN_RTT_MS} ms per round trip (moezip 1 per layer, RPC 3)`,
    "no further overlap of transfer and compute; one core per host, one thread, as measured",
];

module.exports = { projection_rows, ASSUMPTIONS, LINK_MBPS };

// node tools/bench/projection.js BENCH_JSON: the projection of a bench.json (or of any file with
// {"groups": [{model, variant, net, prefill: {median, paired_ratio_median}, decode: {...}}]}) as a Markdown table.
if (require.main === module) {
    const b = JSON.parse(require("fs").readFileSync(process.argv[2], "utf8"));
    const rows = projection_rows(b.groups || []);
    if (!rows.length) {
        console.error(`projection: ${process.argv[2]} has no ${FIXTURE} runs of single, experts1 and rpc_experts on loopback`);
        process.exit(1);
    }
    const f = (x) => x.toFixed(2);
    console.log("| shape | link | phase | one node tok/s | moezip experts1 tok/s | x one node | llama.cpp RPC experts tok/s | x one node | moezip / RPC |");
    console.log("|---|---|---|---|---|---|---|---|---|");
    for (const r of rows)
        console.log(`| ${r.shape} | ${r.link === "1g" ? "1 Gbit/s" : "10 Gbit/s"} | ${r.phase} | ${f(r.tok_s.single)} | ${f(r.tok_s.experts1)} | ` +
                    `${f(r.x_single.experts1)}x | ${f(r.tok_s.rpc_experts)} | ${f(r.x_single.rpc_experts)}x | ${f(r.experts1_x_rpc)}x |`);
}
