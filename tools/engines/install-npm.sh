#!/usr/bin/env bash
# Installs one node-llama-cpp release (prebuilt llama.cpp, CPU only) into the engine cache, once per
# version, and clones the llama.cpp source bundle it ships beside it; prints the package folder
# (the one holding node_modules/). A finished install is marked by a stamp and reused.
#
#   tools/engines/install-npm.sh VERSION      e.g. 3.22.1
#
# Layout: <cache>/npm/node-llama-cpp-VERSION/{node_modules, src (llama.cpp at the bundle's commit)}.
# About 80 MB and well under a minute per release (docs/engines.md).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$1"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "install-npm: bad version '$version'" >&2; exit 2; }
root="$("$here/cache-dir.sh")/npm/node-llama-cpp-$version"
mkdir -p "$root"
exec 9>"$root/.lock"
flock 9
if [ -f "$root/.complete" ]; then echo "$root"; exit 0; fi
echo "install-npm: installing node-llama-cpp@$version into $root" >&2
[ -f "$root/package.json" ] || echo '{"private":true}' > "$root/package.json"
(cd "$root" && npm i -E --omit=optional --no-audit --no-fund --loglevel=error \
   "node-llama-cpp@$version" "@node-llama-cpp/linux-x64@$version" >/dev/null)
rm -rf "$root/src"
git clone -q "$root/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$root/src" 2>/dev/null
touch "$root/.complete"
echo "$root"
