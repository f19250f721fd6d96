#!/usr/bin/env bash
# Start Apache RocketMQ (the oracle) on free loopback ports: one name server and one broker
# (default) or two brokers broker-a and broker-b in one cluster (--cluster).
#
#   tests/conformance/apache/start.sh [--cluster] [--dir DIR] [--max-lifetime SECS]
#                                     [--profile conformance|bench] [--prepare-only]
#                                     [--proxy | --proxy-cluster] [--acl] [--broker-set KEY=VALUE]...
#   tests/conformance/apache/stop.sh DIR
#
# --proxy: the RocketMQ 5 gRPC front door. broker-a runs inside an Apache proxy JVM in local
#   mode (org.apache.rocketmq.proxy.ProxyStartup -pm local -bc DIR/broker-a.conf -pc
#   DIR/rmq-proxy.json), with the same broker config as without --proxy; the jars come from
#   pom-proxy.xml (rocketmq-proxy + rocketmq-namesrv, own classpath file). The proxy's gRPC
#   server (grpcServerPort) and its remoting server (remotingListenPort) get free ports; both
#   bind the wildcard address, as the proxy offers no bind-address setting for them (the
#   broker's own port stays on 127.0.0.1). TLS: the proxy's test mode (tlsTestModeEnable,
#   its default) serves a self-signed certificate and accepts plaintext on the same port.
#   Ready also means the gRPC port accepts connections. Extra lines on stdout, before NAMESRV=:
#   GRPC=127.0.0.1:PORT and PROXY_REMOTING=127.0.0.1:PORT. Not with --cluster.
# --proxy-cluster: as --proxy, but the way RocketMQ 5.5 serves lite topics: broker-a runs alone
#   (BrokerStartup, with enableLmq and enableMultiDispatch on) and the proxy in its own JVM in
#   cluster mode (ProxyStartup -pm cluster), finding the broker through the name server. The
#   local mode of 5.5.0 does not serve lite subscriptions (apache/rocketmq#10478).
#
# --acl: ACL 2.0 on (for acl.sh). Every broker config gets authenticationEnabled and
#   authorizationEnabled with the Default* providers and the Local* metadata providers (users and
#   ACLs in RocksDB under the store's config/), initAuthenticationUser (the super user rocketmq /
#   12345678, created at start) and innerClientAuthenticationCredentials (the same); with --proxy
#   the proxy's JSON turns on authentication and authorization for gRPC too, with the
#   Proxy*MetadataProvider classes (in local mode they read the embedded broker's users and
#   ACLs). The readiness probe then skips its unsigned GET_BROKER_RUNTIME_INFO (the broker
#   answers it with NO_PERMISSION); the name server does no ACL checks.
#
# --broker-set KEY=VALUE (repeatable): one more line of every broker's config (BrokerConfig and
#   MessageStoreConfig fields), after the profile's; e.g. shortened lite expiry checks.
#
# The jars come from Maven Central through pom.xml beside this script, resolved once with
# `mvn dependency:build-classpath` into ~/.m2 and a classpath file under
# ${XDG_CACHE_HOME:-~/.cache}/skiff-conformance (re-resolved when pom.xml changes).
#
# DIR (default: a new mktemp dir) gets the configs, a fresh store per broker, the JVMs' logs
# (user.home is DIR, so ~/logs/rocketmqlogs lands there too), `pids` and `namesrv.addr`.
# Every JVM is killed by a watchdog after --max-lifetime seconds (default 1800) even if stop.sh
# is never called. On success the last line on stdout is `NAMESRV=127.0.0.1:PORT`; exit 0.
# Environment: ROCKETMQ_VERSION (default from pom.xml), APACHE_JAVA_OPTS (extra JVM flags, after
# the heap flags: a later -Xmx wins).
#
# --profile conformance (default): small heaps (name server 192m, broker 384m, direct 512m), small
#   store files and long queue waits, for the conformance suite on two shared cores. Every broker
#   thread that stores messages keeps a 4 MiB direct encoder buffer (MessageExtEncoder), and the
#   schedule, transaction and reply executors each add threads: with 128m the full run's last
#   scenarios (v4_request_reply) failed with "Cannot reserve 4259840 bytes of direct buffer".
#   POP adds many more such threads (pop and ack processors, eight PopReviveService threads,
#   change-invisible-time): with 192m the pop_* scenarios run together lost revives (the
#   revive thread's put failed on the direct-buffer limit without a log line, so the message
#   never reached the retry topic) and an ACK_MESSAGE failed with that error. The limit is
#   only a ceiling; buffers are touched only as far as messages fill them.
# --profile bench: what bench/run.sh measures (bench/README.md): name server -Xms256m -Xmx256m,
#   broker -Xms1g -Xmx1g with -XX:MaxDirectMemorySize=1g, G1; the broker keeps Apache's store
#   defaults (flushDiskType=ASYNC_FLUSH, 1 GiB commit log files, send queue wait 200 ms) except
#   that a pull may return up to 100 messages (maxTransferCountOnMessageIn{Memory,Disk}, default
#   32 and 8) as the benchmark's PULL_MESSAGE asks for 100; and 5.5.0 gets the upstream fix of
#   a busy-spinning thread (see "bench profile" below; APACHE_STOCK=1 leaves it out).
# --prepare-only: write the configs and DIR/launch-NAME.sh (name server first, then the
#   brokers, also listed in that order in DIR/launch-order) and start the watchdog, but start no
#   JVM and do not wait: the caller runs the launch scripts (each prints its JVM's pid) and
#   probes readiness itself. Prints DIR=, BUILD= (what runs), NAMESRV= and
#   BROKER_<name>=127.0.0.1:PORT.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON=${PYTHON:-python3}
CLUSTER=0
DIR=""
MAX_LIFETIME=1800
PROFILE=conformance
PREPARE_ONLY=0
PROXY=0
PROXY_MODE=local
ACL=0
BROKER_SET=()
usage="usage: $0 [--cluster] [--dir DIR] [--max-lifetime SECS] [--profile conformance|bench] [--prepare-only] [--proxy | --proxy-cluster] [--acl] [--broker-set KEY=VALUE]..."
while (($#)); do
    case $1 in
        --cluster) CLUSTER=1 ;;
        --dir) DIR=$2; shift ;;
        --max-lifetime) MAX_LIFETIME=$2; shift ;;
        --profile) PROFILE=$2; shift ;;
        --prepare-only) PREPARE_ONLY=1 ;;
        --proxy) PROXY=1 ;;
        --proxy-cluster) PROXY=1 PROXY_MODE=cluster ;;
        --acl) ACL=1 ;;
        --broker-set)
            [[ ${2:-} == *=* ]] || { echo "$usage" >&2; exit 2; }
            BROKER_SET+=("$2"); shift ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
    shift
