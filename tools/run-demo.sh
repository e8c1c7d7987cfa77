#!/usr/bin/env bash
# make run: the unmodified node-llama-cpp CLI tells a story from a real trained MoE model whose experts
# are computed by two moezip-worker processes, then the same completion runs on one node and the two
# are compared (text and every logits output). See docs/internals/node.md.
#
# Steps: check ../shared/fixtures/stories260K.gguf (sha256); upcycle it into $BUILD/run/ (8 experts,
# top-2, and the exact 8-of-8 variant); make CURVE key pairs for the two workers and the coordinator
# (moezip-worker --keygen, in the temp dir: docs/security.md); start two workers on ipc:// sockets in
# a private temp dir, with their keys and the coordinator's public key as the only one admitted,
# pinned to different cores when there are two, owning experts 0-3 and 4-7; run the CLI with
# LD_PRELOAD=libmoezip.so in experts mode (require_intercept); run it again single-node (observe mode,
# report only); print the story, the evidence and `identical: yes|no`; run the exact variant and the
# dense model and say whether their texts are equal. Workers are stopped on exit, Ctrl-C or failure.
#
# Environment (all optional):
#   BUILD                    build folder (default build)
#   MOEZIP_SHARED            folder holding fixtures/stories260K.gguf (default ../shared)
#   MOEZIP_RUN_TOKENS        tokens to generate (default 128)
#   MOEZIP_RUN_EXPERTS       replicate (default) or split: how the top-2 model's experts are made
#                            (moezip-upcycle --experts; docs/internals/upcycle.md: split top-2 of 8 experts of
#                            this tiny model does not write English, replicate gives the dense story)
#   MOEZIP_RUN_WORKER_WAIT   seconds to wait for a worker's ready line (default 60)
# Exit status: 0 when everything ran and the distributed run is identical to the single-node run;
# 1 with a message starting "run: error:" otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
SHARED=${MOEZIP_SHARED:-$ROOT/../shared}
DENSE=$SHARED/fixtures/stories260K.gguf
DENSE_SHA256=270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d
N_TOKENS=${MOEZIP_RUN_TOKENS:-128}
EXPERTS_KIND=${MOEZIP_RUN_EXPERTS:-replicate}
WORKER_WAIT=${MOEZIP_RUN_WORKER_WAIT:-60}
PROMPT="Once upon a time"
CLI=$ROOT/.deps/engine/node_modules/node-llama-cpp/dist/cli/cli.js
PRELOAD=$ROOT/$BUILD/libmoezip.so
BIN=$ROOT/$BUILD/bin
OUT=$ROOT/$BUILD/run

die() { echo "run: error: $*" >&2; exit 1; }
say() { echo "run: $*"; }

# ---- cleanup: workers (each its own process group) and the temp dir, on any exit ----
TMP=""
NODE_PID=""
WORKER_PIDS=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    local pid
    if [ -n "$NODE_PID" ]; then kill -TERM -- "-$NODE_PID" 2>/dev/null || true; wait "$NODE_PID" 2>/dev/null || true; fi
    for pid in "${WORKER_PIDS[@]+"${WORKER_PIDS[@]}"}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for pid in "${WORKER_PIDS[@]+"${WORKER_PIDS[@]}"}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    [ -n "$TMP" ] && rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "run: interrupted" >&2; exit 130' INT
trap 'echo "run: terminated" >&2; exit 143' TERM

# ---- prerequisites ----
command -v node >/dev/null || die "node is not installed (run make deps: it installs nodejs and npm)"
[ -f "$CLI" ] || die "$CLI is missing (run make deps: it installs node-llama-cpp 3.21.1 into .deps/engine)"
for f in "$PRELOAD" "$BIN/moezip-upcycle" "$BIN/moezip-worker" "$BIN/moezip-report"; do
    [ -x "$f" ] || [ -f "$f" ] || die "$f is missing (run make, or make BUILD=$BUILD build-all)"
done
[ -f "$DENSE" ] || die "$DENSE is missing (set MOEZIP_SHARED to the folder that holds fixtures/)"
sha=$(sha256sum "$DENSE" | cut -d' ' -f1)
[ "$sha" = "$DENSE_SHA256" ] || die "$DENSE has sha256 $sha, expected $DENSE_SHA256 (see fixtures/SOURCES.md)"
case "$EXPERTS_KIND" in replicate|split) ;; *) die "MOEZIP_RUN_EXPERTS must be replicate or split, got '$EXPERTS_KIND'";; esac
say "model $DENSE (sha256 ok)"

