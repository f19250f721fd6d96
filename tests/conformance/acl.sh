#!/usr/bin/env bash
# ACL conformance: authentication and authorization, written once with Apache's own clients and
# run against Apache RocketMQ 5.5.0 with ACL 2.0 on (the oracle) or skiff with an [acl] config.
#
#   bash tests/conformance/acl.sh --broker apache|skiff [--only a,b] [--keep]
#   bash tests/conformance/acl.sh --build-only   # resolve and build what a run needs, then exit
#
# Users and rights, the same on both brokers:
#   rocketmq / 12345678        the super user (Apache: initAuthenticationUser; skiff: admin = true);
#                              creates the topics and groups
#   alice / alice-secret-1     Allow Pub,Sub on Topic AclTopic and Sub on Group GID_acl, nothing
#                              else (on both: mqadmin createUser + two createAcl signed as the
#                              super user)
#   topics AclTopic, AclDenied (4 queues) and groups GID_acl, GID_acl_denied, made by the harness
#   signed as the super user (DefaultMQAdminExt + AclClientRPCHook).
#
#   --broker apache   apache/start.sh --proxy --acl: name server + the Apache proxy 5.5.0 in local
#                     mode (broker inside) with ACL 2.0 in the broker config and the proxy's JSON
#   --broker skiff    ${SKIFF_BIN:-target/release/skiff} serve --config WORK/skiff.toml (the super
#                     user as an [acl] account) --listen 127.0.0.1:P --grpc-listen 127.0.0.1:G
#                     --metrics-listen off --data-dir WORK/data (never builds skiff)
#   --only a,b        run only these scenarios
#   --keep            keep the work dir (logs; Apache's auth audit log is
#                     WORK/apache/logs/rocketmqlogs/auth_audit.log) even when everything passed
#
# Scenarios: remoting (rocketmq-client 5.5.0 signed with AclClientRPCHook, acl/ harness)
# acl_allowed_send_and_consume, acl_denied_topic, acl_denied_group, acl_wrong_secret,
# acl_unsigned (each refusal must carry response code 16, NO_PERMISSION); mqadmin
# (rocketmq-tools 5.5.0, credentials from ROCKETMQ_HOME/conf/tools.yml) mqadmin_admin_allowed,
# mqadmin_admin_denied; gRPC (rocketmq-client-java 5.2.0 with StaticSessionCredentialsProvider)
# grpc_acl_allowed, grpc_acl_denied_topic, grpc_acl_wrong_secret (UnauthorizedException 40100);
# ACL 2.0 administration with mqadmin's ten user and ACL commands mqadmin_acl2_users,
# mqadmin_acl2_acls, mqadmin_acl2_precedence, mqadmin_acl2_disabled, mqadmin_acl2_ranks,
# mqadmin_acl2_super_user.
# Details in tests/conformance/README.md. Ends with `N passed, M failed`; exit 0 iff M = 0.
#
# The harness (tests/conformance/acl, Maven) is built once and rebuilt when its sources change;
# mqadmin's classpath is resolved once as mqadmin.sh does. Everything binds 127.0.0.1 (but the
# Apache proxy's gRPC and remoting ports, which have no bind setting); every process started here
# is stopped on exit, and the broker also has a watchdog.
# Environment: SKIFF_BIN, CONFORMANCE_WORK_DIR (default: a new mktemp dir), PYTHON (python3).

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python3}
BROKER="" KEEP=0 ONLY="" BUILD_ONLY=0
usage="usage: $0 --broker apache|skiff [--only a,b] [--keep] | --build-only"
while (($#)); do
    case $1 in
        --broker) BROKER=$2; shift ;;
        --only) ONLY=$2; shift ;;
        --keep) KEEP=1 ;;
        --build-only) BUILD_ONLY=1 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
    shift
