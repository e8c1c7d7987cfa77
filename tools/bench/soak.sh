#!/usr/bin/env bash
# Soak: a host serving without end under the preload, with worker outages, must keep its memory,
# its report and its stderr bounded. moezip-test-host serve (tests/hosts/scenario_host.cpp: contexts
# answering requests one after another, a failed request counted and the next one started, as a
# server does) runs in experts mode with two workers for SOAK_SECONDS; every SOAK_OUTAGE_EVERY_S one
# worker goes out for SOAK_OUTAGE_S (by turns: SIGSTOP then SIGCONT, or SIGKILL then a restart on the
# same endpoint). The host's VmRSS, the report's size and stderr's line count are sampled every
# SOAK_SAMPLE_S into samples.csv. It fails when
#   - VmRSS grows faster than SOAK_MAX_SLOPE_KIB_MIN (KiB per minute, least squares over the samples
#     after the first SOAK_WARMUP_S, outages included), or
#   - the report is ever larger than SOAK_MAX_REPORT_KIB, or
#   - stderr has more than SOAK_MAX_LINES_MIN lines per minute on average, or
#   - the host did not run to its end (crash, hang) or answered no request.
#
# Environment (all optional):
#   BUILD                   build folder (default build)
#   SOAK_SECONDS            how long the host serves (default 3600)
#   SOAK_OUTAGE_EVERY_S     seconds between outage starts (default 120)
#   SOAK_OUTAGE_S           length of one outage (default 20)
#   SOAK_POLICY             on_worker_error: abort (default: every compute fails while a worker is out)
#                           or local (its part is computed here)
#   SOAK_CONTEXTS           the host's contexts, each serving on its own thread (default 2)
#   SOAK_SAMPLE_S           sampling period (default 5)
#   SOAK_WARMUP_S           samples before this are not in the slope (default 60; model load, first hellos)
#   SOAK_MAX_SLOPE_KIB_MIN  default 64 (3.75 MiB per hour)
#   SOAK_MAX_REPORT_KIB     default 512
#   SOAK_MAX_LINES_MIN      default 30
#   SOAK_OUT                output folder (default $BUILD/bench/soak)
# Files in SOAK_OUT: samples.csv (t_s, rss_kib, report_bytes, stderr_lines, outage), host.err,
# worker-*.err, report.json, host.json, result.json. Exit 0: bounded; 1: a limit broken (a
# "soak: FAIL ..." line says which); 2: it could not run.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build}
BIN=$ROOT/$BUILD/bin
SECONDS_TOTAL=${SOAK_SECONDS:-3600}
OUTAGE_EVERY=${SOAK_OUTAGE_EVERY_S:-120}
OUTAGE_LEN=${SOAK_OUTAGE_S:-20}
POLICY=${SOAK_POLICY:-abort}
CONTEXTS=${SOAK_CONTEXTS:-2}
SAMPLE=${SOAK_SAMPLE_S:-5}
WARMUP=${SOAK_WARMUP_S:-60}
MAX_SLOPE=${SOAK_MAX_SLOPE_KIB_MIN:-64}
MAX_REPORT_KIB=${SOAK_MAX_REPORT_KIB:-512}
MAX_LINES_MIN=${SOAK_MAX_LINES_MIN:-30}
OUT=${SOAK_OUT:-$ROOT/$BUILD/bench/soak}

