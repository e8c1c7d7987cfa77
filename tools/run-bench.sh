#!/usr/bin/env bash
# make bench: measures moezip against the unhooked engine and writes $BUILD/bench/bench.json plus a
# table (method: docs/benchmarking.md; current results: docs/performance.md).
#
# Per model, one loop of repetitions; each repetition runs every (variant, network, core placement)
# once, the order reversed on every other repetition (A B C, C B A, ...), so drift of this shared VM
# falls on all variants alike. Variants:
#   single    unhooked moezip-run (no LD_PRELOAD)            observe   preload, mode "observe"
#   local     preload computes the MoE regions itself         rows1     rows mode, one worker, 50/50
#   experts1  experts mode: coordinator owns the first half of the experts, one worker the second half
#   shard1    shard mode: coordinator and one worker each compute half of every expert's n_ff (partial sums)
#   experts2  experts mode: coordinator owns none, two workers a half each (3 processes on 2 cores)
#   experts1_curve   experts1 over CURVE (keys made once into $BUILD/bench/keys; docs/security.md)
#   experts1_verify  experts1 with dispatch.verify_every = BENCH_VERIFY_EVERY (default 10): one worker
#                    result in N recomputed on the coordinator
#   single_nr        single with --no-repack (the reference moezip's no_repack runs were once held to)
#   single_anon      single with --no-mmap: one node with its weights in anonymous memory (4 KiB pages;
#                    moezip's workers and experts.copy_local hold experts with huge pages)
#   single_thp       single_anon with GLIBC_TUNABLES=glibc.malloc.hugetlb=1: glibc's malloc advises its
#                    mmap'd chunks MADV_HUGEPAGE, so the engine's --no-mmap weights get transparent huge
#                    pages with no change to the engine: what a llama.cpp user can do alone on one node
#   local_copy       mode "local" with experts.copy_local = true: one node computing every expert from a
#                    copy in anonymous memory with huge pages, the memory kind experts1 computes from on both
#                    hosts; experts1 over local_copy is what distributing gains apart from the memory kind
#   experts1_map     experts1 from the page cache on both hosts: experts.copy_local = false, worker --mmap
#                    (no copies: each host's memory is its share of the file's page cache)
# Placement (docs/placement.md), experts mode with one worker:
#   experts1_plan    the placement moezip-plan writes from the routing statistics of this model's `local`
#                    phase runs (another prompt than the timed runs'), each host given BENCH_PLAN_SHARE of
#                    the experts' memory: hot experts replicated, balanced dispatch
#   experts1_repl    every expert on both hosts (experts.replicas = true): each call balanced between them
# A slower worker (its CPU capped at BENCH_THROTTLE % of a core by a cgroup quota, tools/bench/throttle.sh):
#   rows1_slow, shard1_slow            fixed shares (BENCH_ROWS_SHARE, default 0.5)
#   rows1_auto_slow, shard1_auto_slow  local_share = "auto": shares from the measured speeds
# The incumbent, llama.cpp's RPC backend (llama-bench and ggml-rpc-server of llama.cpp built from the
# pinned engine's source with -DGGML_RPC=ON, tools/engines/build-llamacpp.sh, cached):
#   rpc_single       llama-bench, one node (its own reference: the same program without RPC)
#   rpc_experts      experts of every layer on one ggml-rpc-server on the other core (-ngl 0, -ot ...=RPC0[...])
#   rpc_tensor       --split-mode tensor over two ggml-rpc-servers, one per core (llama.cpp skips the
#                    local CPU device for tensor parallelism, so both hosts serve through RPC)
# Pairs: every timed run of a variant sits next to a run of its own reference (single, or rpc_single
# for rpc_*) on the same placement, the pair's order alternating; ratios are taken within pairs.
# Every process has one engine thread and is pinned to a core (taskset). Placement h0 = coordinator on
# core 0, workers on core 1; h1 = swapped. Each run records moezip-run's JSON (prefill 512 tokens in
# one ubatch of 512, then 64 decode steps), the preload's report, the coordinator's peak RSS
# (/usr/bin/time %M), each worker's VmHWM (read just before SIGTERM) and, in network namespaces,
# the veth byte counters. Besides the timed runs, untimed "phase" runs per variant on placement h0 give
# reports of prefill only (-n 1) and of decode only (a 1-token prompt, 64 steps), since the report sums
# a whole run. Networks: lo (loopback TCP) and, as root, coordinator and workers in their own network
# namespaces joined by veth pairs shaped with tbf to 1 and 10 Gbit/s (tools/bench/netns.sh; no delay:
# this kernel has no netem).
#
# Environment (all optional):
#   BUILD               build folder (default build); models are cached in $BUILD/bench/models
#   MOEZIP_SHARED       folder with fixtures/stories260K.gguf (default ../shared)
#   BENCH_SET           comparison (default): the side-by-side answer, in about 80 minutes here (the RPC runs take half of it) plus up to BENCH_RESOLVE_MIN of extra pairs: a3b-L4-q8_0
#                       (single single_nr observe local experts1 shard1 rpc_single rpc_experts rpc_tensor, and experts1 rpc_experts over 1g
#                       and 10g); no repack-costs.
#                       full: every study (the memory-kind and page-cache references single_anon single_thp local_copy
#                       experts1_map, the placement and throttled-worker variants, a3b-L8-q8_0, a3b-L4-q4_K,
#                       stories-moe8, repack-costs): about 3 h more.
#                       hybrid: only the hybrid emulation (tools/bench/hybrid.sh): a GPU host's --cpu-moe run
#                       with an RPC device as the accelerator, one node against experts mode with one worker,
#                       the share p of a decode step in the CPU experts and its Amdahl bound (about 15 min).
#                       soak: only the soak (tools/bench/soak.sh): a host serving for SOAK_SECONDS (default 1 h)
#                       under the preload with worker outages, failing when its VmRSS, report or stderr grows
#                       past the limits that script states (SOAK_* variables there).
#                       big: only the model bigger than one host (tools/bench/big.sh; BIG_* variables there):
#                       llama-server on memory-limited hosts, one node, llama.cpp RPC and experts mode.
#   BENCH_SOAK          1: run the soak after the set's runs (default 1 in the full set, 0 in comparison)
#   BENCH_QUICK=1       a fast look: model a3b-L4-q8_0 only, 3 repetitions
#   BENCH_MODELS        models, from: a3b-L4-q8_0 a3b-L8-q8_0 a3b-L4-q4_K stories-moe8 (default: the set's)
#   BENCH_REPS          repetitions (default 5)
#   BENCH_VARIANTS      timed variants on loopback for every model (default: per model, see plan_for)
#   BENCH_NETS          emulated links: "1g 10g" (default), a subset, or "none"
#   BENCH_NET_VARIANTS  variants run over the emulated links (default "experts1 rpc_experts"; adding rows1 adds
#                       about 4 minutes: rows mode moves 6 kB per prompt token per layer, experts mode 30-40 kB)
#   BENCH_NET_MODELS    models that get the emulated links (default a3b-L4-q8_0)
#   BENCH_LOAD          defaults (default): every program as it loads by default, which makes the servers
#                       alike: the engines (moezip-run, llama-bench) map the file, moezip-worker reads its
#                       experts into anonymous memory, as ggml-rpc-server always does with what it is sent.
#                       mmap: the workers map the file too (--mmap). anon: everything in anonymous memory
#                       (engines --no-mmap / -lm none). First touches cost ~8 s per GiB on a 2-core Debian 12 VM (2026-12-01).
#   BENCH_PAGE_CACHE    kernel (default): before a model's runs its file is evicted from the page cache and read
#                       back through a mapping, so the folio sizes are those the kernel's readahead chooses, as an
#                       unhooked engine's first load after a reboot gets them (2 MiB and PMD-mapped here: ext4 on
#                       Linux 6.18, read_ahead_kb 8192; with the common 128 they stop at 128 KiB).
#                       huge: the same pass advised MADV_HUGEPAGE (2 MiB folios whatever read_ahead_kb is).
#                       small: read back in 4 KiB folios, as on kernels without large folios for the filesystem
#                       (Debian 12's 6.1 with ext4). asis: left as found. Measured before every run (meta
#                       page_cache_pmd_share) and set again when it drifted (tools/moezip-pagecache). A mapped
#                       run decodes 2-3x faster here with 2 MiB folios than with 4 KiB ones.
#   BENCH_ROWS_SHARE    rows1 and shard1: the coordinator's share of the rows / of n_ff (default 0.5)
#   BENCH_PLACES        core placements of the timed runs: "h0 h1" (default) or one of them (more pairs in
#                       the same time, one placement's answer)
#   BENCH_VERIFY_EVERY  experts1_verify's verify_every (default 10)
#   BENCH_PLAN_SHARE    experts1_plan: each host's memory budget, as a fraction of all experts (default 0.625:
#                       a quarter of the experts can have two owners)
#   BENCH_THROTTLE      the *_slow variants: the worker's CPU quota in % of one core (default 40)
#   BENCH_THROTTLE_PERIOD_US   the quota's period (default 100000, cpu.max's default)
#   BENCH_PREFILL, BENCH_UBATCH, BENCH_DECODE   512, 512, 64
#   BENCH_RPC           1 (default): the rpc_* variants (builds llama.cpp once if it is not cached: docs/engines.md gives its time);
#                       0: skip them. BENCH_LLAMA_BUILD: a llama.cpp CMake build folder with -DGGML_RPC=ON instead
#   BENCH_CEILING       1 (default): per model with an experts variant, tools/moezip-ceiling measures what a
#                       dispatch of a decode call's slots reaches on this machine over ZeroMQ and over plain TCP
#                       (its slot time and MoE share from local's decode phase run), into
#                       $BUILD/bench/ceiling/MODEL.json; 0 skips it. BENCH_CEILING_ROUNDS: its rounds (default
#                       100: about 30 s per transport, four transports)
#   BENCH_NO_REPACK     auto (default): no_repack (and --no-repack) only where the weights need it (q4_K
#                       experts, which the engine repacks); 1: everywhere; 0: nowhere
#   BENCH_TRACE_MAX     events kept in each variant's trace (default 200000)
#   BENCH_REPACK_REPS   repetitions of tools/bench/repack-costs.sh, q4_K and q4_0, after the table (default 5 in
#                       the full set, 0 in comparison; 0 skips)
#   BENCH_HYBRID_REPS   repetitions of tools/bench/hybrid.sh after the table (default 5 in the full set and in
#                       BENCH_SET=hybrid, 0 in comparison; 0 skips)
#   BENCH_RESOLVE_MIN   minutes per model of extra pairs for the decode ratios not resolved to ±5% after
#                       BENCH_REPS (default 30, 0 with BENCH_QUICK=1; 0 = none). Each round adds one pair to every such ratio of
#                       BENCH_RESOLVE_VARIANTS (fewest pairs first) until all are resolved, each has
#                       BENCH_RESOLVE_MAX_PAIRS pairs (default 24), or the minutes are spent (tools/bench/unresolved.js)
#   BENCH_RESOLVE_VARIANTS  the decode ratios that get extra pairs: a variant (every link) or variant:link (lo, 1g,
#                       10g). Default "experts1:lo experts1:1g rpc_experts:1g", the ratios the targets read (the
#                       full set adds local_copy)
#   BENCH_RESOLVE_MODELS    models that get them (default a3b-L4-q8_0)
#   BENCH_WARMUP        1 (default): timed runs pass moezip-run --warmup (one untimed prompt + decode step,
#                       KV cache cleared, as llama-bench does); 0: timed runs are the process's first prompt.
#                       Phase runs are always cold: their reports would otherwise count the warm-up too.
# Exit status: 0 when every run finished and every distributed run matched the single-node logits;
# 1 otherwise ("bench: error: ..." lines name the problem).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build}
SHARED=${MOEZIP_SHARED:-$ROOT/../shared}
BIN=$ROOT/$BUILD/bin
PRELOAD=$ROOT/$BUILD/libmoezip.so
OUT=$ROOT/$BUILD/bench
MODELS_DIR=$OUT/models
RUNS=$OUT/runs
QUICK=${BENCH_QUICK:-0}
SET=${BENCH_SET:-comparison}
case "$SET" in
    comparison) SET_MODELS="a3b-L4-q8_0"; REPACK_REPS=${BENCH_REPACK_REPS:-0} ;;
    full) SET_MODELS="a3b-L4-q8_0 a3b-L8-q8_0 a3b-L4-q4_K stories-moe8"; REPACK_REPS=${BENCH_REPACK_REPS:-5} ;;
    soak) BUILD="$BUILD" exec "$ROOT/tools/bench/soak.sh" ;;
    big) BUILD="$BUILD" exec "$ROOT/tools/bench/big.sh" ;;
    hybrid) BUILD="$BUILD" exec "$ROOT/tools/bench/hybrid.sh" "${BENCH_HYBRID_REPS:-5}" ;;
    *) echo "bench: error: BENCH_SET must be comparison, full, hybrid, soak or big, got '$SET'" >&2; exit 1 ;;
