#!/usr/bin/env bash
# The Java benchmark row (bench/README.md, "RocketMQ's benchmark tool"): RocketMQ's own benchmark
# tool, org.apache.rocketmq.example.benchmark.Producer and Consumer from rocketmq-example 5.5.0,
# unmodified, against skiff (`skiff-java`) and Apache RocketMQ 5.5.0 (`apache-java`), and, if
# asked, redis-benchmark's XADD against Redis (`redis-xadd`). Prints one table of medians and the
# skiff / apache (and skiff / redis) ratios. bench/run.sh calls it for those brokers; it also
# runs alone:
#
#   bench/java-bench.sh --skiff-bin target/release/skiff                 # 1,000,000 messages, 3 runs
#   bench/java-bench.sh --skiff-bin target/release/skiff --seconds 20 --runs 1   # smoke run
#   SKIFF_BIN=/tmp/skiff bench/java-bench.sh --brokers skiff,apache,redis --messages 500000
#
#   --brokers LIST     skiff-java (or skiff), apache-java (or apache), redis-xadd (or redis);
#                      default skiff-java,apache-java; other names are ignored
#   --messages N       the send phase sends N messages (the tool's -q; default 1,000,000);
#                      also redis-benchmark's -n
#   --seconds S        the send phase runs S seconds instead (the tool has no time limit of its
#                      own: its JVM is ended); S >= 10 + --warmup for a TPS figure of the tool's
#   --runs N           runs per broker (default 3); the brokers take turns within each run, in
#                      the opposite order every other run
#   --threads T        Producer send threads (-w; default 32); redis-benchmark's -c
#   --size B           message body bytes (-s; default 128); redis-benchmark's value size
#   --warmup W         the TPS and RT medians skip the tool's lines whose window starts in the
#                      first W seconds (default 5)
#   --skiff-bin PATH   the skiff binary (default: $SKIFF_BIN)
#   --skiff-rev REV    what that build is, for the report
#   --out FILE         also append the table (markdown) to FILE
#   --keep             keep the work dir (logs, data)
# run.sh passes its own arguments through: --java-threads, --java-size, --java-seconds and
# --java-warmup are the same as the options above; every other argument is ignored.
# Environment: SKIFF_BIN, SKIFF_BENCH_NICE (nice level of the Maven build, default 10),
# APACHE_STOCK=1 and ROCKETMQ_VERSION as for start.sh --profile bench, PYTHON (python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bench/lib.sh
source "$here/lib.sh"
root="$(cd "$here/.." && pwd)"
apache_dir="$root/tests/conformance/apache"

brokers="skiff-java,apache-java" messages=1000000 seconds=0 runs=3 threads=32 size=128 warmup=5
skiff_bin=${SKIFF_BIN:-} skiff_rev="" out="" keep=0
while (($#)); do
    case $1 in
        -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        --brokers) brokers=$2; shift ;;
        --brokers=*) brokers=${1#--brokers=} ;;
        --messages) messages=$2; shift ;;
        --messages=*) messages=${1#--messages=} ;;
        --seconds | --java-seconds) seconds=$2; shift ;;
        --seconds=* | --java-seconds=*) seconds=${1#*=} ;;
        --runs) runs=$2; shift ;;
        --runs=*) runs=${1#--runs=} ;;
        --threads | --java-threads) threads=$2; shift ;;
        --threads=* | --java-threads=*) threads=${1#*=} ;;
        --size | --java-size) size=$2; shift ;;
        --size=* | --java-size=*) size=${1#*=} ;;
        --warmup | --java-warmup) warmup=$2; shift ;;
        --warmup=* | --java-warmup=*) warmup=${1#*=} ;;
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
for v in messages seconds runs threads size warmup; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { echo "java-bench: --$v wants a number: '${!v}'" >&2; exit 2; }
done
((runs > 0 && threads > 0 && size > 0)) || { echo "java-bench: --runs, --threads, --size must be > 0" >&2; exit 2; }
((seconds > 0 || messages > 0)) || { echo "java-bench: --messages or --seconds must be > 0" >&2; exit 2; }
selected=()
for b in ${brokers//,/ }; do
    case $b in
        skiff | skiff-java) b=skiff-java ;;
        apache | apache-java) b=apache-java ;;
        redis | redis-xadd) b=redis-xadd ;;
        *) continue ;;
    esac
    [[ " ${selected[*]} " == *" $b "* ]] || selected+=("$b")
