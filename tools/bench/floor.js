// make bench: the physical floor of each distributed mode, from the bytes it moved and its round trips.
//
// The coordinator has one link; per step, each MoE layer needs one round trip to every worker (sent
// together, answered in parallel) and its bytes cross the link in the busier direction:
//   floor per step = n_moe_layers * RTT0 + bytes of the busier direction per step / payload rate
// RTT0: a 16-byte ZeroMQ round trip over loopback TCP, back to back, as tools/moezip-ceiling measured it (zeromq) in
// this bench for the model (ceiling.js); without one, 0.107 ms, measured before on this machine
// (/work/shared/notes/engine-llamacpp.md). Payload rates are TCP
// payload at MTU 1500: 117.5 MB/s at 1 Gbit/s (115 MB/s measured here through the tbf-shaped veth),
// 1175 MB/s at 10 Gbit/s. No overlap is assumed: with overlap, local work hides up to its own length.
"use strict";

const RTT0_MS = 0.107;
const RATES = { "1g": 117.5e6, "10g": 1175e6 };

/// ceilings: model -> moezip-ceiling's JSON (ceiling.js load_ceilings), for its measured RTT0.
function floor_rows(phases, ceilings = new Map()) {
    const out = [];
    for (const p of phases) {
        if (p.net !== "lo" || !p.workers.length) continue;
        const per_step_tokens = p.phase === "prefill" ? p.tokens : 1;
        const L = p.n_moe_layers;
        const c = ceilings.get(p.model);
        const rtt0 = c && c.zeromq && c.zeromq.rtt16_ms > 0 ? c.zeromq.rtt16_ms : RTT0_MS;
        const sent = p.workers.reduce((a, w) => a + w.bytes_out, 0), got = p.workers.reduce((a, w) => a + w.bytes_in, 0);
        const busier_per_token_layer = Math.max(sent, got) / (p.tokens * L);
        const step_bytes = busier_per_token_layer * per_step_tokens * L;
        const row = { model: p.model, variant: p.variant, phase: p.phase, n_moe_layers: L,
                      busier_direction_per_token_layer: busier_per_token_layer, round_trips_per_step: L,
                      rtt0_ms: rtt0, rtt0_measured: rtt0 !== RTT0_MS, measured_step_ms: p.step_ms, floor_ms: {} };
        for (const [name, rate] of Object.entries(RATES)) row.floor_ms[name] = L * rtt0 + (1000 * step_bytes) / rate;
        row.floor_ms.lo = L * rtt0;
        out.push(row);
    }
    return out;
}

module.exports = { floor_rows, RTT0_MS };
