// make bench: the Markdown tables of bench.json (printed and written to OUT/table.md).
"use strict";
const { fmt } = require("./stats.js");

const VARIANTS = ["single", "observe", "local", "rows1", "experts1", "experts1_curve", "experts1_verify", "experts2", "shard1"];
const NETS = ["lo", "1g", "10g"];
const order = (a, b) => (a.model < b.model ? -1 : a.model > b.model ? 1 : 0) ||
                        NETS.indexOf(a.net) - NETS.indexOf(b.net) ||
                        VARIANTS.indexOf(a.variant) - VARIANTS.indexOf(b.variant) ||
                        (a.placement || "").localeCompare(b.placement || "") ||
                        (a.phase || "").localeCompare(b.phase || "");
const link = (n) => (n === "lo" ? "loopback" : `${n}bit`);
const cores = (g) => (g.n_workers > 0 ? `${g.host_core} / ${g.worker_core}` : `${g.host_core}`);
const pct = (x) => (x === null || x === undefined ? "-" : `${fmt(100 * x, 0)}%`);
const x2 = (x) => (x === null || x === undefined ? "-" : `${fmt(x, 2)}x`);

function table(head, rows) {
    const lines = [`| ${head.join(" | ")} |`, `|${head.map(() => "---").join("|")}|`];
    for (const r of rows) lines.push(`| ${r.join(" | ")} |`);
    return lines.join("\n");
}

function speed_table(groups) {
    const rows = [...groups].sort(order).map((g) => [
        g.model, link(g.net), g.variant, cores(g),
        `${fmt(g.prefill.median, 1)} ±${fmt(g.prefill.spread_pct, 0)}%`, x2(g.prefill.ratio_to_single),
        `${fmt(g.decode.median, 2)} ±${fmt(g.decode.spread_pct, 0)}%`, x2(g.decode.ratio_to_single),
        g.identical_logits === null ? "-" : g.identical_logits ? "yes" : g.exact_by_design ? "**no**" : "no (partial sums, by design)",
        fmt(g.coordinator_rss_mib, 0), g.worker_rss_mib.map((x) => fmt(x, 0)).join(" + ") || "-",
        `${g.runs - g.failed}/${g.runs}` + (g.notes.length ? `; ${g.notes.join("; ")}` : ""),
    ]);
    return table(["model", "link", "variant", "cores (coord / workers)", "prefill tok/s", "x single", "decode tok/s",
                  "x single", "same logits", "coord. RSS MiB", "worker RSS MiB", "runs; note"], rows);
}

function time_table(phases) {
    const rows = [...phases].sort(order).map((p) => {
        const local = p.layers.reduce((a, l) => a + l.ms_local, 0), wait = p.layers.reduce((a, l) => a + l.ms_wait, 0);
        return [p.model, link(p.net), p.variant, p.phase, fmt(p.step_ms, 2), `${fmt(p.moe_ms_per_step, 2)} (${pct(p.moe_share)})`,
                fmt(local, 2), fmt(wait, 2), fmt(p.step_ms - p.moe_ms_per_step, 2),
                p.layers.map((l) => `${l.il}: ${fmt(l.ms_local, 2)}/${fmt(l.ms_wait, 2)}`).join("; ")];
    });
    return table(["model", "link", "variant", "phase", "step ms", "MoE ms (share)", "local ms", "wait ms", "engine ms",
                  "per layer: local/wait ms"], rows);
}

function wire_table(phases) {
    const rows = [...phases].filter((p) => p.workers.length).sort(order).map((p) => [
        p.model, link(p.net), p.variant, p.phase, fmt(p.bytes_per_token_layer, 0), fmt(p.needed_per_token_layer, 0),
        x2(p.bytes_vs_needed), fmt(p.headers_per_token_layer, 0), fmt(p.minimal_per_token_layer, 0),
        p.veth_per_token_layer === null ? "-" : `${fmt(p.veth_per_token_layer, 0)} (${x2(p.veth_vs_needed)})`,
        p.workers.map((w) => `${fmt(w.rtt_ms_p50, 2)} / ${fmt(w.rtt_ms_p99, 2)}`).join("; "),
        p.workers.map((w) => `${fmt(w.service_ms_p50, 2)} / ${fmt(w.rtt_minus_service_ms_p50, 2)}`).join("; "),
    ]);
    return table(["model", "link", "variant", "phase", "bytes/token/layer", "mode payload", "ratio",
                  "of which headers", "row-sum payload", "veth frames (ratio)", "round trip p50 / p99 ms per worker",
                  "worker service / rest of round trip p50 ms"], rows);
}

