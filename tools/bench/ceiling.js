// make bench: what any ZeroMQ dispatch of a decode call's slots reaches on this machine
// (tools/moezip-ceiling, OUT/ceiling/MODEL.json, schema moezip-ceiling/1), and how close the experts
// variants come to it. The Amdahl bound counts nothing for crossing to the worker; the ceiling is the
// best step a host and one worker reach with the model's slot time, MoE share and message sizes when the
// experts' compute is a spin: the round trip, the wake-ups and the split's granularity are this
// machine's, nothing of moezip is in it. The same with the worker polling its ZeroMQ socket, and over
// a plain TCP socket with the worker blocking or polling (not moezip's transport), says what of it
// the wake-ups take (tools/moezip-ceiling/sim_link.h). The tool measures one dispatch pattern: the
// request leaves at the call's start and the host computes its share meanwhile.
"use strict";
const fs = require("fs");
const path = require("path");
const { read_json } = require("./stats.js");

/// model -> moezip-ceiling's JSON, for every OUT/ceiling/*.json.
function load_ceilings(out) {
    const dir = path.join(out || ".", "ceiling");
    let names = [];
    try { names = fs.readdirSync(dir).filter((n) => n.endsWith(".json")).sort(); } catch (e) { names = []; }
    const m = new Map();
    for (const n of names) {
        const j = read_json(path.join(dir, n));
        if (j && j.schema === "moezip-ceiling/1") m.set(path.basename(n, ".json"), j);
    }
    return m;
}

const whole_of = (t) => (t && t.best_whole_slots ? t.best_whole_slots.of_bound : null);

/// One row per experts variant's decode on loopback whose bound is the two halves' 1/((1-p)+p/2)
/// (experts1, experts1_plan, experts1_repl, ...; not experts1_verify, bound 1), for a model with a
/// ceiling: the ceiling over ZeroMQ (best split of whole slots, and of quarter slots) and over the
/// other transports as fractions of the bound, and the measured fraction over the whole-slot ZeroMQ
/// ceiling (moezip dispatches whole slots) with its paired interval; the same over the bound from one
/// node with the same memory (local_copy) where the set has it. The intervals leave the ceiling's own
/// spread out (it moved 87-89% between runs here).
function ceiling_rows(ceilings, amdahl) {
    const out = [];
    for (const a of amdahl) {
        const c = ceilings.get(a.model);
        if (!c || a.net !== "lo" || a.phase !== "decode" || !a.variant.startsWith("experts1")) continue;
        if (!(a.moe_share > 0) || Math.abs(a.bound - 1 / (1 - a.moe_share / 2)) > 1e-9) continue;
        const z = c.zeromq;
        if (!z || !z.best_whole_slots || !z.best) continue;
        const whole = z.best_whole_slots.of_bound;
        const over = (ci) => (ci && ci.lo !== null && ci.lo !== undefined
            ? { point: ci.point / whole, lo: ci.lo / whole, hi: ci.hi / whole } : null);
        const ci = a.fraction_ci95;
        // the paired point where there is an interval (4 pairs up), else the ratio of medians
        const measured = ci && ci.point !== undefined ? ci.point : a.fraction_of_bound;
        out.push({ model: a.model, variant: a.variant, placement: a.placement, moe_share_ceiling: c.shape.moe_share,
                   slot_ms: c.shape.slot_ms, rtt16_ms: z.rtt16_ms, ceiling_whole_of_bound: whole,
                   ceiling_whole_host_slots: z.best_whole_slots.host_slots, ceiling_any_of_bound: z.best.of_bound,
                   ceiling_any_host_slots: z.best.host_slots,
                   zeromq_poll_whole_of_bound: whole_of(c.zeromq_poll),
                   tcp_block_whole_of_bound: whole_of(c.tcp_block),
                   busy_poll_rtt16_ms: c.tcp_busy_poll ? c.tcp_busy_poll.rtt16_ms : null,
                   busy_poll_whole_of_bound: whole_of(c.tcp_busy_poll),
                   measured_of_bound: measured,
                   of_ceiling: measured !== null && measured !== undefined ? measured / whole : null,
                   of_ceiling_ci95: over(ci),
                   of_ceiling_copy_ci95: over(a.fraction_ci95_copy) });
    }
    return out;
}

module.exports = { load_ceilings, ceiling_rows };
