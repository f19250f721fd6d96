#!/usr/bin/env bash
# Cleanly restart one broker that start.sh started in DIR (same config, ports and store):
# SIGTERM (the broker persists consumer offsets and flushes on shutdown), wait for it to exit,
# start it again with DIR/launch-NAME.sh and wait until it is registered and serving.
#
#   tests/conformance/apache/restart-broker.sh DIR [NAME]      (NAME default broker-a)

set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=${1:?usage: restart-broker.sh DIR [NAME]}
NAME=${2:-broker-a}
PYTHON=${PYTHON:-python3}
pid=$(awk -v n="$NAME" '$2 == n {p = $1} END {print p}' "$DIR/pids")
[[ -n $pid ]] || { echo "restart-broker.sh: no $NAME in $DIR/pids" >&2; exit 1; }
kill -TERM "$pid" 2>/dev/null
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
    echo "restart-broker.sh: $NAME (pid $pid) still running 30 s after SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null
    sleep 1
fi
new=$("$DIR/launch-$NAME.sh")
"$PYTHON" "$HERE/probe.py" --namesrv "$(cat "$DIR/namesrv.addr")" --brokers "$NAME" --timeout 120 \
    --pids "$new" >/dev/null