say() { echo "soak: $*"; }
die() { echo "soak: error: $*" >&2; exit 2; }
case "$POLICY" in abort|local) ;; *) die "SOAK_POLICY must be abort or local, got '$POLICY'";; esac
for v in SECONDS_TOTAL OUTAGE_EVERY OUTAGE_LEN CONTEXTS SAMPLE WARMUP MAX_SLOPE MAX_REPORT_KIB MAX_LINES_MIN; do
    [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v must be a whole number, got '${!v}'"
done
[ "$SAMPLE" -ge 1 ] || die "SOAK_SAMPLE_S must be at least 1"
[ "$OUTAGE_LEN" -lt "$OUTAGE_EVERY" ] || die "SOAK_OUTAGE_S ($OUTAGE_LEN) must be shorter than SOAK_OUTAGE_EVERY_S ($OUTAGE_EVERY)"
for b in moezip-fixture moezip-worker moezip-test-host; do [ -x "$BIN/$b" ] || die "$BIN/$b is missing: make all first"; done
[ -e "$ROOT/$BUILD/libmoezip.so" ] || die "$ROOT/$BUILD/libmoezip.so is missing: make all first"

rm -rf "$OUT"; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
MODEL=$ROOT/$BUILD/fixtures/soak-tiny-q8_0.gguf
if [ ! -s "$MODEL" ]; then
    mkdir -p "$(dirname "$MODEL")"
    "$BIN/moezip-fixture" --preset tiny --type q8_0 -o "$MODEL.tmp" >/dev/null && mv "$MODEL.tmp" "$MODEL" || die "moezip-fixture failed"
fi

PIDS=()   # worker pids by index
HOST=""
cleanup() {
    [ -n "$HOST" ] && kill -KILL "$HOST" 2>/dev/null
    for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
}
trap cleanup EXIT

EXPERTS=("4-5" "6-7")
start_worker() {  # index
    local i=$1
    "$BIN/moezip-worker" --model "$MODEL" --bind "ipc://$OUT/w$i.sock" --experts "${EXPERTS[$i]}" --threads 1 \
        >> "$OUT/worker-$i.out" 2>> "$OUT/worker-$i.err" &
    PIDS[$i]=$!
}
for i in 0 1; do start_worker "$i"; done
for i in 0 1; do
    for _ in $(seq 1 300); do [ -S "$OUT/w$i.sock" ] && break; sleep 0.1; done
    [ -S "$OUT/w$i.sock" ] || die "worker $i did not come up: $(tail -3 "$OUT/worker-$i.err")"
done

cat > "$OUT/moezip.toml" <<TOML
mode = "experts"
no_repack = true
report = "$OUT/report.json"
[experts]
local = "0-3"
[dispatch]
on_worker_error = "$POLICY"
timeout_ms = 2000
[[worker]]
endpoint = "ipc://$OUT/w0.sock"
experts = "4-5"
[[worker]]
endpoint = "ipc://$OUT/w1.sock"
experts = "6-7"
TOML

LD_PRELOAD="$ROOT/$BUILD/libmoezip.so" MOEZIP_CONFIG="$OUT/moezip.toml" \
    "$BIN/moezip-test-host" serve -m "$MODEL" --contexts "$CONTEXTS" -n 32 --fixture 24 \
    --for-ms $((SECONDS_TOTAL * 1000)) --json "$OUT/host.json" > "$OUT/host.out" 2> "$OUT/host.err" &
HOST=$!
say "host $HOST serving for $SECONDS_TOTAL s, outages of $OUTAGE_LEN s every $OUTAGE_EVERY s, on_worker_error = $POLICY; samples in $OUT/samples.csv"

echo "t_s,rss_kib,report_bytes,stderr_lines,outage" > "$OUT/samples.csv"
t0=$(date +%s)
next_outage=$OUTAGE_EVERY
outage_end=-1
outage_n=0
out_worker=-1
max_report=0
while kill -0 "$HOST" 2>/dev/null; do
    now=$(( $(date +%s) - t0 ))
    if [ "$outage_end" -lt 0 ] && [ "$now" -ge "$next_outage" ] && [ "$now" -lt $((SECONDS_TOTAL - OUTAGE_LEN)) ]; then
        out_worker=$((outage_n % 2))
        if [ $((outage_n % 4)) -lt 2 ]; then
            kill -STOP "${PIDS[$out_worker]}"; how=stop
        else
            kill -KILL "${PIDS[$out_worker]}"; wait "${PIDS[$out_worker]}" 2>/dev/null; how=kill
        fi
        say "t=${now}s outage $((outage_n + 1)): worker $out_worker ($how)"
        outage_end=$((now + OUTAGE_LEN)); outage_how=$how
        outage_n=$((outage_n + 1)); next_outage=$((next_outage + OUTAGE_EVERY))
    fi
    if [ "$outage_end" -ge 0 ] && [ "$now" -ge "$outage_end" ]; then
        if [ "$outage_how" = stop ]; then kill -CONT "${PIDS[$out_worker]}"; else rm -f "$OUT/w$out_worker.sock"; start_worker "$out_worker"; fi
        say "t=${now}s worker $out_worker back"
        outage_end=-1
    fi
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$HOST/status" 2>/dev/null)
    [ -n "$rss" ] || break
    rep=$(stat -c %s "$OUT/report.json" 2>/dev/null || echo 0)
    [ "$rep" -gt "$max_report" ] && max_report=$rep
    lines=$(wc -l < "$OUT/host.err")
    echo "$now,$rss,$rep,$lines,$([ "$outage_end" -ge 0 ] && echo 1 || echo 0)" >> "$OUT/samples.csv"
    sleep "$SAMPLE"
done
wait "$HOST"; host_rc=$?
HOST=""
elapsed=$(( $(date +%s) - t0 ))
for i in 0 1; do kill -CONT "${PIDS[$i]}" 2>/dev/null; kill -TERM "${PIDS[$i]}" 2>/dev/null; wait "${PIDS[$i]}" 2>/dev/null; done
PIDS=()

SOAK_POLICY_ABORT=$([ "$POLICY" = abort ] && echo 1 || echo 0) node - "$OUT" "$WARMUP" "$MAX_SLOPE" "$MAX_REPORT_KIB" "$MAX_LINES_MIN" "$host_rc" "$elapsed" "$outage_n" <<'JS'
const fs = require("fs");
const [out, warmup, maxSlope, maxReportKib, maxLinesMin, hostRc, elapsed, outages] = process.argv.slice(2).map((v, i) => i ? Number(v) : v);
const rows = fs.readFileSync(out + "/samples.csv", "utf8").trim().split("\n").slice(1).map(l => l.split(",").map(Number));
const fit = rows.filter(r => r[0] >= warmup);
let slope = null;  // KiB per minute, least squares
if (fit.length >= 3) {
  const n = fit.length, mx = fit.reduce((s, r) => s + r[0], 0) / n, my = fit.reduce((s, r) => s + r[1], 0) / n;
  let sxy = 0, sxx = 0;
  for (const r of fit) { sxy += (r[0] - mx) * (r[1] - my); sxx += (r[0] - mx) ** 2; }
  slope = sxx > 0 ? sxy / sxx * 60 : null;
}
const maxReport = Math.max(0, ...rows.map(r => r[2]));
const lines = rows.length ? rows[rows.length - 1][3] : 0;
let host = {};
try { host = JSON.parse(fs.readFileSync(out + "/host.json", "utf8")).serve || {}; } catch (e) {}
let report = {};
try { report = JSON.parse(fs.readFileSync(out + "/report.json", "utf8")); } catch (e) {}
const res = {
  seconds: elapsed, outages, samples: rows.length,
  rss_kib_first: fit.length ? fit[0][1] : null, rss_kib_last: fit.length ? fit[fit.length - 1][1] : null,
  rss_kib_max: Math.max(0, ...rows.map(r => r[1])), rss_slope_kib_per_min: slope,
  report_bytes_max: maxReport, report_bytes_final: fs.existsSync(out + "/report.json") ? fs.statSync(out + "/report.json").size : null,
  stderr_lines: lines, stderr_lines_per_min: elapsed > 0 ? lines / (elapsed / 60) : null,
  requests_ok: host.served ?? null, requests_failed: host.failed ?? null,
  logits_outputs: report.logits ? report.logits.count : null, errors: report.errors ? report.errors.count : null,
  lines_suppressed: report.log ? report.log.lines_suppressed : null, host_exit: hostRc,
  limits: { slope_kib_per_min: maxSlope, report_kib: maxReportKib, stderr_lines_per_min: maxLinesMin, warmup_s: warmup },
};
const fails = [];
// with on_worker_error = "abort" the computes failed during outages make the exit status 4 (docs/config.md)
const expectedRc = res.requests_failed > 0 && process.env.SOAK_POLICY_ABORT === "1" ? 4 : 0;
if (hostRc !== expectedRc) fails.push(`the host exited with ${hostRc}, not ${expectedRc} (see host.err)`);
if (!(res.requests_ok > 0)) fails.push("the host answered no request");
if (slope === null) fails.push(`too few samples after ${warmup} s to fit a slope`);
else if (slope > maxSlope) fails.push(`VmRSS grows ${slope.toFixed(1)} KiB/min, more than ${maxSlope}`);
if (maxReport > maxReportKib * 1024) fails.push(`the report reached ${maxReport} bytes, more than ${maxReportKib} KiB`);
if (res.stderr_lines_per_min !== null && res.stderr_lines_per_min > maxLinesMin) fails.push(`stderr: ${res.stderr_lines_per_min.toFixed(1)} lines/min, more than ${maxLinesMin}`);
res.ok = fails.length === 0; res.failures = fails;
fs.writeFileSync(out + "/result.json", JSON.stringify(res, null, 1) + "\n");
console.log(`soak: ${elapsed} s, ${outages} outages, ${res.requests_ok} requests answered, ${res.requests_failed} failed; ` +
            `VmRSS ${res.rss_kib_first} -> ${res.rss_kib_last} KiB (max ${res.rss_kib_max}), slope ${slope === null ? "n/a" : slope.toFixed(1)} KiB/min; ` +
            `report at most ${maxReport} bytes; stderr ${lines} lines; ${res.lines_suppressed} lines suppressed`);
for (const f of fails) console.log("soak: FAIL " + f);
process.exit(fails.length ? 1 : 0);
JS
