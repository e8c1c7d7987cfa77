#!/usr/bin/env bash
# BENCH_SET=big (called by tools/run-bench.sh): a model bigger than one host. Every host is a memory
# cgroup (v1 memory.limit_in_bytes or v2 memory.max) + one core (taskset) + a network namespace, the
# two hosts joined by a veth pair shaped to 1 Gbit/s with tbf on both ends (no delay: this kernel has
# no netem). The model: the Qwen3-30B-A3B shape (128 experts top-8) at BIG_LAYERS layers in q4_K,
# written once by moezip-fixture --fast-quant into $BENCH_MODEL_CACHE (48 layers: 16.9 GB).
# Variants, each serving llama-server of llama.cpp built from the pinned source (cached,
# tools/engines/build-llamacpp.sh), moezip built for it (make engines):
#   single          one host, no memory limit (the reference)
#   single_limited  one host inside the limit
#   rpc             llama.cpp's RPC backend: the experts of the last half of the layers on a ggml-rpc-server
#                   host (-ngl 0 -ot blk.N.ffn_*_exps=RPC0), both hosts limited
#   experts1        moezip experts mode under LD_PRELOAD: this host computes experts 0..E/2-1, one
#                   moezip-worker host the rest, both hosts limited
# The model file is evicted from the page cache before every variant (moezip-pagecache evict), so each
# host reads what it needs from disk and its cgroup is charged for the page cache it fills.
# Workload per variant and repetition (tools/bench/big-client.js, OpenAI-compatible /v1/completions,
# streamed, temperature 0): 1 client, then BIG_CLIENTS concurrent clients; the server runs with
# --parallel BIG_CLIENTS throughout. Results: $BUILD/bench/big/big.json, big.md (tools/bench/big-table.js).
#
# Environment (all optional):
#   BENCH_MODEL_CACHE   where the model is written and kept (default $BUILD/bench/models)
#   BIG_LAYERS          layers of the model (default 48)
#   BIG_REPS            repetitions of each workload on each variant's server (default 1)
#   BIG_LIMIT_FRACTION  each limited host's memory limit as a fraction of the model file (default 0.62)
#   BIG_CLIENTS         concurrent clients of the second workload and llama-server --parallel (default 4)
#   BIG_PROMPT_TOKENS   prompt length (default 512); BIG_PREDICT tokens out (default 128)
#   BIG_VARIANTS        subset, in order (default "single single_limited rpc experts1")
#   BIG_REPACK          0 (default): --no-repack on every llama-server and no_repack = true (GGUF-layout
#                       experts, mapped from the file). 1: the engine's default repacking (CPU_REPACK), workers
#                       --repack. The engine repacks at load every q4_K tensor of the file into anonymous
#                       memory, the experts a worker owns included, so a host limited to less than the model
#                       is killed by its cgroup's OOM killer: single_limited and experts1 fail with 1
#                       (4 layers, 2026-12-07, 2-core Debian 12 VM); rpc and single run.
#   BIG_LLAMA_BIN       llama.cpp's bin folder (llama-server, ggml-rpc-server) instead of the cached build
#   BIG_MOEZIP_BUILD    moezip built for that llama.cpp (libmoezip.so, bin/moezip-worker; default the
#                       build-engines/llama.cpp-* folder `make engines` made)
#   BIG_READY_WAIT      seconds a host may take to be ready (default 1800)
# Needs root (cgroups, namespaces, tc, eviction from the page cache). Exit 0 when every variant ran and
# every answer equals the unlimited one node's (concurrent answers that llama-server prefilled in other
# batches than the reference's are named, not failed: big-table.js); 1 otherwise ("bench big: error:
# ..." names the problem); a limited host killed by its cgroup's OOM killer is a failed variant, named
# in the table.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build}
OUT=$ROOT/$BUILD/bench/big
MODEL_CACHE=${BENCH_MODEL_CACHE:-$ROOT/$BUILD/bench/models}
LAYERS=${BIG_LAYERS:-48}
REPS=${BIG_REPS:-1}
FRACTION=${BIG_LIMIT_FRACTION:-0.62}
CLIENTS=${BIG_CLIENTS:-4}
PROMPT=${BIG_PROMPT_TOKENS:-512}
PREDICT=${BIG_PREDICT:-128}
VARIANTS=${BIG_VARIANTS:-single single_limited rpc experts1}
REPACK=${BIG_REPACK:-0}
READY_WAIT=${BIG_READY_WAIT:-1800}
N_EXPERT=128
RPC_PORT=50652
# the fixture vocab's byte tokens <0x00>..<0xFF> (tools/moezip-fixture/fixture_vocab.cpp), never sampled:
# big-client.js says why
BAN=3-258
WORKER_PORT=50653

