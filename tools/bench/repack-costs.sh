#!/usr/bin/env bash
# What repacking is worth, and experts mode with and without it, side by side (docs/history/bench-runs.md,
# "Repacked experts"): llama.cpp repacks q4_K/q4_0 experts into CPU_REPACK by default; before
# moezip-worker --repack, experts mode needed no_repack = true, i.e. the slower plain kernels on both
# hosts. The coordinator is pinned to core 0 and the worker to core 1 (one thread each), experts
# mode on loopback TCP with the worker owning half of the experts, on an a3b-shaped fixture (n_embd
# 2048, n_ff 768, top-8; 4 layers of 64 experts to keep it small) of TYPE (default q4_K).
# Variants: single (the engine's default, repacked), single_norepack (--no-repack), experts1_norepack
# (no_repack = true, a plain worker), experts1_repack (the engine's default here, moezip-worker --repack).
# Each repetition runs every variant once, the order reversed on every other repetition; the medians
# and their ratios to `single` are printed (speed-up: single's time / the variant's), with whether
# the logits equal those of the single node of the same layout.
# Usage: tools/bench/repack-costs.sh [REPS] [TYPE]   (default 5 q4_K)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/bin
REPS=${1:-5}
TYPE=${2:-q4_K}
OUT=$PWD/$BUILD/repack-costs-$TYPE
MODEL=$PWD/$BUILD/fixtures/a3b-shaped-L4-E64-$TYPE.gguf
mkdir -p "$OUT" "$(dirname "$MODEL")"
[ -f "$MODEL" ] || "$BIN/moezip-fixture" --preset a3b-L4 --n-expert 64 --type "$TYPE" -o "$MODEL"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/moezip-repack.XXXXXX")
WPID=""
cleanup() { [ -n "$WPID" ] && kill "$WPID" 2>/dev/null && wait "$WPID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

host() {  # name config|"" run-args...
    local name=$1 cfg=$2; shift 2
    if [ -n "$cfg" ]; then
        MOEZIP_CONFIG="$cfg" LD_PRELOAD="$PWD/$BUILD/libmoezip.so" taskset -c 0 "$BIN/moezip-run" -m "$MODEL" \
            --fixture 256 -b 256 -n 33 -t 1 --warmup --quiet --json "$OUT/$name.json" "$@" 2> "$OUT/$name.err"
    else
        taskset -c 0 "$BIN/moezip-run" -m "$MODEL" --fixture 256 -b 256 -n 33 -t 1 --warmup --quiet --json "$OUT/$name.json" "$@" \
            2> "$OUT/$name.err"
    fi
}

experts1() {  # variant rep worker-args...
    local v=$1 r=$2 ep; shift 2
    taskset -c 1 "$BIN/moezip-worker" --model "$MODEL" --bind "tcp://127.0.0.1:*" --experts 32-63 --threads 1 "$@" \
        > "$TMP/w.out" 2> "$TMP/w.err" &
    WPID=$!
    for _ in $(seq 1200); do grep -q '^moezip-worker: serving' "$TMP/w.out" 2>/dev/null && break; sleep 0.05; done
    ep=$(sed -n 's/^moezip-worker: serving \([^ ]*\) .*/\1/p' "$TMP/w.out")
    cat > "$TMP/$v.toml" <<TOML
mode = "experts"
no_repack = $([ "$v" = experts1_norepack ] && echo true || echo false)
require_intercept = true
report = "$OUT/$v-$r.report.json"
[experts]
local = "0-31"
[dispatch]
timeout_ms = 60000
[[worker]]
endpoint = "$ep"
experts = "32-63"
TOML
    if [ "$v" = experts1_norepack ]; then host "$v-$r" "$TMP/$v.toml" --no-repack; else host "$v-$r" "$TMP/$v.toml"; fi
    kill "$WPID"; wait "$WPID" 2>/dev/null || true; WPID=""
}

run() {  # variant rep
    case "$1" in
        single) host "single-$2" "" ;;
        single_norepack) host "single_norepack-$2" "" --no-repack ;;
        experts1_norepack) experts1 experts1_norepack "$2" ;;
        experts1_repack) experts1 experts1_repack "$2" --repack ;;
    esac
}

VARIANTS=(single single_norepack experts1_norepack experts1_repack)
for r in $(seq "$REPS"); do
    order=("${VARIANTS[@]}")
    if [ $((r % 2)) = 0 ]; then order=(experts1_repack experts1_norepack single_norepack single); fi
    for v in "${order[@]}"; do run "$v" "$r"; done
done
node - "$OUT" "$REPS" "$TYPE" <<'JS'
const fs = require("fs");
const [out, reps, type] = [process.argv[2], +process.argv[3], process.argv[4]];
const med = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
const m = {};
for (const v of ["single", "single_norepack", "experts1_norepack", "experts1_repack"]) {
    const p = [], d = [];
    for (let r = 1; r <= reps; ++r) {
        const j = JSON.parse(fs.readFileSync(`${out}/${v}-${r}.json`));
        p.push(j.prefill.ms); d.push(j.decode.ms / j.decode.tokens);
    }
    m[v] = { prefill: med(p), decode: med(d), logits: JSON.parse(fs.readFileSync(`${out}/${v}-1.json`)).logits_xxh3.join() };
}
const same = { single: "single", single_norepack: "single_norepack", experts1_norepack: "single_norepack", experts1_repack: "single" };
console.log(`${type}, ${reps} repetitions, medians; speed-up = single's time / the variant's`);
console.log("| variant | prefill 256 tokens ms | prefill speed-up | decode ms/token | decode speed-up | logits = its single node |");
console.log("|---|---|---|---|---|---|");
for (const v of Object.keys(m))
    console.log(`| ${v} | ${m[v].prefill.toFixed(0)} | ${(m.single.prefill / m[v].prefill).toFixed(3)} | ${m[v].decode.toFixed(2)} | ` +
                `${(m.single.decode / m[v].decode).toFixed(3)} | ${m[v].logits === m[same[v]].logits ? "yes" : "NO"} (${same[v]}) |`);
JS
