// make bench: the Markdown tables of bench.json (printed and written to OUT/table.md).
"use strict";
const { fmt } = require("./stats.js");

const VARIANTS = ["single", "single_nr", "single_anon", "single_thp", "observe", "local", "local_copy", "rows1", "experts1", "experts1_map", "experts1_curve", "experts1_verify", "experts2", "shard1",
                  "rpc_single", "rpc_experts", "rpc_tensor"];
/// How a variant is shown: the references say which one they are.
const LABEL = { single: "single (engine default: repack on)", single_nr: "single --no-repack", single_anon: "single --no-mmap", single_thp: "single --no-mmap, malloc with huge pages (glibc.malloc.hugetlb=1)",
                local_copy: "local_copy (one node from the huge-page copy)", experts1_map: "experts1_map (both hosts from the page cache, no copies)", rpc_single: "rpc_single (llama-bench, one node)",
                rpc_experts: "rpc_experts (llama.cpp RPC: experts on the server)", rpc_tensor: "rpc_tensor (llama.cpp -sm tensor over RPC)" };
const label = (g) => LABEL[g.variant] || g.variant;
/// BENCH_PAGE_CACHE, as the table header says it.
const PAGE_CACHE_SETTING = {
    kernel: "evicted and read back through a mapping before its runs (the folio sizes of the kernel's readahead)",
    huge: "evicted and read back through a mapping advised MADV_HUGEPAGE before its runs (2 MiB folios)",
    small: "evicted and read back in 4 KiB folios before its runs",
    asis: "left as found",
};
/// A paired ratio with its bootstrap 95% interval: "1.23x [1.19, 1.28]"; "-" without pairs.
const ci = (c) => (!c ? "-" : c.lo === null ? `${fmt(c.point, 2)}x (no interval: ${c.n} ${c.n === 1 ? "pair" : "pairs"})` : `${fmt(c.point, 2)}x [${fmt(c.lo, 2)}, ${fmt(c.hi, 2)}]`);
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
        g.model, link(g.net), label(g), g.reference || "-", cores(g),
        `${fmt(g.prefill.median, 1)} ±${fmt(g.prefill.spread_pct, 0)}%`, ci(g.prefill.ci95),
        `${fmt(g.decode.median, 2)} ±${fmt(g.decode.spread_pct, 0)}%`, ci(g.decode.ci95) + (g.decode.ci95 && !g.decode.resolved_5pct ? " (not ±5%)" : ""),
        g.identical_logits === null ? "-" : g.identical_logits ? "yes" : g.exact_by_design ? "**no**" : "no (partial sums, by design)",
        fmt(g.coordinator_rss_mib, 0), g.worker_rss_mib.map((x) => fmt(x, 0)).join(" + ") || "-",
        g.stall_checked_runs ? `${g.stalled_runs}/${g.stall_checked_runs}` : "-",
        `${g.runs - g.failed}/${g.runs}` + (g.notes.length ? `; ${g.notes.join("; ")}` : ""),
    ]);
    return table(["model", "link", "variant", "paired with", "cores (coord / workers)", "prefill tok/s", "prefill x ref (paired, 95% CI)",
                  "decode tok/s", "decode x ref (paired, 95% CI)", "same logits", "coord. RSS MiB", "worker RSS MiB",
                  "stalled runs (rtt p99 >= 5x p50)", "runs; note"], rows);
}

/// moezip's distributed variants against llama.cpp's RPC experts-on-server run, same model, link and
/// cores: each one's speed-up over its own program's one-node run (ratios within pairs) compared, the
/// like-for-like ratio the targets use; and the raw ratio of tok/s medians (both run sets resampled).
function rpc_table(groups) {
    const rows = [...groups].filter((g) => g.prefill.vs_rpc_experts || g.decode.vs_rpc_experts).sort(order).map((g) => [
        g.model, link(g.net), g.variant, cores(g), ci(g.prefill.vs_rpc_experts_paired), ci(g.prefill.vs_rpc_experts),
        ci(g.decode.vs_rpc_experts_paired), ci(g.decode.vs_rpc_experts)]);
    return table(["model", "link", "variant", "cores", "prefill: speed-up over one node / RPC's (95% CI)", "prefill tok/s x rpc_experts (95% CI)",
                  "decode: speed-up over one node / RPC's (95% CI)", "decode tok/s x rpc_experts (95% CI)"], rows);
}

