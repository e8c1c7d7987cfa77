#!/usr/bin/env bash
# Runs an unmodified llama-server twice on the same model, once plain and once under libmoezip.so,
# queries both with the same OpenAI-compatible requests at temperature 0 (curl), and says whether
# every answer is the same: `identical: yes|no`. Used by the README's two-machine quick start and by
# tests/engine/server_test.cpp.
#
#   tools/server-check.sh --server PATH/llama-server --preload PATH/libmoezip.so --config moezip.toml
#                         --model M.gguf [--out DIR] [-- EXTRA llama-server ARGS]
#
# The workers of the config must already serve. Each server listens on a unix socket in DIR (no port
# to collide), with --parallel 2, one thread, --no-repack (GGUF-layout experts, as moezip needs) and
# --chat-template chatml (models without a usable template get HTTP 500 for chat otherwise). Requests:
# a completion, a chat completion, a streamed completion (SSE), and two completions at the same time
# (both slots busy). Each server is stopped with SIGINT (a second one after 10 s: llama-server needs
# it while requests are in flight); the preloaded server's moezip report (written at its exit, the
# config's `report`, %p = its pid) is summarised with tools/run-demo-summary.js.
# Files in DIR: {plain,moezip}/{completion,chat,stream,parallel_a,parallel_b}.txt, server logs,
# moezip/report.json. Exit 0: identical: yes; 1: identical: no, or a server failed; 2: bad usage.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
server="" preload="" config="" model="" out="server-check.out"
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --server) server="$2"; shift 2;;
    --preload) preload="$2"; shift 2;;
    --config) config="$2"; shift 2;;
    --model) model="$2"; shift 2;;
    --out) out="$2"; shift 2;;
    --) shift; extra=("$@"); break;;
    *) echo "server-check: unknown argument $1 (see the comment at the top of $0)" >&2; exit 2;;
  esac
done
for v in server preload config model; do
  [ -n "${!v}" ] || { echo "server-check: --$v is required" >&2; exit 2; }
  [ -e "${!v}" ] || { echo "server-check: --$v ${!v}: no such file" >&2; exit 2; }
done
command -v curl >/dev/null || { echo "server-check: curl is not installed" >&2; exit 2; }
preload="$(cd "$(dirname "$preload")" && pwd)/$(basename "$preload")"
config="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"
mkdir -p "$out"; out="$(cd "$out" && pwd)"
SERVER_PID=""
cleanup() { [ -n "$SERVER_PID" ] && kill -KILL "$SERVER_PID" 2>/dev/null; }
trap cleanup EXIT

# post NAME PATH JSON: one request, the answer's text (or the error) in $dir/NAME.txt
post() {
  local name=$1 path=$2 body=$3
  curl -sS --max-time 300 --unix-socket "$sock" -H 'Content-Type: application/json' -d "$body" \
       "http://localhost$path" > "$dir/$name.json" 2> "$dir/$name.curl-err"
  node -e '
    const fs = require("fs"); const raw = fs.readFileSync(process.argv[1], "utf8");
    let text = "";
    if (raw.startsWith("data:")) {   // server-sent events: the text of every chunk, in order
      for (const line of raw.split("\n")) {
        const d = line.replace(/^data: ?/, "");
        if (!line.startsWith("data:") || d === "[DONE]") continue;
        const c = JSON.parse(d).choices[0]; text += c.text !== undefined ? c.text : (c.delta.content || "");
      }
    } else {
      const j = JSON.parse(raw);
      if (j.error) { text = "ERROR " + JSON.stringify(j.error); }
      else { const c = j.choices[0]; text = c.text !== undefined ? c.text : c.message.content; }
    }
    fs.writeFileSync(process.argv[2], text);' "$dir/$name.json" "$dir/$name.txt" 2>> "$dir/$name.curl-err" ||
    echo "ERROR unreadable answer: $(head -c 300 "$dir/$name.json")" > "$dir/$name.txt"
}