esac
SOAK=${BENCH_SOAK:-$([ "$SET" = full ] && echo 1 || echo 0)}
case "$SOAK" in 0|1) ;; *) echo "bench: error: BENCH_SOAK must be 0 or 1, got '$SOAK'" >&2; exit 1 ;; esac
if [ "$QUICK" = 1 ]; then
    MODELS=${BENCH_MODELS:-a3b-L4-q8_0}; REPS=${BENCH_REPS:-3}
else
    MODELS=${BENCH_MODELS:-$SET_MODELS}; REPS=${BENCH_REPS:-5}
fi
NET_VARIANTS=${BENCH_NET_VARIANTS:-experts1 rpc_experts}
NETS=${BENCH_NETS:-1g 10g}
[ "$NETS" = none ] && NETS=""
NET_MODELS=${BENCH_NET_MODELS:-a3b-L4-q8_0}
LOAD=${BENCH_LOAD:-defaults}
WARMUP=${BENCH_WARMUP:-1}
ROWS_SHARE=${BENCH_ROWS_SHARE:-0.5}
VERIFY_EVERY=${BENCH_VERIFY_EVERY:-10}
PLAN_SHARE=${BENCH_PLAN_SHARE:-0.625}
THROTTLE_PCT=${BENCH_THROTTLE:-40}
THROTTLE_PERIOD_US=${BENCH_THROTTLE_PERIOD_US:-100000}
RPC=${BENCH_RPC:-1}
CEILING=${BENCH_CEILING:-1}
CEILING_ROUNDS=${BENCH_CEILING_ROUNDS:-100}
NO_REPACK=${BENCH_NO_REPACK:-auto}
TRACE_MAX=${BENCH_TRACE_MAX:-200000}
RESOLVE_MIN=${BENCH_RESOLVE_MIN:-$([ "$QUICK" = 1 ] && echo 0 || echo 30)}
RESOLVE_MAX_PAIRS=${BENCH_RESOLVE_MAX_PAIRS:-24}
RESOLVE_DEFAULT="experts1:lo experts1:1g rpc_experts:1g"
[ "$SET" = full ] && RESOLVE_DEFAULT+=" local_copy"
RESOLVE_VARIANTS=${BENCH_RESOLVE_VARIANTS:-$RESOLVE_DEFAULT}
RESOLVE_MODELS=${BENCH_RESOLVE_MODELS:-a3b-L4-q8_0}
RPC_PORT=50052
KEYS=$OUT/keys
N_PREFILL=${BENCH_PREFILL:-512}
N_UBATCH=${BENCH_UBATCH:-512}
N_DECODE=${BENCH_DECODE:-64}
PAGE_CACHE=${BENCH_PAGE_CACHE:-kernel}
RUN_TIMEOUT=900     # seconds per host run
WORKER_WAIT=120     # seconds for a worker's ready line

die() { echo "bench: error: $*" >&2; exit 1; }
say() { echo "bench: $(date +%H:%M:%S) $*"; }

source "$ROOT/tools/bench/netns.sh"
source "$ROOT/tools/bench/rpc.sh"
source "$ROOT/tools/bench/throttle.sh"

