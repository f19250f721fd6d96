#!/usr/bin/env bash
# Stop what start.sh started in DIR: SIGTERM each JVM listed in DIR/pids, SIGKILL after 15 s,
# end the watchdog, and remove DIR (unless --keep).
#
#   tests/conformance/apache/stop.sh DIR [--keep]

set -uo pipefail
DIR=${1:?usage: stop.sh DIR [--keep]}
KEEP=${2:-}
[[ -f $DIR/pids ]] || { echo "stop.sh: no $DIR/pids" >&2; exit 1; }

JVMS=() WATCHDOG=""
while read -r pid name; do
    [[ -n $pid ]] || continue
    if [[ $name == watchdog ]]; then WATCHDOG=$pid; else JVMS+=("$pid"); fi
done <"$DIR/pids"

# Brokers first, then the name server (listed first), as mqshutdown does.
for ((i = ${#JVMS[@]} - 1; i >= 0; i--)); do kill -TERM "${JVMS[$i]}" 2>/dev/null; done
for _ in $(seq 150); do
    left=0
    for p in "${JVMS[@]}"; do kill -0 "$p" 2>/dev/null && left=1; done
    ((left)) || break
    sleep 0.1
done
for p in "${JVMS[@]}"; do kill -KILL "$p" 2>/dev/null; done
if [[ -n $WATCHDOG ]]; then
    # The watchdog is `bash -c 'sleep ...'` in its own session: end its sleep child, then it.
    pkill -TERM -P "$WATCHDOG" 2>/dev/null
    kill -TERM "$WATCHDOG" 2>/dev/null
fi
[[ $KEEP == --keep ]] || rm -rf "$DIR"
exit 0
