#!/usr/bin/env bash
# mqadmin conformance: Apache RocketMQ's own admin tool (org.apache.rocketmq:rocketmq-tools,
# main class org.apache.rocketmq.tools.command.MQAdminStartup) against one broker.
#
#   bash tests/conformance/mqadmin.sh --broker skiff|apache [--keep]
#   bash tests/conformance/mqadmin.sh --build-only   # resolve and build what a run needs, then exit
#
# Starts the broker as run.sh does (skiff: SKIFF_BIN or `cargo build --release --bin skiff`, then
# `skiff serve` on a free port with a fresh data dir; apache: apache/start.sh), creates a topic
# with `mqadmin updateTopic`, then puts the broker in a known state with the Java harness
# (java/, `Main --mqadmin-setup`: 20 messages with keys from a producer group that stays
# online, all consumed by a push consumer group that stays online, offsets committed), and runs
# the mqadmin commands below. Each must exit 0 and show the state (topic and group names, queue
# counts, offsets, keys, message ids): the checks grep the output for those, not for exact text,
# so the same checks hold against both brokers. Ends with `N passed, M failed`; exit 0 iff M = 0.
# Against skiff, the commands listed in mqadmin-pending-on-skiff.txt run and print as PENDING
# without counting as failures; one that passes fails the run until its line is removed.
#
# The tool's classpath is resolved once from mqadmin/pom.xml with Maven into ~/.m2 and a
# classpath file under ${XDG_CACHE_HOME:-~/.cache}/skiff-conformance, beside a class-data archive
# of its classes that starts each run's JVM with less CPU (mqadmin/tools.sh).
# Environment: SKIFF_BIN, CONFORMANCE_WORK_DIR, PYTHON (as run.sh).

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python3}
BROKER="" KEEP=0 BUILD_ONLY=0
usage="usage: $0 --broker skiff|apache [--keep] | --build-only"
while (($#)); do
    case $1 in
        --broker) BROKER=$2; shift ;;
        --keep) KEEP=1 ;;
        --build-only) BUILD_ONLY=1 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
    shift