# ---- checks ----
case "$LOAD" in defaults|mmap|anon) ;; *) die "BENCH_LOAD must be defaults, mmap or anon, got '$LOAD'";; esac
case "$NO_REPACK" in auto|0|1) ;; *) die "BENCH_NO_REPACK must be auto, 0 or 1, got '$NO_REPACK'";; esac
case "$PAGE_CACHE" in kernel|huge|small|asis) ;; *) die "BENCH_PAGE_CACHE must be kernel, huge, small or asis, got '$PAGE_CACHE'";; esac
[[ "$TRACE_MAX" =~ ^[1-9][0-9]*$ ]] || die "BENCH_TRACE_MAX must be a positive integer, got '$TRACE_MAX'"
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_REPS must be a positive integer, got '$REPS'"
[[ "$RESOLVE_MIN" =~ ^(0|[1-9][0-9]*)$ ]] || die "BENCH_RESOLVE_MIN must be a whole number of minutes, got '$RESOLVE_MIN'"
[[ "$RESOLVE_MAX_PAIRS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_RESOLVE_MAX_PAIRS must be a positive integer, got '$RESOLVE_MAX_PAIRS'"
[[ "$THROTTLE_PCT" =~ ^[0-9]+$ ]] && [ "$THROTTLE_PCT" -ge 1 ] && [ "$THROTTLE_PCT" -le 99 ] ||
    die "BENCH_THROTTLE must be a whole percentage 1..99, got '$THROTTLE_PCT'"
[[ "$THROTTLE_PERIOD_US" =~ ^[0-9]+$ ]] && [ "$THROTTLE_PERIOD_US" -ge 1000 ] && [ "$THROTTLE_PERIOD_US" -le 1000000 ] ||
    die "BENCH_THROTTLE_PERIOD_US must be 1000..1000000, got '$THROTTLE_PERIOD_US'"
case "$CEILING" in 0|1) ;; *) die "BENCH_CEILING must be 0 or 1, got '$CEILING'";; esac
[[ "$CEILING_ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "BENCH_CEILING_ROUNDS must be a positive integer, got '$CEILING_ROUNDS'"
[[ "$REPACK_REPS" =~ ^[0-9]+$ ]] || die "BENCH_REPACK_REPS must be a whole number, got '$REPACK_REPS'"
awk -v f="$PLAN_SHARE" 'BEGIN { exit !(f + 0 > 0 && f + 0 <= 1) }' || die "BENCH_PLAN_SHARE must be in (0, 1], got '$PLAN_SHARE'"
for n in "$N_PREFILL" "$N_UBATCH" "$N_DECODE"; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "BENCH_PREFILL/UBATCH/DECODE must be positive integers, got '$n'"; done
for f in "$PRELOAD" "$BIN/moezip-run" "$BIN/moezip-worker" "$BIN/moezip-fixture" "$BIN/moezip-upcycle" "$BIN/moezip-pagecache" "$BIN/moezip-ceiling"; do
    [ -e "$f" ] || die "$f is missing (run make, or make BUILD=$BUILD build-all)"
done
command -v node >/dev/null || die "node is not installed (make deps installs nodejs)"
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (make deps installs the Debian package 'time')"
N_CPU=$(nproc 2>/dev/null || echo 1)
PIN=0
if [ "$N_CPU" -ge 2 ] && command -v taskset >/dev/null; then PIN=1; fi
for m in $MODELS; do
    case "$m" in a3b-L4-q8_0|a3b-L8-q8_0|a3b-L4-q4_K|stories-moe8) ;; *) die "unknown model '$m' in BENCH_MODELS";; esac
done
for v in ${BENCH_VARIANTS:-} $NET_VARIANTS; do
    case "$v" in single|single_nr|single_anon|single_thp|observe|local|local_copy|rows1|experts1|experts1_map|experts2|shard1|experts1_curve|experts1_verify|rpc_single|rpc_experts|rpc_tensor|\
                 experts1_plan|experts1_repl|rows1_slow|rows1_auto_slow|shard1_slow|shard1_auto_slow) ;;
        *) die "unknown variant '$v'";; esac
done
for n in $NETS; do case "$n" in 1g|10g) ;; *) die "BENCH_NETS: unknown link '$n' (1g, 10g or none)";; esac; done
THROTTLE_NOTE=""
if ! why=$(throttle_available); then THROTTLE_NOTE="throttled (*_slow) variants skipped: $why"; fi
NET_NOTE=""
if [ -n "$NETS" ]; then
    if ! why=$(net_available); then NET_NOTE="emulated links skipped: $why"; NETS=""; fi
fi

mkdir -p "$OUT" "$MODELS_DIR"
# llama.cpp with RPC for the rpc_* variants: the cached build of the pinned source (built once here if missing)
RPC_NOTE=""
LLAMA_BIN=""
if [ "$RPC" = 1 ]; then
    if [ -n "${BENCH_LLAMA_BUILD:-}" ]; then LLAMA_BIN=$BENCH_LLAMA_BUILD/bin
    else
        say "llama.cpp with GGML_RPC for the rpc_* variants (cached; a cold build took 37 min on a loaded 2-core VM: docs/engines.md)"
        if b=$("$ROOT/tools/engines/build-llamacpp.sh" "$ROOT/.deps/engine/node_modules/node-llama-cpp/llama/gitRelease.bundle" \
                 2> "$OUT/llama.cpp-build.log"); then LLAMA_BIN=$b/bin
        else RPC_NOTE="rpc variants skipped: building llama.cpp failed ($(tail -1 "$OUT/llama.cpp-build.log"))"; fi
    fi
    if [ -n "$LLAMA_BIN" ] && { [ ! -x "$LLAMA_BIN/llama-bench" ] || [ ! -x "$LLAMA_BIN/ggml-rpc-server" ]; }; then
        RPC_NOTE="rpc variants skipped: $LLAMA_BIN has no llama-bench or ggml-rpc-server"; LLAMA_BIN=""
    fi
else
    RPC_NOTE="rpc variants skipped (BENCH_RPC=0)"
fi
if [ ! -f "$KEYS/worker/moezip.key" ] || [ ! -f "$KEYS/coordinator/moezip.key" ]; then   # experts1_curve's keys, once
    rm -rf "$KEYS" && mkdir -p "$KEYS"
    "$BIN/moezip-worker" --keygen "$KEYS/worker" > /dev/null && "$BIN/moezip-worker" --keygen "$KEYS/coordinator" > /dev/null ||
        die "moezip-worker --keygen failed (CURVE keys for experts1_curve in $KEYS)"
fi
exec 9> "$OUT/.lock"
flock -n 9 || die "another bench is running (lock $OUT/.lock)"
rm -rf "$RUNS" "$OUT/traces" "$OUT/ceiling"   # a trace or ceiling of an earlier bench must not pass for this one's
mkdir -p "$RUNS"

# ---- cleanup: every process this script started (by pid) and the namespaces, on any exit ----
HOST_PID=""
WORKER_PIDS=()
NET_UP=0
TMPW=$(mktemp -d "${TMPDIR:-/tmp}/moezip-bench.XXXXXX")
stop_pid() {  # pid: TERM its process group, then KILL after 5 s
    local pid=$1
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [ -n "$HOST_PID" ] && stop_pid "$HOST_PID"
    local pid
    for pid in "${WORKER_PIDS[@]+"${WORKER_PIDS[@]}"}"; do stop_pid "$pid"; done
    [ "$NET_UP" = 1 ] && net_teardown
    throttle_teardown
    rm -rf "$TMPW"
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench: interrupted" >&2; exit 130' INT
trap 'echo "bench: terminated" >&2; exit 143' TERM

# ---- models ----
model_path() { echo "$MODELS_DIR/$1.gguf"; }
prepare_model() {  # name: writes the model once, reuses it after
    local m=$1 p
    p=$(model_path "$m")
    [ -s "$p" ] && return 0
    say "writing model $m (cached in $MODELS_DIR; a3b q8_0 ~1 min, a3b-L4 q4_K ~4 min)"
    case "$m" in
        a3b-L4-q8_0) "$BIN/moezip-fixture" --preset a3b-L4 --type q8_0 -o "$p.tmp" ;;
        a3b-L8-q8_0) "$BIN/moezip-fixture" --preset a3b-L8 --type q8_0 -o "$p.tmp" ;;
        a3b-L4-q4_K) "$BIN/moezip-fixture" --preset a3b-L4 --type q4_K -o "$p.tmp" ;;
        stories-moe8)
            [ -f "$SHARED/fixtures/stories260K.gguf" ] || die "$SHARED/fixtures/stories260K.gguf is missing (set MOEZIP_SHARED)"
            "$BIN/moezip-upcycle" -i "$SHARED/fixtures/stories260K.gguf" -o "$p.tmp" --n-expert 8 --n-expert-used 2 ;;
    esac > "$MODELS_DIR/$m.log" 2>&1 || die "could not write model $m: $(tail -3 "$MODELS_DIR/$m.log")"
    mv "$p.tmp" "$p"
}
model_n_expert() { case "$1" in stories-moe8) echo 8 ;; *) echo 128 ;; esac; }

