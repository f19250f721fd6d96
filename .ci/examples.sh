#!/usr/bin/env bash
# Every example in examples/ runs to completion, each under a time limit: the embedded ones on
# their own, the networked ones against one `skiff serve` on a free loopback port, the benchmarks
# with small counts. A new example must be added here (the check at the end fails otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
export RUST_LOG=${RUST_LOG:-warn}
work=$(mktemp -d)
skiff_pid=""
cleanup() {
    if [[ -n $skiff_pid ]]; then kill "$skiff_pid" 2>/dev/null || true; wait "$skiff_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

ran=()
# example NAME SECONDS [ARGS...]
example() {
    local name=$1 limit=$2
    shift 2
    echo "example $name $*"
    timeout --kill-after=10 "$limit" cargo run --quiet --release --example "$name" -- "$@" >"$work/$name.out" 2>&1 || {
        local rc=$?
        echo "example $name failed (exit $rc); its output:"
        cat "$work/$name.out"
        exit 1
    }
    ran+=("$name")
}

cargo build --quiet --release --bin skiff --examples
example quickstart 120
example transaction_bench 120 --messages 500 --runs 1
example pop_bench 120 --messages 2000 --runs 1
example timer_bench 180 --skiff-bin target/release/skiff --rate 200 --secs 2 --delay-ms 500 --pending 2000
# 4,000 queues under an open-file limit of 256 with 400 idle connections held: every send and
# every read back succeeds, before and after a restart.
example many_queues 300 --skiff-bin target/release/skiff --topics 1000 --open-files 256 --idle-connections 400
# The same with 4,000 lite topics of one LITE parent (RocketMQ 5.5), received by lite consumers
# over gRPC a batch of subscriptions at a time.
example many_queues 300 --skiff-bin target/release/skiff --topics 1000 --mode lite --idle-secs 15

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
target/release/skiff serve --listen "127.0.0.1:$port" --data-dir "$work/data" --metrics-listen off >"$work/serve.out" 2>&1 &
skiff_pid=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    kill -0 "$skiff_pid" || { cat "$work/serve.out"; exit 1; }
    sleep 0.1
done
ns="127.0.0.1:$port"
example producer 60 --namesrv "$ns" --topic ExamplesTopic --count 20 --tags TagA
example push_consumer 60 --namesrv "$ns" --group ExamplesPush --topic ExamplesTopic --count 20
example broadcast_consumer 60 --namesrv "$ns" --group ExamplesBroadcast --topic ExamplesTopic --offsets-dir "$work/broadcast" --count 20
example producer 60 --namesrv "$ns" --topic ExamplesOrder --count 40 --orderly --orders 4
example orderly_consumer 60 --namesrv "$ns" --group ExamplesOrderly --topic ExamplesOrder --count 40

# Every example file is covered above.
for file in examples/*.rs; do
    name=$(basename "$file" .rs)
    [[ " ${ran[*]} " == *" $name "* ]] || { echo "example $name is not run by .ci/examples.sh"; exit 1; }
done
echo "${#ran[@]} examples ran to completion"
