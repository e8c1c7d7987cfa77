#!/usr/bin/env bash
# make bench (BENCH_SET=full; or alone): a GPU host's hybrid run, emulated. llama.cpp built from the
# pinned source with GGML_RPC (make engines) runs llama-bench with a local ggml-rpc-server as the
# accelerator: `-rpc EP -ngl 99 -ncmoe 99` puts attention, router and norms on the "accelerator" and
# the routed experts on this host's CPU, where the scheduler gives each MoE layer a split ending at the
# per-slot ffn_moe_down (docs/internals/interception.md, "The split form"). Variants, each a llama-bench
# process on core 0 with one thread (-p 512 -n 64 -r 1, llama-bench's own warm-up):
#   single    the plain hybrid run (no preload)
#   local       the preload computes every CPU-resident region itself (mode "local") from the engine's
#               mapping of the file, as single does: its decode-only run gives p of the plain run, the
#               share of a decode step spent in the CPU experts
#   local_copy  mode "local" with experts.copy_local = true: every expert computed from a copy in
#               anonymous memory with huge pages, the memory kind experts1 computes from on both hosts
#               (a mapped run computes 2-3x slower from 4 KiB page-cache folios than from 2 MiB ones):
#               the reference that leaves out what the memory kind alone gains; its p gives the bound
#   experts1    experts mode: this host owns experts 0-63, one worker (core 1, one thread) 64-127
# The ggml-rpc-server and the worker share core 1: the accelerator works only between the CPU splits,
# the worker only inside them. Each repetition runs every variant once, the order reversed on every
# other repetition; ratios are taken within a repetition (variant / single). Untimed runs besides:
# a decode-only run (-p 0 -n 64) of local, local_copy and experts1 per repetition (their reports give p and the
# per-layer costs), and llama-completion's greedy text of every variant once (the hybrid run's logits
# are computed on the accelerator, out of the preload's sight, so the answers are compared as text).
# Writes $BUILD/bench/hybrid/{hybrid.json,hybrid.md} (tools/bench/hybrid-summary.js).
# Usage: tools/bench/hybrid.sh [REPS] (default 5). Exit 0 when every run finished and the answers are
# the plain run's; 1 otherwise; 2 (with the reason) when llama.cpp with RPC is not available.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build}
REPS=${1:-5}
OUT=$ROOT/$BUILD/bench/hybrid
MODELS_DIR=${BENCH_MODELS_DIR:-$ROOT/$BUILD/bench/models}
MODEL=$MODELS_DIR/a3b-L4-q8_0.gguf
N_EXPERT=128
RPC_PORT=${HYBRID_RPC_PORT:-50152}
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || { echo "hybrid: error: REPS must be a positive integer, got '$REPS'" >&2; exit 1; }
say() { echo "hybrid: $(date +%H:%M:%S) $*"; }
die() { echo "hybrid: error: $*" >&2; exit 1; }
skip() { echo "hybrid: skipped: $*" >&2; exit 2; }

# ---- llama.cpp with RPC, and moezip built for it (make engines writes $BUILD/engines.json) ----
engine_field() {  # FIELD: of the first llama.cpp engine in engines.json, or nothing
    node -e 'const e = (JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).engines || [])
                 .find((x) => x.engine && x.engine.kind === "llama.cpp");
             if (e) console.log(process.argv[2] === "build" ? e.build : e.engine.bin);' "$ROOT/$BUILD/engines.json" "$1" 2>/dev/null || true
}
if [ -z "$(engine_field build)" ]; then
    say "llama.cpp built from the pinned source: make engines (cached; docs/engines.md)"
    make --no-print-directory BUILD="$BUILD" engines > "$ROOT/$BUILD/hybrid-engines.log" 2>&1 ||
        skip "make engines failed ($(tail -1 "$ROOT/$BUILD/hybrid-engines.log"))"
fi
MZ=$(engine_field build)
LLAMA_BIN=$(engine_field bin)
[ -n "$MZ" ] || skip "$BUILD/engines.json names no llama.cpp engine (TEST_ENGINES without llama.cpp:pinned?)"
for f in "$LLAMA_BIN/llama-bench" "$LLAMA_BIN/ggml-rpc-server" "$LLAMA_BIN/llama-completion" "$MZ/libmoezip.so" "$MZ/bin/moezip-worker"; do
    [ -x "$f" ] || [ -f "$f" ] || skip "$f is missing (llama.cpp built without GGML_RPC, or make engines not run)"
done
[ "$(nproc)" -ge 2 ] && command -v taskset > /dev/null || skip "needs 2 cores and taskset (host on core 0, accelerator and worker on core 1)"
if [ ! -f "$MODEL" ]; then
    say "writing $MODEL (moezip-fixture --preset a3b-L4 --type q8_0)"
    mkdir -p "$MODELS_DIR"
    "$ROOT/$BUILD/bin/moezip-fixture" --preset a3b-L4 --type q8_0 -o "$MODEL.tmp" > /dev/null && mv "$MODEL.tmp" "$MODEL" ||
        die "moezip-fixture could not write $MODEL"
fi