# ---- the page cache behind the engines' mappings ----
# A mapped model decodes 2-3x faster here when its page-cache folios are 2 MiB (PMD-mapped) than when
# they are 4 KiB, and which it gets depends on how the file entered the page cache
# (coordinator/memory/page_cache.h). page_cache_set evicts a model and reads it back the way
# BENCH_PAGE_CACHE says; page_cache_check, before every run, measures the state, re-sets it when it
# drifted (resident or PMD-mapped bytes changed by more than 1% of the file) and leaves PC_JSON for
# the run's meta. asis: measured and recorded only.
declare -A PC_PMD=() PC_RES=()
N_PC_RESETS=0
pc_field() {  # key json: the key's whole-number value, or the bench stops
    local v
    v=$(sed -n "s/.*\"$1\":\(-\{0,1\}[0-9][0-9]*\).*/\1/p" <<< "$2")
    [ -n "$v" ] || die "moezip-pagecache printed no $1: $2"
    echo "$v"
}
page_cache_set() {  # model name
    local p s
    p=$(model_path "$1")
    s=$("$BIN/moezip-pagecache" set --fill "$PAGE_CACHE" "$p") || die "could not set the page cache of $p (see above)"
    PC_PMD[$1]=$(pc_field pmd_mapped_bytes "$s"); PC_RES[$1]=$(pc_field resident_bytes "$s")
    say "$1: page cache $PAGE_CACHE: $(awk -v a="${PC_PMD[$1]}" -v b="$(pc_field file_bytes "$s")" 'BEGIN { printf "%.1f", 100 * a / b }')% of the file PMD-mapped"
}
page_cache_check() {  # model name -> PC_JSON
    local p s pmd res bytes reset=false
    p=$(model_path "$1")
    s=$("$BIN/moezip-pagecache" state "$p") || die "could not measure the page cache of $p (see above)"
    pmd=$(pc_field pmd_mapped_bytes "$s"); res=$(pc_field resident_bytes "$s"); bytes=$(pc_field file_bytes "$s")
    if [ "$PAGE_CACHE" != asis ] &&
       { (( (pmd - PC_PMD[$1]) * 100 > bytes || (PC_PMD[$1] - pmd) * 100 > bytes )) ||
         (( (PC_RES[$1] - res) * 100 > bytes )); }; then
        say "$1: the page cache drifted (PMD-mapped $pmd of $bytes bytes, resident $res): set again"
        page_cache_set "$1"
        N_PC_RESETS=$((N_PC_RESETS + 1)); reset=true
        pmd=${PC_PMD[$1]}; res=${PC_RES[$1]}
    fi
    [ "$bytes" -gt 0 ] || die "$p is empty"
    PC_JSON=$(printf '"page_cache":"%s","read_ahead_kb":%s,"page_cache_pmd_share":%s,"page_cache_resident_share":%s,"page_cache_reset":%s' "$PAGE_CACHE" "$(pc_field read_ahead_kb "$s")" \
        "$(awk -v a="$pmd" -v b="$bytes" 'BEGIN { printf "%.4f", a / b }')" "$(awk -v a="$res" -v b="$bytes" 'BEGIN { printf "%.4f", a / b }')" "$reset")
}

# plan_for MODEL: the timed loopback variants of a model (BENCH_VARIANTS overrides). The comparison set
# (default) answers "moezip or llama.cpp RPC, and how far from one node": the modes, the two one-node
# references (engine default, --no-repack) and RPC's two answers on the 4-layer q8_0 model, with pairs on
# both placements, and spends the time left on pairs for the decode ratios of the targets. The full set
# adds every study: the memory-kind and page-cache references (anonymous 4 KiB and huge-page singles, one
# node from a huge-page copy, both hosts from the page cache), the placement and throttled-worker
# variants on the 4-layer q8_0 model and, on the others, the variants that answer their
# question (8 layers: twice the round trips per token; q4_K: another weight type; the tiny real model). `local` always gets phase runs (the MoE share
# for the Amdahl bound). The costs of CURVE and verify_every (experts1_curve, experts1_verify) are in
# neither set since every timed run has a paired reference run (BENCH_VARIANTS adds them;
# docs/security.md has a side-by-side measurement).
plan_for() {
    if [ -n "${BENCH_VARIANTS:-}" ]; then echo "$BENCH_VARIANTS"; return; fi
    if [ "$SET" = comparison ]; then
        case "$1" in
            a3b-L4-q8_0) echo "single single_nr observe local experts1 shard1 rpc_single rpc_experts rpc_tensor" ;;
            *) echo "single observe local experts1 shard1 rpc_single rpc_experts" ;;
        esac
        return
    fi
    case "$1" in
        a3b-L4-q8_0) echo "single single_nr single_anon single_thp observe local local_copy rows1 experts1 experts1_map experts2 shard1 rpc_single rpc_experts rpc_tensor" \
                          "experts1_plan experts1_repl rows1_slow rows1_auto_slow shard1_slow shard1_auto_slow" ;;
        a3b-L8-q8_0) echo "single experts1 rpc_single rpc_experts" ;;
        a3b-L4-q4_K) echo "single single_nr rows1 experts1" ;;
        *) echo "single observe local rows1 experts1 experts2 shard1 rpc_single rpc_experts" ;;
    esac
}
# runnable VARIANTS: the list without rpc_* when llama.cpp with RPC is not available, without *_slow
# when no CPU quota can be set
runnable() {
    local v out=""
    for v in $1; do
        case "$v" in
            rpc_*) [ -n "$LLAMA_BIN" ] && out+="$v " ;;
            *_slow) [ -z "$THROTTLE_NOTE" ] && out+="$v " ;;
            experts1_map) [ "$LOAD" != anon ] && out+="$v " ;;   # with --no-mmap nothing is read from the page cache
            *) out+="$v " ;;
        esac
    done
    echo "$out"
}
# ref_of VARIANT: the reference a variant's timed runs are paired with ("" for the references)
ref_of() { case "$1" in single|rpc_single) echo "" ;; rpc_*) echo rpc_single ;; *) echo single ;; esac; }
# no_repack_for MODEL VARIANT: 1 when the run keeps expert weights in GGUF layout (--no-repack / no_repack = true)
no_repack_for() {
    case "$2" in
        single_nr) echo 1; return ;;
        single|single_anon|single_thp) if [ "$NO_REPACK" = 1 ]; then echo 1; else echo 0; fi; return ;;   # the engine's default: repacking on
        rpc_*) echo 0; return ;;   # llama-bench has no --no-repack: always the engine's default
    esac
    case "$NO_REPACK" in
        1) echo 1 ;; 0) echo 0 ;;
        auto) case "$1" in *q4_K*) echo 1 ;; *) echo 0 ;; esac ;;   # the engine repacks q4_K experts (CPU_REPACK)
    esac
}