# ---- models ----
mkdir -p "$OUT/reports"
rm -f "$OUT"/reports/*.json
SPARSE=$OUT/stories260K-moe8-top2-$EXPERTS_KIND.gguf
EXACT=$OUT/stories260K-moe8-top8-exact.gguf
"$BIN/moezip-upcycle" -i "$DENSE" -o "$SPARSE" --n-expert 8 --n-expert-used 2 --experts "$EXPERTS_KIND" \
    > "$OUT/upcycle-sparse.log" 2>&1 || die "moezip-upcycle (sparse) failed: $(cat "$OUT/upcycle-sparse.log")"
"$BIN/moezip-upcycle" -i "$DENSE" -o "$EXACT" --n-expert 8 --n-expert-used 8 \
    > "$OUT/upcycle-exact.log" 2>&1 || die "moezip-upcycle (exact) failed: $(cat "$OUT/upcycle-exact.log")"
say "upcycled: $SPARSE (8 experts, top-2, $EXPERTS_KIND) and $EXACT (8 of 8, exact)"

# ---- workers ----
TMP=$(mktemp -d "${TMPDIR:-/tmp}/moezip-run.XXXXXX")
n_cpu=$(nproc 2>/dev/null || echo 1)
PIN=0
if [ "$n_cpu" -ge 2 ] && command -v taskset >/dev/null; then PIN=1; fi
RANGES=("0-3" "4-7")

# keys: one pair per worker and one for the coordinator (the secrets stay in the temp dir, mode 0600)
for k in w0 w1 coordinator; do
    "$BIN/moezip-worker" --keygen "$TMP/keys/$k" > /dev/null || die "moezip-worker --keygen $TMP/keys/$k failed"
done
public_key() { sed -n 's/^public-key = "\(.*\)"$/\1/p' "$TMP/keys/$1/moezip.pub"; }
say "keys: CURVE pairs for worker 0, worker 1 and the coordinator in $TMP/keys; each worker admits the coordinator's key only"

start_worker() {  # index
    local i=$1 pin=()
    [ "$PIN" = 1 ] && pin=(taskset -c "$((i % n_cpu))")
    # setsid: the worker leads its own process group, which cleanup kills as a whole.
    setsid "${pin[@]+"${pin[@]}"}" "$BIN/moezip-worker" --model "$SPARSE" --bind "ipc://$TMP/w$i.sock" \
        --experts "${RANGES[$i]}" --threads 1 --key "$TMP/keys/w$i/moezip.key" --allow "$TMP/keys/coordinator/moezip.pub" \
        > "$TMP/w$i.out" 2> "$TMP/w$i.err" &
    WORKER_PIDS+=($!)
}

wait_ready() {  # index
    local i=$1 pid=${WORKER_PIDS[$1]} t
    for t in $(seq $((WORKER_WAIT * 10))); do
        grep -q '^moezip-worker: serving' "$TMP/w$i.out" 2>/dev/null && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "run: error: worker $i (experts ${RANGES[$i]}) exited before it was ready; its stderr:" >&2
            sed 's/^/  /' "$TMP/w$i.err" >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "run: error: worker $i (experts ${RANGES[$i]}) printed no ready line within ${WORKER_WAIT} s; its stderr:" >&2
    sed 's/^/  /' "$TMP/w$i.err" >&2
    exit 1
}

t0=$(date +%s%N)
start_worker 0
start_worker 1
wait_ready 0
wait_ready 1
for i in 0 1; do say "worker $i: $(head -1 "$TMP/w$i.out")$([ "$PIN" = 1 ] && echo " [core $((i % n_cpu))]")"; done
[ "$PIN" = 1 ] || say "one core (or no taskset): workers are not pinned"
say "workers ready in $(( ($(date +%s%N) - t0) / 1000000 )) ms"

# ---- configs ----
DIST_TOML=$TMP/experts.toml
cat > "$DIST_TOML" <<EOF
mode = "experts"
report = "$OUT/reports/distributed.%p.json"
require_intercept = true
no_repack = true

[experts]
local = ""

[dispatch]
client_key = "$TMP/keys/coordinator/moezip.key"

[[worker]]
endpoint = "ipc://$TMP/w0.sock"
experts = "${RANGES[0]}"
public_key = "$(public_key w0)"

[[worker]]
endpoint = "ipc://$TMP/w1.sock"
experts = "${RANGES[1]}"
public_key = "$(public_key w1)"
EOF
SINGLE_TOML=$TMP/observe.toml
cat > "$SINGLE_TOML" <<EOF
mode = "observe"
report = "$OUT/reports/single.%p.json"
no_repack = true
EOF

# ---- the unmodified CLI ----
# node_complete NAME MODEL [VAR=VALUE...]: stdout/stderr to $OUT/NAME.{out,err}, text to $OUT/NAME.txt.
# stdin is /dev/null: after the first completion the CLI's prompt loop reads EOF and exits 0.
node_complete() {
    local name=$1 model=$2; shift 2
    local start rc=0
    start=$(date +%s%N)
    # In the background + wait, so that Ctrl-C runs the trap at once (bash defers traps while a
    # foreground child runs); timeout leads its own process group, which cleanup kills.
    timeout --kill-after=10 600 env NODE_LLAMA_CPP_SKIP_DOWNLOAD=true NODE_LLAMA_CPP_GPU=false FORCE_COLOR=0 "$@" \
        node "$CLI" complete --model "$model" --text "$PROMPT" --maxTokens "$N_TOKENS" --temperature 0 \
        --repeatPenalty 1 --threads 1 --gpu false --contextSize 512 \
        < /dev/null > "$OUT/$name.out" 2> "$OUT/$name.err" &
    NODE_PID=$!
    wait "$NODE_PID" || rc=$?
    NODE_PID=""
    ELAPSED=$(( ($(date +%s%N) - start) / 1000000 ))
    if [ "$rc" -ne 0 ]; then
        echo "run: error: the node-llama-cpp CLI ($name) exited with status $rc; its stderr (last lines):" >&2
        grep -v 'Loading model' "$OUT/$name.err" | tail -15 | sed 's/^/  /' >&2
        exit 1
    fi
    local s
    s=$(cat "$OUT/$name.out")
    case "$s" in *"Completion: "*) ;; *) die "no completion in $OUT/$name.out";; esac
    s=${s#*Completion: }
    s=${s%$'\n'> }
    printf '%s' "$s" > "$OUT/$name.txt"
}

one_report() {  # prefix -> the single report file with that prefix (the CLI's own pid)
    local files=("$OUT"/reports/"$1".*.json)
    [ -f "${files[0]}" ] || die "no $1 report was written in $OUT/reports (was libmoezip.so loaded?)"
    [ "${#files[@]}" -eq 1 ] || die "${#files[@]} $1 reports in $OUT/reports; expected one (one per process that ran the model)"
    echo "${files[0]}"
}

say "distributed run: LD_PRELOAD=$BUILD/libmoezip.so MOEZIP_CONFIG=(experts mode) node cli.js complete ..."
node_complete distributed "$SPARSE" LD_PRELOAD="$PRELOAD" MOEZIP_CONFIG="$DIST_TOML"
ms_dist=$ELAPSED
DIST_REPORT=$(one_report distributed)
echo
echo "----- story (8 experts, top-2, experts computed by two workers) -----"
printf '%s%s\n' "$PROMPT" "$(cat "$OUT/distributed.txt")"
echo "---------------------------------------------------------------------"
echo

say "single-node run (observe mode: the engine computes everything, the preload only reports) ..."
node_complete single "$SPARSE" LD_PRELOAD="$PRELOAD" MOEZIP_CONFIG="$SINGLE_TOML"
ms_single=$ELAPSED
SINGLE_REPORT=$(one_report single)

echo "evidence from $DIST_REPORT:"
summary_rc=0
node "$ROOT/tools/run-demo-summary.js" "$DIST_REPORT" || summary_rc=$?

text_same=no
cmp -s "$OUT/distributed.txt" "$OUT/single.txt" && text_same=yes
compare_out=$("$BIN/moezip-report" compare "$DIST_REPORT" "$SINGLE_REPORT" 2>&1) && logits_same=yes || logits_same=no
echo "  text: distributed vs single-node equal: $text_same ($(wc -c < "$OUT/distributed.txt") bytes)"
echo "  logits: moezip-report compare distributed single: $(head -1 <<< "$compare_out")"
tail -n +2 <<< "$compare_out" | sed 's/^/    /'
echo "  wall time of the CLI: distributed $ms_dist ms, single-node $ms_single ms (whole process: node start, binary check, load, $N_TOKENS tokens)"
identical=no
[ "$text_same" = yes ] && [ "$logits_same" = yes ] && identical=yes
echo "identical: $identical"

# ---- the exact variant against the dense model (single node, no preload) ----
node_complete exact "$EXACT"
node_complete dense "$DENSE"
exact_same=no
cmp -s "$OUT/exact.txt" "$OUT/dense.txt" && exact_same=yes
echo "exact all-experts variant (8 of 8) text equals the dense model's text: $exact_same"
dist_dense=no
cmp -s "$OUT/distributed.txt" "$OUT/dense.txt" && dist_dense=yes
echo "distributed top-2 ($EXPERTS_KIND experts) text equals the dense model's text: $dist_dense"
if [ "$exact_same" = no ]; then
    echo "  exact: $(head -c 200 "$OUT/exact.txt")" ; echo "  dense: $(head -c 200 "$OUT/dense.txt")"
fi
say "outputs in $OUT (CLI stdout/stderr, texts, reports)"

[ "$identical" = yes ] || die "identical: no: the distributed run differs from the single-node run (see above)"
[ "$summary_rc" -eq 0 ] || die "the distributed run's report failed its checks (see above)"
say "ok"
