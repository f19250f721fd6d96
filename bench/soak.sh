#!/usr/bin/env bash
# Soak: skiff serve under a steady produce + consume load (20,000 msgs/s by default) for a
# given time, with small segments and a short retention so retention runs many times, while
# the broker's RSS, disk use, open files and consumer lag are sampled.
#
#   bench/soak.sh                          # 30 minutes, 64 MiB segments, 2 min retention
#   bench/soak.sh --minutes 5 --rate 20000 --retention 1m --segment-mib 32 --every 15
#   bench/soak.sh --out bench/SOAK.md      # also write the table and verdicts there
#
# The load is skiff-bench's latency run (one producer, one consumer of one group committing as
# it goes, 4 queues, 100-byte messages) against `skiff serve --flush async`, built by
# bench/run.sh into target-bench beside the repo. Samples: every --every seconds, the broker's
# VmRSS (/proc), the size of its data dir (du), its open file descriptors (/proc/PID/fd) and the
# group's lag summed over queues (skiff_consumer_lag_messages on the metrics endpoint). The
# verdicts compare the samples after the first retention cycle (retention + one cleanup
# interval + a minute) with their maximum: flat means the last third's maximum is within 10 %
# (RSS, files) or one segment per queue's worth (disk) of the middle third's.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
target="${SKIFF_BENCH_TARGET_DIR:-$(cd "$root/.." && pwd)/target-bench}"

minutes=30 rate=20000 retention=2m segment_mib=64 every=30 cleanup=10s out=""
while (($#)); do
    case $1 in
        --minutes) minutes=$2; shift ;;
        --rate) rate=$2; shift ;;
        --retention) retention=$2; shift ;;
        --segment-mib) segment_mib=$2; shift ;;
        --cleanup-interval) cleanup=$2; shift ;;
        --every) every=$2; shift ;;
        --out) out=$2; shift ;;
        *) echo "usage: $0 [--minutes N] [--rate MSGS] [--retention D] [--segment-mib N] [--cleanup-interval D] [--every S] [--out FILE]" >&2; exit 2 ;;
    esac
    shift
done

# Build (release) skiff and skiff-bench once, as run.sh does.
bash "$here/run.sh" --help >/dev/null
bench_bin="$target/release/skiff-bench"
skiff_bin="$target/release/skiff"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
work=$(mktemp -d /var/tmp/skiff-soak.XXXXXX)
# skiff-bench removes its own work dir when it ends; the samples live beside it.
mkdir -p "$work/bench"
samples="$work/samples.tsv"
secs=$((minutes * 60))
echo "soak: ${minutes} min at ${rate} msgs/s, ${segment_mib} MiB segments, retention ${retention}, metrics on 127.0.0.1:${port}, work dir ${work}" >&2

"$bench_bin" --skiff-bin "$skiff_bin" --brokers skiff-async --runs 1 --messages 100 \
    --latency-rate "$rate" --latency-secs "$secs" --latency-warmup-secs 1 \
    --work-dir "$work/bench" \
    --skiff-args "--segment-size $((segment_mib << 20)) --retention $retention --cleanup-interval $cleanup --metrics-listen 127.0.0.1:$port" \
    >"$work/bench.out" 2>"$work/bench.err" &
bench_pid=$!
trap 'kill $bench_pid 2>/dev/null || true' EXIT