# ---- workers ----
# start_worker IDX CORE NETNS BIND MODEL EXPERTS: background worker (own process group), endpoint in W_EP[IDX];
# W_THROTTLE=1: inside the CPU quota group
W_EP=()
W_MIB=()
# W_CURVE=1: the worker serves over CURVE with the bench's keys; else a bind in a network namespace
# (not loopback) is plain with --insecure (the namespaces are the bench's own).
W_CURVE=0
W_THROTTLE=0
W_MMAP=0       # 1: the worker maps the file (--mmap) whatever BENCH_LOAD says (experts1_map)
CFG_VERIFY=0   # write_config: dispatch.verify_every
CFG_NO_REPACK=1  # write_config: no_repack = true
CFG_TRACE=""   # write_config: trace path ("" = none)
CFG_SHARE=$ROWS_SHARE   # write_config: rows/shard local_share (a number, or auto)
CFG_REPLICAS=0          # write_config: experts.replicas = true
CFG_COPY_LOCAL=""       # write_config: experts.copy_local = true/false ("" = the mode's default)
start_worker() {
    local i=$1 core=$2 ns=$3 bind=$4 model=$5 experts=$6 pre=() args=() pid
    [ -n "$ns" ] && pre+=(ip netns exec "$ns")
    [ "$PIN" = 1 ] && pre+=(taskset -c "$core")
    # joins the group by its pid, then becomes the worker (exec keeps the pid)
    [ "$W_THROTTLE" = 1 ] && pre+=(bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$THROTTLE_CG")
    { [ "$LOAD" = mmap ] || [ "$W_MMAP" = 1 ]; } && args+=(--mmap)
    [ -n "$experts" ] && args+=(--experts "$experts")
    if [ "$W_CURVE" = 1 ]; then args+=(--key "$KEYS/worker/moezip.key" --allow "$KEYS/coordinator/moezip.pub")
    elif [ -n "$ns" ]; then args+=(--insecure); fi
    rm -f "$TMPW/w$i.out" "$TMPW/w$i.err"
    setsid "${pre[@]+"${pre[@]}"}" "$BIN/moezip-worker" --model "$model" --bind "$bind" --threads 1 \
        "${args[@]+"${args[@]}"}" > "$TMPW/w$i.out" 2> "$TMPW/w$i.err" &
    pid=$!
    WORKER_PIDS+=("$pid")
    wait_ready "$pid" "worker $i" "$TMPW/w$i.err" grep -q '^moezip-worker: serving' "$TMPW/w$i.out" || return 1
    W_EP[$i]=$(sed -n 's/^moezip-worker: serving \([^ ]*\) .*/\1/p' "$TMPW/w$i.out")
    W_MIB[$i]=$(sed -n 's/.*, \([0-9.]*\) MiB of expert weights.*/\1/p' "$TMPW/w$i.out")
}
# wait_ready PID WHAT ERR_FILE CHECK...: runs the command CHECK every 50 ms until it succeeds, for at
# most WORKER_WAIT s. Fails naming WHAT (with ERR_FILE's last lines) when PID exits first, or on time.
wait_ready() {
    local pid=$1 what=$2 err=$3 t
    shift 3
    for t in $(seq $((WORKER_WAIT * 20))); do
        "$@" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || { echo "bench: $what exited before it was ready: $(tail -3 "$err")" >&2; return 1; }
        sleep 0.05
    done
    echo "bench: $what was not ready within $WORKER_WAIT s" >&2
    return 1
}
# stop_workers: VmHWM (KiB) of each into W_HWM, then TERM; the worker prints its counters and exits.
W_HWM=()
stop_workers() {
    local pid i=0
    W_HWM=()
    for pid in "${WORKER_PIDS[@]+"${WORKER_PIDS[@]}"}"; do
        W_HWM[$i]=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
        [ -n "${W_HWM[$i]}" ] || W_HWM[$i]=0
        i=$((i + 1))
    done
    for pid in "${WORKER_PIDS[@]+"${WORKER_PIDS[@]}"}"; do stop_pid "$pid"; done
    WORKER_PIDS=()
}

# ---- experts1_plan's placement ----
# plan_experts MODEL REPORT...: moezip-plan on the reports (routing statistics), this host and one worker
# each with a budget of BENCH_PLAN_SHARE of the experts; the ownership into PLAN_LOCAL/WORKER/REPLICAS[MODEL].
# The plan and the config moezip-plan wrote are kept in $OUT/plans/ (the endpoint there is a placeholder:
# the bench's workers bind a free port).
declare -A PLAN_LOCAL=() PLAN_WORKER=() PLAN_REPLICAS=()
plan_experts() {
    local m=$1 E n bytes budget r reports=() dir=$OUT/plans fields
    shift
    for r in "$@"; do reports+=(--report "$r"); done
    E=$(model_n_expert "$m")
    mkdir -p "$dir"
    # the size of one expert over all MoE layers, from a plan with room for everything
    "$BIN/moezip-plan" "${reports[@]}" --host here,1T --host tcp://127.0.0.1:5601,1T --json "$dir/$m.size.json" \
        -o /dev/null 2> "$dir/$m.log" || die "moezip-plan failed on $*: $(tail -2 "$dir/$m.log")"
    bytes=$(node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1])).expert_bytes)' "$dir/$m.size.json")
    n=$(awk -v f="$PLAN_SHARE" -v e="$E" 'BEGIN { n = f * e; printf "%d", (n == int(n)) ? n : int(n) + 1 }')
    budget=$((n * bytes))
    "$BIN/moezip-plan" "${reports[@]}" --host "here,$budget" --host "tcp://127.0.0.1:5601,$budget" --model "$(model_path "$m")" \
        --json "$dir/$m.json" -o "$dir/$m.toml" 2>> "$dir/$m.log" || die "moezip-plan failed: $(tail -2 "$dir/$m.log")"
    fields=$(node -e 'const p = JSON.parse(require("fs").readFileSync(process.argv[1]));
        console.log(p.hosts[0].experts, p.hosts[1].experts, p.replicated > 0 ? 1 : 0, p.replicated)' "$dir/$m.json")
    read -r PLAN_LOCAL[$m] PLAN_WORKER[$m] PLAN_REPLICAS[$m] r <<< "$fields"
    say "$m: planned placement: here ${PLAN_LOCAL[$m]}, worker ${PLAN_WORKER[$m]} ($n experts each at most, $r with two owners)"
}

# ---- one run ----
# write_config FILE MODE REPORT EXPERTS_LOCAL then worker lines "ENDPOINT|SHARE|EXPERTS" on stdin
write_config() {
    local file=$1 mode=$2 report=$3 local_experts=$4 ep share ex
    {
        echo "mode = \"$mode\""
        echo "report = \"$report\""
        echo "report_flush_ms = 0"
        [ "$CFG_NO_REPACK" = 1 ] && echo "no_repack = true"
        if [ -n "$CFG_TRACE" ]; then echo "trace = \"$CFG_TRACE\""; echo "trace_max_events = $TRACE_MAX"; fi
        [ "$mode" != observe ] && echo "require_intercept = true"
        echo "[dispatch]"
        echo "timeout_ms = 120000"
        echo "connect_timeout_ms = 20000"
        echo "on_worker_error = \"abort\""
        if [ "$CFG_VERIFY" -gt 0 ]; then echo "verify_every = $CFG_VERIFY"; fi
        if [ "$W_CURVE" = 1 ]; then echo "client_key = \"$KEYS/coordinator/moezip.key\""; fi
        case "$mode" in
            rows|shard) echo "[$mode]"
                        if [ "$CFG_SHARE" = auto ]; then echo 'local_share = "auto"'; else echo "local_share = $CFG_SHARE"; fi ;;
            experts) echo "[experts]"; echo "local = \"$local_experts\""
                     if [ -n "$CFG_COPY_LOCAL" ]; then echo "copy_local = $CFG_COPY_LOCAL"; fi
                     if [ "$CFG_REPLICAS" = 1 ]; then echo "replicas = true"; fi ;;
            local) if [ -n "$CFG_COPY_LOCAL" ]; then echo "[experts]"; echo "copy_local = $CFG_COPY_LOCAL"; fi ;;
        esac
        while IFS='|' read -r ep share ex; do
            echo "[[worker]]"
            echo "endpoint = \"$ep\""
            if [ "$mode" = rows ] || [ "$mode" = shard ]; then echo "share = $share"; fi   # "auto" comes quoted
            if [ "$mode" = experts ]; then echo "experts = \"$ex\""; fi
            if [ "$W_CURVE" = 1 ]; then echo "public_key = \"$(sed -n 's/^public-key = "\(.*\)"$/\1/p' "$KEYS/worker/moezip.pub")\""; fi
        done
    } > "$file"
}