function copy_table(groups) {
    const res = (c, ok) => (c && c.lo !== null ? (ok ? "yes" : "no") : "-");
    const rows = [...groups].filter((g) => g.prefill.vs_local_copy || g.decode.vs_local_copy).sort(order).map((g) => [
        g.model, link(g.net), g.variant, cores(g), ci(g.prefill.vs_local_copy), ci(g.decode.vs_local_copy),
        res(g.decode.vs_local_copy, g.decode.vs_local_copy_resolved_5pct)]);
    return table(["model", "link", "variant", "cores", "prefill x local_copy (tok/s, 95% CI)", "decode x local_copy (tok/s, 95% CI)",
                  "decode resolved to ±5%"], rows);
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
        x2(a.measured), pct(a.fraction_of_bound),
        a.fraction_ci95 ? `[${pct(a.fraction_ci95.lo)}, ${pct(a.fraction_ci95.hi)}]` : "no interval",
        a.bound_copy ? `${x2(a.bound_copy)} (${x2(a.local_copy_speed)} x MoE ${pct(a.moe_share_copy)})` : "-",
        a.fraction_ci95_copy ? `${pct(a.fraction_ci95_copy.point)} [${pct(a.fraction_ci95_copy.lo)}, ${pct(a.fraction_ci95_copy.hi)}]` : "-"]);
    // *_slow variants: the bound is the ideal split's with the worker at its CPU quota (targets.js)
    return table(["model", "link", "variant", "coord. core", "phase", "MoE share", "Amdahl bound", "measured", "of bound",
                  "of bound, 95% interval (paired)",
                  "bound from one node with the same memory (local_copy speed x MoE share)", "of it [95%]"], rows);
}

function ceiling_table(c) {
    const ci = (x) => (x ? `${pct(x.point)} [${pct(x.lo)}, ${pct(x.hi)}]` : "-");
    const rows = c.rows.map((r) => [
        r.model, r.variant, r.placement === "h0" ? "0" : "1", pct(r.moe_share_ceiling), fmt(r.slot_ms, 3), fmt(r.rtt16_ms, 3),
        `${pct(r.ceiling_whole_of_bound)} (${r.ceiling_whole_host_slots} here)`, `${pct(r.ceiling_any_of_bound)} (${r.ceiling_any_host_slots} here)`,
        pct(r.zeromq_poll_whole_of_bound), pct(r.tcp_block_whole_of_bound),
        r.busy_poll_whole_of_bound !== null ? `${pct(r.busy_poll_whole_of_bound)} (${fmt(r.busy_poll_rtt16_ms, 3)} ms)` : "-",
        pct(r.measured_of_bound), r.of_ceiling_ci95 ? ci(r.of_ceiling_ci95) : `${pct(r.of_ceiling)} (no interval)`,
        ci(r.of_ceiling_copy_ci95)]);
    return table(["model", "variant", "coord. core", "MoE share", "slot ms", "ZeroMQ 16 B round trip ms",
                  "ZeroMQ ceiling of the bound, whole slots", "ZeroMQ, quarter slots", "ZeroMQ, worker polling",
                  "plain TCP, worker blocking", "plain TCP, worker polling (16 B round trip)", "measured of the bound (paired)",
                  "measured of the whole-slot ZeroMQ ceiling [95%]", "the same from local_copy's bound [95%]"], rows);
}

