#!/usr/bin/env bash
# A hybrid run on a real NVIDIA GPU: llama.cpp built with CUDA from the pinned source, `-ngl 99
# --cpu-moe` (attention, router and norms on the GPU, the routed experts in system RAM), plain and
# under libmoezip.so in experts mode with one worker pinned to other cores of the same machine.
# Prints prefill and decode speeds (llama-bench) and whether the logits are identical
# (llama-perplexity --kl-divergence-base writes every logit; the files are compared byte for byte).
#
# The worker shares the host's memory bandwidth here: its figure shows the mechanism, not what a
# second machine adds.
#
# Two steps, because the GPU machine can download nothing and takes at most 64 MiB of working tree:
#
#   tools/device/cuda-hybrid.sh prepare   # here: writes build-device/ (ignored by git, ~12 MiB):
#                                         #   debs/*.deb  the Debian packages moezip builds with
#                                         #   llama.cpp-src.tar.xz  the pinned source, the parts a
#                                         #   build needs, without its git history
#   tools/device/cuda-hybrid.sh run       # on the GPU machine (carry build-device): about 8-10 min
#                                         # with 16 cores (CUDA build of one architecture ~5 min)
#
# run needs nvcc, cmake, g++ and make there; it unpacks the .debs into build-device/sysroot (no
# root, nothing installed), builds llama.cpp for the GPU's own compute capability only, builds moezip
# for that build (make ENGINE=... build-engine-tools, no `make deps`), writes an a3b-shaped model
# (moezip-fixture --preset a3b-L4 --type q8_0, 2.5 GB) and measures. Results: $OUT (or
# build-device/out) holds bench-*.json, logits-*.bin, the moezip report and summary.txt.
# Exit status: 0 measured (identical or not: see the summary), 1 a step failed (its log is named).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DEV="$ROOT/build-device"
PINNED_COMMIT=80fb11ac73e66d89eae2c6a91d8a77428fa733ed
# moezip's build dependencies and what libzmq5 needs at run time that a CUDA image may lack
DEBS=(libzmq3-dev libzmq5 cppzmq-dev libxxhash-dev libxxhash0 libtomlplusplus-dev libtomlplusplus3 nlohmann-json3-dev
      libcli11-dev libsodium23 libpgm-5.3-0 libnorm1 libbsd0 libmd0)
# the parts of the llama.cpp tree a build of the library and its tools reads (models/, docs/, tests/ are 116 MiB)
SRC_PARTS=(CMakeLists.txt cmake common ggml include src tools vendor licenses LICENSE)

step() { echo "cuda-hybrid: $*" >&2; }
fail() { echo "cuda-hybrid: FAILED: $*" >&2; exit 1; }

prepare() {
  mkdir -p "$DEV/debs"
  local bundle="$ROOT/.deps/engine/node_modules/node-llama-cpp/llama/gitRelease.bundle" src="$ROOT/.deps/llama.cpp"
  [ -d "$src/.git" ] || fail "$src is not the pinned llama.cpp checkout (make deps makes it from $bundle)"
  [ "$(git -C "$src" rev-parse HEAD)" = "$PINNED_COMMIT" ] || fail "$src is not at $PINNED_COMMIT"
  git -C "$src" archive --format=tar "$PINNED_COMMIT" "${SRC_PARTS[@]}" | xz -T1 -6 > "$DEV/llama.cpp-src.tar.xz"
  (cd "$DEV/debs" && apt-get download "${DEBS[@]}") >/dev/null || fail "apt-get download ${DEBS[*]}"
  step "prepared $DEV: $(du -sh "$DEV" | cut -f1) (carry build-device to the GPU machine)"
}