# run_one MODEL VARIANT NET PLACEMENT KIND REP [PAIR]: one host run (and its workers); appends to $RUNS.
# KIND: timed (prefill + decode), prefill (-n 1), decode (1-token prompt, N_DECODE steps; hooked
# variants write their trace, kept as $OUT/traces/<model>-<variant>-<net>.json). PAIR: the timed pair
# the run belongs to (a variant and its reference, side by side), "" outside pairs.
N_RUN=0
N_FAILED=0
LAST_REPORT=""   # the report of the last hooked run
run_one() {
    local m=$1 v=$2 net=$3 place=$4 kind=$5 rep=$6 pair=${7:-}
    local model E half id host_core wcore ns="" mode="" n_workers=0 local_ex="" wl="" i rc=0 engine=moezip-run nr
    model=$(model_path "$m")
    E=$(model_n_expert "$m"); half=$((E / 2))
    N_RUN=$((N_RUN + 1))
    page_cache_check "$m"
    id=$(printf '%04d-%s-%s-%s-%s-%s-r%s' "$N_RUN" "$m" "$v" "$net" "$place" "$kind" "$rep")
    host_core=${place#h}; wcore=$((1 - host_core))
    [ "$net" != lo ] && ns=$NET_NS_HOST
    case "$v" in
        observe) mode=observe ;; local|local_copy) mode=local ;;
        rows1|rows1_slow|rows1_auto_slow) mode=rows; n_workers=1 ;;
        experts1|experts1_curve|experts1_verify|experts1_map) mode=experts; n_workers=1; local_ex="0-$((half - 1))" ;;
        experts1_plan) mode=experts; n_workers=1; local_ex=${PLAN_LOCAL[$m]} ;;
        experts1_repl) mode=experts; n_workers=1; local_ex="0-$((E - 1))" ;;
        experts2) mode=experts; n_workers=2 ;;
        shard1|shard1_slow|shard1_auto_slow) mode=shard; n_workers=1 ;;
        rpc_single) engine=llama-bench ;;
        rpc_experts) engine=llama-bench; n_workers=1 ;;
        rpc_tensor) engine=llama-bench; n_workers=2 ;;   # a server on each core: this host's and the worker's
    esac
    nr=$(no_repack_for "$m" "$v")
    CFG_NO_REPACK=$nr
    CFG_TRACE=""
    [ "$kind" = decode ] && [ -n "$mode" ] && CFG_TRACE="$RUNS/$id.trace.json"
    # CFG_COPY_LOCAL: "" leaves experts.copy_local at the mode's default, else true/false; W_MMAP: worker --mmap
    W_CURVE=0; CFG_VERIFY=0; W_THROTTLE=0; CFG_SHARE=$ROWS_SHARE; CFG_REPLICAS=0; CFG_COPY_LOCAL=""; W_MMAP=0
    case "$v" in
        *_slow) W_THROTTLE=1 ;;&
        *_auto_slow) CFG_SHARE=auto ;;
        experts1_repl) CFG_REPLICAS=1 ;;
        local_copy) CFG_COPY_LOCAL=true ;;
        experts1_map) CFG_COPY_LOCAL=false; W_MMAP=1 ;;
        experts1_plan) CFG_REPLICAS=${PLAN_REPLICAS[$m]} ;;
    esac
    if [ "$v" = experts1_curve ]; then W_CURVE=1; fi
    if [ "$v" = experts1_verify ]; then CFG_VERIFY=$VERIFY_EVERY; fi
    # workers
    local wex=() wshare=() wns=() wbind=() ok=1
    W_EP=(); W_MIB=(); W_HWM=()
    case "$v" in
        rows1|shard1|rows1_slow|shard1_slow) wex=(""); wshare=("$(awk -v s="$ROWS_SHARE" 'BEGIN{printf "%.6f", 1 - s}')") ;;
        rows1_auto_slow|shard1_auto_slow) wex=(""); wshare=('"auto"') ;;
        experts1|experts1_curve|experts1_verify|experts1_map) wex=("$half-$((E - 1))") ;;
        experts1_plan) wex=("${PLAN_WORKER[$m]}") ;;
        experts1_repl) wex=("0-$((E - 1))") ;;
        experts2) wex=("0-$((half - 1))" "$half-$((E - 1))") ;;
    esac
    for ((i = 0; i < n_workers; i++)); do
        if [ "$engine" = llama-bench ]; then
            # rpc_tensor: server 0 on this host's core (its loopback), server 1 on the worker's; rpc_experts: one, the worker's
            local rcore=$wcore rns="" rhost=127.0.0.1 wi=$i
            [ "$v" = rpc_tensor ] && wi=$((i - 1))
            if [ "$v" = rpc_tensor ] && [ "$i" = 0 ]; then rcore=$host_core; rns=$ns
            elif [ "$net" != lo ]; then rns=${NET_NS_WORKERS[$wi]}; rhost=$(net_worker_addr "$wi"); fi
            start_rpc_server "$i" "$rcore" "$rns" "$rhost" || { ok=0; break; }
            continue
        fi
        if [ "$net" = lo ]; then wns[$i]=""; wbind[$i]="tcp://127.0.0.1:*"
        else wns[$i]=${NET_NS_WORKERS[$i]}; wbind[$i]="tcp://$(net_worker_addr "$i"):5601"; fi
        start_worker "$i" "$wcore" "${wns[$i]}" "${wbind[$i]}" "$model" "${wex[$i]}" || { ok=0; break; }
        wl+="${W_EP[$i]}|${wshare[$i]:-0}|${wex[$i]}"$'\n'
    done
    # host
    local pre=() envs=() args=() cfg="$RUNS/$id.toml" report="$RUNS/$id.report.json" t0 t1 la0 la1 wire0="0 0" wire1="0 0" thr0 thr1
    local cmd=("$BIN/moezip-run")
    args=(-m "$model" -b "$N_UBATCH" -t 1 --quiet --json "$RUNS/$id.run.json")
    [ "$nr" = 1 ] && args+=(--no-repack)
    case "$kind" in
        timed) args+=(--fixture "$N_PREFILL" -n "$((N_DECODE + 1))")
               [ "$WARMUP" = 1 ] && args+=(--warmup) ;;
        prefill) args+=(--fixture "$N_PREFILL" -n 1) ;;
        decode) args+=(--fixture 1 -n "$((N_DECODE + 1))") ;;
    esac
    if [ "$LOAD" = anon ] || [ "$v" = single_anon ] || [ "$v" = single_thp ]; then args+=(--no-mmap); fi
    # glibc >= 2.35: malloc's mmap'd chunks advised MADV_HUGEPAGE (THP "madvise" mode, as here)
    [ "$v" = single_thp ] && envs=(env "GLIBC_TUNABLES=glibc.malloc.hugetlb=1")
    if [ "$engine" = llama-bench ] && [ "$ok" = 1 ]; then
        # the same lengths, ubatch and thread count; llama-bench times the prompt and the decode as two
        # tests, each after one untimed warm-up run of its own (decode from an empty context)
        local extra=()
        read -ra extra <<< "$(rpc_bench_args "$v" "${W_EP[@]+"${W_EP[@]}"}")"
        cmd=(env "LD_LIBRARY_PATH=$LLAMA_BIN" "$LLAMA_BIN/llama-bench")
        args=(-m "$model" -p "$N_PREFILL" -n "$N_DECODE" -b "$N_UBATCH" -ub "$N_UBATCH" -t 1 -r 1 -o json "${extra[@]}")
        [ "$WARMUP" = 1 ] || args+=(--no-warmup)
        [ "$LOAD" = anon ] && args+=(-lm none)   # read into memory, as --no-mmap
    fi
    if [ -n "$mode" ]; then
        printf '%s' "$wl" | write_config "$cfg" "$mode" "$report" "$local_ex"
        envs=(env "LD_PRELOAD=$PRELOAD" "MOEZIP_CONFIG=$cfg")
        LAST_REPORT=$report
    fi
    [ -n "$ns" ] && pre+=(ip netns exec "$ns")
    [ "$PIN" = 1 ] && pre+=(taskset -c "$host_core")
    [ -n "$ns" ] && wire0=$(net_bytes)
    thr0=$(throttle_stat)
    la0=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s%N)
    if [ "$ok" = 1 ]; then
        timeout --kill-after=10 "$RUN_TIMEOUT" /usr/bin/time -o "$RUNS/$id.time" -f '%M %e %U %S' \
            "${pre[@]+"${pre[@]}"}" "${envs[@]+"${envs[@]}"}" "${cmd[@]}" "${args[@]}" \
            > "$RUNS/$id.out" 2> "$RUNS/$id.err" &
        HOST_PID=$!
        wait "$HOST_PID" || rc=$?
        HOST_PID=""
    else
        rc=97
    fi
    t1=$(date +%s%N)
    la1=$(cut -d' ' -f1 /proc/loadavg)
    if [ "$engine" = llama-bench ] && [ "$rc" = 0 ]; then
        node "$ROOT/tools/bench/llama-bench-run.js" "$RUNS/$id.out" > "$RUNS/$id.run.json" || rc=98
    fi
    if [ -n "$CFG_TRACE" ] && [ -s "$CFG_TRACE" ]; then
        mkdir -p "$OUT/traces" && cp "$CFG_TRACE" "$OUT/traces/$m-$v-$net.json"
    fi
    [ -n "$ns" ] && wire1=$(net_bytes)
    thr1=$(throttle_stat)
    stop_workers
    local rss=0 hwm="" mib=""
    [ -f "$RUNS/$id.time" ] && rss=$(tail -1 "$RUNS/$id.time" | awk '{print ($1 ~ /^[0-9]+$/) ? $1 : 0}')
    for ((i = 0; i < n_workers; i++)); do
        hwm+="${hwm:+,}${W_HWM[$i]:-0}"; mib+="${mib:+,}${W_MIB[$i]:-0}"
    done
    printf '{"id":"%s","model":"%s","variant":"%s","mode":"%s","n_workers":%d,"net":"%s","placement":"%s","host_core":%d,"worker_core":%d,"kind":"%s","rep":%d,"load":"%s","rows_share":%s,"rc":%d,"wall_ms":%d,"host_maxrss_kib":%d,"worker_hwm_kib":[%s],"worker_expert_mib":[%s],"wire_tx":%d,"wire_rx":%d,"loadavg":[%s,%s],"run":"%s","report":"%s","pinned":%s,"n_prefill":%d,"n_ubatch":%d,"n_decode":%d,"warmup":%s,"engine":"%s","pair":"%s","no_repack":%s,"share":"%s","throttle_pct":%d,"throttled_periods":%d,"quota_periods":%d,%s}\n' \
        "$id" "$m" "$v" "${mode:-none}" "$n_workers" "$net" "$place" "$host_core" "$wcore" "$kind" "$rep" "$LOAD" "$ROWS_SHARE" \
        "$rc" "$(( (t1 - t0) / 1000000 ))" "${rss:-0}" "$hwm" "$mib" \
        "$(( ${wire1% *} - ${wire0% *} ))" "$(( ${wire1#* } - ${wire0#* } ))" "$la0" "$la1" \
        "$id.run.json" "$([ -n "$mode" ] && echo "$id.report.json")" "$([ "$PIN" = 1 ] && echo true || echo false)" \
        "$N_PREFILL" "$N_UBATCH" "$N_DECODE" "$([ "$WARMUP" = 1 ] && [ "$kind" = timed ] && echo true || echo false)" \
        "$engine" "$pair" "$([ "$nr" = 1 ] && echo true || echo false)" \
        "$([ -n "$mode" ] && [ "$mode" != experts ] && [ "$n_workers" -gt 0 ] && echo "$CFG_SHARE")" \
        "$([ "$W_THROTTLE" = 1 ] && echo "$THROTTLE_PCT" || echo 0)" "$(( ${thr1% *} - ${thr0% *} ))" "$(( ${thr1#* } - ${thr0#* } ))" "$PC_JSON" \
        > "$RUNS/$id.meta.json"
    if [ "$rc" -ne 0 ]; then
        N_FAILED=$((N_FAILED + 1))
        echo "bench: run $id failed (status $rc): $(grep -v '^moezip\[' "$RUNS/$id.err" | tail -2 | tr '\n' ' ')" >&2
    elif [ "$kind" = timed ]; then
        node "$ROOT/tools/bench/progress.js" "$RUNS/$id.meta.json" "$RUNS/$id.run.json" || true
    fi
}

