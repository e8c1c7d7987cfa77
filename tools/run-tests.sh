#!/usr/bin/env bash
# make test: runs the GoogleTest suite and ends with the line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
export MOEZIP_SHARED="${MOEZIP_SHARED:-$(cd .. && pwd)/shared}"
BUILD="${BUILD:-build}"
mkdir -p "$BUILD/test-out"
# make SANITIZE=address,undefined test: the instrumented libmoezip.so is preloaded into programs that
# are not instrumented, so the sanitizer runtimes must come first in LD_PRELOAD (ASan refuses to run
# otherwise); leak reports of the unmodified host are not ours to fix.
if [ -n "${SANITIZE:-}" ]; then
  first=""
  case "$SANITIZE" in *address*) first="$(${CXX:-g++} -print-file-name=libasan.so)";; esac
  case "$SANITIZE" in *undefined*) first="${first:+$first:}$(${CXX:-g++} -print-file-name=libubsan.so)";; esac
  export MOEZIP_TEST_PRELOAD_FIRST="$first"
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}"
fi
out="$BUILD/test-out/gtest.json"
rm -f "$out"
# No timing inside tests; the whole suite is bounded here so a hang cannot eat CI's 90 minutes.
timeout --signal=TERM --kill-after=30 1200 "$BUILD/bin/moezip-tests" --gtest_output="json:$out" "$@"
rc=$?
passed=0; failed=0
if [ -f "$out" ]; then
  tests=$(grep -m1 -o '"tests": [0-9]*' "$out" | grep -o '[0-9]*$')
  failed=$(grep -m1 -o '"failures": [0-9]*' "$out" | grep -o '[0-9]*$')
  disabled=$(grep -m1 -o '"disabled": [0-9]*' "$out" | grep -o '[0-9]*$')
  skipped=$(grep -c '"result": "SKIPPED"' "$out")
  passed=$(( tests - failed - ${disabled:-0} - skipped ))
  [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1   # a crash or timeout counts as a failure
  echo "${passed} passed, ${failed} failed, ${skipped} skipped"
else
  echo "0 passed, 1 failed"
fi
[ "$rc" -eq 0 ] && [ "$failed" -eq 0 ]
