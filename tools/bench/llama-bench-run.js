// make bench: llama-bench's JSON (-o json: one object per test) as the bench's run record, the shape
// moezip-run --json writes for the fields the bench reads: {prefill: {tokens, tok_s}, decode: {tokens,
// tok_s}}. The prompt test has n_gen 0, the decode test n_prompt 0; each timed once (-r 1) after
// llama-bench's own warm-up. No logits: llama-bench does not expose them (logits_xxh3 null).
//   node tools/bench/llama-bench-run.js LLAMA_BENCH_STDOUT > RUN.json
// Exit 1 (message on stderr) when the output holds no prompt or no decode test.
"use strict";
const fs = require("fs");

function main() {
    let tests;
    try {
        tests = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
    } catch (e) {
        console.error(`llama-bench-run: ${process.argv[2]}: not llama-bench JSON (${e.message})`);
        process.exit(1);
    }
    const pp = Array.isArray(tests) && tests.find((t) => t.n_prompt > 0 && t.n_gen === 0);
    const tg = Array.isArray(tests) && tests.find((t) => t.n_gen > 0 && t.n_prompt === 0);
    if (!pp || !tg) {
        console.error(`llama-bench-run: ${process.argv[2]}: no prompt test or no decode test`);
        process.exit(1);
    }
    const out = {
        engine: "llama-bench",
        build_commit: pp.build_commit,
        backends: pp.backends,
        split_mode: pp.split_mode,
        tensor_buft_overrides: pp.tensor_buft_overrides,
        prefill: { tokens: pp.n_prompt, tok_s: pp.avg_ts, ms: pp.avg_ns / 1e6 },
        decode: { tokens: tg.n_gen, tok_s: tg.avg_ts, ms: tg.avg_ns / 1e6 },
        logits_xxh3: null,
    };
    process.stdout.write(JSON.stringify(out) + "\n");
}

main();
