#!/usr/bin/env bash
# Lite topics at scale (RocketMQ 5.5), one Java program against Apache RocketMQ 5.5.0 and skiff:
# bench/grpc/LiteBench.java with the gRPC Java client 5.2.0 (the shape of
# `examples/many_queues.rs --mode lite`: N lite topics of one LITE parent, one message each, then
# min(N, 20000) more into existing ones, then 4 LitePushConsumers taking 1,000 lite topics at a
# time, then idle). Apache runs in cluster mode, as it serves lite topics only there
# (tests/conformance/apache/start.sh --proxy-cluster --profile bench: name server, broker with
# enableLmq and enableMultiDispatch, proxy; CPU and RSS are summed over the three JVMs). skiff
# runs `serve` (name server and broker on --listen, gRPC on --grpc-listen). One fresh broker per
# count; prints each run's RESULT line and a table.
#
#   bench/lite-bench.sh --counts 10000,50000
#   bench/lite-bench.sh --counts 50000 --brokers apache,skiff --skiff-bin /tmp/skiff-litebench
#
#   --counts LIST        lite topic counts, one run each (default 10000)
#   --brokers LIST       apache,skiff (default apache)
#   --skiff-bin PATH     the skiff binary (default: $SKIFF_BIN)
#   --idle-secs S        idle wait after the consumers before the last RSS read (default 60)
#   --threads K          producer threads (default 16)
#   --consumers C        lite consumers (default 4)
#   --lite-batch B       lite topics each consumer subscribes at a time (default 1000)
#   --lite-quota Q       set the group's lite.sub.client.quota (default: the broker's)
#   --broker-set K=V     passed to start.sh for Apache (repeatable)
#   --open-files N       start Apache under `ulimit -n N` (soft and hard; raising the hard limit
#                        needs root): its file consume queues hold a descriptor per lite topic
#   --timeout SECS       a run taking longer fails (default 1200)
#   --out FILE           also append the table (markdown) to FILE
#   --keep               keep the work dir (logs, stores)
# Environment: SKIFF_BENCH_NICE (nice level of the Maven build, default 10).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
root="$(cd "$here/.." && pwd)"
apache_dir="$root/tests/conformance/apache"

counts=10000 brokers=apache skiff_bin=${SKIFF_BIN:-} idle=60 threads=16 consumers=4 batch=1000
quota=0 timeout_secs=1200 out="" keep=0 broker_sets=() open_files=""
while (($#)); do
    case $1 in
        --counts) counts=$2; shift ;;
        --brokers) brokers=$2; shift ;;
        --skiff-bin) skiff_bin=$2; shift ;;
        --idle-secs) idle=$2; shift ;;
        --threads) threads=$2; shift ;;
        --consumers) consumers=$2; shift ;;
        --lite-batch) batch=$2; shift ;;
        --lite-quota) quota=$2; shift ;;
        --broker-set) broker_sets+=(--broker-set "$2"); shift ;;
        --timeout) timeout_secs=$2; shift ;;
        --open-files) open_files=$2; shift ;;
        --out) out=$2; shift ;;
        --keep) keep=1 ;;
        *) echo "lite-bench: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
say() { printf '[lite-bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
for b in ${brokers//,/ }; do
    case $b in
        apache) ;;
        skiff) [[ -n $skiff_bin && -x $skiff_bin ]] || { echo "lite-bench: skiff needs --skiff-bin" >&2; exit 2; } ;;
        *) echo "lite-bench: unknown broker $b" >&2; exit 2 ;;
    esac