done
[[ $BROKER == skiff || $BROKER == apache ]] || ((BUILD_ONLY)) || { echo "$usage" >&2; exit 2; }
log() { printf '[mqadmin %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
MAX_LIFETIME=900
fail_setup() { log "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }

# ---- mqadmin's classpath, resolved once ---------------------------------------------------
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/skiff-conformance
mkdir -p "$CACHE"
# shellcheck source=tests/conformance/mqadmin/tools.sh
source "$HERE/mqadmin/tools.sh"
resolve_tools

# ---- the Java harness (for the setup), built as run.sh builds it -------------------------
JAVA_DIR=$HERE/java
CP_FILE=$JAVA_DIR/target/classpath.txt
if [[ ! -s $CP_FILE || ! -d $JAVA_DIR/target/classes \
    || -n $(find "$JAVA_DIR/src" "$JAVA_DIR/pom.xml" -newer "$CP_FILE" -print -quit) ]]; then
    log "building the Java harness (mvn compile)"
    nice -n 10 mvn -q -B -f "$JAVA_DIR/pom.xml" compile >"${TMPDIR:-/tmp}/skiff-mqadmin-mvn.log" 2>&1 \
        || fail_setup "building the harness; see ${TMPDIR:-/tmp}/skiff-mqadmin-mvn.log"
    touch "$CP_FILE"
fi
HARNESS_CP=$JAVA_DIR/target/classes:$(cat "$CP_FILE")
((BUILD_ONLY)) && exit 0

WORK=${CONFORMANCE_WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/skiff-mqadmin.XXXXXX")}
mkdir -p "$WORK/client-home"
WORK=$(cd "$WORK" && pwd)

# ---- broker under test (as run.sh starts it) ------------------------------------------------
SKIFF_PID="" WATCHDOG_PID="" APACHE_DIR="" SETUP_PID=""
cleanup() {
    if [[ -n $SETUP_PID ]]; then
        kill -TERM "$SETUP_PID" 2>/dev/null
        wait "$SETUP_PID" 2>/dev/null
    fi
    if [[ -n $SKIFF_PID ]] && kill -0 "$SKIFF_PID" 2>/dev/null; then
        kill -TERM "$SKIFF_PID" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$SKIFF_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SKIFF_PID" 2>/dev/null
    fi
    if [[ -n $WATCHDOG_PID ]]; then
        pkill -TERM -P "$WATCHDOG_PID" 2>/dev/null
        kill -TERM "$WATCHDOG_PID" 2>/dev/null
    fi
    [[ -n $APACHE_DIR ]] && "$HERE/apache/stop.sh" "$APACHE_DIR" --keep >/dev/null 2>&1
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM

NAMESRV=""
if [[ $BROKER == apache ]]; then
    out=$("$HERE/apache/start.sh" --dir "$WORK/apache" --max-lifetime "$MAX_LIFETIME") \
        || fail_setup "Apache RocketMQ did not start; logs in $WORK/apache"
    APACHE_DIR=$WORK/apache
    NAMESRV=$(sed -n 's/^NAMESRV=//p' <<<"$out" | tail -1)
else
    SKIFF=${SKIFF_BIN:-}
    if [[ -z $SKIFF ]]; then
        log "building skiff (cargo build --release --bin skiff)"
        (cd "$ROOT" && nice -n 10 cargo build --release --bin skiff) >"$WORK/cargo.log" 2>&1 \
            || fail_setup "cargo build; see $WORK/cargo.log"
        SKIFF=${CARGO_TARGET_DIR:-$ROOT/target}/release/skiff
        [[ $SKIFF == /* ]] || SKIFF=$ROOT/$SKIFF
    fi
    [[ -x $SKIFF ]] || fail_setup "no skiff binary at $SKIFF"
    port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
    NAMESRV=127.0.0.1:$port
    (cd "$WORK" && exec "$SKIFF" serve --listen "$NAMESRV" --data-dir "$WORK/skiff-data") \
        >>"$WORK/skiff.log" 2>&1 </dev/null &
    SKIFF_PID=$!
    setsid bash -c 'sleep "$1"; kill -TERM "$2" 2>/dev/null; sleep 10; kill -KILL "$2" 2>/dev/null' \
        watchdog "$MAX_LIFETIME" "$SKIFF_PID" >/dev/null 2>&1 </dev/null &
    WATCHDOG_PID=$!
    "$PYTHON" "$HERE/apache/probe.py" --namesrv "$NAMESRV" --brokers any --no-broker-check \
        --timeout 30 --pids "$SKIFF_PID" >/dev/null || fail_setup "skiff did not start; see $WORK/skiff.log"
fi
log "$BROKER ready at $NAMESRV; work dir $WORK"

# ---- helpers ----------------------------------------------------------------------------------
# mqadmin NAME ARGS...: runs `mqadmin ARGS -n NAMESRV` into WORK/NAME.out; its exit status.
# It runs in WORK: consumerStatus writes each client's running info into the current directory.
mqadmin() {
    local name=$1
    shift
    (cd "$WORK" && exec timeout --kill-after=5 90 java "${TOOLS_JVM_FLAGS[@]}" -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Duser.home="$WORK/client-home" -Drocketmq.client.logUseSlf4j=false \
        -cp "$TOOLS_CP" org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "$NAMESRV") \
        >"$WORK/$name.out" 2>&1
}

declare -A PENDING=()
if [[ $BROKER == skiff ]]; then
    while read -r n why; do
        [[ -z $n || $n == \#* ]] || PENDING[$n]=$why
    done <"$HERE/mqadmin-pending-on-skiff.txt"
fi
PASSED=0 FAILED=0 PENDING_FAILED=0
# verdict NAME RC [PROBLEM...]: PASS when RC is 0 and no problem was found.
verdict() {
    local name=$1 rc=$2
    shift 2
    local problems=("$@")
    ((rc == 0)) || problems=("exit status $rc" "${problems[@]}")
    local pending=${PENDING[$name]+x}
    if ((${#problems[@]} == 0)); then
        if [[ -n $pending ]]; then
            echo "FAIL $name: passes, but mqadmin-pending-on-skiff.txt lists it as not built; delete its line there"
            FAILED=$((FAILED + 1))
        else
            echo "PASS $name"
            PASSED=$((PASSED + 1))
        fi
        return
    fi
    local why
    why=$(IFS='; '; echo "${problems[*]}")
    if [[ -n $pending ]]; then
        echo "PENDING $name: $why (${PENDING[$name]})"
        PENDING_FAILED=$((PENDING_FAILED + 1))
    else
        echo "FAIL $name: $why (output: $WORK/$name.out)"
        sed 's/^/    | /' "$WORK/$name.out" | grep -v '^    | \s*$' | tail -n 8
        FAILED=$((FAILED + 1))
    fi
}
# has NAME REGEX DESCRIPTION: prints DESCRIPTION when NAME's output has no line matching REGEX.
has() { grep -Eq -- "$2" "$WORK/$1.out" || echo "$3"; }
lacks() { grep -Eq -- "$2" "$WORK/$1.out" && echo "$3"; }
# in_lane NAME ARGS...: runs mqadmin as `mqadmin` does and keeps its exit status in WORK/NAME.rc.
in_lane() {
    mqadmin "$@"
    echo $? >"$WORK/$1.rc"
}
# judge NAME 'CHECKS': the verdict on NAME's run, from its kept exit status and CHECKS (shell
# code printing problems).
judge() {
    local name=$1 checks=$2 rc problems=()
    rc=$(cat "$WORK/$name.rc" 2>/dev/null) || rc=255
    mapfile -t problems < <(eval "$checks")
    verdict "$name" "$rc" "${problems[@]}"
}

RUN=$(date +%s%N | tail -c 9)
TOPIC=mqadmin_t_$RUN
GROUP=mqadmin_cg_$RUN
PGROUP=mqadmin_pg_$RUN
SUBGROUP=mqadmin_sg_$RUN
TMP_TOPIC=mqadmin_tmp_$RUN
N=20 # messages the setup sends (MqadminSetup.MESSAGES)

# ---- the commands -----------------------------------------------------------------------------
# clusterList: one broker, active; its cluster name and address are what the other commands use.
mqadmin clusterList clusterList
rc=$?
read -r CLUSTER _ _ BROKER_ADDR _ < <(awk 'NR > 1 && $3 == "0" {print; exit}' "$WORK/clusterList.out")
problems=()
[[ -n ${BROKER_ADDR:-} && $BROKER_ADDR == 127.0.0.1:* ]] || problems+=("no master broker line")
grep -Eq 'true[[:space:]]*$' "$WORK/clusterList.out" || problems+=("broker not shown as activated")
verdict clusterList "$rc" "${problems[@]}"
CLUSTER=${CLUSTER:-none} BROKER_ADDR=${BROKER_ADDR:-none}

in_lane updateTopic updateTopic -c "$CLUSTER" -t "$TOPIC" -r 4 -w 4
judge updateTopic \
    'has updateTopic "success" "no success line"; has updateTopic "readQueueNums=4, writeQueueNums=4" "queue counts not echoed"'

log "setup: $N messages with keys, consumed by $GROUP"
timeout --kill-after=5 300 java -Xms64m -Xmx256m -XX:+UseSerialGC -Duser.home="$WORK/client-home" \
    -cp "$HARNESS_CP" skiff.conformance.Main --mqadmin-setup --namesrv "$NAMESRV" \
    --topic "$TOPIC" --group "$GROUP" --producer-group "$PGROUP" >"$WORK/setup.out" 2>"$WORK/setup.err" &
SETUP_PID=$!
for _ in $(seq 600); do
    grep -q '^READY' "$WORK/setup.out" && break
    grep -q '^SETUP FAILED' "$WORK/setup.out" && break
    kill -0 "$SETUP_PID" 2>/dev/null || break
    sleep 0.5
done
if ! grep -q '^READY' "$WORK/setup.out"; then
    log "FAIL: setup: $(grep '^SETUP FAILED' "$WORK/setup.out" || tail -3 "$WORK/setup.err")"
    echo "$PASSED passed, $((FAILED + 1)) failed"
    exit 1
fi
UNIQ_KEY=$(sed -n 's/^UNIQ_KEY=//p' "$WORK/setup.out")
OFFSET_MSG_ID=$(sed -n 's/^OFFSET_MSG_ID=//p' "$WORK/setup.out")

# ---- the commands after the setup ------------------------------------------------------------
# Each reads the state the setup made or changes only what it made itself, so they run side by
# side in lanes (an mqadmin run spends most of its 3-5 s starting a JVM and waiting for its client
# to close), each lane in the order its commands depend on. The checks then judge every output in
# the order written. resetOffsetByTime moves the group's offsets: it runs last, alone.
TYPO_TOPIC=mqadmin_typo_$RUN
LANES=()
(
    in_lane topicList topicList
    in_lane topicRoute topicRoute -t "$TOPIC"
    in_lane topicStatus topicStatus -t "$TOPIC"
) &
LANES+=($!)
(
    # The topic list comes after the three read-only commands on the typo.
    in_lane typoRoute topicRoute -t "$TYPO_TOPIC"
    in_lane typoStatus topicStatus -t "$TYPO_TOPIC"
    in_lane typoQuery queryMsgByKey -t "$TYPO_TOPIC" -k some-key
    in_lane typoTopicList topicList
) &
LANES+=($!)
(
    in_lane updateSubGroup updateSubGroup -c "$CLUSTER" -g "$SUBGROUP"
    in_lane deleteSubGroup deleteSubGroup -c "$CLUSTER" -g "$SUBGROUP"
    in_lane updateTopicTmp updateTopic -c "$CLUSTER" -t "$TMP_TOPIC" -r 2 -w 2
    in_lane deleteTopic deleteTopic -c "$CLUSTER" -t "$TMP_TOPIC"
    in_lane topicListAfterDelete topicList
) &
LANES+=($!)
(
    # The group's commands see it after its request mode for the topic changed.
    in_lane setConsumeMode setConsumeMode -b "$BROKER_ADDR" -t "$TOPIC" -g "$GROUP" -m POP -q 0
    in_lane consumerProgress consumerProgress -g "$GROUP"
    in_lane consumerConnection consumerConnection -g "$GROUP"
    in_lane consumerStatus consumerStatus -g "$GROUP"
) &
LANES+=($!)
(
    in_lane producerConnection producerConnection -g "$PGROUP" -t "$TOPIC"
    in_lane brokerStatus brokerStatus -b "$BROKER_ADDR"
    in_lane getBrokerConfig getBrokerConfig -c "$CLUSTER"
) &
LANES+=($!)
(
    in_lane queryMsgById queryMsgById -i "$OFFSET_MSG_ID" -t "$TOPIC"
    in_lane queryMsgByKey queryMsgByKey -t "$TOPIC" -k mqadmin-key-0
    in_lane queryMsgByUniqueKey queryMsgByUniqueKey -t "$TOPIC" -i "$UNIQ_KEY"
) &
LANES+=($!)
for lane in "${LANES[@]}"; do wait "$lane"; done
in_lane resetOffsetByTime resetOffsetByTime -g "$GROUP" -t "$TOPIC" -s now

judge topicList \
    'has topicList "^$TOPIC\$" "topic $TOPIC not listed"'

judge topicRoute \
    'has topicRoute "\"readQueueNums\"[[:space:]]*:[[:space:]]*4" "no read queue count 4"; has topicRoute "$BROKER_ADDR" "broker address not in the route"'

# topicStatus: 4 queues whose max offsets add up to the N messages sent.
sum_column() { awk -v col="$2" '$2 ~ /^[0-9]+$/ && NF >= col {s += $col} END {print s + 0}' "$WORK/$1.out"; }
count_rows() { awk '$2 ~ /^[0-9]+$/ {n++} END {print n + 0}' "$WORK/$1.out"; }
judge topicStatus \
    '[[ $(count_rows topicStatus) == 4 ]] || echo "expected 4 queue rows, saw $(count_rows topicStatus)"; [[ $(sum_column topicStatus 4) == "$N" ]] || echo "max offsets add up to $(sum_column topicStatus 4), expected $N"'

# A typo creates nothing: the route and the status of a topic nobody created fail with
# TOPIC_NOT_EXIST (17), a key query on it finds nothing, and none of them lists the topic after.
mapfile -t problems < <(has typoRoute "CODE: 17" "route of a missing topic not refused with code 17"; has typoStatus "CODE: 17" "status of a missing topic not refused with code 17"; lacks typoQuery "Message ID" "a key query on a missing topic found a message"; lacks typoTopicList "^$TYPO_TOPIC\$" "$TYPO_TOPIC listed after read-only commands"; has typoTopicList "^$TOPIC\$" "no topic list")
verdict missingTopicCreatesNothing 0 "${problems[@]}"

judge updateSubGroup \
    'has updateSubGroup "success" "no success line"; has updateSubGroup "groupName=$SUBGROUP" "group not echoed"'

# setConsumeMode: the broker takes the group's request mode for the topic (POP); a broker that
# refuses it makes mqadmin throw with -b.
judge setConsumeMode \
    'has setConsumeMode "success" "no success line"; has setConsumeMode "consume mode\[POP\]" "mode not echoed"'

judge deleteSubGroup \
    'has deleteSubGroup "success" "no success line"'

# deleteTopic: a topic created for it disappears from the topic list.
judge deleteTopic \
    'has updateTopicTmp "success" "creating $TMP_TOPIC failed"; has deleteTopic "success" "no success line"; lacks topicListAfterDelete "^$TMP_TOPIC\$" "$TMP_TOPIC still listed after deleteTopic"; has topicListAfterDelete "^$TOPIC\$" "$TOPIC gone after deleting another topic"'

# consumerProgress: every queue of the topic, consumer offset = broker offset, diff 0.
judge consumerProgress \
    '[[ $(grep -c "^$TOPIC " "$WORK/consumerProgress.out") == 4 ]] || echo "expected 4 rows of $TOPIC"; has consumerProgress "Diff Total: 0" "diff total not 0"; [[ $(awk -v t="$TOPIC" "\$1 == t {s += \$4} END {print s + 0}" "$WORK/consumerProgress.out") == "$N" ]] || echo "broker offsets do not add up to $N"; [[ $(awk -v t="$TOPIC" "\$1 == t {s += \$5} END {print s + 0}" "$WORK/consumerProgress.out") == "$N" ]] || echo "consumer offsets do not add up to $N"'

judge consumerConnection \
    'has consumerConnection "@" "no client id"; has consumerConnection "JAVA" "no client language"; has consumerConnection "$TOPIC" "subscription to $TOPIC not shown"; has consumerConnection "CLUSTERING" "message model not shown"; has consumerConnection "CONSUME_PASSIVELY" "consume type not shown"; has consumerConnection "CONSUME_FROM_FIRST_OFFSET" "consume-from-where not shown"'

# consumerStatus: the broker forwards GET_CONSUMER_RUNNING_INFO to the consumer itself; mqadmin
# writes each client's running info to a file and judges the group from them.
judge consumerStatus \
    'has consumerStatus "^1 .*@" "no running info of a client listed"; has consumerStatus "Rebalance OK" "rebalance of the group not judged OK"; lacks consumerStatus "not online|Exception" "an error was printed"'

judge producerConnection \
    'has producerConnection "@" "no client id"; has producerConnection "JAVA" "no client language"'

judge brokerStatus \
    'has brokerStatus "brokerVersionDesc" "no version"; has brokerStatus "msgPutTotalTodayNow" "no put total"'

judge getBrokerConfig \
    'has getBrokerConfig "brokerName[[:space:]]*=" "no brokerName"; has getBrokerConfig "brokerClusterName[[:space:]]*=[[:space:]]*$CLUSTER" "no cluster name"'

judge queryMsgById \
    'has queryMsgById "$TOPIC" "topic not shown"; has queryMsgById "mqadmin-key-0" "keys not shown"; has queryMsgById "$UNIQ_KEY" "unique key not shown"'

judge queryMsgByKey \
    'has queryMsgByKey "$UNIQ_KEY" "message $UNIQ_KEY not found"'

judge queryMsgByUniqueKey \
    'has queryMsgByUniqueKey "mqadmin-key-0" "keys not shown"; has queryMsgByUniqueKey "$TOPIC" "topic not shown"'

# resetOffsetByTime to now: every queue of the topic is reset to its end (N in all).
judge resetOffsetByTime \
    '[[ $(count_rows resetOffsetByTime) == 4 ]] || echo "expected 4 queue rows"; [[ $(sum_column resetOffsetByTime 3) == "$N" ]] || echo "reset offsets add up to $(sum_column resetOffsetByTime 3), expected $N"'

((PENDING_FAILED)) && echo "$PENDING_FAILED pending: features skiff has not built yet (tests/conformance/mqadmin-pending-on-skiff.txt)"
echo "$PASSED passed, $FAILED failed"
if ((FAILED == 0 && !KEEP)); then
    cleanup
    trap - EXIT
    rm -rf "$WORK"
fi
((FAILED == 0))
