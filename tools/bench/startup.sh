#!/bin/bash
# Worker start-up against the disk: the time from starting moezip-worker to its ready line, each run
# after dropping the page cache, against the time `cat` takes to read the whole model file from a
# cold page cache (a superset of the worker's bytes: the file's other tensors are a few percent).
#
#   tools/bench/startup.sh MODEL.gguf [MODE ...]
#
# MODE: default (pread into memory), mmap (--mmap), repack (--repack), or any of them followed by
# ":FLAGS" (comma-separated worker flags, e.g. "default:--experts,0-63") and/or "@BINARY" (another
# moezip-worker, e.g. "default@/old/build/bin/moezip-worker": an older build in the same alternation).
# Default: default mmap.
# Environment: REPS (3) runs of each mode, alternating with the others and each preceded by its own
# cold cat; WORKER (build/bin/moezip-worker); OUT (a temporary folder) keeps every run's stderr.
# Needs root (writes /proc/sys/vm/drop_caches). Prints one line per run and then, per mode, the
# median and range of the worker's time, of cat's, and of their ratio.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:?usage: tools/bench/startup.sh MODEL.gguf [MODE ...]}
shift
MODES=("$@")
[ ${#MODES[@]} -gt 0 ] || MODES=(default mmap)
REPS=${REPS:-3}
WORKER=${WORKER:-build/bin/moezip-worker}
OUT=${OUT:-$(mktemp -d /tmp/moezip-startup.XXXXXX)}
mkdir -p "$OUT"
[ -w /proc/sys/vm/drop_caches ] || { echo "startup.sh: needs root (writes /proc/sys/vm/drop_caches)" >&2; exit 2; }

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }

cat_seconds() {
    drop_caches
    local s; s=$(now)
    cat "$MODEL" > /dev/null
    echo "$(now) - $s" | bc
}

# worker_seconds MODE TAG: seconds from exec to the ready line on stdout (polled every 10 ms)
worker_seconds() {
    local spec=${1%%@*} bin=$WORKER extra="" flags=()
    [[ $1 == *@* ]] && bin=${1#*@}
    local mode=${spec%%:*}
    [[ $spec == *:* ]] && extra=${spec#*:}
    case $mode in
        default) ;;
        mmap) flags+=(--mmap) ;;
        repack) flags+=(--repack) ;;
        *) echo "startup.sh: unknown mode $mode" >&2; exit 2 ;;
    esac
    [ -n "$extra" ] && IFS=, read -r -a more <<< "$extra" && flags+=("${more[@]}")
    drop_caches
    local s pid; s=$(now)
    "$bin" --model "$MODEL" --bind "ipc://$OUT/w.sock" "${flags[@]}" > "$OUT/$2.out" 2> "$OUT/$2.err" &
    pid=$!
    until grep -q '^moezip-worker: serving' "$OUT/$2.out" 2>/dev/null; do
        kill -0 "$pid" 2>/dev/null || { echo "startup.sh: worker exited: $(cat "$OUT/$2.err")" >&2; exit 1; }
        sleep 0.01
    done
    local e; e=$(now)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$e - $s" | bc
}

echo "model $MODEL ($(stat -c %s "$MODEL") bytes), $REPS runs per mode, $(nproc) cores, $(uname -r); runs in $OUT"
: > "$OUT/runs.tsv"
for rep in $(seq "$REPS"); do
    for m in "${MODES[@]}"; do
        c=$(cat_seconds)
        tag="${m//[^a-zA-Z0-9_-]/_}.$rep"
        w=$(worker_seconds "$m" "$tag")
        summary=$(grep -h '^moezip-worker: loaded' "$OUT/$tag.err" | sed 's/^moezip-worker: //' || true)
        printf '%s\t%s\t%s\t%s\n' "$m" "$rep" "$c" "$w" >> "$OUT/runs.tsv"
        printf 'run %s %-10s cat %.2f s  worker %.2f s  ratio %.2f  (%s)\n' "$rep" "$m" "$c" "$w" "$(echo "$w / $c" | bc -l)" "$summary"
    done
done
echo "median [min-max] of $REPS runs:"
for m in "${MODES[@]}"; do
    awk -F'\t' -v m="$m" '
        function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                       return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        $1 == m { n++; c[n] = $3; w[n] = $4; r[n] = $4 / $3 }
        END { mc = med(c, n); mw = med(w, n); mr = med(r, n)
              printf "%-10s worker %.2f s [%.2f-%.2f]  cat %.2f s [%.2f-%.2f]  worker/cat %.2f [%.2f-%.2f]\n", m, mw, w[1], w[n], mc, c[1], c[n], mr, r[1], r[n] }' \
        "$OUT/runs.tsv"
done