done
# Each broker runs in its own directory: a relative --skiff-bin is the caller's.
[[ -z $skiff_bin || $skiff_bin == /* ]] || skiff_bin=$PWD/$skiff_bin

# ---- the Java program (the module of grpc-bench.sh) ------------------------------------------
bench_cp=$(grpc_bench_classpath lite-bench) || exit 1
clk_tck=$(getconf CLK_TCK)
work=$(mktemp -d "/var/tmp/skiff-lite-bench.XXXXXX")
results=$work/results.tsv
: >"$results"

SKIFF_PID="" APACHE_RUN=""
stop_broker() {
    if [[ -n $SKIFF_PID ]]; then
        stop_pid "$SKIFF_PID"
        SKIFF_PID=""
    fi
    if [[ -n $APACHE_RUN ]]; then
        # --keep: the store and logs stay for a look at what went wrong.
        "$apache_dir/stop.sh" "$APACHE_RUN" --keep >/dev/null 2>&1 || true
        APACHE_RUN=""
    fi
}
trap 'stop_broker' EXIT
# The benchmark runs in the background and is waited for: bash runs a trap only once its
# foreground child exits, so a TERM would otherwise wait for the whole run.
BENCH_PID=""
trap 'say interrupted; [[ -z $BENCH_PID ]] || kill -TERM "$BENCH_PID" 2>/dev/null; exit 130' INT TERM

# Starts one broker; sets ENDPOINT, NAMESRV and PIDS (comma separated).
start_broker() { # start_broker NAME RUN_DIR
    local name=$1 dir=$2
    mkdir -p "$dir"
    case $name in
        skiff)
            local port grpc
            port=$(free_port)
            grpc=$(free_port)
            while [[ $grpc == "$port" ]]; do grpc=$(free_port); done
            mkdir -p "$dir/data"
            # skiff reads SKIFF_* variables as configuration: none of the caller's reach it.
            (cd "$dir" && exec env $(env | sed -n 's/^\(SKIFF_[A-Za-z0-9_]*\)=.*/-u \1/p') \
                "$skiff_bin" serve --listen "127.0.0.1:$port" --grpc-listen "127.0.0.1:$grpc" \
                --data-dir "$dir/data" --metrics-listen off) >"$dir/skiff.log" 2>&1 </dev/null &
            SKIFF_PID=$!
            wait_port "$grpc" "$SKIFF_PID" || { say "skiff did not open $grpc; see $dir/skiff.log"; return 1; }
            ENDPOINT=127.0.0.1:$grpc NAMESRV=127.0.0.1:$port PIDS=$SKIFF_PID
            ;;
        apache)
            local outp
            outp=$([[ -z $open_files ]] || ulimit -n "$open_files"
                "$apache_dir/start.sh" --proxy-cluster --profile bench --dir "$dir/apache" \
                --max-lifetime $((timeout_secs + 600)) "${broker_sets[@]}") \
                || { say "Apache did not start; see $dir/apache"; return 1; }
            APACHE_RUN=$dir/apache
            ENDPOINT=$(sed -n 's/^GRPC=//p' <<<"$outp" | tail -1)
            NAMESRV=$(sed -n 's/^NAMESRV=//p' <<<"$outp" | tail -1)
            # Every JVM: name server, broker, proxy.
            PIDS=$(awk '$2 != "watchdog" {print $1}' "$dir/apache/pids" | paste -sd, -)
            ;;
    esac
}

say "work dir $work; counts $counts; brokers $brokers; load average $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
for n in ${counts//,/ }; do
    for b in ${brokers//,/ }; do
        rdir=$work/$b-$n
        say "$b: $n lite topics"
        if ! start_broker "$b" "$rdir"; then
            stop_broker
            status=1
            continue
        fi
        say "$b up: gRPC $ENDPOINT, name server $NAMESRV, pids $PIDS"
        rc=0
        timeout "$timeout_secs" java -Xms512m -Xmx2g -XX:+UseG1GC -Duser.home="$rdir" -cp "$bench_cp" \
            skiff.bench.grpc.LiteBench --endpoint "$ENDPOINT" --namesrv "$NAMESRV" --lite-topics "$n" \
            --threads "$threads" --consumers "$consumers" --lite-batch "$batch" --idle-secs "$idle" \
            --lite-quota "$quota" --pids "$PIDS" --clk-tck "$clk_tck" \
            >"$rdir/bench.out" 2>"$rdir/bench.err" &
        BENCH_PID=$!
        wait "$BENCH_PID" || rc=$?
        BENCH_PID=""
        line=$(grep -E '^(RESULT|FAIL) ' "$rdir/bench.out" | tail -1 || true)
        if ((rc != 0)) || [[ $line != RESULT* ]]; then
            grep -v '^\s*at ' "$rdir/bench.err" | tail -15 >&2 || true
            say "FAIL: $b at $n (exit $rc): ${line:-no result}; see $rdir"
            printf '%s\t%s\tFAIL\t%s\n' "$b" "$n" "${line:-exit $rc}" >>"$results"
            keep=1 status=1
        else
            say "$b: ${line#RESULT }"
            printf '%s\t%s\tOK\t%s\n' "$b" "$n" "${line#RESULT }" >>"$results"
        fi
        stop_broker
    done
done

table=$("$PYTHON" - "$results" <<'EOF'
import sys
out = ["| broker | lite topics | peak RSS | RSS after the consumers | idle RSS | first / existing message (broker CPU) | received (broker CPU each) |",
       "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
for line in open(sys.argv[1]):
    b, n, ok, kv = line.rstrip("\n").split("\t", 3)
    if ok != "OK":
        out.append(f"| {b} | {int(n):,} | failed: {kv} | | | | |")
        continue
    d = dict(x.split("=", 1) for x in kv.split())
    f = {k: float(v) for k, v in d.items()}
    out.append(f"| {b} | {int(n):,} | {f['peak_rss_mib']:,.1f} MiB | {f['rss_after_consumers_mib']:,.1f} MiB | "
               f"{f['idle_rss_mib']:,.1f} MiB ({int(f['idle_secs'])} s) | "
               f"{f['first_us']:,.1f} / {f['existing_us']:,.1f} µs ({f['first_over_existing']:.1f}×) | "
               f"{f['consume_msgs_s']:,.0f} msgs/s ({f['consume_us']:,.1f} µs) |")
print("\n".join(out))
EOF
)
echo "$table"
if [[ -n $out ]]; then
    { echo; echo "$table"; } >>"$out"
fi
if ((keep)); then say "kept $work"; else rm -rf "$work"; fi
exit $status