function amdahl_table(amdahl) {
    const rows = [...amdahl].filter((a) => a.variant !== "observe").sort(order).map((a) => [
        a.model, link(a.net), a.variant, a.placement === "h0" ? "0" : "1", a.phase, pct(a.moe_share), x2(a.bound),
        x2(a.measured), pct(a.fraction_of_bound)]);
    return table(["model", "link", "variant", "coord. core", "phase", "MoE share", "Amdahl bound", "measured", "of bound"], rows);
}

function floor_table(floor) {
    const rows = [...floor].sort(order).map((f) => [
        f.model, f.variant, f.phase, fmt(f.busier_direction_per_token_layer, 0), `${f.round_trips_per_step}`,
        fmt(f.floor_ms.lo, 2), fmt(f.floor_ms["10g"], 2), fmt(f.floor_ms["1g"], 2), fmt(f.measured_step_ms, 2)]);
    return table(["model", "variant", "phase", "busier direction B/token/layer", "round trips per step",
                  "floor ms/step: loopback (round trips only)", "10 Gbit/s", "1 Gbit/s", "measured step ms (loopback)"], rows);
}

function memory_table(memory) {
    const rows = memory.map((m) => [m.model, m.variant, fmt(m.single_rss_mib, 0), fmt(m.coordinator_rss_mib, 0),
                                     fmt(m.coordinator_serving_rss_mib, 0), fmt(m.coordinator_released_mib, 0),
                                     m.worker_rss_mib.map((x) => fmt(x, 0)).join(" + "), fmt(m.not_owned_expert_mib, 0),
                                     fmt(m.rss_if_not_owned_were_not_loaded_mib, 0)]);
    return table(["model", "variant", "single-node peak RSS MiB", "coordinator peak RSS MiB", "coordinator RSS serving MiB",
                  "never loaded by coordinator MiB", "worker peak RSS MiB", "experts not owned MiB", "single RSS - not owned"], rows);
}

function target_table(targets) {
    const names = [...new Set(targets.map((t) => t.target))];
    const rows = names.map((n) => {
        const ts = targets.filter((t) => t.target === n);
        const missed = ts.filter((t) => !t.met);
        return [n, `${ts.length - missed.length}/${ts.length}`,
                missed.slice(0, 8).map((t) => `${t.model} ${t.variant} ${link(t.net)} ${t.placement} ${t.phase}: ${fmt(t.value, 3)}`)
                      .join("; ") + (missed.length > 8 ? `; ... (${missed.length - 8} more)` : "")];
    });
    return table(["target", "met", "missed (value)"], rows);
}

function render(b) {
    const s = b.settings || {};
    const head = [
        `# moezip bench ${b.date}`,
        "",
        `Machine: ${b.machine.cpu}, ${b.machine.cores} cores, ${fmt(b.machine.mem_gib, 0)} GiB, kernel ${b.machine.kernel}. ` +
        `Median 1-min load average at run starts: ${fmt(b.loadavg_median, 2)} (this VM is shared with other engineers' builds and tests). ` +
        `Total ${b.seconds ? Math.round(b.seconds / 60) + " min" : "?"}; tree ${b.commit || "?"}.`,
        `Weights: ${s.load === "anon" ? "read into memory (--no-mmap; workers anonymous memory)" : "memory-mapped on every side (coordinator mmap, workers --mmap)"}; ` +
        `rows share of the coordinator ${s.rows_share}; ${s.pinned ? "every process pinned to one core, one engine thread" : "not pinned"}; ` +
        `prefill ${s.prefill} tokens in one ubatch, decode ${s.decode} steps; ` +
        `${s.warmup ? "timed runs warmed up (moezip-run --warmup: one untimed prompt, KV cache cleared); phase runs cold (first prompt of the process)" : "every run cold (first prompt of the process)"}.`,
        ...b.notes.map((n) => `Note: ${n}.`),
        b.failed_runs.length ? `Failed runs: ${b.failed_runs.join(", ")}` : "",
    ];
    return [
        head.filter((x) => x !== null).join("\n"),
        "## Speed (timed runs; median ± half the min-max range; x single = ratio to the unhooked run on the same coordinator core)",
        speed_table(b.groups),
        "## Where the time goes (phase runs, coordinator on core 0; per step, from the preload's report)",
        time_table(b.phases),
        "## Wire (phase runs; bytes sent + received by the coordinator per token per MoE layer)",
        wire_table(b.phases),
        "## Amdahl bound (MoE share from the local-mode phase runs)",
        amdahl_table(b.amdahl),
        "## Physical floor per step (n_moe_layers x 0.107 ms round trip + bytes of the busier direction / TCP payload rate; no overlap)",
        floor_table(b.floor),
        "## Memory (median of the timed runs on loopback; peak = ru_maxrss / VmHWM, serving = the preload's largest VmRSS at the end of a graph compute)",
        memory_table(b.memory),
        "## Targets",
        target_table(b.targets),
        "",
    ].join("\n\n");
}

module.exports = { render };
