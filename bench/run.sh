#!/usr/bin/env bash
# Runs the skiff benchmark: installs Redis and NATS if missing, builds skiff and the bench
# (release, outside the repo), then runs one fixed workload against every broker and prints
# one table (medians, skiff / peer ratios). Apache RocketMQ (`apache`) runs from Maven Central
# jars through tests/conformance/apache/start.sh --profile bench (needs java and mvn).
#
#   bench/run.sh                                   # 1,000,000 messages, 3 runs per broker
#   bench/run.sh --messages 100000 --runs 1        # smoke run
#   bench/run.sh --brokers skiff-async,redis-everysec --out bench/RESULTS.md
#   bench/run.sh --brokers skiff-async,apache      # skiff vs Apache RocketMQ only
#
# Every argument goes to skiff-bench (`bench/run.sh --help` lists them). Environment:
#   SKIFF_BENCH_TARGET_DIR  cargo target dir (default: target-bench beside the repo)
#   SKIFF_BENCH_NICE        nice level of the builds (default 10)
#   APACHE_STOCK=1          Apache RocketMQ 5.5.0 as released, without the fix of its
#                           busy-spinning TransactionMetricsFlushService (bench/README.md)
#   ROCKETMQ_VERSION        another Apache RocketMQ version (default: the pom's, 5.5.0)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
target="${SKIFF_BENCH_TARGET_DIR:-$(cd "$root/.." && pwd)/target-bench}"
nice_level="${SKIFF_BENCH_NICE:-10}"

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# Which brokers run (skiff-bench's --brokers; default: all): only their servers are needed.
brokers="default"
prev=""
for a in "$@"; do
    case $a in
        --brokers=*) brokers=${a#--brokers=} ;;
        *) [ "$prev" = "--brokers" ] && brokers=$a ;;
    esac
    prev=$a
done
wants() { # wants PATTERN: a selected broker matches PATTERN
    [ "$brokers" = default ] && return 0
    local b
    for b in ${brokers//,/ }; do
        # shellcheck disable=SC2254
        case $b in $1) return 0 ;; esac
    done
    return 1
}

need=()
if wants 'redis-*'; then command -v redis-server >/dev/null 2>&1 || need+=(redis-server); fi
if wants jetstream; then
    command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || need+=(nats-server)
fi
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

apache_args=()
if wants apache; then
    for tool in java mvn; do
        command -v "$tool" >/dev/null 2>&1 || {
            echo "apache needs $tool (Debian: default-jdk-headless maven); or leave it out with --brokers" >&2
            exit 1
        }
    done
    apache_dir="$root/tests/conformance/apache"
    java_version="$(java -version 2>&1 | head -n 1)"
    apache_args=(--apache-start "$apache_dir/start.sh" --apache-desc "Maven Central jars; $java_version")
fi

echo "building skiff and skiff-bench (release, CARGO_TARGET_DIR=$target)" >&2
export CARGO_TARGET_DIR="$target"
(cd "$root" && nice -n "$nice_level" cargo build --release --bin skiff)
# Not --locked: bench/Cargo.lock pins the bench's own dependencies, and a dependency added to
# skiff (a path dependency) must be able to enter it.
(cd "$here" && nice -n "$nice_level" cargo build --release)

if [ "${#apache_args[@]}" -gt 0 ]; then
    # Resolves the jars with Maven once (cached), outside the timed start; the dir is a dry run.
    dry="$(mktemp -d "${TMPDIR:-/tmp}/skiff-bench-apache-dry.XXXXXX")"
    "$apache_dir/start.sh" --profile bench --prepare-only --dir "$dry" --max-lifetime 1 >/dev/null
    "$apache_dir/stop.sh" "$dry" >/dev/null 2>&1 || true
fi

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (the table is noisy while other work uses the cores)" >&2
rev="$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
exec "$target/release/skiff-bench" \
    --skiff-bin "$target/release/skiff" \
    --skiff-rev "$rev" \
    --nats-server "$nats_bin" \
    ${apache_args[@]+"${apache_args[@]}"} \
    "$@"
