#!/usr/bin/env bash
# Builds llama.cpp from a git bundle or checkout with the default CMake flags (plus GGML_RPC), once
# per (commit, flags, CPU), into the engine cache; prints the build directory (its bin/ holds the
# libraries and programs). A finished build is marked by a stamp and reused; a failed or interrupted
# one is rebuilt. Concurrent callers wait on a lock instead of building twice.
#
#   tools/engines/build-llamacpp.sh SOURCE [TARGET...]
#
# SOURCE: a git bundle (node-llama-cpp's llama/gitRelease.bundle) or a llama.cpp git checkout.
# TARGETs: ninja targets (default: the programs the tests run). At -j2 on a 2-core VM under a load
# average of 5-10 this took 37 minutes of wall time (docs/engines.md); less on an idle machine.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src_in="$1"; shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(llama-server llama-cli llama-completion llama-simple llama-bench ggml-rpc-server)
JOBS="${MOEZIP_ENGINE_JOBS:-2}"
FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF
       -DLLAMA_BUILD_TESTS=OFF -DGGML_RPC=ON)

commit=$(git -C "$src_in" rev-parse HEAD 2>/dev/null || git ls-remote "$src_in" HEAD | cut -f1)
[ -n "$commit" ] || { echo "build-llamacpp: $src_in is neither a git bundle nor a checkout" >&2; exit 1; }
# GGML_NATIVE (the default) compiles for this CPU: the CPU model and flags are part of the key.
cpu=$(grep -m1 '^model name' /proc/cpuinfo; grep -m1 '^flags' /proc/cpuinfo)
key=$(printf '%s\n' "${FLAGS[*]}" "$cpu" | sha256sum | cut -c1-10)
root="$("$here/cache-dir.sh")/llama.cpp/${commit:0:12}-$key"
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
stamp="$root/.complete"
want="${targets[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then echo "$root/build"; exit 0; fi

if [ ! -d "$root/src/.git" ] || [ "$(git -C "$root/src" rev-parse HEAD 2>/dev/null)" != "$commit" ]; then
  rm -rf "$root/src"
  git clone -q "$src_in" "$root/src"
  git -C "$root/src" -c advice.detachedHead=false checkout -q "$commit"
fi
echo "build-llamacpp: building llama.cpp ${commit:0:12} (${FLAGS[*]}) at -j$JOBS into $root/build: 37 min on a loaded 2-core VM (docs/engines.md), less when idle" >&2
start=$(date +%s)
cmake -S "$root/src" -B "$root/build" "${FLAGS[@]}" >"$root/cmake.log" 2>&1 \
  || { tail -30 "$root/cmake.log" >&2; exit 1; }
cmake --build "$root/build" -j"$JOBS" --target "${targets[@]}" >"$root/build.log" 2>&1 \
  || { tail -30 "$root/build.log" >&2; exit 1; }
echo "build-llamacpp: built in $(( $(date +%s) - start )) s" >&2
echo "$(( $(date +%s) - start ))" > "$root/build-seconds"
echo "$want" > "$stamp"
echo "$root/build"