# ---- the schedule ----
# run_pair MODEL VARIANT NET PLACEMENT REP PAIR FIRST: a variant's timed run and its reference's (ref_of,
# on loopback) side by side; the reference goes first when FIRST is odd. Alternating it over the pairs
# makes a drift within a pair fall on both sides alike.
run_pair() {
    local m=$1 v=$2 n=$3 p=$4 rep=$5 pair=$6 first=$7 r
    r=$(ref_of "$v")
    if (( first % 2 )); then
        run_one "$m" "$r" lo "$p" timed "$rep" "$pair"; run_one "$m" "$v" "$n" "$p" timed "$rep" "$pair"
    else
        run_one "$m" "$v" "$n" "$p" timed "$rep" "$pair"; run_one "$m" "$r" lo "$p" timed "$rep" "$pair"
    fi
}
PLACES=${BENCH_PLACES:-h0 h1}
for p in $PLACES; do case "$p" in h0|h1) ;; *) die "BENCH_PLACES: unknown placement '$p' (h0, h1)";; esac; done
[ "$PIN" = 1 ] || PLACES="h0"

say "models: $MODELS; repetitions: $REPS; load: $LOAD; prefill $N_PREFILL (ubatch $N_UBATCH), decode $N_DECODE"
if [ -n "$NETS" ]; then say "links: lo $NETS (net variants: $NET_VARIANTS on $NET_MODELS)${NET_NOTE:+; $NET_NOTE}"
else say "links: loopback only${NET_NOTE:+; $NET_NOTE}"; fi
[ "$PIN" = 1 ] || say "fewer than 2 cores (or no taskset): processes are not pinned, one placement only"
say "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $N_CPU cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
T_START=$(date +%s)
TREE=$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)  # the sources at the start

if [ -n "$NETS" ]; then
    net_setup || die "could not create the network namespaces (see above)"
    NET_UP=1
fi

NET_VARIANTS=$(runnable "$NET_VARIANTS")
[ -n "$RPC_NOTE" ] && say "$RPC_NOTE"
[ -n "$THROTTLE_NOTE" ] && say "$THROTTLE_NOTE"
if [ -z "$THROTTLE_NOTE" ]; then
    throttle_setup "$THROTTLE_PCT" "$THROTTLE_PERIOD_US" || die "could not make the CPU quota group $THROTTLE_CG"
    say "throttled workers: $THROTTLE_PCT% of a core per ${THROTTLE_PERIOD_US} us ($THROTTLE_CG)"