printf 'elapsed_s\trss_mib\tdisk_mib\topen_files\tlag\tproduced\n' >"$samples"
start=$(date +%s)
broker_pid=""
while kill -0 "$bench_pid" 2>/dev/null; do
    sleep "$every"
    if [[ -z $broker_pid ]] || ! kill -0 "$broker_pid" 2>/dev/null; then
        # The broker, not skiff-bench (whose own arguments carry the same flags).
        broker_pid=$(pgrep -f -- "^$skiff_bin serve .*--metrics-listen 127.0.0.1:$port" | head -1 || true)
        [[ -z $broker_pid ]] && continue
    fi
    data_dir=$(tr '\0' '\n' <"/proc/$broker_pid/cmdline" 2>/dev/null | sed -n '/^--data-dir$/{n;p}')
    rss_kib=$(awk '/^VmRSS/{print $2}' "/proc/$broker_pid/status" 2>/dev/null || echo 0)
    files=$(ls "/proc/$broker_pid/fd" 2>/dev/null | wc -l)
    disk_kib=$(du -sk "$data_dir" 2>/dev/null | cut -f1 || echo 0)
    metrics=$(curl -s --max-time 5 "http://127.0.0.1:$port/metrics" || true)
    lag=$(awk '/^skiff_consumer_lag_messages/{s+=$2} END{printf "%d", s}' <<<"$metrics")
    produced=$(awk '/^skiff_produced_messages_total\{topic="bench"/{s+=$2} END{printf "%d", s}' <<<"$metrics")
    awk -v t="$(($(date +%s) - start))" -v rss="${rss_kib:-0}" -v disk="${disk_kib:-0}" \
        -v files="$files" -v lag="${lag:-0}" -v produced="${produced:-0}" \
        'BEGIN { printf "%d\t%.1f\t%.1f\t%d\t%d\t%d\n", t, rss / 1024, disk / 1024, files, lag, produced }' |
        tee -a "$samples" >&2
done
wait "$bench_pid" && bench_ok=1 || bench_ok=0
trap - EXIT

python3 - "$samples" "$retention" "$cleanup" "$segment_mib" "$bench_ok" "$work/bench.out" "$out" <<'PY'
import re, sys
path, retention, cleanup, segment_mib, bench_ok, bench_out, out = sys.argv[1:]
def secs(d):
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", d)
    n, u = int(m.group(1)), m.group(2)
    return n / 1000 if u == "ms" else n * {"s": 1, "m": 60, "h": 3600}[u]
rows = [l.split("\t") for l in open(path).read().splitlines()[1:]]
rows = [[float(x) for x in r] for r in rows]
settle = secs(retention) + secs(cleanup) + 60
after = [r for r in rows if r[0] >= settle]
lines = ["| elapsed s | RSS MiB | disk MiB | open files | lag | produced |", "|---:|---:|---:|---:|---:|---:|"]
lines += [f"| {int(r[0])} | {r[1]:.1f} | {r[2]:.1f} | {int(r[3])} | {int(r[4])} | {int(r[5])} |" for r in rows]
verdicts = []
if len(after) >= 3:
    third = len(after) // 3
    mid, last = after[third:2 * third], after[2 * third:]
    def flat(i, slack):
        return max(r[i] for r in last) <= max(r[i] for r in mid) + slack(max(r[i] for r in mid))
    verdicts.append(f"RSS flat after the first retention cycle: {'yes' if flat(1, lambda m: 0.1 * m) else 'NO'} "
                    f"(middle third max {max(r[1] for r in mid):.1f} MiB, last third max {max(r[1] for r in last):.1f} MiB)")
    verdicts.append(f"disk flat: {'yes' if flat(2, lambda m: 4 * float(segment_mib)) else 'NO'} "
                    f"(middle {max(r[2] for r in mid):.1f} MiB, last {max(r[2] for r in last):.1f} MiB)")
    verdicts.append(f"open files flat: {'yes' if flat(3, lambda m: 0.1 * m + 2) else 'NO'} "
                    f"(middle {int(max(r[3] for r in mid))}, last {int(max(r[3] for r in last))})")
    verdicts.append(f"lag bounded: max {int(max(r[4] for r in after))} messages after settling")
else:
    verdicts.append("too few samples after the first retention cycle for verdicts")
verdicts.append("load generator: " + ("completed" if bench_ok == "1" else "FAILED (see bench.err in the work dir)"))
text = "\n".join(lines + [""] + ["- " + v for v in verdicts]) + "\n"
print(text)
if out:
    open(out, "w").write(text)
PY
