#!/usr/bin/env bash
# make engines: installs or builds each test engine (cached, docs/engines.md), builds moezip for it
# into build-engines/<name>/ (make ENGINE=... BUILD=... engine-tools: libmoezip.so, moezip-run,
# moezip-worker) and writes BUILD/engines.json, which tests/engine/engines_test.cpp reads.
#
#   tools/engines/prepare.sh BUILD SPEC...
#
# SPEC: npm:VERSION           node-llama-cpp VERSION from the npm registry (tools/engines/install-npm.sh)
#       llama.cpp:pinned      llama.cpp built with default flags from the pinned engine's source bundle
#       llama.cpp:SOURCE      the same from another bundle or checkout (tools/engines/build-llamacpp.sh)
# No SPEC: writes an empty list (the engine tests then skip). Exit 1 when an engine fails to install or
# build, or moezip fails to build for it; the message names it.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tools/engines
build="$1"; shift
MAKE="${MAKE:-make}"
mkdir -p build-engines
entries=()
for spec in "$@"; do
  start=$(date +%s)
  case "$spec" in
    npm:*)
      engine=$("$here/install-npm.sh" "${spec#npm:}")
      name="npm-${spec#npm:}";;
    llama.cpp:*)
      src="${spec#llama.cpp:}"
      [ "$src" = pinned ] && src=.deps/engine/node_modules/node-llama-cpp/llama/gitRelease.bundle
      engine=$("$here/build-llamacpp.sh" "$src")
      commit=$(git -C "$engine/../src" rev-parse HEAD)
      name="llama.cpp-${commit:0:12}-default";;
    *) echo "engines: unknown engine spec '$spec' (npm:VERSION, llama.cpp:pinned or llama.cpp:SOURCE)" >&2; exit 1;;
  esac
  out="build-engines/$name${SANITIZE:+-san}"   # make SANITIZE=...: instrumented builds apart
  if ! "$MAKE" --no-print-directory ENGINE="$engine" BUILD="$out" engine-tools > "$out.log" 2>&1; then
    tail -30 "$out.log" >&2
    echo "engines: building moezip for $spec ($engine) failed: $out.log" >&2
    exit 1
  fi
  echo "engines: $spec ready in $out ($(( $(date +%s) - start )) s)" >&2
  entries+=("{\"spec\": \"$spec\", \"name\": \"$name\", \"build\": \"$PWD/$out\", \"engine\": $(cat "$out/engine.json")}")
done
mkdir -p "$build"
{ echo '{"engines": ['; (IFS=,; echo "${entries[*]:-}"); echo ']}'; } > "$build/engines.json.tmp"
mv "$build/engines.json.tmp" "$build/engines.json"
