#!/usr/bin/env bash
# The gRPC row of the benchmark (bench/README.md, "gRPC"): the RocketMQ 5 gRPC Java client
# (rocketmq-client-java 5.2.0, bench/grpc/GrpcBench.java) against skiff's gRPC port
# (`skiff-grpc`) and the Apache proxy 5.5.0 in local mode (`apache-grpc`). Prints one table of
# medians and the skiff / apache ratios. bench/run.sh calls it for those two brokers; it also
# runs alone:
#
#   bench/grpc-bench.sh --skiff-bin target-bench/release/skiff --messages 100000 --runs 1
#   bench/grpc-bench.sh --skiff-bin /tmp/skiff --brokers skiff-grpc --grpc-threads 8
#
#   --brokers LIST       skiff-grpc,apache-grpc (default both; other names are ignored)
#   --messages M         messages per run (default 1,000,000; a multiple of --grpc-threads)
#   --runs N             runs per broker (default 3); the brokers take turns within each run
#   --grpc-threads K     producer threads, each with blocking sends (default 4)
#   --grpc-consumers C   receive threads of the SimpleConsumer (default 4)
#   --skiff-bin PATH     the skiff binary (default: $SKIFF_BIN)
#   --skiff-rev REV      what that build is, for the report
#   --out FILE           also append the table (markdown) to FILE
#   --keep               keep the work dir (logs, data)
# Every other argument (skiff-bench's) is ignored, so run.sh can pass its arguments through.
# Environment: SKIFF_BENCH_NICE (nice level of the Maven build, default 10), APACHE_STOCK=1 and
# ROCKETMQ_VERSION as for start.sh --profile bench.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
root="$(cd "$here/.." && pwd)"
apache_dir="$root/tests/conformance/apache"

brokers="skiff-grpc,apache-grpc" messages=1000000 runs=3 threads=4 consumers=4
skiff_bin=${SKIFF_BIN:-} skiff_rev="" out="" keep=0
while (($#)); do
    case $1 in
        --brokers) brokers=$2; shift ;;
        --brokers=*) brokers=${1#--brokers=} ;;
        --messages) messages=$2; shift ;;
        --messages=*) messages=${1#--messages=} ;;
        --runs) runs=$2; shift ;;
        --runs=*) runs=${1#--runs=} ;;
        --grpc-threads) threads=$2; shift ;;
        --grpc-threads=*) threads=${1#--grpc-threads=} ;;
        --grpc-consumers) consumers=$2; shift ;;
        --grpc-consumers=*) consumers=${1#--grpc-consumers=} ;;
        --skiff-bin) skiff_bin=$2; shift ;;
        --skiff-bin=*) skiff_bin=${1#--skiff-bin=} ;;
        --skiff-rev) skiff_rev=$2; shift ;;
        --skiff-rev=*) skiff_rev=${1#--skiff-rev=} ;;
        --out) out=$2; shift ;;
        --out=*) out=${1#--out=} ;;
        --keep) keep=1 ;;
        *) ;; # skiff-bench's arguments
    esac
    shift
done
selected=()
for b in ${brokers//,/ }; do
    case $b in skiff-grpc | apache-grpc) selected+=("$b") ;; esac