function floor_table(floor) {
    const rows = [...floor].sort(order).map((f) => [
        f.model, f.variant, f.phase, fmt(f.busier_direction_per_token_layer, 0), `${f.round_trips_per_step}`, fmt(f.rtt0_ms, 3),
        fmt(f.floor_ms.lo, 2), fmt(f.floor_ms["10g"], 2), fmt(f.floor_ms["1g"], 2), fmt(f.measured_step_ms, 2)]);
    return table(["model", "variant", "phase", "busier direction B/token/layer", "round trips per step", "RTT0 ms",
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
    const value = (t) => (t.lo !== undefined ? `${fmt(t.value, 3)} [${fmt(t.lo, 3)}, ${fmt(t.hi, 3)}]` : fmt(t.value, 3));
    const rows = names.map((n) => {
        const ts = targets.filter((t) => t.target === n);
        const missed = ts.filter((t) => t.verdict === "missed"), open = ts.filter((t) => t.verdict === "not resolved");
        const list = (xs) => xs.slice(0, 8).map((t) => `${t.model} ${t.variant} ${link(t.net)} ${t.placement} ${t.phase}: ${value(t)}`)
                               .join("; ") + (xs.length > 8 ? `; ... (${xs.length - 8} more)` : "");
        return [n, `${ts.length - missed.length - open.length}/${ts.length}`, list(missed) || "-", list(open) || "-"];
    });
    return table(["target", "met", "missed (value [95% CI])", "not resolved (the interval spans the threshold)"], rows);
}

function projection_table(p) {
    const rows = p.rows.map((r) => [r.shape, link(r.link), r.phase, fmt(r.tok_s.single, 2), fmt(r.tok_s.experts1, 2),
                                    x2(r.x_single.experts1), fmt(r.tok_s.rpc_experts, 2), x2(r.x_single.rpc_experts),
                                    x2(r.experts1_x_rpc)]);
    return table(["shape", "link", "phase", "one node tok/s", "moezip experts1 tok/s", "x one node", "llama.cpp RPC experts tok/s",
                  "x one node", "moezip / RPC"], rows) + "\n\nAssumptions: " + p.assumptions.join("; ") + ".";
}

function render(b) {
    const s = b.settings || {};
    const head = [
        `# moezip bench ${b.date}`,
        "",
        `Machine: ${b.machine.cpu}, ${b.machine.cores} cores, ${fmt(b.machine.mem_gib, 0)} GiB, kernel ${b.machine.kernel}. ` +
        `Median 1-min load average at run starts: ${fmt(b.loadavg_median, 2)} (a load average over the core count means other work shared the machine: noisier runs). ` +
        `Total ${b.seconds ? Math.round(b.seconds / 60) + " min" : "?"}; tree ${b.commit || "?"}.`,
        `Weights: ${s.load === "anon" ? "read into memory on every side (engines --no-mmap / -lm none; workers and RPC servers anonymous memory)"
                   : s.load === "defaults" ? "each program's default (engines map the file; moezip-worker and ggml-rpc-server hold their experts in anonymous memory)"
                   : "memory-mapped (coordinator mmap, workers --mmap; RPC servers anonymous memory, their only way)"}; ` +
        `rows share of the coordinator ${s.rows_share}; ${s.pinned ? "every process pinned to one core, one engine thread" : "not pinned"}; ` +
        `prefill ${s.prefill} tokens in one ubatch, decode ${s.decode} steps; ` +
        `${s.warmup ? "timed runs warmed up (moezip-run --warmup: one untimed prompt, KV cache cleared); phase runs cold (first prompt of the process)" : "every run cold (first prompt of the process)"}.`,
        ...(b.page_cache || []).map((c) =>
            `Page cache of ${c.model}: ${PAGE_CACHE_SETTING[c.setting] || `mixed settings (${c.setting})`}; ` +
            `PMD-mapped (2 MiB folios) at run start: ${fmt(100 * c.pmd_share_min, 1)}-${fmt(100 * c.pmd_share_max, 1)}% of the file, ` +
            `resident >= ${fmt(100 * c.resident_share_min, 1)}%, over ${c.runs} runs; set again after a drift before ${c.set_again} of them` +
            (c.read_ahead_kb !== null && c.read_ahead_kb !== undefined ? `; the disk's read_ahead_kb ${c.read_ahead_kb}.` : ".")),
        ...b.notes.map((n) => `Note: ${n}.`),
        b.failed_runs.length ? `Failed runs: ${b.failed_runs.join(", ")}` : "",
    ];
    return [
        head.filter((x) => x !== null).join("\n"),
        "## Speed (timed runs; median ± half the min-max range; x ref = median of the ratios within pairs, each run over its reference's run side by side on the same cores, with a bootstrap 95% interval)",
        speed_table(b.groups),
        "## Against llama.cpp's RPC backend (experts of every layer on a ggml-rpc-server on the other core)\n\n" +
        "Speed-up over one node / RPC's: each program's median ratio within its pairs (moezip's over moezip-run's single, " +
        "rpc_experts over llama-bench's rpc_single, side by side on the same cores), divided; both pair sets resampled. " +
        "tok/s x rpc_experts divides the raw medians of the two programs, which time one node differently " +
        "(llama-bench's decode starts from an empty context, moezip-run's after the prompt; llama-bench is built from source, " +
        "moezip-run runs the npm engine: compare the single and rpc_single rows). The targets are judged on both.",
        rpc_table(b.groups),
        // local_copy runs in the full set only
        ...([...b.groups].some((g) => g.prefill.vs_local_copy || g.decode.vs_local_copy) ? [
            "## Against one node computing from the same huge-page copy (local_copy): what distributing gains apart from the memory kind (ratio of medians of the two variants' timed runs, bootstrap 95% interval)",
            copy_table(b.groups)] : []),
        "## Where the time goes (phase runs, coordinator on core 0; per step, from the preload's report)",
        time_table(b.phases),
        "## Wire (phase runs; bytes sent + received by the coordinator per token per MoE layer)",
        wire_table(b.phases),
        "## Amdahl bound (MoE share from the local-mode phase runs; experts1 variants also from local_copy, one node computing from the huge-page copy both of their hosts use)",
        amdahl_table(b.amdahl),
        "## What a dispatch reaches here (tools/moezip-ceiling: a host and one worker exchanging a decode call's messages, the request at the call's start, " +
        "the experts' compute replaced by spins of the model's slot time; best host share of the slots, as a fraction of the Amdahl bound; " +
        "ZeroMQ is moezip's transport, plain TCP tells what the wake-ups cost)",
        b.ceiling && b.ceiling.rows.length ? ceiling_table(b.ceiling) : "(no ceiling: BENCH_CEILING=0, one CPU, or no experts variant)",
        "## Physical floor per step (n_moe_layers x RTT0 + bytes of the busier direction / TCP payload rate; no overlap; RTT0 a 16-byte round trip, measured by moezip-ceiling where it ran, else 0.107 ms)",
        floor_table(b.floor),
        "## Memory (median of the timed runs on loopback; peak = ru_maxrss / VmHWM, serving = the preload's largest VmRSS at the end of a graph compute)",
        memory_table(b.memory),
        "## Targets",
        target_table(b.targets),
        "## Full-size projection (a model, from the per-layer costs above; one core per host)",
        b.projection && b.projection.rows.length ? projection_table(b.projection) : "(needs single, experts1 and rpc_experts on a3b-L4-q8_0)",
        "",
    ].join("\n\n");
}

module.exports = { render };