# unpacks the .debs into a private sysroot and points the compiler, linker and loader at it
use_sysroot() {
  local sys="$DEV/sysroot"
  if [ ! -f "$sys/.done" ]; then
    rm -rf "$sys"; mkdir -p "$sys"
    for d in "$DEV"/debs/*.deb; do dpkg-deb -x "$d" "$sys" || fail "dpkg-deb -x $d"; done
    touch "$sys/.done"
  fi
  local lib="$sys/usr/lib/x86_64-linux-gnu"
  export CPATH="$sys/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # ld's -rpath-link for libzmq's own needs too
}

build_llama() {
  local src="$DEV/llama.cpp" bld="$DEV/llama.cpp/build"
  if [ ! -x "$bld/bin/llama-bench" ]; then
    rm -rf "$src"; mkdir -p "$src"
    tar -xJf "$DEV/llama.cpp-src.tar.xz" -C "$src"
    # A tree without history reports ggml_commit() "unknown", which names no source (the ABI guard
    # refuses it): one local commit gives it a name, and moezip is built for exactly that tree.
    git -C "$src" init -q && git -C "$src" add -A &&
      git -C "$src" -c user.name=moezip -c user.email=moezip@localhost commit -qm "llama.cpp $PINNED_COMMIT (pinned source)"
    local cc; cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
    [ -n "$cc" ] || fail "nvidia-smi did not give the GPU's compute capability"
    step "building llama.cpp with CUDA for sm_$cc (log $DEV/llama-build.log)"
    cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cc" \
      -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
      > "$DEV/llama-build.log" 2>&1 || fail "cmake: $DEV/llama-build.log"
    cmake --build "$bld" -j"$(nproc)" --target llama-bench llama-perplexity llama-completion >> "$DEV/llama-build.log" 2>&1 ||
      fail "llama.cpp build: $DEV/llama-build.log"
  fi
  LLAMA_BIN="$bld/bin"
  LLAMA_SRC="$src"
}

build_moezip() {
  MZ="$ROOT/build-device/moezip"
  if [ ! -x "$MZ/bin/moezip-worker" ]; then
    step "building moezip for it (log $DEV/moezip-build.log)"
    (cd "$ROOT" && tools/engines/engine-config.sh "$LLAMA_BIN/.." "$MZ" "$LLAMA_SRC" &&
       make --no-print-directory -j"$(nproc)" ENGINE="$LLAMA_BIN/.." BUILD="$MZ" build-engine-tools $MZ/bin/moezip-fixture) \
      > "$DEV/moezip-build.log" 2>&1 || fail "moezip build: $DEV/moezip-build.log"
  fi
}

run() {
  OUT="${OUT:-$DEV/out}"; mkdir -p "$OUT"
  command -v nvcc >/dev/null || fail "nvcc (CUDA's compiler) is not on PATH"
  use_sysroot
  build_llama
  build_moezip
  local model="$DEV/a3b-L4-q8_0.gguf" n; n=$(nproc)
  [ -f "$model" ] || "$MZ/bin/moezip-fixture" --preset a3b-L4 --type q8_0 -o "$model" || fail "moezip-fixture"
  # host on the first half of the cores, the worker on the second half
  local half=$(( n / 2 )) host_cores="0-$(( n / 2 - 1 ))" worker_cores="$(( n / 2 ))-$(( n - 1 ))"
  taskset -c "$worker_cores" "$MZ/bin/moezip-worker" --model "$model" --bind tcp://127.0.0.1:5601 --experts 64-127 \
    --threads "$half" > "$OUT/worker.log" 2>&1 &
  WORKER_PID=$!
  trap 'kill "$WORKER_PID" 2>/dev/null; wait "$WORKER_PID" 2>/dev/null' EXIT
  for _ in $(seq 600); do grep -q "serving" "$OUT/worker.log" && break; sleep 0.1; done
  grep -q "serving" "$OUT/worker.log" || fail "the worker did not start: $OUT/worker.log"
  cat > "$OUT/moezip.toml" <<EOF
mode = "experts"
no_repack = true
require_intercept = true
report = "$OUT/moezip-report.%p.json"
[experts]
local = "0-63"
[[worker]]
endpoint = "tcp://127.0.0.1:5601"
experts = "64-127"
EOF
  # llama-bench has no --cpu-moe: -ncmoe 4 keeps the experts of all 4 layers on the CPU (the same
  # placement). It has no --no-repack either: where the CPU repacks q8_0 (AMX), the plain runs use
  # those kernels and moezip (no_repack) the GGUF-layout ones: the logits check below uses the same on both.
  local common=(-m "$model" -ngl 99 -ncmoe 4 -t "$half")
  local bench=(-p 512 -n 64 -r 3 -o json)
  local off=2147483647
  step "llama-bench: plain (op offload on: the GPU takes prefill), plain without op offload, moezip experts1"
  taskset -c "$host_cores" "$LLAMA_BIN/llama-bench" "${common[@]}" "${bench[@]}" > "$OUT/bench-plain.json" 2> "$OUT/bench-plain.err" ||
    fail "$OUT/bench-plain.err"
  GGML_OP_OFFLOAD_MIN_BATCH=$off taskset -c "$host_cores" "$LLAMA_BIN/llama-bench" "${common[@]}" "${bench[@]}" \
    > "$OUT/bench-plain-cpu-experts.json" 2> "$OUT/bench-plain-cpu-experts.err" || fail "$OUT/bench-plain-cpu-experts.err"
  MOEZIP_CONFIG="$OUT/moezip.toml" LD_PRELOAD="$MZ/libmoezip.so" taskset -c "$host_cores" "$LLAMA_BIN/llama-bench" \
    "${common[@]}" "${bench[@]}" > "$OUT/bench-experts1.json" 2> "$OUT/bench-experts1.err" || fail "$OUT/bench-experts1.err"
  # every logit of a 2 x 512-token text, plain (experts on the CPU, as under moezip) and under moezip
  python3 - "$OUT/text.txt" <<'EOF'
import random, sys
random.seed(7)
words = "the a cat dog ran sat on mat big small red blue house tree river over under quickly slowly and then".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(3000)))
EOF
  local ppl=(-m "$model" -ngl 99 --cpu-moe -t "$half" --no-repack -c 512 -b 512 --chunks 2 -f "$OUT/text.txt")
  GGML_OP_OFFLOAD_MIN_BATCH=$off taskset -c "$host_cores" "$LLAMA_BIN/llama-perplexity" "${ppl[@]}" \
    --kl-divergence-base "$OUT/logits-plain.bin" > "$OUT/ppl-plain.log" 2>&1 || fail "$OUT/ppl-plain.log"
  MOEZIP_CONFIG="$OUT/moezip.toml" LD_PRELOAD="$MZ/libmoezip.so" taskset -c "$host_cores" "$LLAMA_BIN/llama-perplexity" \
    "${ppl[@]}" --kl-divergence-base "$OUT/logits-experts1.bin" > "$OUT/ppl-experts1.log" 2>&1 || fail "$OUT/ppl-experts1.log"
  local same=no
  cmp -s "$OUT/logits-plain.bin" "$OUT/logits-experts1.bin" && same=yes
  write_summary "$same"
}

# summary.txt: prefill (pp512) and decode (tg64) tokens/s of each run, and the logits verdict
write_summary() {
  python3 - "$OUT" "$1" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" "$(nproc)" <<'EOF' | tee "$OUT/summary.txt"
import json, sys, os
out, same, gpu, cores = sys.argv[1:5]
def speeds(name):
    rows = json.load(open(os.path.join(out, name)))
    pp = [r["avg_ts"] for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0]
    tg = [r["avg_ts"] for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0]
    return (pp[0] if pp else float("nan"), tg[0] if tg else float("nan"))
runs = [("plain (op offload on)", "bench-plain.json"), ("plain, experts on the CPU split", "bench-plain-cpu-experts.json"),
        ("moezip experts1 (worker on the same machine)", "bench-experts1.json")]
print(f"GPU {gpu}, {cores} cores; a3b-L4 q8_0, -ngl 99 --cpu-moe, host on half the cores, the worker on the other half")
base = speeds("bench-plain-cpu-experts.json")
for label, f in runs:
    pp, tg = speeds(f)
    print(f"{label:48s} prefill {pp:9.1f} tok/s  decode {tg:8.2f} tok/s  (decode {tg / base[1]:.2f}x of the CPU-split plain run)")
print(f"logits identical (2 x 512 tokens, every logit): {same}")
EOF
}

case "${1:-}" in
  prepare) prepare;;
  run) run;;
  *) echo "usage: $0 prepare|run (see the comment at the top)" >&2; exit 2;;
esac
