#!/usr/bin/env bash
# The scale curve: how skiff's throughput, broker CPU per message, send p99 and RSS move as the
# work grows. Each point is a fresh `skiff serve` (release build, --flush async, a fresh data
# dir under /var/tmp) driven by `skiff-bench load` (bench/src/load.rs): producer connections
# each sending one 128-byte message per request and waiting for its answer, as RocketMQ's
# benchmark producer does, and consumer groups pulling the first topic while it runs.
#
#   bench/scale.sh                       # every curve, 10 s per point (about 10 minutes)
#   bench/scale.sh --seconds 5 --curves connections,topics
#   bench/scale.sh --out /tmp/scale.md   # also write the tables there
#
# Curves (--curves, comma separated; default all):
#   connections  1, 16, 256, 1,000 producer connections (1 topic, no consumer)
#   topics       1, 1,000, 10,000 topics, 32 connections rotating over them
#   groups       1, 10, 100 consumer groups on one topic (fan-out), 32 producer connections
#   backlog      1M, then 10M messages already in the topic when a group starts draining it
#                from the first offset, 32 producer connections sending meanwhile
# Environment: SKIFF_BENCH_TARGET_DIR (default: target-bench beside the repo), SKIFF_BIN (a
# skiff binary; default: built there).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
root="$(cd "$here/.." && pwd)"
target="${SKIFF_BENCH_TARGET_DIR:-$(cd "$root/.." && pwd)/target-bench}"
seconds=10
curves="connections,topics,groups,backlog"
out=""
while [ $# -gt 0 ]; do
    case $1 in
        --seconds) seconds=$2; shift 2 ;;
        --curves) curves=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [ -z "${SKIFF_BIN:-}" ]; then
    (cd "$root" && nice -n 10 cargo build --release --bin skiff --target-dir "$target")
    SKIFF_BIN="$target/release/skiff"
fi
(cd "$here" && nice -n 10 cargo build --release --target-dir "$target")
load="$target/release/skiff-bench"

work="$(mktemp -d /var/tmp/skiff-scale.XXXXXX)"
pid=""
stop_node() {
    if [ -n "$pid" ]; then
        stop_pid "$pid"
        pid=""
    fi
}
trap 'stop_node; rm -rf "$work"' EXIT

# point LABEL LOAD-ARGS...: one fresh node, one load run; appends a JSON line to $work/points.
point() {
    local label=$1
    shift
    stop_node
    rm -rf "$work/data"
    local port
    port=$(free_port)
    "$SKIFF_BIN" serve --data-dir "$work/data" --listen "127.0.0.1:$port" --flush async \
        --metrics-listen off --grpc-listen off >"$work/node.log" 2>&1 &
    pid=$!
    wait_port "$port" "$pid" || { echo "skiff did not open $port; see $work/node.log" >&2; exit 1; }
    echo "  $label: $*" >&2
    local line
    line=$("$load" load --addr "127.0.0.1:$port" --pid "$pid" --seconds "$seconds" --json "$@")
    echo "{\"curve\":\"$label\",${line#\{}" >>"$work/points"
    stop_node
}

wants() { [[ ",$curves," == *",$1,"* ]]; }

if wants connections; then
    for c in 1 16 256 1000; do point connections --connections "$c"; done
fi
if wants topics; then
    for t in 1 1000 10000; do point topics --connections 32 --topics "$t"; done
fi
if wants groups; then
    for g in 1 10 100; do point groups --connections 32 --groups "$g"; done
fi
if wants backlog; then
    for b in 1000000 10000000; do point backlog --connections 32 --groups 1 --backlog "$b"; done
fi

"$PYTHON" - "$work/points" "$seconds" "$(git -C "$root" describe --always --dirty)" >"$work/table.md" <<'EOF'
import json, sys
points = [json.loads(l) for l in open(sys.argv[1])]
print(f"skiff {sys.argv[3]}, {sys.argv[2]} s per point, 128-byte messages, one send in flight per connection;")
print("a message moved is one sent or one consumed (a fan-out to N groups moves each message N + 1 times)\n")
curves = {
    "connections": ("producer connections", "connections"),
    "topics": ("topics", "topics"),
    "groups": ("consumer groups", "groups"),
    "backlog": ("backlog", "backlog"),
}
for curve, (title, key) in curves.items():
    rows = [p for p in points if p["curve"] == curve]
    if not rows:
        continue
    print(f"| {title} | sends/s | consumed/s | broker CPU µs/send | broker CPU µs/message moved | send p50 µs | send p99 µs | RSS MiB | peak RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p in rows:
        mib = lambda k: f"{p[k] / 1024:.1f}" if p.get(k) else "-"
        print(f"| {p[key]:,} | {p['sends_per_sec']:,.0f} | {p['consumed_per_sec']:,.0f} | {p['broker_cpu_us_per_send']:.2f} | {p['broker_cpu_us_per_message']:.2f} | {p['p50_us']} | {p['p99_us']} | {mib('broker_rss_kib')} | {mib('broker_hwm_kib')} |")
    print()
EOF
cat "$work/table.md"
if [ -n "$out" ]; then
    cp "$work/table.md" "$out"
fi