done
[[ $BROKER == skiff || $BROKER == apache ]] || ((BUILD_ONLY)) || { echo "$usage" >&2; exit 2; }
log() { printf '[acl %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
fail_setup() { log "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
MAX_LIFETIME=600
ROOT_AK=rocketmq ROOT_SK=12345678 ALICE_AK=alice ALICE_SK=alice-secret-1
ALL_SCENARIOS=(acl_allowed_send_and_consume acl_denied_topic acl_denied_group acl_wrong_secret
    acl_unsigned mqadmin_admin_allowed mqadmin_admin_denied grpc_acl_allowed grpc_acl_denied_topic
    grpc_acl_wrong_secret mqadmin_acl2_users mqadmin_acl2_acls mqadmin_acl2_precedence
    mqadmin_acl2_disabled mqadmin_acl2_ranks mqadmin_acl2_super_user)
selected() { [[ -z $ONLY || ",$ONLY," == *",$1,"* ]]; }

# ---- mqadmin's classpath and the harness, built once -------------------------------------------
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/skiff-conformance
mkdir -p "$CACHE"
# shellcheck source=tests/conformance/mqadmin/tools.sh
source "$HERE/mqadmin/tools.sh"
resolve_tools

ACL_DIR=$HERE/acl
CP_FILE=$ACL_DIR/target/classpath.txt
if [[ ! -s $CP_FILE || ! -d $ACL_DIR/target/classes \
    || -n $(find "$ACL_DIR/src" "$ACL_DIR/pom.xml" -newer "$CP_FILE" -print -quit) ]]; then
    log "building the ACL harness (mvn compile)"
    nice -n 10 mvn -q -B -f "$ACL_DIR/pom.xml" compile >"${TMPDIR:-/tmp}/skiff-acl-conformance-mvn.log" 2>&1 \
        || { tail -20 "${TMPDIR:-/tmp}/skiff-acl-conformance-mvn.log" >&2
             fail_setup "building the harness; see ${TMPDIR:-/tmp}/skiff-acl-conformance-mvn.log"; }
    touch "$CP_FILE"
fi
HARNESS_CP=$ACL_DIR/target/classes:$(cat "$CP_FILE")
((BUILD_ONLY)) && exit 0

WORK=${CONFORMANCE_WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/skiff-acl.XXXXXX")}
mkdir -p "$WORK/client-home"
WORK=$(cd "$WORK" && pwd)

# ---- cleanup: every process started here, by its id --------------------------------------------
SKIFF_PID="" WATCHDOG_PID="" APACHE_DIR="" HARNESS_PID="" BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}" $HARNESS_PID; do
        if kill -0 "$p" 2>/dev/null; then
            pkill -TERM -P "$p" 2>/dev/null # its `timeout` child, which passes TERM on to the JVM
            kill -TERM "$p" 2>/dev/null
        fi
    done
    BG_PIDS=() HARNESS_PID=""
    if [[ -n $SKIFF_PID ]] && kill -0 "$SKIFF_PID" 2>/dev/null; then
        kill -TERM "$SKIFF_PID" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$SKIFF_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$SKIFF_PID" 2>/dev/null
    fi
    SKIFF_PID=""
    if [[ -n $WATCHDOG_PID ]]; then
        pkill -TERM -P "$WATCHDOG_PID" 2>/dev/null
        kill -TERM "$WATCHDOG_PID" 2>/dev/null
        WATCHDOG_PID=""
    fi
    if [[ -n $APACHE_DIR ]]; then
        "$HERE/apache/stop.sh" "$APACHE_DIR" --keep >/dev/null 2>&1
        APACHE_DIR=""
    fi
}
trap cleanup EXIT
# Further signals are ignored once interrupted: `timeout` sends its signal twice (to the child and to
# its process group), and a second one would cut the cleanup short.
trap 'trap "" INT TERM; log interrupted; exit 130' INT TERM

# shellcheck source=tests/lib.sh
source "$ROOT/tests/lib.sh"

# ---- broker under test ---------------------------------------------------------------------------
NAMESRV="" GRPC="" BROKER_ADDR=""
t0=$SECONDS
if [[ $BROKER == apache ]]; then
    APACHE_DIR=$WORK/apache # set first: an interrupted start is stopped too (stop.sh reads DIR/pids)
    out=$("$HERE/apache/start.sh" --proxy --acl --dir "$WORK/apache" --max-lifetime "$MAX_LIFETIME") \
        || fail_setup "Apache RocketMQ did not start; logs in $WORK/apache"
    NAMESRV=$(sed -n 's/^NAMESRV=//p' <<<"$out" | tail -1)
    GRPC=$(sed -n 's/^GRPC=//p' <<<"$out" | tail -1)
    BROKER_ADDR=$(sed -n 's/^broker-a=//p' "$WORK/apache/brokers.addr")
else
    SKIFF=${SKIFF_BIN:-$ROOT/target/release/skiff}
    [[ -x $SKIFF ]] || fail_setup "no skiff binary at $SKIFF (set SKIFF_BIN or build it)"
    port=$(free_port)
    grpc_port=$(free_port)
    while [[ $grpc_port == "$port" ]]; do grpc_port=$(free_port); done
    NAMESRV=127.0.0.1:$port GRPC=127.0.0.1:$grpc_port BROKER_ADDR=127.0.0.1:$port
    cat >"$WORK/skiff.toml" <<EOF
[acl]
global_white_remote_addresses = []
[[acl.accounts]]
access_key = "$ROOT_AK"
secret_key = "$ROOT_SK"
admin = true
EOF
    mkdir -p "$WORK/data"
    log "skiff $SKIFF: remoting $NAMESRV, gRPC $GRPC, data $WORK/data"
    (cd "$WORK" && exec "$SKIFF" serve --config "$WORK/skiff.toml" --listen "$NAMESRV" --grpc-listen "$GRPC" \
        --metrics-listen off --data-dir "$WORK/data") >>"$WORK/skiff.log" 2>&1 </dev/null &
    SKIFF_PID=$!
    setsid bash -c 'sleep "$1"; kill -TERM "$2" 2>/dev/null; sleep 10; kill -KILL "$2" 2>/dev/null' \
        watchdog "$MAX_LIFETIME" "$SKIFF_PID" >/dev/null 2>&1 </dev/null &
    WATCHDOG_PID=$!
    waited=0
    until grep -q 'skiff ready' "$WORK/skiff.log" 2>/dev/null; do
        kill -0 "$SKIFF_PID" 2>/dev/null || fail_setup "skiff exited; see $WORK/skiff.log"
        ((waited++ < 300)) || fail_setup "skiff not ready after 30 s; see $WORK/skiff.log"
        sleep 0.1
    done
    "$PYTHON" - "$grpc_port" "$SKIFF_PID" <<'EOF' || fail_setup "skiff's gRPC port did not open; see $WORK/skiff.log"
import os, socket, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
deadline = time.time() + 30
while time.time() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(2)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
EOF
fi
[[ -n $NAMESRV && -n $GRPC && -n $BROKER_ADDR ]] || fail_setup "no addresses from the $BROKER broker"
log "$BROKER ready after $((SECONDS - t0))s: name server $NAMESRV, broker $BROKER_ADDR, gRPC $GRPC; work dir $WORK"

# ---- mqadmin, with the credentials of ROCKETMQ_HOME/conf/tools.yml --------------------------------
for who in root alice; do
    mkdir -p "$WORK/mqadmin-$who/conf"
done
printf 'accessKey: %s\nsecretKey: %s\n' "$ROOT_AK" "$ROOT_SK" >"$WORK/mqadmin-root/conf/tools.yml"
printf 'accessKey: %s\nsecretKey: %s\n' "$ALICE_AK" "$ALICE_SK" >"$WORK/mqadmin-alice/conf/tools.yml"
# mqadmin NAME WHO ARGS...: `mqadmin ARGS -n NAMESRV` signed as WHO (root|alice) into WORK/NAME.out;
# its exit status (mqadmin exits 0 also when the command failed: the output tells).
mqadmin() {
    local name=$1 who=$2
    shift 2
    (cd "$WORK" && exec timeout --kill-after=5 90 java "${TOOLS_JVM_FLAGS[@]}" -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Duser.home="$WORK/client-home" -Drocketmq.home.dir="$WORK/mqadmin-$who" -Drocketmq.client.logUseSlf4j=false \
        -cp "$TOOLS_CP" org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "$NAMESRV") \
        >"$WORK/$name.out" 2>&1
    local rc=$?
    echo "$rc" >"$WORK/$name.rc"
    return $rc
}
ok_line() { grep -q 'success' "$WORK/$1.out" && ! grep -q 'CODE:' "$WORK/$1.out"; }

# ---- ACL 2.0 administration: each scenario runs mqadmin commands in order and writes its
# problems (one per line, none: passed) to WORK/NAME.problems ---------------------------------------
step=0
# run NAME WHO ARGS...: one mqadmin run of scenario NAME, into WORK/NAME-<step>.out; sets OUT.
run() {
    local name=$1 who=$2
    shift 2
    step=$((step + 1))
    OUT=$name-$step
    mqadmin "$OUT" "$who" "$@" -b "$BROKER_ADDR"
}
problem() { echo "$*" >>"$WORK/$SCENARIO.problems"; }
# expect_ok WHAT: the last run printed its success line and no error.
expect_ok() { ok_line "$OUT" || problem "$1: no success line ($(grep -m1 -E 'CODE:|Exception' "$WORK/$OUT.out"))"; }
# expect_refused WHAT TEXT: the last run failed with NO_PERMISSION (16) and TEXT in its remark.
expect_refused() {
    grep -q 'CODE: 16 ' "$WORK/$OUT.out" && grep -qF -- "$2" "$WORK/$OUT.out" \
        || problem "$1: not refused with 16 and \"$2\" ($(grep -m1 -E 'CODE:|success' "$WORK/$OUT.out"))"
}
# expect_rows WHAT FIRST EXPECTED: the table rows of the last run whose first column is FIRST, spaces
# squeezed, one per line.
expect_rows() {
    local got
    got=$(awk -v first="$2" '$1 == first' "$WORK/$OUT.out" | tr -s ' ' | sed 's/ $//')
    [[ $got == "$3" ]] || problem "$1: rows [$(tr '\n' '|' <<<"$got")], expected [$(tr '\n' '|' <<<"$3")]"
}
# expect_user_rows WHAT USER EXPECTED: expect_rows of a user table without its password column
# (Apache answers it, skiff never does).
expect_user_rows() {
    local got
    got=$(awk -v first="$2" '$1 == first { $2 = ""; print }' "$WORK/$OUT.out" | tr -s ' ' | sed 's/ $//')
    [[ $got == "$3" ]] || problem "$1: rows [$(tr '\n' '|' <<<"$got")], expected [$(tr '\n' '|' <<<"$3")]"
}
mqadmin_acl2_users() {
    SCENARIO=mqadmin_acl2_users
    : >"$WORK/$SCENARIO.problems"
    run $SCENARIO root createUser -u bob -p bob-secret-1; expect_ok "createUser bob"
    run $SCENARIO root createUser -u bob -p other; expect_refused "createUser bob again" "The user is existed"
    run $SCENARIO root getUser -u bob; expect_user_rows "getUser bob" bob "bob Normal enable"
    run $SCENARIO root updateUser -u bob -s disable; expect_ok "updateUser bob -s disable"
    run $SCENARIO root updateUser -u bob -t Super; expect_ok "updateUser bob -t Super"
    run $SCENARIO root listUser -f bo; expect_user_rows "listUser -f bo" bob "bob Super disable"
    run $SCENARIO root updateUser -u nobody -p x; expect_refused "updateUser nobody" "The user is not exist"
    run $SCENARIO root deleteUser -u bob; expect_ok "deleteUser bob"
    run $SCENARIO root getUser -u bob; expect_user_rows "getUser bob after deleteUser" bob ""
    run $SCENARIO root deleteUser -u bob; expect_ok "deleteUser bob again (a missing user is no error)"
}
mqadmin_acl2_acls() {
    SCENARIO=mqadmin_acl2_acls
    : >"$WORK/$SCENARIO.problems"
    run $SCENARIO root createUser -u carol -p carol-secret-1; expect_ok "createUser carol"
    run $SCENARIO root createAcl -s User:carol -r Topic:orders,Group:GID_orders -a Pub,Sub -d Allow
    expect_ok "createAcl orders"
    run $SCENARIO root createAcl -s User:carol -r 'Topic:secret*' -a Pub,Sub -d Deny -i 10.0.0.0/8
    expect_ok "createAcl secret*"
    run $SCENARIO root getAcl -s User:carol
    expect_rows "getAcl carol" User:carol "User:carol Custom Topic:orders [Pub, Sub] null Allow
User:carol Custom Group:GID_orders [Pub, Sub] null Allow
User:carol Custom Topic:secret* [Pub, Sub] [10.0.0.0/8] Deny"
    run $SCENARIO root updateAcl -s User:carol -r Topic:orders -a Sub -d Allow; expect_ok "updateAcl orders"
    run $SCENARIO root listAcl -s carol -r orders
    expect_rows "listAcl -s carol -r orders" User:carol "User:carol Custom Topic:orders [Sub] null Allow
User:carol Custom Group:GID_orders [Pub, Sub] null Allow"
    run $SCENARIO root deleteAcl -s User:carol -r 'Topic:secret*'; expect_ok "deleteAcl secret*"
    run $SCENARIO root getAcl -s User:carol
    expect_rows "getAcl carol after deleteAcl" User:carol "User:carol Custom Topic:orders [Sub] null Allow
User:carol Custom Group:GID_orders [Pub, Sub] null Allow"
    run $SCENARIO root createAcl -s User:nobody -r Topic:orders -a Pub -d Allow
    expect_refused "createAcl for an unknown user" "The subject of User:nobody is not exist."
    run $SCENARIO root createAcl -s User:carol -r Topic:orders -a Pub -d Allow -i 300.1.1.1
    expect_refused "createAcl with a bad source ip" "The source ip is invalid."
    run $SCENARIO root deleteAcl -s User:carol; expect_ok "deleteAcl carol (whole)"
    run $SCENARIO root getAcl -s User:carol; expect_rows "getAcl carol after the whole deleteAcl" User:carol ""
    run $SCENARIO root deleteAcl -s User:carol; expect_refused "deleteAcl with no ACL" "The acl is not exist."
    run $SCENARIO root deleteUser -u carol; expect_ok "deleteUser carol"
}
# dan may create topics by prefix: a longer prefix that denies beats a shorter one that allows, a
# literal name beats both, a source address outside the entry's range matches nothing; signed as
# dan, updateTopic (UPDATE_AND_CREATE_TOPIC, which needs Create on the topic) is the probe.
mqadmin_acl2_precedence() {
    SCENARIO=mqadmin_acl2_precedence
    : >"$WORK/$SCENARIO.problems"
    mkdir -p "$WORK/mqadmin-dan/conf"
    printf 'accessKey: dan\nsecretKey: dan-secret-1\n' >"$WORK/mqadmin-dan/conf/tools.yml"
    run $SCENARIO root createUser -u dan -p dan-secret-1; expect_ok "createUser dan"
    run $SCENARIO root createAcl -s User:dan -r 'Topic:prec-*,Topic:prec-deny-ok,Topic:iplocal' -a Create -d Allow
    expect_ok "createAcl allow"
    run $SCENARIO root createAcl -s User:dan -r 'Topic:prec-deny*' -a Create -d Deny; expect_ok "createAcl deny"
    run $SCENARIO root createAcl -s User:dan -r Topic:iponly -a Create -d Allow -i 10.0.0.0/8
    expect_ok "createAcl from 10.0.0.0/8"
    run $SCENARIO dan updateTopic -t prec-a -r 1 -w 1; expect_ok "dan creates prec-a (prefix allows)"
    run $SCENARIO dan updateTopic -t prec-deny-x -r 1 -w 1
    expect_refused "dan creates prec-deny-x (the longer prefix denies)" "Topic:prec-deny-x from 127.0.0.1, the decision is deny."
    run $SCENARIO dan updateTopic -t prec-deny-ok -r 1 -w 1; expect_ok "dan creates prec-deny-ok (the literal allows)"
    run $SCENARIO dan updateTopic -t iponly -r 1 -w 1
    expect_refused "dan creates iponly from 127.0.0.1" "Topic:iponly from 127.0.0.1, no matched policies."
    run $SCENARIO dan updateTopic -t iplocal -r 1 -w 1; expect_ok "dan creates iplocal"
    run $SCENARIO dan updateTopic -t elsewhere -r 1 -w 1
    expect_refused "dan creates elsewhere" "Topic:elsewhere from 127.0.0.1, no matched policies."
    run $SCENARIO root deleteUser -u dan; expect_ok "deleteUser dan"
}
# A disabled user is refused whatever its ACL; enabled again, it is allowed again.
mqadmin_acl2_disabled() {
    SCENARIO=mqadmin_acl2_disabled
    : >"$WORK/$SCENARIO.problems"
    mkdir -p "$WORK/mqadmin-erin/conf"
    printf 'accessKey: erin\nsecretKey: erin-secret-1\n' >"$WORK/mqadmin-erin/conf/tools.yml"
    run $SCENARIO root createUser -u erin -p erin-secret-1; expect_ok "createUser erin"
    run $SCENARIO root createAcl -s User:erin -r '*' -a All -d Allow; expect_ok "createAcl * All"
    run $SCENARIO erin updateTopic -t ErinTopic -r 1 -w 1; expect_ok "erin creates a topic"
    run $SCENARIO root updateUser -u erin -s disable; expect_ok "updateUser erin -s disable"
    run $SCENARIO erin updateTopic -t ErinTopic2 -r 1 -w 1; expect_refused "disabled erin" "User:erin is disabled."
    run $SCENARIO root updateUser -u erin -s enable; expect_ok "updateUser erin -s enable"
    run $SCENARIO erin updateTopic -t ErinTopic3 -r 1 -w 1; expect_ok "enabled erin creates a topic"
    run $SCENARIO root deleteUser -u erin; expect_ok "deleteUser erin"
    run $SCENARIO erin updateTopic -t ErinTopic4 -r 1 -w 1; expect_refused "deleted erin" "User:erin is not found."
}
# frank: a topic of any name (Topic:*) beats any resource (*), a prefix beats a topic of any name,
# a literal beats a prefix; createAcl on a resource the subject already has replaces its entry (a
# subject keeps one entry per resource, so an Allow and a Deny never meet at equal rank through the
# admin requests).
mqadmin_acl2_ranks() {
    SCENARIO=mqadmin_acl2_ranks
    : >"$WORK/$SCENARIO.problems"
    mkdir -p "$WORK/mqadmin-frank/conf"
    printf 'accessKey: frank\nsecretKey: frank-secret-1\n' >"$WORK/mqadmin-frank/conf/tools.yml"
    run $SCENARIO root createUser -u frank -p frank-secret-1; expect_ok "createUser frank"
    run $SCENARIO root createAcl -s User:frank -r '*' -a Create -d Allow; expect_ok "createAcl * allow"
    run $SCENARIO frank updateTopic -t rank-any -r 1 -w 1; expect_ok "frank creates rank-any (* allows)"
    run $SCENARIO root createAcl -s User:frank -r 'Topic:*' -a Create -d Deny; expect_ok "createAcl Topic:* deny"
    run $SCENARIO frank updateTopic -t rank-any2 -r 1 -w 1
    expect_refused "frank creates rank-any2 (Topic:* denies over *)" "Topic:rank-any2 from 127.0.0.1, the decision is deny."
    run $SCENARIO root createAcl -s User:frank -r 'Topic:rank-*' -a Create -d Allow; expect_ok "createAcl rank-* allow"
    run $SCENARIO frank updateTopic -t rank-a -r 1 -w 1; expect_ok "frank creates rank-a (the prefix allows over Topic:*)"
    run $SCENARIO root createAcl -s User:frank -r Topic:rank-same -a Create -d Allow; expect_ok "createAcl rank-same allow"
    run $SCENARIO root createAcl -s User:frank -r Topic:rank-same -a Create -d Deny; expect_ok "createAcl rank-same deny"
    run $SCENARIO root getAcl -s User:frank
    expect_rows "getAcl frank" User:frank "User:frank Custom * [Create] null Allow
User:frank Custom Topic:* [Create] null Deny
User:frank Custom Topic:rank-* [Create] null Allow
User:frank Custom Topic:rank-same [Create] null Deny"
    run $SCENARIO frank updateTopic -t rank-same -r 1 -w 1
    expect_refused "frank creates rank-same (the literal denies over the prefix)" "Topic:rank-same from 127.0.0.1, the decision is deny."
    run $SCENARIO root updateAcl -s User:frank -r Topic:rank-same -a Create -d Allow; expect_ok "updateAcl rank-same allow"
    run $SCENARIO frank updateTopic -t rank-same -r 1 -w 1; expect_ok "frank creates rank-same (allowed again)"
    run $SCENARIO root deleteUser -u frank; expect_ok "deleteUser frank"
}
# gina: a stored Super user reaches everything without an ACL, and once made Normal, nothing.
mqadmin_acl2_super_user() {
    SCENARIO=mqadmin_acl2_super_user
    : >"$WORK/$SCENARIO.problems"
    mkdir -p "$WORK/mqadmin-gina/conf"
    printf 'accessKey: gina\nsecretKey: gina-secret-1\n' >"$WORK/mqadmin-gina/conf/tools.yml"
    run $SCENARIO root createUser -u gina -p gina-secret-1 -t Super; expect_ok "createUser gina -t Super"
    run $SCENARIO gina updateTopic -t GinaTopic -r 1 -w 1; expect_ok "super gina creates a topic without an ACL"
    run $SCENARIO gina createUser -u gina-made -p gina-made-1; expect_ok "super gina creates a user"
    run $SCENARIO root getUser -u gina-made; expect_user_rows "getUser gina-made" gina-made "gina-made Normal enable"
    run $SCENARIO root deleteUser -u gina-made; expect_ok "deleteUser gina-made"
    run $SCENARIO root updateUser -u gina -t Normal; expect_ok "updateUser gina -t Normal"
    run $SCENARIO gina updateTopic -t GinaTopic2 -r 1 -w 1
    expect_refused "normal gina creates a topic" "Topic:GinaTopic2 from 127.0.0.1, no matched policies."
    run $SCENARIO root deleteUser -u gina; expect_ok "deleteUser gina"
}
ACL2_SELECTED=()
for n in mqadmin_acl2_users mqadmin_acl2_acls mqadmin_acl2_precedence mqadmin_acl2_disabled mqadmin_acl2_ranks \
    mqadmin_acl2_super_user; do
    selected "$n" && ACL2_SELECTED+=("$n")
done

# ---- the harness: topics and groups as the super user, then (once WORK/acl-ready exists) the
# remoting and gRPC scenarios ------------------------------------------------------------------------
HARNESS_ARGS=(--namesrv "$NAMESRV" --grpc "$GRPC" --wait-file "$WORK/acl-ready")
harness_only=()
for n in "${ALL_SCENARIOS[@]}"; do
    [[ $n == mqadmin_* ]] || ! selected "$n" || harness_only+=("$n")
done
if ((${#harness_only[@]})); then
    HARNESS_ARGS+=(--only "$(IFS=,; echo "${harness_only[*]}")")
    timeout --kill-after=10 300 java -Xms64m -Xmx512m -XX:+UseSerialGC -Duser.home="$WORK/client-home" \
        -cp "$HARNESS_CP" skiff.conformance.acl.Main "${HARNESS_ARGS[@]}" \
        >"$WORK/harness.out" 2>"$WORK/harness.err" &
    HARNESS_PID=$!
fi

# alice and her ACL, made with mqadmin signed as the super user on both brokers, beside
# mqadmin_admin_allowed. The denied command runs once alice exists, so it is refused by
# authorization, not for an unknown user.
SETUP_PROBLEMS=()
(
    mqadmin setup-createUser root createUser -b "$BROKER_ADDR" -u "$ALICE_AK" -p "$ALICE_SK"
    ok_line setup-createUser && touch "$WORK/user-created"
    mqadmin setup-createAcl-topic root createAcl -b "$BROKER_ADDR" -s "User:$ALICE_AK" -r Topic:AclTopic -a Pub,Sub -d Allow
    mqadmin setup-createAcl-group root createAcl -b "$BROKER_ADDR" -s "User:$ALICE_AK" -r Group:GID_acl -a Sub -d Allow
    touch "$WORK/user-created" "$WORK/acl-ready"
) &
BG_PIDS+=($!)
# The ACL 2.0 admin commands: each scenario a sequence of mqadmin runs under its own users, the
# scenarios side by side (an mqadmin run spends most of its 3-5 s waiting for its client to close).
for n in "${ACL2_SELECTED[@]}"; do
    "$n" &
    BG_PIDS+=($!)
done
ADMIN_TOPIC=AclAdminByRoot DENIED_ADMIN_TOPIC=AclAdminByAlice
(
    selected mqadmin_admin_allowed && mqadmin mqadmin_admin_allowed root updateTopic -b "$BROKER_ADDR" -t "$ADMIN_TOPIC" -r 4 -w 4
    for _ in $(seq 1200); do [[ -e $WORK/user-created ]] && break; sleep 0.1; done
    selected mqadmin_admin_denied && mqadmin mqadmin_admin_denied alice updateTopic -b "$BROKER_ADDR" -t "$DENIED_ADMIN_TOPIC" -r 4 -w 4
) &
BG_PIDS+=($!)
for p in "${BG_PIDS[@]}"; do wait "$p"; done
BG_PIDS=()
for s in setup-createUser setup-createAcl-topic setup-createAcl-group; do
    ok_line "$s" || SETUP_PROBLEMS+=("$s failed: $(grep -m1 -E 'CODE:|Exception' "$WORK/$s.out")")
done
if ((${#SETUP_PROBLEMS[@]} == 0)); then
    log "alice and her ACL created with mqadmin after $((SECONDS - t0))s"
else
    log "FAIL: ${SETUP_PROBLEMS[*]}"
fi

# listed TOPIC [SECS]: whether the name server's topic list (GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
# 206, what `mqadmin topicList` shows) has TOPIC, waiting up to SECS for it: "yes", "no", or
# "code N" when the list is refused. The list, not a route lookup: a list is what mqadmin shows,
# and it needs no route for a topic that may not exist.
listed() {
    "$PYTHON" - "$HERE/apache" "$NAMESRV" "$1" "${2:-0}" <<'EOF'
import json, sys, time
sys.path.insert(0, sys.argv[1])
import probe
ns, topic, wait = sys.argv[2], sys.argv[3], float(sys.argv[4])
deadline = time.time() + wait
while True:
    try:
        rh, body = probe.request(ns, 206)
        if rh.get("code") != 0:
            answer = "code %s" % rh.get("code")
        else:
            answer = "yes" if topic in json.loads(body.decode("utf-8"))["topicList"] else "no"
    except Exception as e:
        answer = "error %s" % e
    if answer == "yes" or time.time() >= deadline:
        print(answer)
        break
    time.sleep(0.2)
EOF
}

PASSED=0 FAILED=0
declare -A RESULT=()
verdict() { # verdict NAME PROBLEM... (none: PASS, with $NOTE)
    local name=$1 p
    shift
    if (($# == 0)); then
        RESULT[$name]="PASS $name: ${NOTE:-}"
    else
        local why=$1
        shift
        for p in "$@"; do why+="; $p"; done
        RESULT[$name]="FAIL $name: $why (output: $WORK/$name.out)"
    fi
}
if selected mqadmin_admin_allowed; then
    problems=()
    [[ $(cat "$WORK/mqadmin_admin_allowed.rc" 2>/dev/null) == 0 ]] || problems+=("exit status $(cat "$WORK/mqadmin_admin_allowed.rc" 2>/dev/null)")
    ok_line mqadmin_admin_allowed || problems+=("no success line, or an error: $(grep -m1 -E 'CODE:|Exception' "$WORK/mqadmin_admin_allowed.out")")
    there=$(listed "$ADMIN_TOPIC" 10)
    [[ $there == yes ]] || problems+=("$ADMIN_TOPIC not in the name server's topic list 10 s later ($there)")
    NOTE="updateTopic signed as $ROOT_AK: success, $ADMIN_TOPIC listed" verdict mqadmin_admin_allowed "${problems[@]}"
fi
if selected mqadmin_admin_denied; then
    problems=()
    if grep -q 'CODE: 16 ' "$WORK/mqadmin_admin_denied.out"; then
        :
    else
        problems+=("no 'CODE: 16' (NO_PERMISSION) in the output: $(grep -m1 -E 'CODE:|Exception|success' "$WORK/mqadmin_admin_denied.out")")
    fi
    ! grep -q 'success' "$WORK/mqadmin_admin_denied.out" || problems+=("mqadmin printed success")
    # Asked after the allowed topic is listed (or 10 s), and a second later: a topic the broker
    # created would be registered with the name server by then.
    sleep 1
    there=$(listed "$DENIED_ADMIN_TOPIC" 0)
    [[ $there == no ]] || problems+=("$DENIED_ADMIN_TOPIC in the name server's topic list: $there (expected no)")
    NOTE="updateTopic signed as $ALICE_AK: $(grep -m1 -o 'CODE: [0-9]* *DESC: .*' "$WORK/mqadmin_admin_denied.out"); exit status $(cat "$WORK/mqadmin_admin_denied.rc" 2>/dev/null); $DENIED_ADMIN_TOPIC listed: $there" \
        verdict mqadmin_admin_denied "${problems[@]}"
fi

for n in "${ACL2_SELECTED[@]}"; do
    if [[ ! -e $WORK/$n.problems ]]; then
        verdict "$n" "did not run"
    else
        mapfile -t problems <"$WORK/$n.problems"
        NOTE="$(find "$WORK" -maxdepth 1 -name "$n-*.rc" | wc -l) mqadmin runs as expected" verdict "$n" "${problems[@]}"
    fi
done
if [[ -n $HARNESS_PID ]]; then
    wait "$HARNESS_PID"
    hrc=$?
    HARNESS_PID=""
    for n in "${harness_only[@]}"; do
        line=$(grep -E "^(PASS|FAIL) $n " "$WORK/harness.out" | tail -1)
        if [[ -z $line ]]; then
            line="FAIL $n: no result (harness exit $hrc: $(grep -m1 '^SETUP FAILED' "$WORK/harness.out" || tail -1 "$WORK/harness.err"))"
        fi
        RESULT[$n]=$line
    done
fi
cleanup

echo "== ACL conformance against $BROKER (name server $NAMESRV, gRPC $GRPC), $((SECONDS - t0))s, work dir $WORK"
for s in "${SETUP_PROBLEMS[@]}"; do echo "SETUP: $s"; done
for n in "${ALL_SCENARIOS[@]}"; do
    selected "$n" || continue
    line=${RESULT[$n]:-"FAIL $n: no result"}
    echo "$line"
    if [[ $line == PASS* ]]; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); fi
done
if ((FAILED == 0 && !KEEP)) && [[ -z ${CONFORMANCE_WORK_DIR:-} ]]; then
    rm -rf "$WORK"
fi
echo "$PASSED passed, $FAILED failed"
((FAILED == 0))
