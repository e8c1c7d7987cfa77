#!/usr/bin/env bash
# Resolves the engine moezip is built for (make ENGINE=...) and writes what the build needs:
#   BUILD/engine.mk           ENGINE_NAME, ENGINE_KIND, ENGINE_BIN, ENGINE_SRC, ENGINE_LINK for the Makefile
#   BUILD/gen/engine_pin.inc  the engine's identity compiled into moezip (provider_map/engine_pin.cpp)
#   BUILD/engine.json         the same for tests and people
# Files are rewritten only when their content changes (every object depends on engine.mk).
#
#   tools/engines/engine-config.sh ENGINE BUILD [SRC]
#
# ENGINE is either
#   - a folder holding node_modules/node-llama-cpp (prebuilt llama.cpp from npm; its source is the
#     git bundle the package ships, cloned into SRC or the engine cache), or
#   - a llama.cpp CMake build folder (CMakeCache.txt; libraries in bin/; source = its CMAKE_HOME_DIRECTORY).
# The identity is: the ggml version and git commit of the source tree whose headers moezip compiles
# against, and what the engine's libggml-base itself reports (version, commit string, layout probes),
# asked through its public API by engine-probe.c. Exit 1 with a message when ENGINE is neither, is a
# static build, is not a git checkout, or its libraries and source do not belong together.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
engine_in="$1"; build="$2"; src="${3:-}"
die() { echo "moezip: ENGINE=$engine_in: $*" >&2; exit 1; }
[ -d "$engine_in" ] || die "no such folder"
engine="$(cd "$engine_in" && pwd)"
mkdir -p "$build/gen"

if [ -f "$engine/node_modules/node-llama-cpp/package.json" ] || [ -f "$engine/package.json" -a -d "$engine/llama" ]; then
  kind=npm
  pkg="$engine/node_modules/node-llama-cpp"; [ -d "$pkg" ] || pkg="$engine"
  mods="$(dirname "$pkg")"
  version=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$pkg/package.json" | head -1)
  bin="$mods/@node-llama-cpp/linux-x64/bins/linux-x64"
  [ -f "$bin/libggml-base.so" ] || die "no prebuilt linux-x64 binaries ($bin/libggml-base.so): install @node-llama-cpp/linux-x64@$version beside node-llama-cpp"
  bundle="$pkg/llama/gitRelease.bundle"
  [ -f "$bundle" ] || die "node-llama-cpp $version ships no llama.cpp source bundle ($bundle)"
  bundle_commit=$(git ls-remote "$bundle" HEAD | cut -f1)
  name="node-llama-cpp $version"
  if [ -z "$src" ]; then
    if [ "$(git -C "$engine/src" rev-parse HEAD 2>/dev/null || true)" = "$bundle_commit" ]; then src="$engine/src"
    else
      src="$("$here/cache-dir.sh")/src/llama.cpp-${bundle_commit:0:12}"
      if [ "$(git -C "$src" rev-parse HEAD 2>/dev/null || true)" != "$bundle_commit" ]; then
        rm -rf "$src"; mkdir -p "$(dirname "$src")"
        git clone -q "$bundle" "$src" 2>/dev/null
      fi
    fi
  fi
  libllama=$(cd "$bin" && ls libllama.*.so 2>/dev/null | grep -v common | head -1 || true)
  libggml=$(cd "$bin" && ls libggml.*.so 2>/dev/null | head -1 || true)
  [ -n "$libllama" ] && [ -n "$libggml" ] || die "no libllama.*.so / libggml.*.so in $bin"
  link="-L$bin -l:$libllama -l:$libggml -l:libggml-base.so -Wl,-rpath,$bin"
