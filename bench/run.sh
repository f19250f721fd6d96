#!/usr/bin/env bash
# Runs the skiff benchmark: installs Redis and NATS if missing, builds skiff and the bench
# (release, outside the repo), then runs one fixed workload against every broker and prints
# one table (medians, skiff / peer ratios).
#
#   bench/run.sh                                   # 1,000,000 messages, 3 runs per broker
#   bench/run.sh --messages 100000 --runs 1        # smoke run
#   bench/run.sh --brokers skiff-async,redis-everysec --out bench/RESULTS.md
#
# Every argument goes to skiff-bench (`bench/run.sh --help` lists them). Environment:
#   SKIFF_BENCH_TARGET_DIR  cargo target dir (default: target-bench beside the repo)
#   SKIFF_BENCH_NICE        nice level of the builds (default 10)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
target="${SKIFF_BENCH_TARGET_DIR:-$(cd "$root/.." && pwd)/target-bench}"
nice_level="${SKIFF_BENCH_NICE:-10}"

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || need+=(nats-server)
if [ "${#need[@]}" -gt 0 ]; then
    echo "installing ${need[*]} (Debian packages)" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
    # The packages start system services; the bench runs its own instances.
    for svc in redis-server nats-server; do
        as_root service "$svc" stop >/dev/null 2>&1 || true
    done
fi
nats_bin="$(command -v nats-server || echo /usr/sbin/nats-server)"

echo "building skiff and skiff-bench (release, CARGO_TARGET_DIR=$target)" >&2
export CARGO_TARGET_DIR="$target"
(cd "$root" && nice -n "$nice_level" cargo build --release --bin skiff)
# Not --locked: bench/Cargo.lock pins the bench's own dependencies, and a dependency added to
# skiff (a path dependency) must be able to enter it.
(cd "$here" && nice -n "$nice_level" cargo build --release)

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (the table is noisy while other work uses the cores)" >&2
rev="$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
exec "$target/release/skiff-bench" \
    --skiff-bin "$target/release/skiff" \
    --skiff-rev "$rev" \
    --nats-server "$nats_bin" \
    "$@"
