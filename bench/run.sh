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
#   bench/run.sh --brokers skiff-grpc,apache-grpc --messages 100000 --runs 1   # the gRPC row
#   bench/run.sh --brokers skiff-java,apache-java,redis-xadd --java-seconds 20 --runs 1   # RocketMQ's tool
#
# Every argument goes to skiff-bench (`bench/run.sh --help` lists them), except the gRPC row's:
# the brokers skiff-grpc and apache-grpc (not in the default set) run bench/grpc-bench.sh (a Java
# program with the RocketMQ 5 gRPC client) after skiff-bench, with --messages, --runs, --out and
# --grpc-threads K / --grpc-consumers C (default 4 / 4); and the Java benchmark row's: the
# brokers skiff-java, apache-java and redis-xadd (not in the default set either) run
# bench/java-bench.sh (RocketMQ's own benchmark tool, and redis-benchmark's XADD) after those,
# with --messages, --runs, --out and --java-threads T / --java-size B / --java-seconds S /
# --java-warmup W (default 32 / 128 / off: --messages / 5). Environment:
#   SKIFF_BENCH_TARGET_DIR  cargo target dir (default: target-bench beside the repo)
#   SKIFF_BENCH_NICE        nice level of the builds (default 10)
#   APACHE_STOCK=1          Apache RocketMQ 5.5.0 as released, without the fix of its
#                           busy-spinning TransactionMetricsFlushService (bench/README.md)
#   ROCKETMQ_VERSION        another Apache RocketMQ version (default: the pom's, 5.5.0)
#   SKIFF_BIN               a skiff binary for skiff-grpc and skiff-java (with only gRPC and
#                           Java-tool brokers selected: nothing is built)
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
# The gRPC row (skiff-grpc, apache-grpc) is bench/grpc-bench.sh, the Java benchmark row
# (skiff-java, apache-java, redis-xadd) bench/java-bench.sh; skiff-bench gets the rest.
grpc_brokers="" java_brokers="" bench_brokers="$brokers"
if [ "$brokers" != default ]; then
    bench_brokers=""
    for b in ${brokers//,/ }; do
        case $b in
            skiff-grpc | apache-grpc) grpc_brokers="${grpc_brokers:+$grpc_brokers,}$b" ;;
            skiff-java | apache-java | redis-xadd) java_brokers="${java_brokers:+$java_brokers,}$b" ;;
            *) bench_brokers="${bench_brokers:+$bench_brokers,}$b" ;;
        esac
    done
fi
bench_args=() rows_out=""
skip=0
prev=""
for a in "$@"; do
    if [ "$skip" = 1 ]; then skip=0; prev=$a; continue; fi
    case $a in
        --grpc-threads | --grpc-consumers | --java-threads | --java-size | --java-seconds | --java-warmup) skip=1 ;;
        --grpc-threads=* | --grpc-consumers=* | --java-threads=* | --java-size=* | --java-seconds=* | --java-warmup=*) ;;
        --brokers) bench_args+=("$a") ;;
        --brokers=*) bench_args+=("--brokers=$bench_brokers") ;;
        *)
            if [ "$prev" = "--brokers" ]; then bench_args+=("$bench_brokers"); else bench_args+=("$a"); fi
            ;;
    esac
    case $a in --out=*) rows_out=${a#--out=} ;; esac
    [ "$prev" = "--out" ] && rows_out=$a
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

if [[ ,$java_brokers, == *-java,* ]]; then
    for tool in java mvn; do
        command -v "$tool" >/dev/null 2>&1 || {
            echo "skiff-java and apache-java need $tool (Debian: default-jdk-headless maven)" >&2
            exit 1
        }
    done
fi

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

export CARGO_TARGET_DIR="$target"
skiff_bin="$target/release/skiff"
if [ -n "$bench_brokers" ]; then
    echo "building skiff and skiff-bench (release, CARGO_TARGET_DIR=$target)" >&2
    (cd "$root" && nice -n "$nice_level" cargo build --release --bin skiff)
    # Not --locked: bench/Cargo.lock pins the bench's own dependencies, and a dependency added to
    # skiff (a path dependency) must be able to enter it.
    (cd "$here" && nice -n "$nice_level" cargo build --release)
elif [[ ,$grpc_brokers, == *,skiff-grpc,* || ,$java_brokers, == *,skiff-java,* ]]; then
    if [ -n "${SKIFF_BIN:-}" ]; then
        skiff_bin=$SKIFF_BIN
    else
        echo "building skiff (release, CARGO_TARGET_DIR=$target)" >&2
        (cd "$root" && nice -n "$nice_level" cargo build --release --bin skiff)
    fi
fi

if [ "${#apache_args[@]}" -gt 0 ]; then
    # Resolves the jars with Maven once (cached), outside the timed start; the dir is a dry run.
    dry="$(mktemp -d "${TMPDIR:-/tmp}/skiff-bench-apache-dry.XXXXXX")"
    "$apache_dir/start.sh" --profile bench --prepare-only --dir "$dry" --max-lifetime 1 >/dev/null
    "$apache_dir/stop.sh" "$dry" >/dev/null 2>&1 || true
fi

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (the table is noisy while other work uses the cores)" >&2
rev="$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
[ -n "${SKIFF_BIN:-}" ] && [ -z "$bench_brokers" ] && rev="SKIFF_BIN=$SKIFF_BIN"
if [ -n "$bench_brokers" ]; then
    # skiff reads SKIFF_* variables as configuration; skiff-bench removes them for skiff.
    "$target/release/skiff-bench" \
        --skiff-bin "$target/release/skiff" \
        --skiff-rev "$rev" \
        --nats-server "$nats_bin" \
        ${apache_args[@]+"${apache_args[@]}"} \
        ${bench_args[@]+"${bench_args[@]}"}
elif [ -n "$rows_out" ]; then
    : >"$rows_out"
fi
if [ -n "$grpc_brokers" ]; then
    "$here/grpc-bench.sh" "$@" --brokers "$grpc_brokers" --skiff-bin "$skiff_bin" --skiff-rev "$rev"
fi
if [ -n "$java_brokers" ]; then
    "$here/java-bench.sh" "$@" --brokers "$java_brokers" --skiff-bin "$skiff_bin" --skiff-rev "$rev"
fi
