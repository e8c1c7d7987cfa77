#!/usr/bin/env bash
# The cost of CURVE and verify_every, side by side (docs/security.md "Costs"): experts mode with one
# worker on loopback TCP, the coordinator pinned to core 0 and the worker to core 1 (one thread each),
# on an a3b-shaped fixture (n_embd 2048, n_ff 768, top-8; 32 experts and 2 layers to keep it small).
# Variants: plain, curve (keys), verify10 (verify_every = 10), verify1 (verify_every = 1). Each
# repetition runs every variant once, the order reversed on every other repetition; the medians, their
# ratios to plain, and the median of the paired per-repetition ratios (variant / plain of the same
# repetition) with its bootstrap 95% interval are printed. Usage: tools/bench/security-costs.sh [REPS]
# (default 5); COST_VARIANTS="plain verify1" runs a subset (plain is always run).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/bin
REPS=${1:-5}
OUT=$PWD/$BUILD/security-costs
MODEL=$PWD/$BUILD/fixtures/a3b-shaped-L2-E32-q8_0.gguf
mkdir -p "$OUT" "$(dirname "$MODEL")"
[ -f "$MODEL" ] || "$BIN/moezip-fixture" --preset a3b-L4 --n-layer 2 --n-expert 32 --type q8_0 -o "$MODEL"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/moezip-costs.XXXXXX")
WPID=""
cleanup() { [ -n "$WPID" ] && kill "$WPID" 2>/dev/null && wait "$WPID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
"$BIN/moezip-worker" --keygen "$TMP/w" > /dev/null
"$BIN/moezip-worker" --keygen "$TMP/c" > /dev/null
WPUB=$(sed -n 's/^public-key = "\(.*\)"$/\1/p' "$TMP/w/moezip.pub")

run() {  # variant rep
    local v=$1 r=$2 wargs=() extra="" ep
    [ "$v" = curve ] && wargs=(--key "$TMP/w/moezip.key" --allow "$TMP/c/moezip.pub")
    taskset -c 1 "$BIN/moezip-worker" --model "$MODEL" --bind "tcp://127.0.0.1:*" --experts 16-31 --threads 1 --mmap \
        "${wargs[@]+"${wargs[@]}"}" > "$TMP/w.out" 2> "$TMP/w.err" &
    WPID=$!
    for _ in $(seq 600); do grep -q '^moezip-worker: serving' "$TMP/w.out" 2>/dev/null && break; sleep 0.05; done
    ep=$(sed -n 's/^moezip-worker: serving \([^ ]*\) .*/\1/p' "$TMP/w.out")
    case "$v" in
        curve) extra="client_key = \"$TMP/c/moezip.key\"" ;;
        verify10) extra="verify_every = 10" ;;
        verify1) extra="verify_every = 1" ;;
    esac
    cat > "$TMP/$v.toml" <<TOML
mode = "experts"
no_repack = true
require_intercept = true
report = "$OUT/$v-$r.report.json"
[experts]
local = "0-15"
[dispatch]
timeout_ms = 60000
$extra
[[worker]]
endpoint = "$ep"
experts = "16-31"
$([ "$v" = curve ] && echo "public_key = \"$WPUB\"")
TOML
    MOEZIP_CONFIG="$TMP/$v.toml" LD_PRELOAD="$PWD/$BUILD/libmoezip.so" taskset -c 0 "$BIN/moezip-run" -m "$MODEL" \
        --fixture 256 -b 256 -n 33 -t 1 --warmup --no-repack --quiet --json "$OUT/$v-$r.json" 2> "$OUT/$v-$r.err"
    kill "$WPID"; wait "$WPID" 2>/dev/null || true; WPID=""
}

read -r -a VARIANTS <<< "${COST_VARIANTS:-plain curve verify10 verify1}"
[[ " ${VARIANTS[*]} " == *" plain "* ]] || VARIANTS=(plain "${VARIANTS[@]}")
for r in $(seq "$REPS"); do
    order=("${VARIANTS[@]}")
    if [ $((r % 2)) = 0 ]; then order=(); for ((i = ${#VARIANTS[@]} - 1; i >= 0; --i)); do order+=("${VARIANTS[i]}"); done; fi
    for v in "${order[@]}"; do run "$v" "$r"; done
done
node - "$OUT" "$REPS" "${VARIANTS[@]}" <<'JS'
const fs = require("fs");
const { bootstrap_ci, median } = require(process.cwd() + "/tools/bench/stats.js");
const [out, reps, ...variants] = [process.argv[2], +process.argv[3], ...process.argv.slice(4)];
const med = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
const m = {};
for (const v of variants) {
    const p = [], d = [];
    for (let r = 1; r <= reps; ++r) {
        const j = JSON.parse(fs.readFileSync(`${out}/${v}-${r}.json`));
        p.push(j.prefill.ms); d.push(j.decode.ms / j.decode.tokens);
    }
    m[v] = { p, d, prefill: med(p), decode: med(d), logits: JSON.parse(fs.readFileSync(`${out}/${v}-1.json`)).logits_xxh3.join() };
}
// variant / plain of the same repetition: the pair shares the host's load at that moment
const paired = (v, k) => {
    const r = m[v][k].map((x, i) => x / m.plain[k][i]);
    const ci = bootstrap_ci(r, median);
    return ci ? `${ci.point.toFixed(3)} [${ci.lo.toFixed(3)}, ${ci.hi.toFixed(3)}]` : `${median(r).toFixed(3)} (one pair)`;
};
console.log("| variant | prefill 256 tokens ms (median) | paired ratio [95% CI] | decode ms/token (median) | paired ratio [95% CI] | logits = plain |");
console.log("|---|---|---|---|---|---|");
for (const v of Object.keys(m))
    console.log(`| ${v} | ${m[v].prefill.toFixed(0)} | ${paired(v, "p")} | ${m[v].decode.toFixed(2)} | ` +
                `${paired(v, "d")} | ${m[v].logits === m.plain.logits ? "yes" : "NO"} |`);
JS