say() { echo "bench big: $*"; }
die() { echo "bench big: error: $*" >&2; exit 1; }

for n in "$LAYERS" "$REPS" "$CLIENTS" "$PROMPT" "$PREDICT" "$READY_WAIT"; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "BIG_LAYERS/REPS/CLIENTS/PROMPT_TOKENS/PREDICT/READY_WAIT must be positive integers, got '$n'"
done
[ "$LAYERS" -ge 2 ] || die "BIG_LAYERS must be at least 2 (rpc puts half the layers' experts on the other host), got $LAYERS"
awk -v f="$FRACTION" 'BEGIN { exit !(f + 0 > 0 && f + 0 <= 1) }' || die "BIG_LIMIT_FRACTION must be in (0, 1], got '$FRACTION'"
case "$REPACK" in 0|1) ;; *) die "BIG_REPACK must be 0 or 1, got '$REPACK'";; esac
for v in $VARIANTS; do case "$v" in single|single_limited|rpc|experts1) ;; *) die "BIG_VARIANTS: unknown variant '$v'";; esac; done
[ "$(id -u)" -eq 0 ] || die "needs root (memory cgroups, network namespaces, tc)"
command -v ip >/dev/null && command -v tc >/dev/null || die "ip and tc (iproute2) are needed"
command -v node >/dev/null || die "node is not installed (make deps installs nodejs)"
command -v taskset >/dev/null || die "taskset (util-linux) is needed"
[ "$(nproc)" -ge 2 ] || die "needs 2 cores (one per host), this machine has $(nproc)"