done
((${#selected[@]})) || { echo "java-bench: no broker of this row in --brokers $brokers" >&2; exit 2; }
say() { printf '[java-bench %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
has() { [[ " ${selected[*]} " == *" $1 "* ]]; }

if has skiff-java && [[ -z $skiff_bin || ! -x $skiff_bin ]]; then
    echo "java-bench: skiff-java needs --skiff-bin (or SKIFF_BIN): '$skiff_bin'" >&2
    exit 2
fi
if has redis-xadd; then
    for tool in redis-server redis-benchmark redis-cli; do
        command -v "$tool" >/dev/null 2>&1 || {
            echo "java-bench: redis-xadd needs $tool (Debian: apt-get install redis-server)" >&2
            exit 2
        }
    done
fi

# ---- the launcher (bench/javabench): the tool's jars and JavaBench, built once -----------------
java_cp=""
if has skiff-java || has apache-java; then
    jdir=$here/javabench
    cp_file=$jdir/target/classpath.txt
    if [[ ! -s $cp_file || ! -d $jdir/target/classes \
        || -n $(find "$jdir/src" "$jdir/pom.xml" -newer "$cp_file" -print -quit) ]]; then
        say "building bench/javabench (mvn compile: rocketmq-example 5.5.0 and JavaBench)"
        mvn_log=${TMPDIR:-/tmp}/skiff-java-bench-mvn.log
        if ! nice -n "${SKIFF_BENCH_NICE:-10}" mvn -q -B -f "$jdir/pom.xml" compile >"$mvn_log" 2>&1; then
            tail -20 "$mvn_log" >&2
            say "FAIL: mvn compile; see $mvn_log"
            exit 1
        fi
        touch "$cp_file"
    fi
    java_cp=$jdir/target/classes:$(cat "$cp_file")
fi

clk_tck=$(getconf CLK_TCK)
work=$(mktemp -d "/var/tmp/skiff-java-bench.XXXXXX")
results=$work/results.tsv
: >"$results"
# Not the tool's default topic BenchmarkTest: Apache's broker predefines that one with 1024
# queues (TopicConfigManager), skiff would auto-create it with 4. bench_java is auto-created by
# the first send on both, with the Producer's defaultTopicQueueNums: 4 queues.
topic=bench_java group=benchmark_consumer

cpu_ticks() { # cpu_ticks PID,PID...: utime + stime of the processes (/proc/PID/stat), in ticks
    local p s t=0 f
    for p in ${1//,/ }; do
        s=$(<"/proc/$p/stat")
        read -r -a f <<<"${s##*) }" # fields from 3 (state) on: utime is 14, stime 15
        t=$((t + f[11] + f[12]))
    done
    echo "$t"
}
machine_ticks() { # machine_ticks: "busy total" CPU ticks of the whole machine since boot (/proc/stat)
    local user nice system idle iowait irq softirq steal
    read -r _ user nice system idle iowait irq softirq steal _ </proc/stat
    local busy=$((user + nice + system + irq + softirq)) # guest time is already in user and nice
    echo "$busy $((busy + idle + iowait + steal))"
}
children_cpu_ms() { # children_cpu_ms: CHILDREN_MS= user + system CPU of this shell's reaped children
    local u s
    # In this shell, so never as $(children_cpu_ms): a subshell has no children of its own.
    times >"$work/times"
    { read -r _; read -r u s; } <"$work/times"
    CHILDREN_MS=$("$PYTHON" -c 'import re, sys
ms = lambda v: (lambda m: (int(m[1]) * 60 + float(m[2])) * 1000)(re.fullmatch(r"(\d+)m([\d.]+)s", v))
print(round(ms(sys.argv[1]) + ms(sys.argv[2])))' "$u" "$s")
}
# client_and_machine N J0 J1 M0 M1: key=value pairs for the client's CPU per message (from
# children_cpu_ms before and after it ran) and the machine's busy cores meanwhile (machine_ticks).
client_and_machine() {
    "$PYTHON" - "$@" <<'EOF'
import os, sys
n, j0, j1 = (int(x) for x in sys.argv[1:4])
(b0, t0), (b1, t1) = (map(int, m.split()) for m in sys.argv[4:6])
cores = os.cpu_count()
print(f"client_cpu_us={(j1 - j0) * 1e3 / n} machine_busy_cores={(b1 - b0) / (t1 - t0) * cores}")
EOF
}
hwm_kib() { # hwm_kib PID,PID...: the sum of their VmHWM (peak RSS), KiB
    local p t=0 k
    for p in ${1//,/ }; do
        k=$(awk '$1 == "VmHWM:" {print $2}' "/proc/$p/status")
        t=$((t + k))
    done
    echo "$t"
}

SKIFF_PID="" APACHE_RUN="" REDIS_PID="" CLIENT_PID="" failed=0
stop_broker() {
    local p
    for p in "$SKIFF_PID" "$REDIS_PID"; do
        [[ -n $p ]] && stop_pid "$p"
    done
    SKIFF_PID="" REDIS_PID=""
    if [[ -n $APACHE_RUN ]]; then
        "$apache_dir/stop.sh" "$APACHE_RUN" --keep >/dev/null 2>&1 || true
        APACHE_RUN=""
    fi
}
cleanup() {
    if [[ -n $CLIENT_PID ]]; then
        kill -KILL "$CLIENT_PID" 2>/dev/null || true
        wait "$CLIENT_PID" 2>/dev/null || true
        CLIENT_PID=""
    fi
    stop_broker
    if ((keep)); then
        say "kept $work"
    elif ((failed)); then
        # The logs stay for a look; the brokers' data goes.
        find "$work" -depth -type d \( -name data -o -name 'store-*' \) -exec rm -rf {} + 2>/dev/null || true
        say "logs kept in $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'say interrupted; exit 130' INT TERM

# run_client LOG_BASE CMD...: runs a client in the background (so a signal can end it) and waits.
run_client() {
    local base=$1 rc=0
    shift
    "$@" >"$base.out" 2>"$base.err" </dev/null &
    CLIENT_PID=$!
    wait "$CLIENT_PID" || rc=$?
    CLIENT_PID=""
    return "$rc"
}
fail_run() { # fail_run MSG FILE...: report, show the files' tails, stop
    local msg=$1 f
    shift
    for f in "$@"; do [[ -s $f ]] && { echo "---- $f" >&2; tail -15 "$f" >&2; }; done
    say "FAIL: $msg"
    failed=1
    exit 1
}

# Starts one broker; sets NAMESRV (RocketMQ) or PORT (Redis), PIDS (comma separated), DESC.
start_broker() { # start_broker NAME RUN_DIR
    local name=$1 dir=$2 port outp
    mkdir -p "$dir"
    case $name in
        skiff-java)
            port=$(free_port)
            mkdir -p "$dir/data"
            # skiff reads SKIFF_* variables as configuration: none of the caller's reach it.
            local unset_env=(-u RUST_LOG) v
            for v in $(compgen -e); do [[ $v == SKIFF_* ]] && unset_env+=(-u "$v"); done
            (cd "$dir" && exec env "${unset_env[@]}" "$skiff_bin" serve --listen "127.0.0.1:$port" \
                --data-dir "$dir/data" --flush async --grpc-listen off --metrics-listen off) \
                >"$dir/skiff.log" 2>&1 </dev/null &
            SKIFF_PID=$!
            wait_port "$port" "$SKIFF_PID" || fail_run "skiff did not open $port" "$dir/skiff.log"
            NAMESRV=127.0.0.1:$port PIDS=$SKIFF_PID
            DESC="skiff${skiff_rev:+ ($skiff_rev)} \`serve --flush async --grpc-listen off --metrics-listen off\` (name server and broker on one port); broker CPU and RSS = the skiff process"
            ;;
        apache-java)
            APACHE_RUN=$dir/apache
            outp=$("$apache_dir/start.sh" --profile bench --dir "$dir/apache" --max-lifetime 7200 \
                2>"$dir/apache-start.err") || fail_run "Apache RocketMQ did not start" "$dir/apache-start.err"
            NAMESRV=$(sed -n 's/^NAMESRV=//p' <<<"$outp" | tail -1)
            PIDS=$(awk '$2 != "watchdog" {print $1}' "$dir/apache/pids" | paste -sd, -)
            DESC="Apache RocketMQ ${ROCKETMQ_VERSION:-5.5.0} (start.sh --profile bench$([[ ${APACHE_STOCK:-0} == 1 ]] && echo ', stock' || echo ', with the ISSUE #10515 fix'); $(java -version 2>&1 | head -1)): broker CPU and RSS = name server + broker JVMs"
            ;;
        redis-xadd)
            port=$(free_port)
            mkdir -p "$dir/data"
            (cd "$dir" && exec redis-server --port "$port" --bind 127.0.0.1 --dir "$dir/data" \
                --appendonly yes --appendfsync everysec --save "" --daemonize no --protected-mode yes) \
                >"$dir/redis.log" 2>&1 </dev/null &
            REDIS_PID=$!
            wait_port "$port" "$REDIS_PID" || fail_run "redis-server did not open $port" "$dir/redis.log"
            PORT=$port PIDS=$REDIS_PID
            DESC="$(redis-server --version | cut -d' ' -f1-3) \`--appendonly yes --appendfsync everysec --save \"\"\`, redis-benchmark -c $threads -n $messages: XADD bench * p <$size bytes>; CPU per request, RSS = redis-server"
            ;;
    esac
}

# The tool's per-second lines of a send phase -> key=value: TPS and average RT (medians of the
# lines whose window starts after the warm-up), max RT and failures (cumulative: the last line).
parse_send() { # parse_send SEND_OUT WARMUP
    "$PYTHON" - "$1" "$2" <<'EOF'
import re, statistics, sys
path, warmup = sys.argv[1], int(sys.argv[2])
pat = re.compile(r"Send TPS: (\d+) \| Max RT\(ms\): (\d+) \| Average RT\(ms\): +([\d.]+) \| "
                 r"Send Failed: (\d+) \| Response Failed: (\d+)")
lines, complete, send_ms = [], None, None
for line in open(path, errors="replace"):
    m = pat.search(line)
    if m:
        v = (int(m[1]), int(m[2]), float(m[3]), int(m[4]), int(m[5]))
        if line.startswith("[Complete]"):
            complete = v
        else:
            lines.append(v)
    elif line.startswith("JAVABENCH SEND_MS="):
        send_ms = int(line.split("=", 1)[1])
if send_ms is None:
    sys.exit("no JAVABENCH SEND_MS line")
# Line i (from 1) is printed i + 9 s after the tool's start and covers seconds i .. i + 9.
steady = lines[warmup - 1:] if warmup > 0 else lines
which = "steady"
if not steady:
    steady, which = lines, "all"
last = complete or (lines[-1] if lines else None)
out = {"send_ms": send_ms, "tps_lines": len(steady) if steady else 0}
if steady:
    out["tps"] = statistics.median(v[0] for v in steady)
    out["avg_rt_ms"] = statistics.median(v[2] for v in steady)
if last:
    out["max_rt_ms"], out["failed"] = last[1], last[3] + last[4]
print(" ".join(f"{k}={v}" for k, v in out.items()), f"lines={which}")
EOF
}

run_rocketmq() { # run_rocketmq NAME RUN_DIR: one send phase and one drain; appends a result line
    local b=$1 rdir=$2 c0 c1 c2 m0 m1 j0 j1 kv drain stored q_args=() s_args=() timeout
    if ((seconds > 0)); then s_args=(--seconds "$seconds"); else q_args=(-q "$messages"); fi
    mkdir -p "$rdir/client"
    local jvm=(java -Xms512m -Xmx1g -XX:+UseG1GC -Duser.home="$rdir/client" -cp "$java_cp")
    c0=$(cpu_ticks "$PIDS") m0=$(machine_ticks) && children_cpu_ms && j0=$CHILDREN_MS
    run_client "$rdir/send" "${jvm[@]}" skiff.bench.javabench.JavaBench produce "${s_args[@]}" -- \
        -n "$NAMESRV" -t "$topic" -w "$threads" -s "$size" -ri 1000 "${q_args[@]}" \
        || fail_run "$b: the Producer failed" "$rdir/send.out" "$rdir/send.err"
    c1=$(cpu_ticks "$PIDS") m1=$(machine_ticks) && children_cpu_ms && j1=$CHILDREN_MS
    kv=$(parse_send "$rdir/send.out" "$warmup") || fail_run "$b: no result from the Producer" "$rdir/send.out"
    timeout=$((600 + messages / 1000))
    run_client "$rdir/drain" "${jvm[@]}" skiff.bench.javabench.JavaBench drain --namesrv "$NAMESRV" \
        --topic "$topic" --group "$group" --timeout "$timeout" -- \
        -n "$NAMESRV" -t "$topic" -g "$group" -ri 1000 \
        || fail_run "$b: the Consumer did not drain the topic" "$rdir/drain.out" "$rdir/drain.err"
    c2=$(cpu_ticks "$PIDS")
    drain=$(grep '^JAVABENCH STORED=' "$rdir/drain.out" | tail -1)
    [[ -n $drain ]] || fail_run "$b: no result from the Consumer" "$rdir/drain.out"
    stored=${drain#*STORED=} stored=${stored%% *}
    "$PYTHON" - "$b" "$run" "$kv" "${drain#JAVABENCH }" "$c0" "$c1" "$c2" "$clk_tck" "$(hwm_kib "$PIDS")" \
        "$(client_and_machine "$stored" "$j0" "$j1" "$m0" "$m1")" >>"$results" <<'EOF'
import sys
b, run, send, drain, c0, c1, c2, tck, hwm, client = sys.argv[1:11]
d = dict(x.split("=", 1) for x in (send + " " + drain + " " + client).split())
sent, tck = int(d["STORED"]), int(tck)
send_s, drain_s = int(d["send_ms"]) / 1000, int(d["DRAIN_MS"]) / 1000
r = {
    "sent": sent, "consumed": int(d["CONSUMED"]), "queues": int(d["QUEUES"]),
    "send_s": send_s, "send_rate": sent / send_s, "drain_s": drain_s, "drain_rate": sent / drain_s,
    "total_s": send_s + drain_s,
    "cpu_send_us": (int(c1) - int(c0)) / tck * 1e6 / sent,
    "cpu_drain_us": (int(c2) - int(c1)) / tck * 1e6 / sent,
    "rss_mib": int(hwm) / 1024,
}
for k in ("tps", "avg_rt_ms", "max_rt_ms", "failed", "tps_lines", "client_cpu_us", "machine_busy_cores"):
    if k in d:
        r[k] = float(d[k])
print(f"{b}\t{run}\t" + " ".join(f"{k}={v}" for k, v in r.items()) + f"\tlines={d['lines']}")
EOF
}

run_redis() { # run_redis RUN_DIR: redis-benchmark XADD; appends a result line
    local rdir=$1 c0 c1 t0 t1 m0 m1 j0 j1 len
    c0=$(cpu_ticks "$PIDS") m0=$(machine_ticks) && children_cpu_ms && j0=$CHILDREN_MS
    t0=$(date +%s%N)
    run_client "$rdir/redis-benchmark" redis-benchmark -h 127.0.0.1 -p "$PORT" -c "$threads" \
        -n "$messages" --csv XADD bench '*' p "$payload" \
        || fail_run "redis-benchmark failed" "$rdir/redis-benchmark.out" "$rdir/redis-benchmark.err"
    t1=$(date +%s%N)
    c1=$(cpu_ticks "$PIDS") m1=$(machine_ticks) && children_cpu_ms && j1=$CHILDREN_MS
    len=$(redis-cli -h 127.0.0.1 -p "$PORT" XLEN bench)
    "$PYTHON" - "$rdir/redis-benchmark.out" "$run" "$messages" "$len" "$t0" "$t1" "$c0" "$c1" \
        "$clk_tck" "$(hwm_kib "$PIDS")" "$(client_and_machine "$messages" "$j0" "$j1" "$m0" "$m1")" \
        >>"$results" <<'EOF'
import csv, sys
path, run, n, xlen, t0, t1, c0, c1, tck, hwm, client = sys.argv[1:12]
rows = [r for r in csv.reader(open(path)) if r and r[0] != "test"]
if not rows:
    sys.exit("no result line from redis-benchmark")
row = rows[-1]  # test, rps, avg, min, p50, p95, p99, max (ms)
n, xlen = int(n), int(xlen)
send_s = (int(t1) - int(t0)) / 1e9
r = {
    "tps": float(row[1]), "avg_rt_ms": float(row[2]), "max_rt_ms": float(row[7]),
    "sent": xlen, "failed": n - xlen, "send_s": send_s, "send_rate": xlen / send_s,
    "cpu_send_us": (int(c1) - int(c0)) / int(tck) * 1e6 / n, "rss_mib": int(hwm) / 1024,
    **{k: float(v) for k, v in (x.split("=", 1) for x in client.split())},
}
print(f"redis-xadd\t{run}\t" + " ".join(f"{k}={v}" for k, v in r.items()) + "\tlines=-")
EOF
}

payload=""
if has redis-xadd; then
    payload=$("$PYTHON" -c 'import random, string, sys; print("".join(random.choice(string.ascii_letters + string.digits) for _ in range(int(sys.argv[1]))))' "$size")
fi

declare -A DESCS
if ((seconds > 0)); then phase="${seconds} s of sending"; else phase=$("$PYTHON" -c 'import sys; print(f"{int(sys.argv[1]):,} messages")' "$messages"); fi
say "work dir $work; ${phase}, ${threads} threads, ${size}-byte bodies, ${runs} run(s): ${selected[*]}"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
say "load average: $load_before"
for ((run = 1; run <= runs; run++)); do
    order=("${selected[@]}")
    if ((run % 2 == 0)); then
        order=()
        for ((i = ${#selected[@]} - 1; i >= 0; i--)); do order+=("${selected[$i]}"); done
    fi
    for b in "${order[@]}"; do
        rdir=$work/run$run/$b
        say "run $run/$runs: $b"
        start_broker "$b" "$rdir"
        DESCS[$b]=$DESC
        if [[ $b == redis-xadd ]]; then run_redis "$rdir"; else run_rocketmq "$b" "$rdir"; fi
        say "$b: $(tail -1 "$results" | cut -f3)"
        stop_broker
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

table=$("$PYTHON" - "$results" "$phase" "$runs" "$threads" "$size" "$warmup" "$load_before" "$load_after" \
    "${DESCS[skiff-java]:-}" "${DESCS[apache-java]:-}" "${DESCS[redis-xadd]:-}" <<'EOF'
import statistics, sys
path, phase, runs, threads, size, warmup, lb, la, dskiff, dapache, dredis = sys.argv[1:12]
rows, lines = {}, {}
for line in open(path):
    b, run, kv, which = line.rstrip("\n").split("\t")
    rows.setdefault(b, []).append({k: float(v) for k, v in (x.split("=", 1) for x in kv.split())})
    lines.setdefault(b, set()).add(which.split("=", 1)[-1])
# label, key, format, with a skiff / apache ratio, with a skiff / redis ratio
cols = [
    ("send TPS (tool's lines, median after warm-up; redis: requests/s)", "tps", "{:,.0f}", 1, 1),
    ("send msgs/s (messages / send s)", "send_rate", "{:,.0f}", 1, 1),
    ("average RT ms", "avg_rt_ms", "{:.3f}", 1, 1),
    ("max RT ms", "max_rt_ms", "{:.0f}", 1, 1),
    ("messages sent (stored)", "sent", "{:,.0f}", 1, 0),
    ("topic queues", "queues", "{:.0f}", 0, 0),
    ("send failures", "failed", "{:.0f}", 0, 0),
    ("send s", "send_s", "{:.2f}", 1, 0),
    ("drain s (benchmark Consumer)", "drain_s", "{:.2f}", 1, 0),
    ("send+drain s", "total_s", "{:.2f}", 1, 0),
    ("drain msgs/s", "drain_rate", "{:,.0f}", 1, 0),
    ("broker CPU µs/msg (send)", "cpu_send_us", "{:.1f}", 1, 1),
    ("broker CPU µs/msg (drain)", "cpu_drain_us", "{:.1f}", 1, 0),
    ("peak RSS MiB (VmHWM)", "rss_mib", "{:.0f}", 1, 1),
    ("client CPU µs/msg (send; its process whole, start included)", "client_cpu_us", "{:.1f}", 1, 1),
    ("machine CPU busy during send, cores", "machine_busy_cores", "{:.2f}", 0, 0),
]
def med(b, k):
    vs = [r[k] for r in rows.get(b, []) if k in r]
    return statistics.median(vs) if vs else None
order = [b for b in ("skiff-java", "apache-java", "redis-xadd") if b in rows]
ratios = [p for p in ("apache-java", "redis-xadd") if "skiff-java" in rows and p in rows]
names = {"apache-java": "apache", "redis-xadd": "redis"}
out = [f"### RocketMQ's benchmark tool (rocketmq-example 5.5.0 Producer / Consumer): {phase}, "
       f"{threads} threads, {size}-byte bodies, sync sends; medians of {runs} run(s)", ""]
out.append("| | " + " | ".join(order + [f"skiff / {names[p]}" for p in ratios]) + " |")
out.append("| --- |" + " --- |" * (len(order) + len(ratios)))
for label, k, f, with_apache, with_redis in cols:
    if all(med(b, k) is None for b in order):
        continue
    cells = ["–" if med(b, k) is None else f.format(med(b, k)) for b in order]
    for p in ratios:
        s, a = med("skiff-java", k), med(p, k)
        wanted = with_apache if p == "apache-java" else with_redis
        cells.append(f"{s / a:.2f}×" if wanted and s is not None and a else "–")
    out.append(f"| {label} | " + " | ".join(cells) + " |")
out.append("")
for b, d in (("skiff-java", dskiff), ("apache-java", dapache), ("redis-xadd", dredis)):
    if d and b in rows:
        out.append(f"- {b}: {d}")
w = int(warmup)
note = (f"- send TPS and average RT: the medians of the Producer's stats lines (`-ri 1000`: one a "
        f"second from 10 s on, each over the last 9 s) whose window starts {w} s or more after the start")
if any("all" in lines.get(b, ()) for b in order):
    note += " (in some run no line was that late: there, all lines; a send phase under 10 s has none)"
out.append(note + "; max RT and failures: the tool's totals at the end of the send phase")
out.append(f"- load average before {lb}, after {la}")
print("\n".join(out))
EOF
)
echo "$table"
if [[ -n $out ]]; then
    { echo; echo "$table"; } >>"$out"
fi
