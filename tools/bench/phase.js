// make bench: what one phase run (prefill only, or decode only) says about the MoE layers and the wire.
// Inputs are the files of one run: tools/run-bench.sh's meta JSON, moezip-run's JSON
// (docs/internals/moezip-run.md) and the preload's report (schema moezip-report/1: coordinator/evidence/evidence.cpp
// for `layers`, coordinator/dispatch/dispatcher.cpp for `workers`).
"use strict";
const { sum } = require("./stats.js");

const HEADER_BYTES = 152;  // MsgHeader, frame 0 of every request and reply (coordinator/wire/protocol.h static_assert)

/// Tokens whose MoE regions the report counted: a prefill run has one graph of the prompt; a decode
/// run (1-token prompt) has only one-row graphs, its prompt token included.
function phase_tokens(kind, run) {
    return kind === "prefill" ? run.prefill.tokens : run.prefill.tokens + run.decode.tokens;
}

/// Time of one step of the phase, ms: the prompt's llama_decode, or the mean decode step. setup_ms:
/// the one-time preparation the report counted (layers' ms_setup), which a prefill phase run's one
/// step contains (a decode phase run makes it in its 1-token prompt, outside the decode steps).
function phase_step_ms(kind, run, setup_ms = 0) {
    return kind === "prefill" ? run.prefill.ms - setup_ms : run.decode.ms / Math.max(1, run.decode.tokens);
}

/// Bytes the mode has to move per call, summed over layers: every row sent carries its hidden state
/// [n_embd] f32 and n_used ids (i32) and weights (f32); back come per-slot outputs [n_embd] f32
/// (experts mode, exact combine, which keeps results bit-identical; a row whose slots were its first
/// ones in slot order comes back as one sum: workers[].prefix_sum_rows / prefix_sum_slots) or one row
/// sum [n_embd] f32 (rows mode; experts mode with partial combine). `minimal` is the row-sum form for
/// every mode.
function payload_bytes(report) {
    const pm = (report.provider_map || [])[0] || {};
    const E = pm.n_embd || 0, k = pm.n_used || 0;
    const rows = sum(report.layers || [], "remote_rows"), slots = sum(report.layers || [], "remote_slots");
    const out = rows * (E * 4 + 2 * k * 4);
    const ws = report.workers || [];
    const summed = sum(ws, "prefix_sum_slots") - sum(ws, "prefix_sum_rows");  // outputs a prefix sum saved
    const back_exact = report.config && report.config.mode === "experts" ? (slots - summed) * E * 4 : rows * E * 4;
    return { needed: out + back_exact, minimal: out + rows * E * 4, n_embd: E, n_used: k };
}

/// Per-layer averages per call (ms): MoE handling in total, local compute (with packing and sending),
/// waiting for workers after the local part was done. The one-time preparation at a plan's first call
/// is left out: phase runs are cold, and a copy of seconds in a 64-step decode would otherwise count as
/// MoE time of every step. A decode run (kind "decode") leaves its first call out whole (the report's
/// first_call: the 1-token prompt's, outside the timed steps), which also drops a worker's one-time
/// work that this host sees only as waiting (first touch, packing its slices); later preparation
/// (ms_setup after a slice change) is still subtracted. A prefill run has one call: only ms_setup is
/// taken out. Reports without first_call (before 2026-12-02) get the prefill rule.
function layer_rows(report, kind = "prefill") {
    return (report.layers || []).map((l) => {
        const f = kind === "decode" && l.calls > 1 && l.first_call ? l.first_call : null;
        const c = Math.max(1, f ? l.calls - 1 : l.calls);
        const less = (key) => (l[key] || 0) - (f ? f[key] || 0 : 0);
        return { il: l.il, calls: l.calls, rows: l.rows, remote_rows: l.remote_rows, remote_slots: l.remote_slots,
                 ms: (less("ms") - less("ms_setup")) / c, ms_local: less("ms_local") / c, ms_wait: less("ms_wait") / c,
                 ms_setup: l.ms_setup || 0 };
    });
}

/// Everything the bench reports about one phase run.
function phase_record(meta, run, report) {
    const kind = meta.kind;
    const tokens = phase_tokens(kind, run);
    const layers = layer_rows(report, kind);
    const L = Math.max(1, layers.length);
    const workers = report.workers || [];
    const bytes = sum(workers, "bytes_out") + sum(workers, "bytes_in");
    const pay = payload_bytes(report);
    const wire = meta.net !== "lo" ? meta.wire_tx + meta.wire_rx : null;
    const moe_ms = layers.reduce((a, l) => a + l.ms, 0);
    const step_ms = phase_step_ms(kind, run, layers.reduce((a, l) => a + l.ms_setup, 0));
    return {
        model: meta.model, variant: meta.variant, net: meta.net, placement: meta.placement, phase: kind,
        tokens, n_moe_layers: layers.length, step_ms, moe_ms_per_step: moe_ms, moe_share: moe_ms / step_ms,
        layers,
        bytes_per_token_layer: bytes / (tokens * L),
        needed_per_token_layer: pay.needed / (tokens * L),
        minimal_per_token_layer: pay.minimal / (tokens * L),
        bytes_vs_needed: pay.needed > 0 ? bytes / pay.needed : null,
        bytes_vs_minimal: pay.minimal > 0 ? bytes / pay.minimal : null,
        headers_per_token_layer: (2 * HEADER_BYTES * sum(workers, "requests")) / (tokens * L),
        veth_per_token_layer: wire === null ? null : wire / (tokens * L),
        veth_vs_needed: wire === null || pay.needed === 0 ? null : wire / pay.needed,
        workers: workers.map((w) => ({ endpoint: w.endpoint, experts: w.identity ? w.identity.experts : "",
                                       requests: w.requests, bytes_out: w.bytes_out, bytes_in: w.bytes_in,
                                       rtt_ms_p50: w.rtt_ms_p50, rtt_ms_p99: w.rtt_ms_p99,
                                       // the worker's own time per reply (header service_us) and the rest of the round trip
                                       service_ms_p50: w.service_ms_p50 ?? null, rtt_minus_service_ms_p50: w.rtt_minus_service_ms_p50 ?? null })),
    };
}

module.exports = { phase_record, payload_bytes, phase_tokens, phase_step_ms };