# ---- memory cgroups: v1 (the memory controller mounted on its own) or v2 ----
CG_KIND=""
if [ -w /sys/fs/cgroup/memory ] && [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then CG_KIND=v1
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null &&
     [ -w /sys/fs/cgroup ]; then CG_KIND=v2
else
    mkdir -p "$OUT"
    echo "{\"skipped\": \"no writable memory cgroup (v1 /sys/fs/cgroup/memory or v2 memory in cgroup.subtree_control)\"}" > "$OUT/big.json"
    say "skipped: no writable memory cgroup (v1 /sys/fs/cgroup/memory or v2 with memory in /sys/fs/cgroup/cgroup.subtree_control)"
    exit 0
fi
cg_path() { [ "$CG_KIND" = v1 ] && echo "/sys/fs/cgroup/memory/moezip-big-$$-$1" || echo "/sys/fs/cgroup/moezip-big-$$-$1"; }
# cg_make NAME BYTES: a group with that limit (0 = none)
cg_make() {
    local d; d=$(cg_path "$1")
    mkdir -p "$d"
    [ "$2" -gt 0 ] || return 0
    if [ "$CG_KIND" = v1 ]; then echo "$2" > "$d/memory.limit_in_bytes"; else echo "$2" > "$d/memory.max"; fi
}
cg_peak() {  # bytes: the group's max usage (v2 memory.peak needs Linux 5.19)
    local d; d=$(cg_path "$1")
    if [ "$CG_KIND" = v1 ]; then cat "$d/memory.max_usage_in_bytes"; else cat "$d/memory.peak" 2>/dev/null || echo null; fi
}
cg_ooms() {  # OOM kills in the group
    local d; d=$(cg_path "$1")
    if [ "$CG_KIND" = v1 ]; then awk '/^oom_kill / {print $2; f=1} END {if (!f) print 0}' "$d/memory.oom_control" 2>/dev/null || echo 0
    else awk '/^oom_kill / {print $2; f=1} END {if (!f) print 0}' "$d/memory.events" 2>/dev/null || echo 0; fi
}
cg_remove() {
    local d; d=$(cg_path "$1")
    [ -d "$d" ] || return 0
    for _ in $(seq 50); do rmdir "$d" 2>/dev/null && return 0; sleep 0.1; done
    echo "bench big: could not remove cgroup $d" >&2
}

# ---- network: host a (mzbig-a, 10.98.0.1) <-- veth, tbf 1 Gbit/s both ends --> host b (mzbig-b, 10.98.0.2) ----
NS_A=mzbig-a
NS_B=mzbig-b
ADDR_B=10.98.0.2
net_teardown() { ip netns del "$NS_A" 2>/dev/null || true; ip netns del "$NS_B" 2>/dev/null || true; }
net_setup() {
    net_teardown
    ip netns add "$NS_A" && ip netns add "$NS_B" &&
    ip -n "$NS_A" link set lo up && ip -n "$NS_B" link set lo up &&
    ip link add mzbig-a0 netns "$NS_A" type veth peer name mzbig-b0 netns "$NS_B" &&
    ip -n "$NS_A" addr add 10.98.0.1/30 dev mzbig-a0 && ip -n "$NS_B" addr add "$ADDR_B/30" dev mzbig-b0 &&
    ip -n "$NS_A" link set mzbig-a0 up && ip -n "$NS_B" link set mzbig-b0 up &&
    # 1 ms of line rate in the bucket (tools/bench/netns.sh says why), 50 ms of queue
    tc -n "$NS_A" qdisc replace dev mzbig-a0 root tbf rate 1gbit burst 125000 latency 50ms &&
    tc -n "$NS_B" qdisc replace dev mzbig-b0 root tbf rate 1gbit burst 125000 latency 50ms
}
net_bytes() {  # "TX RX" of host a's end
    echo "$(ip netns exec "$NS_A" cat /sys/class/net/mzbig-a0/statistics/tx_bytes) $(ip netns exec "$NS_A" cat /sys/class/net/mzbig-a0/statistics/rx_bytes)"
}

# ---- the engine and moezip built for it ----
if [ -n "${BIG_LLAMA_BIN:-}" ]; then LLAMA_BIN=$BIG_LLAMA_BIN
else
    say "llama.cpp from the pinned source (cached; a cold build takes about 40 min here: docs/engines.md)"
    mkdir -p "$OUT"
    b=$("$ROOT/tools/engines/build-llamacpp.sh" "$ROOT/.deps/engine/node_modules/node-llama-cpp/llama/gitRelease.bundle" \
        2> "$OUT/llama.cpp-build.log") || die "building llama.cpp failed ($(tail -1 "$OUT/llama.cpp-build.log"))"
    LLAMA_BIN=$b/bin
fi
for p in llama-server ggml-rpc-server; do [ -x "$LLAMA_BIN/$p" ] || die "$LLAMA_BIN/$p is missing (BIG_LLAMA_BIN)"; done
MZ=${BIG_MOEZIP_BUILD:-$(ls -d "$ROOT"/build-engines/llama.cpp-*-default 2>/dev/null | head -1)}
[ -n "$MZ" ] && [ -f "$MZ/libmoezip.so" ] && [ -x "$MZ/bin/moezip-worker" ] ||
    die "moezip built for llama.cpp is missing (run make engines, or set BIG_MOEZIP_BUILD)"
for p in moezip-fixture moezip-pagecache; do [ -x "$ROOT/$BUILD/bin/$p" ] || die "$BUILD/bin/$p is missing (run make)"; done

# ---- the model ----
MODEL=$MODEL_CACHE/a3b-L$LAYERS-q4_K-fast.gguf
mkdir -p "$MODEL_CACHE" "$OUT"
if [ ! -s "$MODEL" ]; then
    say "writing $MODEL (48 layers: 16.9 GB in 26 s of wall time on a 2-core Debian 12 VM, 2026-12-07, commit 9e96205)"
    nice "$ROOT/$BUILD/bin/moezip-fixture" --preset a3b-L4 --n-layer "$LAYERS" --type q4_K --fast-quant -o "$MODEL.tmp" \
        > "$OUT/model.log" 2>&1 || die "could not write the model: $(tail -2 "$OUT/model.log")"
    mv "$MODEL.tmp" "$MODEL"
fi
MODEL_BYTES=$(stat -c %s "$MODEL")
# %.0f, not %d: mawk (Debian's awk) caps %d at 2^31 - 1, which made a 10.5 GB limit 2 GiB
LIMIT=$(awk -v b="$MODEL_BYTES" -v f="$FRACTION" 'BEGIN { printf "%.0f", b * f }')
node -e 'process.exit(Math.abs(process.argv[1] - process.argv[2] * process.argv[3]) <= 1 ? 0 : 1)' "$LIMIT" "$MODEL_BYTES" "$FRACTION" ||
    die "the memory limit $LIMIT is not $FRACTION of $MODEL_BYTES bytes"
CTX=$((CLIENTS * (PROMPT + PREDICT + 64)))

# ---- cleanup of every process, cgroup and namespace this script made ----
PIDS=()
CGS=()
TMPW=$(mktemp -d "${TMPDIR:-/tmp}/moezip-big.XXXXXX")
stop_pid() {  # TERM the process group, INT first for llama-server (it wants a second one while busy)
    local pid=$1
    kill -INT -- "-$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
stop_all() {
    local pid c
    for pid in "${PIDS[@]+"${PIDS[@]}"}"; do stop_pid "$pid"; done
    PIDS=()
    for c in "${CGS[@]+"${CGS[@]}"}"; do cg_remove "$c"; done
    CGS=()
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_all
    net_teardown
    rm -rf "$TMPW"
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench big: interrupted" >&2; exit 130' INT
trap 'echo "bench big: terminated" >&2; exit 143' TERM
net_setup || die "could not make the network namespaces and the shaped veth pair"

# start_host NAME NS CORE LIMIT LOG CMD...: CMD in its own process group, in namespace NS (or none),
# on core CORE, in a new memory cgroup NAME with LIMIT bytes (0: none). Sets HOST_PID.
start_host() {
    local name=$1 ns=$2 core=$3 limit=$4 log=$5 pre=()
    shift 5
    cg_make "$name" "$limit"
    CGS+=("$name")
    # joins the cgroup first: `ip netns exec` mounts another /sys, without /sys/fs/cgroup
    [ -n "$ns" ] && pre+=(ip netns exec "$ns")
    setsid bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$(cg_path "$name")" "${pre[@]+"${pre[@]}"}" taskset -c "$core" \
        "$@" > "$log.out" 2> "$log.err" &
    HOST_PID=$!
    PIDS+=("$HOST_PID")
}
# wait_until PID WHAT LOG CHECK...: CHECK every 100 ms until it succeeds; seconds taken in WAITED.
wait_until() {
    local pid=$1 what=$2 log=$3 t0
    shift 3
    t0=$(date +%s.%N)
    WAITED=null
    for _ in $(seq $((READY_WAIT * 10))); do
        if "$@" 2>/dev/null; then WAITED=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'); return 0; fi
        kill -0 "$pid" 2>/dev/null || { echo "bench big: $what exited before it was ready: $(tail -3 "$log.err")" >&2; return 1; }
        sleep 0.1
    done
    echo "bench big: $what was not ready within $READY_WAIT s" >&2
    return 1
}
health() { curl -s --max-time 2 --unix-socket "$1" http://localhost/health | grep -q '"ok"'; }
# host_stats NAME PID: JSON of a host's peak memory (cgroup max usage, VmHWM) and bytes read from disk
host_stats() {
    local hwm rb
    hwm=$(awk '/^VmHWM:/ {printf "%.0f\n", $2 * 1024}' "/proc/$2/status" 2>/dev/null || true)
    rb=$(awk '/^read_bytes:/ {print $2}' "/proc/$2/io" 2>/dev/null || true)
    echo "{\"cgroup_peak_bytes\": $(cg_peak "$1"), \"rss_peak_bytes\": ${hwm:-null}, \"disk_read_bytes\": ${rb:-null}, \"oom_kills\": $(cg_ooms "$1")}"
}

# record_failure V REP WHY: the JSON line of a variant that never served (a host did not start)
record_failure() {
    node -e 'console.log(JSON.stringify({ variant: process.argv[1], rep: Number(process.argv[2]), ok: false,
        error: process.argv[3], hosts: {}, one: null, many: null }))' "$1" "$2" "$3" >> "$RESULTS"
}

# run_variant V REP: one server (and its remote host), both workloads; appends a JSON line to $RESULTS
run_variant() {
    local v=$1 rep=$2 dir=$OUT/runs/$v-$rep sock limit=0 ns="" srv_env=() srv_args=() remote="" rpid="" spid
    local half=$((N_EXPERT / 2)) lhalf=$((LAYERS / 2)) layers_re ready_r=null ready_s rc=0 w stats_s stats_r="null" net0 net1
    rm -rf "$dir"; mkdir -p "$dir"
    sock=$dir/server.sock
    "$ROOT/$BUILD/bin/moezip-pagecache" evict "$MODEL" > /dev/null || die "moezip-pagecache evict $MODEL failed"
    [ "$v" = single ] || limit=$LIMIT
    [ "$REPACK" = 0 ] && srv_args+=(--no-repack)
    case "$v" in
        rpc)
            ns=$NS_A
            start_host "$v-$rep-b" "$NS_B" 1 "$LIMIT" "$dir/remote" env "LD_LIBRARY_PATH=$LLAMA_BIN" "$LLAMA_BIN/ggml-rpc-server" \
                -t 1 -H "$ADDR_B" -p "$RPC_PORT"
            rpid=$HOST_PID
            wait_until "$rpid" "ggml-rpc-server" "$dir/remote" ip netns exec "$NS_B" bash -c "exec 3<>/dev/tcp/$ADDR_B/$RPC_PORT" ||
                { record_failure "$v" "$rep" "ggml-rpc-server exited or was not ready within $READY_WAIT s (last line: $(tail -1 "$dir/remote.err"))"; return 1; }
            ready_r=$WAITED
            layers_re=$(seq -s '|' "$lhalf" $((LAYERS - 1)))
            srv_args+=(-ngl 0 --rpc "$ADDR_B:$RPC_PORT" -ot "blk\\.($layers_re)\\.ffn_(gate|up|down)_exps\\.weight=RPC0[$ADDR_B:$RPC_PORT]") ;;
        experts1)
            ns=$NS_A
            w=()
            [ "$REPACK" = 1 ] && w+=(--repack)
            start_host "$v-$rep-b" "$NS_B" 1 "$LIMIT" "$dir/remote" "$MZ/bin/moezip-worker" --model "$MODEL" \
                --bind "tcp://$ADDR_B:$WORKER_PORT" --threads 1 --experts "$half-$((N_EXPERT - 1))" --insecure "${w[@]+"${w[@]}"}"
            rpid=$HOST_PID
            wait_until "$rpid" "moezip-worker" "$dir/remote" grep -q '^moezip-worker: serving' "$dir/remote.out" ||
                { record_failure "$v" "$rep" "moezip-worker exited or was not ready within $READY_WAIT s (last line: $(tail -1 "$dir/remote.err"))"; return 1; }
            ready_r=$WAITED
            {
                echo 'mode = "experts"'
                echo "report = \"$dir/report.json\""
                [ "$REPACK" = 0 ] && echo "no_repack = true"
                echo "require_intercept = true"
                echo "[dispatch]"
                echo "timeout_ms = 600000"
                echo "connect_timeout_ms = 20000"
                echo 'on_worker_error = "abort"'
                echo "[experts]"
                echo "local = \"0-$((half - 1))\""
                echo "[[worker]]"
                echo "endpoint = \"tcp://$ADDR_B:$WORKER_PORT\""
                echo "experts = \"$half-$((N_EXPERT - 1))\""
            } > "$dir/moezip.toml"
            srv_env+=("LD_PRELOAD=$MZ/libmoezip.so" "MOEZIP_CONFIG=$dir/moezip.toml") ;;
    esac
    net0=$(net_bytes)
    start_host "$v-$rep-a" "$ns" 0 "$limit" "$dir/server" env "LD_LIBRARY_PATH=$LLAMA_BIN" "${srv_env[@]+"${srv_env[@]}"}" \
        "$LLAMA_BIN/llama-server" -m "$MODEL" --host "$sock" -t 1 --parallel "$CLIENTS" -c "$CTX" --no-webui "${srv_args[@]}"
    spid=$HOST_PID
    wait_until "$spid" "llama-server ($v)" "$dir/server" health "$sock" || rc=1
    ready_s=$WAITED
    if [ "$rc" = 0 ]; then
        node "$ROOT/tools/bench/big-client.js" "$sock" 1 "$PROMPT" "$PREDICT" "$dir/clients1.json" "$BAN" 2> "$dir/clients1.err" || rc=1
        [ "$rc" = 0 ] && { node "$ROOT/tools/bench/big-client.js" "$sock" "$CLIENTS" "$PROMPT" "$PREDICT" "$dir/clientsN.json" "$BAN" \
            2> "$dir/clientsN.err" || rc=1; }
    fi
    net1=$(net_bytes)
    stats_s=$(host_stats "$v-$rep-a" "$spid")
    [ -n "$rpid" ] && stats_r=$(host_stats "$v-$rep-b" "$rpid")
    stop_all
    node -e '
        const fs = require("fs");
        const [v, rep, dir, readyS, readyR, statsS, statsR, net0, net1, limit, rc] = process.argv.slice(1);
        const read = (f) => { try { return JSON.parse(fs.readFileSync(dir + "/" + f, "utf8")); } catch (e) { return null; } };
        const err = (f) => { try { return fs.readFileSync(dir + "/" + f, "utf8").trim().split("\n").pop(); } catch (e) { return ""; } };
        const [tx0, rx0] = net0.split(" ").map(Number), [tx1, rx1] = net1.split(" ").map(Number);
        const report = read("report.json");
        const w = report && report.workers && report.workers[0];
        console.log(JSON.stringify({ variant: v, rep: Number(rep), ok: rc === "0", limit_bytes: Number(limit),
            error: rc === "0" ? null : JSON.parse(statsS).oom_kills > 0 ? "llama-server killed by its memory cgroup OOM killer" :
                statsR !== "null" && JSON.parse(statsR).oom_kills > 0 ? "the remote host killed by its memory cgroup OOM killer" :
                (err("clientsN.err") || err("clients1.err") || err("server.err")),
            hosts: { server: Object.assign({ ready_s: readyS === "null" ? null : Number(readyS) }, JSON.parse(statsS)),
                     remote: readyR === "null" ? null : Object.assign({ ready_s: Number(readyR) }, JSON.parse(statsR)) },
            net_bytes: { tx: tx1 - tx0, rx: rx1 - rx0 },
            rtt_ms_p50_one_row: w ? w.rtt_ms_p50_one_row : null,
            one: read("clients1.json"), many: read("clientsN.json") }));
    ' "$v" "$rep" "$dir" "$ready_s" "$ready_r" "$stats_s" "$stats_r" "$net0" "$net1" "$limit" "$rc" >> "$RESULTS"
    return "$rc"
}