# the file's page cache as an unhooked engine's first load after a reboot gets it (run-bench.sh's
# BENCH_PAGE_CACHE=kernel): evicted and read back through a mapping, folio sizes the kernel's readahead's
PAGE_CACHE=$("$ROOT/$BUILD/bin/moezip-pagecache" set --fill kernel "$MODEL") || die "could not set the page cache of $MODEL"
rm -rf "$OUT" && mkdir -p "$OUT/runs"
echo "$PAGE_CACHE" > "$OUT/page-cache-before.json"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/moezip-hybrid.XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2> /dev/null || true; done
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do wait "$p" 2> /dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT

# the accelerator: never under the preload
taskset -c 1 env -u LD_PRELOAD -u MOEZIP_CONFIG LD_LIBRARY_PATH="$LLAMA_BIN" "$LLAMA_BIN/ggml-rpc-server" \
    -H 127.0.0.1 -p "$RPC_PORT" -t 1 > "$OUT/rpc-server.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 600); do (exec 3<> "/dev/tcp/127.0.0.1/$RPC_PORT") 2> /dev/null && break; sleep 0.1; done
(exec 3<> "/dev/tcp/127.0.0.1/$RPC_PORT") 2> /dev/null || die "ggml-rpc-server did not listen on port $RPC_PORT ($OUT/rpc-server.log)"

taskset -c 1 "$MZ/bin/moezip-worker" --model "$MODEL" --bind "tcp://127.0.0.1:*" --experts 64-127 --threads 1 \
    > "$OUT/worker.out" 2> "$OUT/worker.err" &
PIDS+=($!)
for _ in $(seq 2400); do grep -q '^moezip-worker: serving' "$OUT/worker.out" 2> /dev/null && break; sleep 0.1; done
WEP=$(sed -n 's/^moezip-worker: serving \([^ ]*\) .*/\1/p' "$OUT/worker.out")
[ -n "$WEP" ] || die "moezip-worker did not get ready in 240 s ($OUT/worker.err)"

config() {  # VARIANT REPORT: the preload's config of a variant
    printf 'mode = "%s"\nno_repack = true\nrequire_intercept = true\nreport = "%s"\n' "$([ "$1" = experts1 ] && echo experts || echo local)" "$2"
    printf '[dispatch]\ntimeout_ms = 60000\n'
    [ "$1" = local_copy ] && printf '[experts]\ncopy_local = true\n'
    [ "$1" = experts1 ] && printf '[experts]\nlocal = "0-%d"\n[[worker]]\nendpoint = "%s"\nexperts = "%d-%d"\n' \
        $((N_EXPERT / 2 - 1)) "$WEP" $((N_EXPERT / 2)) $((N_EXPERT - 1))
    return 0
}

# run VARIANT NAME PROGRAM ARGS...: PROGRAM of llama.cpp on core 0, under the preload unless single;
# its stdout in runs/NAME.out, stderr in runs/NAME.err, the preload's report in runs/NAME.report.json.
run() {
    local v=$1 name=$2 prog=$3; shift 3
    local pre=()
    if [ "$v" != single ]; then
        config "$v" "$OUT/runs/$name.report.json" > "$TMP/$name.toml"
        pre=(MOEZIP_CONFIG="$TMP/$name.toml" LD_PRELOAD="$MZ/libmoezip.so")
    fi
    env "${pre[@]+"${pre[@]}"}" LD_LIBRARY_PATH="$LLAMA_BIN" taskset -c 0 "$LLAMA_BIN/$prog" "$@" \
        > "$OUT/runs/$name.out" 2> "$OUT/runs/$name.err" || die "$name: $prog exited $? ($OUT/runs/$name.err)"
}
HYBRID=(-rpc "127.0.0.1:$RPC_PORT" -ngl 99 -ncmoe 99 -t 1)

VARIANTS=(single local local_copy experts1)
say "answers: llama-completion, 64 greedy tokens per variant"
for v in "${VARIANTS[@]}"; do
    run "$v" "text-$v" llama-completion -m "$MODEL" -p "Once upon a time" -n 64 --temp 0 --seed 42 -no-cnv \
        --rpc "127.0.0.1:$RPC_PORT" -ngl 99 --cpu-moe -t 1 --no-repack -b 512 -ub 512
done
for r in $(seq "$REPS"); do
    order=("${VARIANTS[@]}")
    [ $((r % 2)) = 0 ] && order=(experts1 local_copy local single)
    say "repetition $r of $REPS: ${order[*]}"
    for v in "${order[@]}"; do
        run "$v" "$v-$r" llama-bench -m "$MODEL" "${HYBRID[@]}" -p 512 -n 64 -ub 512 -b 512 -r 1 -o json
    done
    for v in local local_copy experts1; do
        run "$v" "$v-decode-$r" llama-bench -m "$MODEL" "${HYBRID[@]}" -p 0 -n 64 -r 1 -o json
    done
done
"$ROOT/$BUILD/bin/moezip-pagecache" state "$MODEL" > "$OUT/page-cache-after.json" || true
say "summary"
node "$ROOT/tools/bench/hybrid-summary.js" "$OUT" "$REPS" "$(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo unknown)" |
    tee "$OUT/hybrid.md"
