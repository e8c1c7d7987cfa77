#!/usr/bin/env bash
# make fuzz: runs each libFuzzer target for FUZZ_SECONDS (default 300) and says what it found.
#   tools/run-fuzz.sh [target ...]      (targets: config request reply; default: all)
# Inputs that add coverage accumulate in build/fuzz/corpus/<target>/ (kept between runs, seeded from
# tests/fuzz/corpus/<target>/); crashing inputs are written to build/fuzz/artifacts/<target>/.
# Exit status 1 when any target found a crash. See docs/internals/fuzzing.md.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD:-build}"
FUZZ_SECONDS="${FUZZ_SECONDS:-300}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config request reply)
failed=0
for t in "${targets[@]}"; do
  bin="$BUILD/fuzz/${t}_fuzz"
  if [ ! -x "$bin" ]; then echo "fuzz: $bin is missing (make builds it)"; failed=1; continue; fi
  corpus="$BUILD/fuzz/corpus/$t"; artifacts="$BUILD/fuzz/artifacts/$t"; log="$BUILD/fuzz/$t.log"
  mkdir -p "$corpus" "$artifacts"
  extra=()
  [ -f "tests/fuzz/$t.dict" ] && extra+=("-dict=tests/fuzz/$t.dict")
  echo "fuzz: $t for ${FUZZ_SECONDS} s (log $log)"
  "$bin" -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
      -artifact_prefix="$artifacts/" "${extra[@]+"${extra[@]}"}" "$corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  crash=$(grep -o 'Test unit written to .*' "$log" | sed 's/Test unit written to //' || true)
  echo "fuzz: $t: ${runs:-?} executions, corpus $(ls "$corpus" | wc -l) inputs, exit $rc${crash:+, crashing input $crash}"
  if [ "$rc" -ne 0 ]; then
    failed=1
    grep -m1 -E 'runtime error|ERROR: |fuzz invariant broken' "$log" || true
  fi
done
exit $failed
