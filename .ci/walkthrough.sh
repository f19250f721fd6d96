#!/usr/bin/env bash
# Runs the README's "Five minutes with skiff" commands as written: `skiff serve` on its defaults
# (the ports the README names, data in a fresh directory), then every other line of that block
# from the repository root. Fails when a command fails or the consumer is not caught up.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
serve_pid=""
cleanup() {
    if [[ -n $serve_pid ]]; then kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# The first ```sh block after the heading.
mapfile -t lines < <(awk '/^## Five minutes with skiff/ {in_section = 1}
    in_section && /^```sh/ {in_block = 1; next}
    in_block && /^```/ {exit}
    in_block && !/^#/ && NF {print}' README.md)
((${#lines[@]} > 2)) || { echo "no walk-through found in README.md"; exit 1; }
[[ ${lines[0]} == "cargo run --release -- serve" ]] || { echo "the walk-through does not start with serve: ${lines[0]}"; exit 1; }

# What the lines build, once, before their time limits: `cargo run --release` builds the binary
# without the features the examples' dev-dependencies add, `--example` with them.
cargo build --quiet --release
cargo build --quiet --release --bin skiff --examples
bin=$PWD/target/release/skiff
(cd "$work" && exec "$bin" serve) >"$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 100); do
    grep -q 'skiff ready' "$work/serve.log" && break
    kill -0 "$serve_pid" || { cat "$work/serve.log"; exit 1; }
    sleep 0.1
done
grep -q 'skiff ready' "$work/serve.log" || { echo "skiff serve did not start"; cat "$work/serve.log"; exit 1; }

for line in "${lines[@]:1}"; do
    echo "\$ $line"
    timeout --kill-after=10 120 bash -c "$line" >"$work/out" 2>&1 || {
        echo "failed (exit $?):"; cat "$work/out"; exit 1
    }
    tail -n 4 "$work/out"
done
# The group read all ten: its progress names no lag.
target/release/skiff admin progress OrdersGroup --json | python3 -c '
import json, sys
progress = json.load(sys.stdin)
assert progress["total_lag"] == 0, progress
print("walk-through: OrdersGroup caught up")'
