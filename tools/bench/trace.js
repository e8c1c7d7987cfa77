// make bench: a timeline of one decode step as Chrome trace-event JSON (open it in https://ui.perfetto.dev
// or chrome://tracing). Synthetic: the preload reports per-layer sums, not per-call timestamps, so each
// layer's block is its mean per decode call (ms, ms_local, ms_wait of the report divided by calls) and
// the engine's own work (attention, norms, router, output) is the rest of the measured step time,
// spread evenly before each MoE layer and after the last. A worker's bar is the round trip p50 of all
// its requests in the run (transfer + its compute), placed at the start of the layer's MoE block.
"use strict";

const US = 1000;  // trace timestamps are microseconds; our numbers are ms

function complete(name, pid, tid, ts_ms, dur_ms, args) {
    return { name, ph: "X", pid, tid, ts: ts_ms * US, dur: Math.max(0, dur_ms) * US, args: args || {} };
}

function meta(pid, tid, what, name) {
    return { name: what, ph: "M", pid, tid, args: { name } };
}

/// Events of one variant's decode step as process `pid`. `rec` is a decode phase record (phase.js).
function variant_events(pid, label, rec) {
    const ev = [meta(pid, 0, "process_name", label), meta(pid, 1, "thread_name", "coordinator (engine thread)")];
    const L = rec.layers.length;
    const moe = rec.layers.reduce((a, l) => a + l.ms, 0);
    const engine_chunk = Math.max(0, rec.step_ms - moe) / (L + 1);
    rec.workers.forEach((w, i) => ev.push(meta(pid, 2 + i, "thread_name", `worker ${i} (experts ${w.experts})`)));
    let t = 0;
    for (const l of rec.layers) {
        ev.push(complete(`engine: attention, norms, router (layer ${l.il})`, pid, 1, t, engine_chunk,
                         { note: "rest of the step time, spread evenly" }));
        t += engine_chunk;
        const rest = Math.max(0, l.ms - l.ms_local - l.ms_wait);
        ev.push(complete(`MoE ${l.il}: local experts`, pid, 1, t, l.ms_local, { ms: l.ms_local, calls: l.calls }));
        ev.push(complete(`MoE ${l.il}: wait for workers`, pid, 1, t + l.ms_local, l.ms_wait, { ms: l.ms_wait }));
        ev.push(complete(`MoE ${l.il}: combine`, pid, 1, t + l.ms_local + l.ms_wait, rest, { ms: rest }));
        rec.workers.forEach((w, i) => {
            ev.push(complete(`layer ${l.il}: round trip (p50)`, pid, 2 + i, t, Math.min(w.rtt_ms_p50, l.ms),
                             { rtt_ms_p50: w.rtt_ms_p50, rtt_ms_p99: w.rtt_ms_p99, service_ms_p50: w.service_ms_p50,
                               rtt_minus_service_ms_p50: w.rtt_minus_service_ms_p50 }));
        });
        t += l.ms;
    }
    ev.push(complete("engine: output norm, logits", pid, 1, t, engine_chunk, {}));
    return ev;
}

/// The trace of one model: one process per variant (local first), each one decode step from t = 0.
function build_trace(model, records) {
    const order = ["local", "experts1", "experts2"];
    const recs = records.filter((r) => r.phase === "decode" && r.net === "lo" && order.includes(r.variant))
                        .sort((a, b) => order.indexOf(a.variant) - order.indexOf(b.variant));
    const events = [];
    recs.forEach((r, i) => {
        const label = `${model} ${r.variant}: one decode step, ${r.step_ms.toFixed(2)} ms`;
        events.push(...variant_events(i + 1, label, r));
    });
    return {
        traceEvents: events,
        displayTimeUnit: "ms",
        otherData: {
            model,
            note: "synthetic timeline from per-layer means of the moezip report (decode phase run, placement h0, " +
                  "loopback); engine time spread evenly between layers; worker bars are round-trip p50",
        },
    };
}

module.exports = { build_trace };
