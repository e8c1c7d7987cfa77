# Sourced by tools/run-bench.sh: the incumbent's variants, llama.cpp's RPC backend timed by llama-bench
# (rpc_single, rpc_experts, rpc_tensor; the programs of $LLAMA_BIN, llama.cpp built from the pinned
# engine's source with -DGGML_RPC=ON). Uses the driver's PIN, TMPW, WORKER_PIDS, W_EP, WORKER_WAIT and wait_ready.

# start_rpc_server IDX CORE NETNS HOST: ggml-rpc-server with one thread on HOST:(RPC_PORT + IDX), in its
# own process group (stopped like a worker); W_EP[IDX] = HOST:PORT once it accepts connections (its
# stdout is block-buffered into a file, so its "endpoint" line cannot be waited for).
start_rpc_server() {
    local i=$1 core=$2 ns=$3 host=$4 port=$((RPC_PORT + $1)) pre=() nsx=() pid
    [ -n "$ns" ] && pre+=(ip netns exec "$ns") && nsx+=(ip netns exec "$ns")
    [ "$PIN" = 1 ] && pre+=(taskset -c "$core")
    rm -f "$TMPW/w$i.out" "$TMPW/w$i.err"
    setsid "${pre[@]+"${pre[@]}"}" env "LD_LIBRARY_PATH=$LLAMA_BIN" "$LLAMA_BIN/ggml-rpc-server" -t 1 -H "$host" -p "$port" \
        > "$TMPW/w$i.out" 2> "$TMPW/w$i.err" &
    pid=$!
    WORKER_PIDS+=("$pid")
    # ready when it accepts a connection; one that closes at once is harmless (the server logs it)
    wait_ready "$pid" "rpc server $i on $host:$port" "$TMPW/w$i.err" \
        "${nsx[@]+"${nsx[@]}"}" bash -c "exec 3<>/dev/tcp/$host/$port" || return 1
    W_EP[$i]="$host:$port"
}

# rpc_bench_args VARIANT SERVERS...: llama-bench's flags for a variant besides model, lengths and output.
# -ngl 0 keeps every layer on this host's CPU; -ot then places only the expert tensors of every layer
# on the server (the incumbent's way to put experts on another host); -sm tensor splits every tensor
# over the RPC devices (llama.cpp skips the CPU device for tensor parallelism).
rpc_bench_args() {
    local v=$1; shift
    case "$v" in
        rpc_single) echo "-ngl 0" ;;
        rpc_experts) echo "-ngl 0 --rpc $1 -ot ffn_(gate|up|down)_exps\\.weight=RPC0[$1]" ;;
        rpc_tensor) echo "-ngl 99 -sm tensor --rpc $(IFS=,; echo "$*")" ;;
    esac
}