done
case $PROFILE in
    conformance) NAMESRV_HEAP=192m BROKER_HEAP=384m DIRECT=512m CLUSTER_NAME=ConformanceCluster ;;
    bench) NAMESRV_HEAP=256m BROKER_HEAP=1g DIRECT=1g CLUSTER_NAME=BenchCluster ;;
    *) echo "$usage" >&2; exit 2 ;;
esac
if ((PROXY)); then
    ((!CLUSTER)) || { echo "$0: --proxy starts one broker; not with --cluster" >&2; exit 2; }
    # The proxy's gRPC and remoting servers and their thread pools share the broker's JVM.
    [[ $PROFILE == conformance ]] && BROKER_HEAP=512m
fi
log() { printf '[apache %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# ---- classpath, resolved once -----------------------------------------------------------
POM=$HERE/pom.xml KIND=rocketmq
((PROXY)) && POM=$HERE/pom-proxy.xml KIND=rocketmq-proxy
VERSION=${ROCKETMQ_VERSION:-$(sed -n 's:.*<rocketmq.version>\(.*\)</rocketmq.version>.*:\1:p' "$POM")}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/skiff-conformance
CP_FILE=$CACHE/apache-$KIND-$VERSION.classpath
mkdir -p "$CACHE"
# Suites start brokers side by side: one resolves while the others wait, then find it done.
exec {cp_lock}>"$CP_FILE.lock"
flock "$cp_lock"
if [[ ! -s $CP_FILE || $POM -nt $CP_FILE ]]; then
    log "resolving Apache $KIND $VERSION with Maven (once; cached in ~/.m2)"
    if ! nice -n 10 mvn -q -B -f "$POM" -Drocketmq.version="$VERSION" \
        dependency:build-classpath -Dmdep.outputFile="$CP_FILE.tmp" >"$CACHE/mvn-apache.log" 2>&1; then
        log "FAIL: mvn dependency:build-classpath (see $CACHE/mvn-apache.log)"
        tail -5 "$CACHE/mvn-apache.log" >&2
        exit 1
    fi
    mv "$CP_FILE.tmp" "$CP_FILE"
fi
exec {cp_lock}>&-
CP=$(cat "$CP_FILE")

# ---- bench profile: 5.5.0's busy-spinning TransactionMetricsFlushService -------------------
# In 5.5.0 TransactionMetricsFlushService.run() only waits (10 s) after a flush, and spins
# through the 10 s before each flush: a core half the time, even on an idle broker
# (apache/rocketmq ISSUE #10515, fixed by PR #10517 in 5.5.1). On the benchmark's two cores that
# takes up to half the machine, so the bench profile puts the fixed class, unchanged from the
# rocketmq-broker 5.5.1 release jar (it calls the same 5.5.0 methods), ahead of the 5.5.0 jars.
# APACHE_STOCK=1 runs 5.5.0 as released.
BUILD="Apache RocketMQ $VERSION"
if [[ $PROFILE == bench && $VERSION == 5.5.0 && ${APACHE_STOCK:-0} != 1 ]]; then
    FIX_CLASS=org/apache/rocketmq/broker/transaction/TransactionMetricsFlushService.class
    FIX_DIR=$CACHE/rocketmq-5.5.0-fix-10515
    if [[ ! -s $FIX_DIR/$FIX_CLASS ]]; then
        jar550=$(tr ':' '\n' <<<"$CP" | grep '/rocketmq-broker-5\.5\.0\.jar$' || true)
        jar551=${jar550//5.5.0/5.5.1}
        if [[ -n $jar550 && ! -s $jar551 ]]; then
            log "fetching rocketmq-broker 5.5.1 (for the fixed TransactionMetricsFlushService only)"
            nice -n 10 mvn -q -B dependency:get -Dartifact=org.apache.rocketmq:rocketmq-broker:5.5.1 \
                -Dtransitive=false >"$CACHE/mvn-apache-fix.log" 2>&1 || true
        fi
        if [[ -z $jar550 || ! -s $jar551 ]]; then
            log "FAIL: no rocketmq-broker-5.5.1.jar for the ISSUE #10515 fix (see $CACHE/mvn-apache-fix.log); APACHE_STOCK=1 runs 5.5.0 as released"
            exit 1
        fi
        "$PYTHON" - "$jar551" "$FIX_CLASS" "$FIX_DIR.tmp" <<'EOF'
import os, sys, zipfile
jar, name, out = sys.argv[1:]
os.makedirs(os.path.join(out, os.path.dirname(name)), exist_ok=True)
with zipfile.ZipFile(jar) as z, open(os.path.join(out, name), "wb") as f:
    f.write(z.read(name))
EOF
        rm -rf "$FIX_DIR"
        mv "$FIX_DIR.tmp" "$FIX_DIR"
    fi
    CP=$FIX_DIR:$CP
    BUILD="$BUILD + the ISSUE #10515 fix (TransactionMetricsFlushService from 5.5.1)"
fi

# ---- work dir and ports --------------------------------------------------------------------
[[ -n $DIR ]] || DIR=$(mktemp -d "${TMPDIR:-/tmp}/skiff-conformance-apache.XXXXXX")
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
: >"$DIR/pids"

# free_ports N: N port bases P with P-2 (the broker's fast port), P and P+1 (HA) all free.
free_ports() {
    "$PYTHON" - "$1" <<'EOF'
import random, socket, sys
def free(p):
    for host in ("127.0.0.1", "0.0.0.0"):
        s = socket.socket()
        try:
            s.bind((host, p))
        except OSError:
            return False
        finally:
            s.close()
    return True
out, used = [], set()
while len(out) < int(sys.argv[1]):
    p = random.randrange(20000, 60000)
    group = {p - 2, p, p + 1}
    if not group & used and all(free(q) for q in group):
        used |= group
        out.append(p)
print(" ".join(map(str, out)))
EOF
}

BROKERS=(broker-a)
((CLUSTER)) && BROKERS=(broker-a broker-b)
read -r -a PORTS <<<"$(free_ports $((${#BROKERS[@]} + 1 + 2 * PROXY)))"
NS_PORT=${PORTS[0]}
if ((PROXY)); then
    GRPC_PORT=${PORTS[2]} PROXY_REMOTING_PORT=${PORTS[3]}
fi
NAMESRV=127.0.0.1:$NS_PORT

JAVA_BASE=(java -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError -Djava.net.preferIPv4Stack=true
    -Duser.home="$DIR" -Drocketmq.home.dir="$DIR"
    --add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED
    --add-opens java.base/java.lang=ALL-UNNAMED)
# shellcheck disable=SC2206
EXTRA=(${APACHE_JAVA_OPTS:-})

PIDS=()
# Each JVM gets a launch script (restart-broker.sh reuses it): it starts the JVM in its own
# session, appends "PID NAME" to DIR/pids and prints the PID. With --prepare-only the script is
# only written (and listed in DIR/launch-order).
: >"$DIR/launch-order"
start_jvm() { # start_jvm NAME HEAP MAIN ARG...
    local name=$1 heap=$2 main=$3 launch=$DIR/launch-$1.sh
    shift 3
    {
        echo '#!/usr/bin/env bash'
        printf 'cd %q || exit 1\n' "$DIR"
        printf 'setsid'
        printf ' %q' "${JAVA_BASE[@]}" -Xms"$heap" -Xmx"$heap" -XX:MaxDirectMemorySize="$DIRECT" "${EXTRA[@]}" \
            -cp "$CP" "$main" "$@"
        printf ' >>%q 2>&1 </dev/null &\n' "$DIR/$name.out"
        printf 'echo "$! %s" >>%q\necho "$!"\n' "$name" "$DIR/pids"
    } >"$launch"
    chmod +x "$launch"
    echo "$name" >>"$DIR/launch-order"
    ((PREPARE_ONLY)) || PIDS+=("$("$launch")")
}

# ---- name server ---------------------------------------------------------------------------
cat >"$DIR/namesrv.conf" <<EOF
listenPort=$NS_PORT
bindAddress=127.0.0.1
kvConfigPath=$DIR/namesrv/kvConfig.json
configStorePath=$DIR/namesrv/namesrv.properties
EOF
start_jvm namesrv "$NAMESRV_HEAP" org.apache.rocketmq.namesrv.NamesrvStartup -c "$DIR/namesrv.conf"

# ---- brokers -------------------------------------------------------------------------------
i=1
for b in "${BROKERS[@]}"; do
    p=${PORTS[$i]}
    store=$DIR/store-$b
    mkdir -p "$store"
    cat >"$DIR/$b.conf" <<EOF
brokerClusterName=$CLUSTER_NAME
brokerName=$b
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
namesrvAddr=$NAMESRV
brokerIP1=127.0.0.1
bindAddress=127.0.0.1
listenPort=$p
haListenPort=$((p + 1))
storePathRootDir=$store
storePathCommitLog=$store/commitlog
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
EOF
    if [[ $PROFILE == bench ]]; then
        cat >>"$DIR/$b.conf" <<EOF
# Apache's store and send-queue defaults, except: a pull may return the 100 messages the
# benchmark's PULL_MESSAGE asks for (defaults 32 from memory, 8 from disk).
maxTransferCountOnMessageInMemory=100
maxTransferCountOnMessageInDisk=100
EOF
    else
        cat >>"$DIR/$b.conf" <<EOF
mappedFileSizeCommitLog=67108864
mappedFileSizeConsumeQueue=600000
mappedFileSizeTimerLog=16777216
traceTopicEnable=false
# SQL92 subscriptions (MessageSelector.bySql) need it; skiff filters by SQL92 without a switch.
enablePropertyFilter=true
transferMsgByHeap=true
warmMapedFileEnable=false
diskMaxUsedSpaceRatio=95
# Two shared cores: a send may wait in the broker's queue longer than the 200 ms default before
# the broker sheds it with SYSTEM_BUSY "[TIMEOUT_CLEAN_QUEUE]broker busy".
waitTimeMillsInSendQueue=5000
waitTimeMillsInPullQueue=10000
osPageCacheBusyTimeOutMills=5000
# Transaction check-backs within seconds, as run.sh sets them for skiff: halves older than 3 s,
# checked every 2 s (Apache's defaults are 6 s and 30 s).
transactionTimeOut=3000
transactionCheckInterval=2000
# Message recall (5.3.2), off by default in Apache, on by default in skiff.
recallMessageEnable=true
EOF
    fi
    if [[ $PROXY_MODE == cluster ]]; then
        cat >>"$DIR/$b.conf" <<EOF
# Lite topics (5.5.0): each lite topic is a light message queue fed by multi-dispatch.
enableLmq=true
enableMultiDispatch=true
EOF
    fi
    if ((${#BROKER_SET[@]})); then
        echo "# --broker-set" >>"$DIR/$b.conf"
        printf '%s\n' "${BROKER_SET[@]}" >>"$DIR/$b.conf"
    fi
    if ((ACL)); then
        cat >>"$DIR/$b.conf" <<'EOF'
# ACL 2.0 (--acl)
authenticationEnabled=true
authenticationProvider=org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider
authenticationMetadataProvider=org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider
authorizationEnabled=true
authorizationProvider=org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider
authorizationMetadataProvider=org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider
initAuthenticationUser={"username":"rocketmq","password":"12345678"}
innerClientAuthenticationCredentials={"accessKey":"rocketmq","secretKey":"12345678"}
EOF
    fi
    if ((PROXY)); then
        PROXY_ACL=""
        PROXY_BROKER='
  "brokerConfigPath": "'"$DIR/$b.conf"'",'
        [[ $PROXY_MODE == cluster ]] && PROXY_BROKER=""
        ((ACL)) && PROXY_ACL='
  "authenticationEnabled": true,
  "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
  "authenticationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider",
  "authorizationEnabled": true,
  "authorizationProvider": "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
  "authorizationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthorizationMetadataProvider",'
        # The proxy's config is JSON (ProxyConfig's fields). Everything else at the proxy's
        # defaults, which the gRPC suite pins (tests/conformance/README.md, gRPC section).
        cat >"$DIR/rmq-proxy.json" <<EOF
{
  "rocketMQClusterName": "$CLUSTER_NAME",
  "proxyMode": "$PROXY_MODE",
  "namesrvAddr": "$NAMESRV",$PROXY_BROKER
  "grpcServerPort": $GRPC_PORT,
  "remotingListenPort": $PROXY_REMOTING_PORT,
  "localServeAddr": "127.0.0.1",$PROXY_ACL
  "enablePrintJstack": false
}
EOF
        if [[ $PROXY_MODE == cluster ]]; then
            # The proxy starts once the broker is ready (below): at start it creates its system
            # topics through the broker and exits when none is registered yet.
            start_jvm "$b" "$BROKER_HEAP" org.apache.rocketmq.broker.BrokerStartup -c "$DIR/$b.conf"
        else
            start_jvm "$b" "$BROKER_HEAP" org.apache.rocketmq.proxy.ProxyStartup \
                -pm local -bc "$DIR/$b.conf" -pc "$DIR/rmq-proxy.json" -n "$NAMESRV"
        fi
    else
        start_jvm "$b" "$BROKER_HEAP" org.apache.rocketmq.broker.BrokerStartup -c "$DIR/$b.conf"
    fi
    i=$((i + 1))
done

# ---- watchdog: kills every JVM in DIR/pids after MAX_LIFETIME even if nobody calls stop.sh ----
setsid bash -c '
    sleep "$1"
    jvms=$(awk '\''$2 != "watchdog" {print $1}'\'' "$2/pids")
    for p in $jvms; do kill -TERM "$p" 2>/dev/null; done
    sleep 10
    for p in $jvms; do kill -KILL "$p" 2>/dev/null; done
' watchdog "$MAX_LIFETIME" "$DIR" >/dev/null 2>&1 </dev/null &
echo "$! watchdog" >>"$DIR/pids"

if ((PREPARE_ONLY)); then
    echo "$NAMESRV" >"$DIR/namesrv.addr"
    log "prepared ($PROFILE): name server $NAMESRV, brokers ${BROKERS[*]}, dir $DIR (watchdog: ${MAX_LIFETIME}s)"
    echo "DIR=$DIR"
    echo "BUILD=$BUILD"
    if ((PROXY)); then
        echo "GRPC=127.0.0.1:$GRPC_PORT"
        echo "PROXY_REMOTING=127.0.0.1:$PROXY_REMOTING_PORT"
    fi
    echo "NAMESRV=$NAMESRV"
    i=1
    for b in "${BROKERS[@]}"; do
        echo "BROKER_$b=127.0.0.1:${PORTS[$i]}"
        i=$((i + 1))
    done
    exit 0
fi
log "name server $NAMESRV, brokers ${BROKERS[*]}, dir $DIR (watchdog: ${MAX_LIFETIME}s)"
PROBE_ARGS=()
((ACL)) && PROBE_ARGS=(--no-broker-check) # its unsigned request would get NO_PERMISSION
IFS=,
if ! "$PYTHON" "$HERE/probe.py" --namesrv "$NAMESRV" --brokers "${BROKERS[*]}" --timeout 120 \
    --pids "${PIDS[*]}" "${PROBE_ARGS[@]}" >"$DIR/brokers.addr"; then
    unset IFS
    log "FAIL: Apache RocketMQ did not become ready; logs in $DIR"
    for f in "$DIR"/*.out; do
        echo "---- $f" >&2
        grep -v '|-' "$f" | tail -n 5 >&2
    done
    "$HERE/stop.sh" "$DIR" --keep >/dev/null 2>&1 || true
    exit 1
fi
unset IFS
if [[ $PROXY_MODE == cluster ]]; then
    start_jvm proxy "$BROKER_HEAP" org.apache.rocketmq.proxy.ProxyStartup \
        -pm cluster -pc "$DIR/rmq-proxy.json" -n "$NAMESRV"
fi
if ((PROXY)); then
    # The gRPC server starts after the broker; wait until it accepts connections.
    if ! "$PYTHON" - "$GRPC_PORT" "${PIDS[@]}" <<'EOF'
import os, socket, sys, time
port, pids = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
deadline = time.time() + 60
while time.time() < deadline:
    for p in pids:
        try:
            os.kill(p, 0)
        except OSError:
            sys.exit(2)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.3)
sys.exit(1)
EOF
    then
        log "FAIL: the proxy's gRPC port $GRPC_PORT did not open; logs in $DIR"
        "$HERE/stop.sh" "$DIR" --keep >/dev/null 2>&1 || true
        exit 1
    fi
    echo "127.0.0.1:$GRPC_PORT" >"$DIR/grpc.addr"
fi
echo "$NAMESRV" >"$DIR/namesrv.addr"
log "ready: $(tr '\n' ' ' <"$DIR/brokers.addr")"
echo "DIR=$DIR"
if ((PROXY)); then
    echo "GRPC=127.0.0.1:$GRPC_PORT"
    echo "PROXY_REMOTING=127.0.0.1:$PROXY_REMOTING_PORT"
fi
echo "NAMESRV=$NAMESRV"
