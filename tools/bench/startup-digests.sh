#!/bin/bash
# The coordinator's identity check before its first token: one worker serving part of the experts
# (loaded once, before the runs), then moezip-run under the preload in experts mode, REPS times each
# with the page cache dropped before the host starts (cold: the worker keeps its experts in its own
# memory) and not (warm). Per run: the report's memory.identity_digest_ms and identity_digest_bytes
# (the expert slices hashed here for the worker's digests), the prefill's time (the first graph,
# where the check runs), the host's wall time and model_skipped_bytes (the worker's experts the
# engine itself never reads).
#
#   tools/bench/startup-digests.sh MODEL.gguf WORKER_EXPERTS LOCAL_EXPERTS
#     e.g. tools/bench/startup-digests.sh m.gguf 8-15 0-7
#
# Environment: REPS (3), PROMPT (32 fixture tokens), OUT (a temporary folder). Needs root
# (/proc/sys/vm/drop_caches) and jq.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:?usage: tools/bench/startup-digests.sh MODEL.gguf WORKER_EXPERTS LOCAL_EXPERTS}
WEX=${2:?worker experts}
LEX=${3:?local experts}
REPS=${REPS:-3}
PROMPT=${PROMPT:-32}
OUT=${OUT:-$(mktemp -d /tmp/moezip-startup-digests.XXXXXX)}
mkdir -p "$OUT"
[ -w /proc/sys/vm/drop_caches ] || { echo "startup-digests.sh: needs root (writes /proc/sys/vm/drop_caches)" >&2; exit 2; }

build/bin/moezip-worker --model "$MODEL" --experts "$WEX" --bind "ipc://$OUT/w.sock" > "$OUT/w.out" 2> "$OUT/w.err" &
WPID=$!
trap 'kill $WPID 2>/dev/null; wait $WPID 2>/dev/null || true' EXIT
until grep -q '^moezip-worker: serving' "$OUT/w.out" 2>/dev/null; do
    kill -0 $WPID 2>/dev/null || { echo "startup-digests.sh: worker exited: $(cat "$OUT/w.err")" >&2; exit 1; }
    sleep 0.05
done
cat > "$OUT/host.toml" <<EOF
mode = "experts"
report = "$OUT/report.json"
report_flush_ms = 0
require_intercept = true
[dispatch]
timeout_ms = 120000
on_worker_error = "abort"
[experts]
local = "$LEX"
[[worker]]
endpoint = "ipc://$OUT/w.sock"
experts = "$WEX"
EOF

echo "model $MODEL ($(stat -c %s "$MODEL") bytes), worker experts $WEX, host experts $LEX, prompt $PROMPT tokens, $REPS runs each"
: > "$OUT/runs.tsv"
for rep in $(seq "$REPS"); do
    for cache in cold warm; do
        [ "$cache" = cold ] && { sync; echo 3 > /proc/sys/vm/drop_caches; }
        s=$(date +%s.%N)
        env LD_PRELOAD="$PWD/build/libmoezip.so" MOEZIP_CONFIG="$OUT/host.toml" \
            build/bin/moezip-run -m "$MODEL" --fixture "$PROMPT" -n 2 --quiet --json "$OUT/run.json" 2> "$OUT/host.$cache.$rep.err"
        e=$(date +%s.%N)
        d_ms=$(jq '.memory.identity_digest_ms' "$OUT/report.json")
        d_b=$(jq '.memory.identity_digest_bytes' "$OUT/report.json")
        skip=$(jq '.memory.model_skipped_bytes // 0' "$OUT/report.json")
        pre=$(jq '.prefill.ms' "$OUT/run.json")
        wall=$(echo "$e - $s" | bc)
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$cache" "$rep" "$d_ms" "$pre" "$wall" "$d_b" >> "$OUT/runs.tsv"
        printf 'run %s %-4s identity digests %8.1f ms over %s bytes; prefill %8.1f ms; host wall %6.2f s; engine skipped %s bytes\n' \
            "$rep" "$cache" "$d_ms" "$d_b" "$pre" "$wall" "$skip"
    done
done
echo "median [min-max] of $REPS runs:"
for cache in cold warm; do
    awk -F'\t' -v c="$cache" '
        function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                       return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        $1 == c { n++; d[n] = $3; p[n] = $4; w[n] = $5 }
        END { md = med(d, n); mp = med(p, n); mw = med(w, n)
              printf "%-4s identity digests %.0f ms [%.0f-%.0f]  prefill %.0f ms [%.0f-%.0f]  host wall %.2f s [%.2f-%.2f]\n", c, md, d[1], d[n], mp, p[1], p[n], mw, w[1], w[n] }' \
        "$OUT/runs.tsv"
done