fi
for m in $MODELS; do
    prepare_model "$m"
    variants=$(runnable "$(plan_for "$m")")
    nets_here=""
    for x in $NET_MODELS; do [ "$x" = "$m" ] && nets_here=$NETS; done
    # combos of this model: "variant net placement"; each variant's timed runs are paired with its
    # reference's (ref_of), so a reference is a combo of its own only when no variant of the plan uses it
    combos=()
    for v in $variants; do
        r=$(ref_of "$v")
        if [ -z "$r" ]; then
            used=0
            for x in $variants $NET_VARIANTS; do [ "$(ref_of "$x")" = "$v" ] && used=1; done
            [ "$used" = 1 ] && continue
        fi
        for p in $PLACES; do combos+=("$v lo $p"); done
    done
    for v in $NET_VARIANTS; do for n in $nets_here; do for p in $PLACES; do combos+=("$v $n $p"); done; done; done

    say "$m: warm-up (page cache, one unhooked run per core)"
    if [ "$PAGE_CACHE" = asis ]; then cat "$(model_path "$m")" > /dev/null; else page_cache_set "$m"; fi
    for p in $PLACES; do run_one "$m" single lo "$p" decode 0; done

    # phase runs (placement h0): local and every distributed variant, per link
    phase=()
    for v in local $variants; do
        case "$v" in local|local_copy|rows1|experts1|experts2|shard1|experts1_curve|experts1_verify|experts1_repl|experts1_map) phase+=("$v lo");; esac
    done
    for v in $NET_VARIANTS; do case "$v" in rpc_*) ;; *) for n in $nets_here; do phase+=("$v $n"); done;; esac; done
    seen=" "
    calibration=()
    for c in "${phase[@]}"; do
        case "$seen" in *" $c "*) continue;; esac
        seen+="$c "
        read -r v n <<< "$c"
        [ "$n" != lo ] && net_shape "${n}bit"
        run_one "$m" "$v" "$n" h0 prefill 0
        [ "$v" = local ] && calibration=("$LAST_REPORT")
        [ "$v" != rows1 ] && run_one "$m" "$v" "$n" h0 decode 0   # rows mode decodes locally (min_rows 2)
        [ "$v" = local ] && calibration+=("$LAST_REPORT")
    done
    # experts1_plan: placed from the routing of local's phase runs (prefill and a decode from another prompt)
    case " $variants " in *" experts1_plan "*)
        plan_experts "$m" "${calibration[@]}"
        # the planned run's own phase runs (after the plan: they need it)
        run_one "$m" experts1_plan lo h0 prefill 0
        run_one "$m" experts1_plan lo h0 decode 0 ;;
    esac
    # What a dispatch of a decode call's slots reaches here (tools/moezip-ceiling), with this
    # model's slot time and MoE share from local's decode phase run: the ceiling the experts targets are
    # read against beside the Amdahl bound. Pinned as placement h0.
    if [ "$CEILING" = 1 ] && [ "$PIN" = 1 ]; then
        case " $variants " in *" experts1 "*|*" experts1_repl "*|*" experts1_plan "*)
            cargs=$(node "$ROOT/tools/bench/ceiling-args.js" "$OUT" "$m") || die "tools/bench/ceiling-args.js failed for $m (see above)"
            say "$m: the dispatch ceiling on this machine ($cargs)"
            mkdir -p "$OUT/ceiling"
            # shellcheck disable=SC2086  # cargs is a list of flags
            "$BIN/moezip-ceiling" $cargs --rounds "$CEILING_ROUNDS" --host-cpu 0 --worker-cpu 1 --out "$OUT/ceiling/$m.json" ||
                die "moezip-ceiling failed for $m" ;;
        esac
    fi

    say "$m: ${#combos[@]} pairs per repetition x $REPS (each a variant and its reference, side by side)"
    for ((rep = 1; rep <= REPS; rep++)); do
        order=("${combos[@]}")
        if ((rep % 2 == 0)); then
            order=(); for ((i = ${#combos[@]} - 1; i >= 0; i--)); do order+=("${combos[$i]}"); done
        fi
        k=0
        for c in "${order[@]}"; do
            read -r v n p <<< "$c"
            k=$((k + 1))
            [ "$n" != lo ] && net_shape "${n}bit"
            r=$(ref_of "$v")
            if [ -z "$r" ]; then run_one "$m" "$v" "$n" "$p" timed "$rep"; continue; fi
            run_pair "$m" "$v" "$n" "$p" "$rep" "r$rep-$k" $((rep + k))
        done
    done
    # Extra pairs where a decode ratio is not resolved to ±5% yet (a shared VM's decode spreads ±20-50%
    # between runs): a round adds one pair to each such ratio of RESOLVE_VARIANTS, fewest pairs first,
    # until every one is resolved, has RESOLVE_MAX_PAIRS pairs, or RESOLVE_MIN minutes are spent.
    case " $RESOLVE_MODELS " in *" $m "*) resolve_here=$RESOLVE_MIN ;; *) resolve_here=0 ;; esac
    if [ "$resolve_here" -gt 0 ]; then
        t_stop=$(( $(date +%s) + resolve_here * 60 ))
        round=0
        while [ "$(date +%s)" -lt "$t_stop" ]; do
            round=$((round + 1))
            todo=()
            left=$(node "$ROOT/tools/bench/unresolved.js" "$OUT" "$m" decode "$RESOLVE_MAX_PAIRS") ||
                die "tools/bench/unresolved.js failed on $OUT (see above)"
            while read -r v n p; do
                [ -n "$v" ] || continue
                case " $RESOLVE_VARIANTS " in *" $v "*|*" $v:$n "*) todo+=("$v $n $p") ;; esac
            done <<< "$left"
            if [ "${#todo[@]}" -eq 0 ]; then say "$m: every decode ratio of $RESOLVE_VARIANTS is resolved to ±5% or has $RESOLVE_MAX_PAIRS pairs"; break; fi
            say "$m: extra pairs, round $round: ${#todo[@]} decode ratios not resolved to ±5%: ${todo[*]}"
            rep=$((REPS + round)); k=0
            for c in "${todo[@]}"; do
                [ "$(date +%s)" -lt "$t_stop" ] || break
                read -r v n p <<< "$c"
                k=$((k + 1))
                [ "$n" != lo ] && net_shape "${n}bit"
                run_pair "$m" "$v" "$n" "$p" "$rep" "x$round-$k" $((rep + k))
            done
        done
        [ "$(date +%s)" -lt "$t_stop" ] || say "$m: the $resolve_here minutes of extra pairs are spent"
    fi
done

if [ "$NET_UP" = 1 ]; then net_teardown; NET_UP=0; fi
rm -rf "$TMPW"
T_END=$(date +%s)
say "done in $(( (T_END - T_START) / 60 )) min $(( (T_END - T_START) % 60 )) s; $N_RUN runs, $N_FAILED failed; page cache set again $N_PC_RESETS times"

summary_rc=0
BENCH_COMMIT=$TREE BENCH_NOTE="${NET_NOTE}${NET_NOTE:+; }${RPC_NOTE}${THROTTLE_NOTE:+; }${THROTTLE_NOTE}" BENCH_SECONDS=$((T_END - T_START)) node "$ROOT/tools/bench/summary.js" "$OUT" || summary_rc=$?
[ "$N_FAILED" -eq 0 ] || die "$N_FAILED runs failed (their stderr: $RUNS/*.err)"
[ "$summary_rc" -eq 0 ] || die "the summary found problems (see above)"

# What repacking is worth and experts mode with repacked workers (moezip-worker --repack) against the
# engine's default single node, q4_K and q4_0 (tools/bench/repack-costs.sh; BENCH_REPACK_REPS=0 skips it).
if [ "$REPACK_REPS" -gt 0 ]; then
    for t in q4_K q4_0; do
        say "repacked experts, $t: $REPACK_REPS repetitions"
        BUILD="$BUILD" "$ROOT/tools/bench/repack-costs.sh" "$REPACK_REPS" "$t" | tee "$OUT/repack-$t.md"
    done
fi

# A GPU host's hybrid run emulated with an RPC device as the accelerator (tools/bench/hybrid.sh;
# BENCH_HYBRID_REPS=0 skips it). Exit 2 is a skip with its reason (no llama.cpp with RPC, one core).
HYBRID_REPS=${BENCH_HYBRID_REPS:-$([ "$SET" = full ] && echo 5 || echo 0)}
[[ "$HYBRID_REPS" =~ ^[0-9]+$ ]] || die "BENCH_HYBRID_REPS must be a whole number, got '$HYBRID_REPS'"
if [ "$HYBRID_REPS" -gt 0 ]; then
    say "hybrid emulation: $HYBRID_REPS repetitions"
    hybrid_rc=0
    BUILD="$BUILD" "$ROOT/tools/bench/hybrid.sh" "$HYBRID_REPS" || hybrid_rc=$?
    [ "$hybrid_rc" = 0 ] || [ "$hybrid_rc" = 2 ] || die "the hybrid emulation failed (see $OUT/hybrid)"
fi

# A long-running host under the preload with worker outages: memory, report and stderr stay bounded
# (tools/bench/soak.sh; BENCH_SOAK=0 skips it, BENCH_SET=soak runs only it).
if [ "$SOAK" = 1 ]; then
    say "soak: a host serving for ${SOAK_SECONDS:-3600} s with worker outages"
    BUILD="$BUILD" SOAK_OUT="$OUT/soak" "$ROOT/tools/bench/soak.sh" || die "the soak found unbounded growth (see $OUT/soak/result.json)"
fi