done
((${#selected[@]})) || { echo "grpc-bench: no gRPC broker in --brokers $brokers" >&2; exit 2; }
say() { printf '[grpc-bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# ---- the Java program ------------------------------------------------------------------------
bench_cp=$(grpc_bench_classpath grpc-bench) || exit 1

for b in "${selected[@]}"; do
    if [[ $b == skiff-grpc && ( -z $skiff_bin || ! -x $skiff_bin ) ]]; then
        echo "grpc-bench: skiff-grpc needs --skiff-bin (or SKIFF_BIN): '$skiff_bin'" >&2
        exit 2
    fi
done
clk_tck=$(getconf CLK_TCK)
work=$(mktemp -d "/var/tmp/skiff-grpc-bench.XXXXXX")
results=$work/results.tsv
: >"$results"


SKIFF_PID="" APACHE_RUN=""
stop_broker() {
    if [[ -n $SKIFF_PID ]]; then
        stop_pid "$SKIFF_PID"
        SKIFF_PID=""
    fi
    if [[ -n $APACHE_RUN ]]; then
        "$apache_dir/stop.sh" "$APACHE_RUN" >/dev/null 2>&1 || true
        APACHE_RUN=""
    fi
}
trap 'stop_broker' EXIT
trap 'say interrupted; exit 130' INT TERM

# Starts one broker; sets ENDPOINT, NAMESRV, PIDS (comma separated) and DESC.
start_broker() { # start_broker NAME RUN_DIR
    local name=$1 dir=$2
    mkdir -p "$dir"
    case $name in
        skiff-grpc)
            local port grpc
            port=$(free_port)
            grpc=$(free_port)
            while [[ $grpc == "$port" ]]; do grpc=$(free_port); done
            mkdir -p "$dir/data"
            # skiff reads SKIFF_* variables as configuration: none of the caller's reach it.
            (cd "$dir" && exec env $(env | sed -n 's/^\(SKIFF_[A-Za-z0-9_]*\)=.*/-u \1/p') \
                "$skiff_bin" serve --listen "127.0.0.1:$port" --grpc-listen "127.0.0.1:$grpc" \
                --data-dir "$dir/data" --flush async) >"$dir/skiff.log" 2>&1 </dev/null &
            SKIFF_PID=$!
            wait_port "$grpc" "$SKIFF_PID" || { say "skiff did not open $grpc; see $dir/skiff.log"; return 1; }
            ENDPOINT=127.0.0.1:$grpc NAMESRV=127.0.0.1:$port PIDS=$SKIFF_PID
            DESC="skiff${skiff_rev:+ ($skiff_rev)} \`serve --flush async --grpc-listen\`; broker CPU = the skiff process"
            ;;
        apache-grpc)
            local outp
            outp=$("$apache_dir/start.sh" --proxy --profile bench --dir "$dir/apache" --max-lifetime 3600) \
                || { say "the Apache proxy did not start; see $dir/apache"; return 1; }
            APACHE_RUN=$dir/apache
            ENDPOINT=$(sed -n 's/^GRPC=//p' <<<"$outp" | tail -1)
            NAMESRV=$(sed -n 's/^NAMESRV=//p' <<<"$outp" | tail -1)
            PIDS=$(awk '$2 != "watchdog" {print $1}' "$dir/apache/pids" | paste -sd, -)
            DESC="Apache RocketMQ ${ROCKETMQ_VERSION:-5.5.0} proxy in local mode (start.sh --proxy --profile bench$([[ ${APACHE_STOCK:-0} == 1 ]] && echo ', stock' || echo ', with the ISSUE #10515 fix')): broker CPU = name server + proxy/broker JVMs"
            ;;
    esac
}

declare -A DESCS
say "work dir $work; ${messages} messages, ${threads} producer threads, ${consumers} receive threads, ${runs} run(s): ${selected[*]}"
say "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((run = 1; run <= runs; run++)); do
    for b in "${selected[@]}"; do
        rdir=$work/run$run/$b
        say "run $run/$runs: $b"
        if ! start_broker "$b" "$rdir"; then
            stop_broker
            exit 1
        fi
        DESCS[$b]=$DESC
        if ! nice -n 0 java -Xms512m -Xmx1g -XX:+UseG1GC -Duser.home="$rdir" -cp "$bench_cp" \
            skiff.bench.grpc.GrpcBench --endpoint "$ENDPOINT" --namesrv "$NAMESRV" --messages "$messages" \
            --threads "$threads" --consumers "$consumers" --size 128 --pids "$PIDS" --clk-tck "$clk_tck" \
            >"$rdir/bench.out" 2>"$rdir/bench.err"; then
            tail -20 "$rdir/bench.err" >&2
            say "FAIL: $b run $run; see $rdir"
            stop_broker
            keep=1
            exit 1
        fi
        line=$(grep '^RESULT ' "$rdir/bench.out" | tail -1)
        say "$b: ${line#RESULT }"
        printf '%s\t%s\t%s\n' "$b" "$run" "${line#RESULT }" >>"$results"
        stop_broker
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

table=$("$PYTHON" - "$results" "$messages" "$runs" "$threads" "$consumers" "$load_before" "$load_after" \
    "${DESCS[skiff-grpc]:-}" "${DESCS[apache-grpc]:-}" <<'EOF'
import statistics, sys
path, messages, runs, threads, consumers, lb, la, dskiff, dapache = sys.argv[1:10]
rows = {}
for line in open(path):
    b, run, kv = line.rstrip("\n").split("\t")
    d = dict(x.split("=", 1) for x in kv.split())
    rows.setdefault(b, []).append({k: float(v) for k, v in d.items()})
cols = [
    ("produce msgs/s", "produce_rate", True, "{:,.0f}"),
    ("send p50 ms", "send_p50_ms", False, "{:.2f}"),
    ("send p99 ms", "send_p99_ms", False, "{:.2f}"),
    ("drain s", "drain_secs", False, "{:.2f}"),
    ("drain msgs/s", "drain_rate", True, "{:,.0f}"),
    ("broker CPU µs/msg (produce)", "broker_cpu_us_per_msg_produce", False, "{:.1f}"),
    ("broker CPU µs/msg (drain)", "broker_cpu_us_per_msg_drain", False, "{:.1f}"),
    ("broker CPU µs/msg (total)", "broker_cpu_us_per_msg", False, "{:.1f}"),
    ("client CPU µs/msg (produce)", "client_cpu_us_per_msg_produce", False, "{:.1f}"),
    ("client CPU µs/msg (drain)", "client_cpu_us_per_msg_drain", False, "{:.1f}"),
    ("duplicates", "duplicates", False, "{:.0f}"),
]
med = {b: {k: statistics.median(r[k] for r in rs) for _, k, _, _ in cols} for b, rs in rows.items()}
order = [b for b in ("skiff-grpc", "apache-grpc") if b in med]
out = []
out.append(f"### gRPC (rocketmq-client-java 5.2.0): {int(messages):,} messages of 128 bytes, "
           f"{threads} producer threads (blocking send), SimpleConsumer with {consumers} receive threads; "
           f"medians of {runs} run(s)")
out.append("")
out.append("| | " + " | ".join(order) + (" | skiff / apache |" if len(order) == 2 else " |"))
out.append("| --- | " + " | ".join("---" for _ in order) + (" | --- |" if len(order) == 2 else " |"))
for label, k, _, f in cols:
    cells = [f.format(med[b][k]) for b in order]
    if len(order) == 2:
        a = med["apache-grpc"][k]
        cells.append(f"{med['skiff-grpc'][k] / a:.2f}×" if a else "–")
    out.append(f"| {label} | " + " | ".join(cells) + " |")
out.append("")
if dskiff:
    out.append(f"- skiff-grpc: {dskiff}")
if dapache:
    out.append(f"- apache-grpc: {dapache}")
out.append(f"- load average before {lb}, after {la}")
print("\n".join(out))
EOF
)
echo "$table"
if [[ -n $out ]]; then
    { echo; echo "$table"; } >>"$out"
fi
if ((keep)); then say "kept $work"; else rm -rf "$work"; fi