RESULTS=$TMPW/results.jsonl
: > "$RESULTS"
FAILED=0
say "model $MODEL ($MODEL_BYTES bytes, $LAYERS layers), limit $LIMIT bytes per limited host ($FRACTION), cgroup $CG_KIND," \
    "prompt $PROMPT, predict $PREDICT, clients 1 and $CLIENTS, reps $REPS, repack $REPACK"
for rep in $(seq "$REPS"); do
    for v in $VARIANTS; do
        say "rep $rep: $v"
        run_variant "$v" "$rep" || { FAILED=1; say "rep $rep: $v failed (see $OUT/runs/$v-$rep)"; stop_all; }
    done
done
node -e '
    const fs = require("fs");
    const [results, out, model, bytes, layers, limit, fraction, clients, prompt, predict, repack, cg] = process.argv.slice(1);
    const runs = fs.readFileSync(results, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
    fs.writeFileSync(out, JSON.stringify({ meta: { model, model_bytes: Number(bytes), layers: Number(layers),
        limit_bytes: Number(limit), limit_fraction: Number(fraction), clients: Number(clients), prompt_tokens: Number(prompt),
        predict: Number(predict), repack: repack === "1", cgroup: cg, threads_per_host: 1, cores: 2,
        date: new Date().toISOString() }, runs }, null, 1));
' "$RESULTS" "$OUT/big.json" "$MODEL" "$MODEL_BYTES" "$LAYERS" "$LIMIT" "$FRACTION" "$CLIENTS" "$PROMPT" "$PREDICT" "$REPACK" "$CG_KIND"
node "$ROOT/tools/bench/big-table.js" "$OUT/big.json" > "$OUT/big.md" || FAILED=1
cat "$OUT/big.md"
say "results in $OUT/big.json and $OUT/big.md"
exit "$FAILED"
