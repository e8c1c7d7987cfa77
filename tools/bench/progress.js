// make bench (tools/run-bench.sh): one progress line for a finished timed run.
//   node tools/bench/progress.js RUN.meta.json RUN.run.json
"use strict";
const { read_json, fmt } = require("./stats.js");

const meta = read_json(process.argv[2]);
const run = read_json(process.argv[3]);
if (!meta || !run) process.exit(0);
const rss = meta.host_maxrss_kib / 1024;
console.log(`bench:   ${meta.model} ${meta.variant} ${meta.net} ${meta.placement} r${meta.rep}: ` +
            `prefill ${fmt(run.prefill.tok_s, 1)} tok/s, decode ${fmt(run.decode.tok_s, 2)} tok/s, ` +
            `rss ${fmt(rss, 0)} MiB, load ${meta.loadavg[0]}`);