elif [ -f "$engine/CMakeCache.txt" ]; then
  kind=llama.cpp
  cache_get() { sed -n "s/^$1:[A-Z]*=//p" "$engine/CMakeCache.txt" | head -1; }
  [ -n "$src" ] || src="$(cache_get CMAKE_HOME_DIRECTORY)"
  [ "$(cache_get BUILD_SHARED_LIBS)" != OFF ] ||
    die "llama.cpp was built with BUILD_SHARED_LIBS=OFF: ggml is linked into each program and no preload can reach it; rebuild it with shared libraries (the default)"
  bin="$engine/bin"
  [ -f "$bin/libggml-base.so" ] || die "no $bin/libggml-base.so: build llama.cpp first (cmake --build $engine)"
  [ -f "$bin/libllama.so" ] && [ -f "$bin/libggml.so" ] || die "no libllama.so / libggml.so in $bin"
  link="-L$bin -lllama -lggml -lggml-base -Wl,-rpath,$bin"
elif [ -f "$engine/build/CMakeCache.txt" ]; then
  die "a llama.cpp source tree: give its CMake build folder, ENGINE=$engine/build"
else
  die "neither a llama.cpp CMake build folder (no CMakeCache.txt) nor a folder with node_modules/node-llama-cpp"
fi

[ -f "$src/ggml/src/ggml-impl.h" ] || die "its source tree $src has no ggml/src/ggml-impl.h"
source_commit=$(git -C "$src" rev-parse HEAD 2>/dev/null) ||
  die "its source tree $src is not a git checkout: moezip names an engine by the commit of its source"
src_version=$(awk '/set\(GGML_VERSION_(MAJOR|MINOR|PATCH)/ {gsub(/\)/, "", $2); v = v (v == "" ? "" : ".") $2} END {print v}' "$src/ggml/CMakeLists.txt")

cc -O1 -o "$build/gen/engine-probe" "$here/engine-probe.c" -ldl
read -r bin_version bin_commit tensor_overhead graph_overhead < <("$build/gen/engine-probe" "$bin/libggml-base.so") ||
  die "cannot ask $bin/libggml-base.so for its identity"
[ "$bin_version" = "$src_version" ] ||
  die "its libraries report ggml $bin_version but its source tree $src is ggml $src_version: they do not belong together"
if [ "$kind" = llama.cpp ]; then
  case "$bin_commit" in
    unknown) die "its libraries report ggml commit 'unknown' (built outside a git checkout): rebuild llama.cpp from a git checkout so that the build names its source";;
    "${source_commit:0:${#bin_commit}}"|"${source_commit:0:$(( ${#bin_commit} - 6 ))}-dirty") ;;
    *) die "its libraries report ggml commit $bin_commit but the source tree $src is at ${source_commit:0:12}: built from another tree";;
  esac
  name="llama.cpp ${source_commit:0:12}"
fi

write_if_changed() {  # file, content
  if [ ! -f "$1" ] || [ "$(cat "$1")" != "$2" ]; then printf '%s\n' "$2" > "$1"; fi
}
write_if_changed "$build/engine.mk" "# generated by tools/engines/engine-config.sh for ENGINE=$engine; do not edit
ENGINE_NAME := $name
ENGINE_KIND := $kind
ENGINE_DIR := $engine
ENGINE_BIN := $bin
ENGINE_SRC := $src
ENGINE_LINK := $link"
write_if_changed "$build/gen/engine_pin.inc" "// generated by tools/engines/engine-config.sh; do not edit
#define MOEZIP_PIN_NAME \"$name\"
#define MOEZIP_PIN_ENGINE_DIR \"$engine\"
#define MOEZIP_PIN_LIB_DIR \"$bin\"
#define MOEZIP_PIN_GGML_VERSION \"$src_version\"
#define MOEZIP_PIN_SOURCE_COMMIT \"$source_commit\"
#define MOEZIP_PIN_BINARY_COMMIT \"$bin_commit\"
#define MOEZIP_PIN_TENSOR_OVERHEAD $tensor_overhead
#define MOEZIP_PIN_GRAPH_OVERHEAD_2048 $graph_overhead"
write_if_changed "$build/engine.json" "{\"name\": \"$name\", \"kind\": \"$kind\", \"engine\": \"$engine\", \"bin\": \"$bin\", \"src\": \"$src\",
 \"ggml_version\": \"$src_version\", \"source_commit\": \"$source_commit\", \"binary_commit\": \"$bin_commit\",
 \"tensor_overhead\": $tensor_overhead, \"graph_overhead_2048\": $graph_overhead}"
