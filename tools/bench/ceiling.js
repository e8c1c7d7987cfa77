// make bench: what any ZeroMQ dispatch of a decode call's slots reaches on this machine
// (tools/moezip-ceiling, OUT/ceiling/MODEL.json, schema moezip-ceiling/1), and how close the experts
// variants come to it. The Amdahl bound counts nothing for crossing to the worker; the ceiling is the
// best step a host and one worker reach with the model's slot time, MoE share and message sizes when the
// experts' compute is a spin: the round trip, the wake-ups and the split's granularity are this
// machine's, nothing of moezip is in it. The same over a busy-polled plain TCP socket (not moezip's
// transport) says what this machine's wake-ups take of it.
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

/// One row per experts variant's decode on loopback with a ceiling for its model: the bound, the
/// ceiling (best split of whole slots, and best of any split) as fractions of the bound, and the
/// measured fraction over the whole-slot ceiling (moezip dispatches whole slots) with its interval.
function ceiling_rows(ceilings, amdahl) {
    const out = [];
    for (const a of amdahl) {
        const c = ceilings.get(a.model);
        if (!c || a.net !== "lo" || a.phase !== "decode" || !a.variant.startsWith("experts1")) continue;
        const z = c.zeromq, t = c.tcp_busy_poll;
        if (!z || !z.best_whole_slots || !z.best) continue;
        const whole = z.best_whole_slots.of_bound;
        const ci = a.fraction_ci95;
        out.push({ model: a.model, variant: a.variant, placement: a.placement, moe_share_ceiling: c.shape.moe_share,
                   slot_ms: c.shape.slot_ms, rtt16_ms: z.rtt16_ms, ceiling_whole_of_bound: whole,
                   ceiling_whole_host_slots: z.best_whole_slots.host_slots, ceiling_any_of_bound: z.best.of_bound,
                   ceiling_any_host_slots: z.best.host_slots,
                   busy_poll_rtt16_ms: t ? t.rtt16_ms : null,
                   busy_poll_whole_of_bound: t && t.best_whole_slots ? t.best_whole_slots.of_bound : null,
                   measured_of_bound: a.fraction_of_bound,
                   of_ceiling: a.fraction_of_bound !== null ? a.fraction_of_bound / whole : null,
                   of_ceiling_ci95: ci && ci.lo !== null ? { point: ci.point / whole, lo: ci.lo / whole, hi: ci.hi / whole } : null });
    }
    return out;
}

module.exports = { load_ceilings, ceiling_rows };