ask_all() {
  local common='"temperature": 0, "seed": 42, "max_tokens": 48'
  post completion /v1/completions "{\"prompt\": \"Once upon a time\", $common}"
  post chat /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"Tell me a story about a cat.\"}], $common}"
  post stream /v1/completions "{\"prompt\": \"The little girl\", \"stream\": true, $common}"
  post parallel_a /v1/completions "{\"prompt\": \"Tom and Lily went\", $common}" &
  local a=$!
  post parallel_b /v1/completions "{\"prompt\": \"One day, a big dog\", $common}"
  wait "$a"
}

# run NAME [VAR=VALUE...]: one server with that environment, all requests, SIGINT; its exit status in $rc
run() {
  local name=$1; shift
  dir="$out/$name"; sock="$dir/server.sock"
  rm -rf "$dir"; mkdir -p "$dir"
  env "$@" "$server" -m "$model" --host "$sock" -t 1 --parallel 2 -c 2048 --no-repack --chat-template chatml \
      --no-webui "${extra[@]+"${extra[@]}"}" > "$dir/server.out" 2> "$dir/server.err" &
  SERVER_PID=$!
  local i
  for i in $(seq 1 600); do   # up to 60 s for the model to load
    curl -s --max-time 1 --unix-socket "$sock" http://localhost/health 2>/dev/null | grep -q '"ok"' && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "server-check: $name llama-server exited at start; its stderr (last lines):" >&2
    tail -15 "$dir/server.err" | sed 's/^/  /' >&2; rc=1; SERVER_PID=""; return
  fi
  ask_all
  kill -INT "$SERVER_PID"
  for i in $(seq 1 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$SERVER_PID" 2>/dev/null && kill -INT "$SERVER_PID"   # in flight: llama-server wants a second one
  rc=0
  wait "$SERVER_PID" || rc=$?
  SERVER_PID=""
}

echo "server-check: $server, model $model"
run plain
plain_rc=$rc
# (tests of `make SANITIZE=...` put the sanitizer runtimes first: MOEZIP_TEST_PRELOAD_FIRST)
run moezip LD_PRELOAD="${MOEZIP_TEST_PRELOAD_FIRST:+$MOEZIP_TEST_PRELOAD_FIRST:}$preload" MOEZIP_CONFIG="$config"
moezip_rc=$rc
pid=$(grep -o 'moezip\[[0-9]*\]' "$out/moezip/server.err" | head -1 | tr -dc 0-9)
report=$(sed -n 's/^ *report *= *"\(.*\)".*/\1/p' "$config" | head -1)
report="${report:-moezip-report.%p.json}"
report="${report//%p/$pid}"
[ -f "$report" ] && cp "$report" "$out/moezip/report.json"

same=yes
for q in completion chat stream parallel_a parallel_b; do
  a="$(cat "$out/plain/$q.txt" 2>/dev/null)"; b="$(cat "$out/moezip/$q.txt" 2>/dev/null)"
  verdict=same
  if [ "$a" != "$b" ]; then verdict=DIFFERENT; same=no; fi
  case "$a$b" in ERROR*|*ERROR\ *) verdict="$verdict (error)"; same=no;; esac
  [ -n "$a" ] || { verdict="$verdict (empty)"; same=no; }
  printf '  %-10s %s: %s\n' "$q" "$verdict" "$(head -c 100 <<< "$a" | tr '\n' ' ')"
  [ "$verdict" = same ] || printf '  %-10s moezip:    %s\n' "" "$(head -c 100 <<< "$b" | tr '\n' ' ')"
done
echo "  exit status after SIGINT: plain $plain_rc, moezip $moezip_rc"
[ "$plain_rc" = 0 ] && [ "$moezip_rc" = 0 ] || same=no
if [ -f "$out/moezip/report.json" ]; then
  echo "evidence from $report:"
  node "$ROOT/tools/run-demo-summary.js" "$out/moezip/report.json" || same=no
else
  echo "server-check: no moezip report at $report (pid $pid): was libmoezip.so loaded?" >&2; same=no
fi
echo "identical: $same"
[ "$same" = yes ]
