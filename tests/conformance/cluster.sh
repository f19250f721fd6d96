#!/usr/bin/env bash
# skiff's own producer and consumers (RemoteBroker) against an Apache RocketMQ cluster of two
# brokers: starts the cluster (apache/start.sh --cluster), creates the test topics with 4 queues
# on both brokers, runs the ignored tests of tests/it/remote_cluster.rs against it and stops it.
#
#   bash tests/conformance/cluster.sh [--keep]      (--keep: leave the cluster dir for reading)
#
# Needs what apache/start.sh needs (Java 17, Maven; jars cached in ~/.m2) and cargo. Exit status
# is the tests'.

set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python3}
KEEP=${1:-}
# Keep equal to the topic constants of tests/it/remote_cluster.rs.
TOPICS=(SkiffClusterSpread SkiffClusterSplit SkiffClusterOrderly SkiffClusterRestart SkiffClusterTxn)
log() { printf '[cluster %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

DIR=$(mktemp -d "${TMPDIR:-/tmp}/skiff-cluster.XXXXXX")
stop() { bash "$HERE/apache/stop.sh" "$DIR" $KEEP >/dev/null 2>&1 || true; }
trap stop EXIT

log "starting the Apache cluster in $DIR"
NAMESRV=$(bash "$HERE/apache/start.sh" --cluster --dir "$DIR" | sed -n 's/^NAMESRV=//p' | tail -1)
[[ -n $NAMESRV ]] || { log "FAIL: start.sh printed no NAMESRV"; exit 1; }
log "name server $NAMESRV; brokers $(tr '\n' ' ' <"$DIR/brokers.addr")"

# UPDATE_AND_CREATE_TOPIC (17) on every broker, then wait until the name server's route of each
# topic names both brokers.
"$PYTHON" - "$HERE/apache" "$NAMESRV" "$DIR/brokers.addr" "${TOPICS[@]}" <<'PY'
import json, re, sys, time
sys.path.insert(0, sys.argv[1])
from probe import request
namesrv, addr_file, topics = sys.argv[2], sys.argv[3], sys.argv[4:]
brokers = dict(line.strip().split("=", 1) for line in open(addr_file) if "=" in line)
for topic in topics:
    for name, addr in sorted(brokers.items()):
        rh, _ = request(addr, 17, {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4",
                                   "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
                                   "topicSysFlag": "0", "order": "false"})
        if rh.get("code") != 0:
            sys.exit("creating %s on %s (%s) answered %s %s" % (topic, name, addr, rh.get("code"), rh.get("remark")))
deadline = time.time() + 60
pending = set(topics)
while pending:
    for topic in sorted(pending):
        rh, body = request(namesrv, 105, {"topic": topic})
        if rh.get("code") == 0:
            route = json.loads(re.sub(r'([{,])(\d+):', r'\1"\2":', body.decode("utf-8", "replace")))
            if {q.get("brokerName") for q in route.get("queueDatas", [])} >= set(brokers):
                pending.discard(topic)
    if pending and time.time() > deadline:
        sys.exit("the name server does not route %s to every broker within 60 s" % sorted(pending))
    if pending:
        time.sleep(0.5)
print("topics on %s: %s" % (",".join(sorted(brokers)), " ".join(topics)), file=sys.stderr)
PY

log "running tests/it/remote_cluster.rs"
cd "$ROOT"
status=0
SKIFF_CLUSTER_NAMESRV=$NAMESRV SKIFF_CLUSTER_DIR=$DIR \
    nice -n 10 cargo test --release -p skiff --test it -- --ignored --test-threads=1 remote_cluster:: || status=$?
[[ -n $KEEP ]] && log "cluster dir kept: $DIR"
exit $status
