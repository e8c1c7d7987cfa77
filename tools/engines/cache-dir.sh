#!/usr/bin/env bash
# Prints the root of moezip's engine cache: $MOEZIP_ENGINE_CACHE, else /var/cache/moezip when it
# is (or can be made) writable, else ${XDG_CACHE_HOME:-~/.cache}/moezip. Engines installed or built
# there are keyed by what determines their bits (npm version; llama.cpp commit + CMake flags + CPU),
# so a warm machine reuses them and a fresh one builds them (docs/engines.md).
set -euo pipefail
if [ -n "${MOEZIP_ENGINE_CACHE:-}" ]; then root="$MOEZIP_ENGINE_CACHE"
elif mkdir -p /var/cache/moezip 2>/dev/null && [ -w /var/cache/moezip ]; then root=/var/cache/moezip
else root="${XDG_CACHE_HOME:-$HOME/.cache}/moezip"
fi
mkdir -p "$root"
echo "$root"
