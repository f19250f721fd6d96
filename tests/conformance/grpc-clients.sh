#!/usr/bin/env bash
# gRPC client smokes: the other official RocketMQ 5 gRPC clients (Python, Node.js, Rust) against
# the Apache RocketMQ proxy (the oracle) or skiff's gRPC port (apache.rocketmq.v2.MessagingService).
#
#   bash tests/conformance/grpc-clients.sh --broker apache|skiff [--only python,node,rust]
#                                          [--tls on|off|both] [--keep]
#   bash tests/conformance/grpc-clients.sh --build-only [--only ...]   # install/build the clients
#
# Each smoke (grpc-clients/{python,node,rust}): a topic (NORMAL, 4 queues) and a group created
# over remoting (grpc-clients/admin/SmokeAdmin.java, DefaultMQAdminExt as mqadmin; gRPC has no
# create call), a SimpleConsumer and a Producer of that client; 10 messages with a tag, two keys
# and a user property are sent, received with receive + ack and checked (message id, topic,
# body, tag, keys, property, delivery attempt 1), then nothing may come back for 13 s after the
# last receive (the invisible duration is 10 s). The Python smoke also sends priority messages to
# a PRIORITY topic of 8 queues and receives them highest first, and subscribes, receives and
# unsubscribes lite topics of a LITE topic with a LitePushConsumer (python/smoke.py). One line per
# smoke, NAME.tls / NAME.plain, then
# `N passed, M failed` last; exit 0 iff none failed. The smokes run at once, each with its own
# topic and group.
#
#   --broker apache   tests/conformance/apache/start.sh --proxy-cluster (name server, broker and
#                     proxy 5.5.0 in cluster mode: its local mode serves no lite subscriptions)
#   --broker skiff    SKIFF_BIN, or `cargo build --release --bin skiff` in this checkout, then
#                     `skiff serve --listen 127.0.0.1:P --grpc-listen 127.0.0.1:G` (as grpc.sh)
#   --only            clients to run (default python,node,rust)
#   --tls on|off|both which modes (default both). TLS: Python and Node verify the server's
#                     certificate and take no option to skip that; their smokes trust the
#                     certificate the server presents (see python/smoke.py). The Rust crate sets
#                     no TLS config of its own (tonic's rustls defaults): rust.tls runs with
#                     SSL_CERT_FILE = the server's certificate when that names 127.0.0.1 in a
#                     SAN (skiff's does), else it is SKIPPED (listed, not counted; the Apache
#                     proxy's CN=localhost certificate has no SAN). See the README.
#   --keep            keep the work dir even when everything passed
#
# Clients are installed/built once into ${XDG_CACHE_HOME:-~/.cache}/skiff-conformance and
# redone only when their pins change: python -> py-grpc/ (venv, python/requirements.txt),
# node -> node-grpc/ (npm ci of node/package.json + package-lock.json), rust -> the target dir
# GRPC_SMOKE_RUST_TARGET_DIR (default CACHE/grpc-smoke-rust-target; `cargo build --release
# --locked`), admin -> grpc-clients-admin/ (javac against mqadmin/pom.xml's rocketmq-tools).
# Environment: SKIFF_BIN, GRPC_SMOKE_RUST_TARGET_DIR, CONFORMANCE_WORK_DIR, PYTHON (python3).
# Everything binds 127.0.0.1 (but the Apache proxy's ports, which have no bind setting); every
# process started here is stopped on exit, and the broker also has a watchdog.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GC=$HERE/grpc-clients
PYTHON=${PYTHON:-python3}
BROKER="" ONLY=python,node,rust KEEP=0 TLS=both
usage="usage: $0 --broker skiff|apache [--only python,node,rust] [--tls on|off|both] [--keep] | --build-only"
BUILD_ONLY=0
while (($#)); do
    case $1 in
        --broker) BROKER=$2; shift ;;
        --only) ONLY=$2; shift ;;
        --tls) TLS=$2; shift ;;
        --keep) KEEP=1 ;;
        --build-only) BUILD_ONLY=1 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
    shift
done
[[ $BROKER == skiff || $BROKER == apache ]] || ((BUILD_ONLY)) || { echo "$usage" >&2; exit 2; }
[[ $TLS == on || $TLS == off || $TLS == both ]] || { echo "$usage" >&2; exit 2; }
CLIENTS=()
for c in ${ONLY//,/ }; do
    case $c in
        python|node|rust) CLIENTS+=("$c") ;;
        *) echo "unknown client $c (python, node, rust)" >&2; exit 2 ;;
    esac
done
MODES=()
[[ $TLS == off || $TLS == both ]] && MODES+=(plain)
[[ $TLS == on || $TLS == both ]] && MODES+=(tls)
log() { printf '[grpc-clients %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
MAX_LIFETIME=900
T_START=$SECONDS
fail_setup() { log "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/skiff-conformance
mkdir -p "$CACHE"
WORK=${CONFORMANCE_WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/skiff-grpc-clients.XXXXXX")}
mkdir -p "$WORK/client-home"
WORK=$(cd "$WORK" && pwd)

# ---- installs and builds (once each) ----------------------------------------------------------
# newer_than STAMP FILE...: true when STAMP is missing or one FILE is newer.
newer_than() {
    local stamp=$1 f
    shift
    [[ -e $stamp ]] || return 0
    for f in "$@"; do [[ $f -nt $stamp ]] && return 0; done
    return 1
}
# The clients in the cache are judged by the content of their pins, not by mtimes: a fresh clone
# makes every file newer than the cache, and would reinstall what has not changed.
# pins_of FILE...: the files' content digest; pins_changed STAMP FILE...: true unless STAMP holds it.
pins_of() { cat "$@" | sha256sum | cut -d' ' -f1; }
pins_changed() {
    local stamp=$1
    shift
    [[ $(cat "$stamp" 2>/dev/null) != "$(pins_of "$@")" ]]
}

# shellcheck source=tests/conformance/mqadmin/tools.sh
source "$HERE/mqadmin/tools.sh"
resolve_tools
ADMIN_CLASSES=$CACHE/grpc-clients-admin
if newer_than "$ADMIN_CLASSES/SmokeAdmin.class" "$GC/admin/SmokeAdmin.java" "$TOOLS_CP_FILE"; then
    log "compiling SmokeAdmin"
    mkdir -p "$ADMIN_CLASSES"
    javac -d "$ADMIN_CLASSES" -cp "$TOOLS_CP" "$GC/admin/SmokeAdmin.java" \
        >"$WORK/javac.log" 2>&1 || fail_setup "javac SmokeAdmin.java; see $WORK/javac.log"
fi
ADMIN_CP=$ADMIN_CLASSES:$TOOLS_CP

BUILD_FAILED=()
PY_VENV=$CACHE/py-grpc
NODE_DIR=$CACHE/node-grpc
RUST_TARGET=${GRPC_SMOKE_RUST_TARGET_DIR:-$CACHE/grpc-smoke-rust-target}
RUST_BIN=$RUST_TARGET/release/grpc-smoke-rust
for c in "${CLIENTS[@]}"; do
    case $c in
        python)
            if pins_changed "$PY_VENV/.installed" "$GC/python/requirements.txt"; then
                log "installing the Python client into $PY_VENV (pip)"
                rm -rf "$PY_VENV"
                { "$PYTHON" -m venv "$PY_VENV" \
                    && nice -n 10 "$PY_VENV/bin/pip" install -q --disable-pip-version-check \
                        -r "$GC/python/requirements.txt"; } >"$WORK/pip.log" 2>&1 \
                    && pins_of "$GC/python/requirements.txt" >"$PY_VENV/.installed" \
                    || { log "FAIL: pip install; see $WORK/pip.log"; BUILD_FAILED+=(python); }
            fi ;;
        node)
            if pins_changed "$NODE_DIR/.installed" "$GC/node/package.json" "$GC/node/package-lock.json"; then
                log "installing the Node.js client into $NODE_DIR (npm ci)"
                rm -rf "$NODE_DIR"
                mkdir -p "$NODE_DIR"
                cp "$GC/node/package.json" "$GC/node/package-lock.json" "$NODE_DIR/"
                (cd "$NODE_DIR" && nice -n 10 npm ci --no-audit --no-fund) >"$WORK/npm.log" 2>&1 \
                    && pins_of "$GC/node/package.json" "$GC/node/package-lock.json" >"$NODE_DIR/.installed" \
                    || { log "FAIL: npm ci; see $WORK/npm.log"; BUILD_FAILED+=(node); }
            fi ;;
        rust)
            mapfile -t rust_sources < <(find "$GC/rust/src" "$GC/rust/Cargo.toml" "$GC/rust/Cargo.lock" -type f | sort)
            if [[ ! -x $RUST_BIN ]] || pins_changed "$RUST_BIN.built-from" "${rust_sources[@]}"; then
                log "building the Rust smoke (cargo build --release --locked, target $RUST_TARGET)"
                (cd "$GC/rust" && CARGO_TARGET_DIR=$RUST_TARGET nice -n 10 cargo build --release --locked) \
                    >"$WORK/cargo-rust-smoke.log" 2>&1 && pins_of "${rust_sources[@]}" >"$RUST_BIN.built-from" \
                    || { log "FAIL: cargo build; see $WORK/cargo-rust-smoke.log"; BUILD_FAILED+=(rust); }
            fi ;;
    esac
done
log "clients ready after $((SECONDS - T_START))s"
if ((BUILD_ONLY)); then
    ((${#BUILD_FAILED[@]} == 0)) || exit 1
    [[ -n ${CONFORMANCE_WORK_DIR:-} ]] || rm -rf "$WORK"
    exit 0
fi

# ---- broker under test (as grpc.sh) -------------------------------------------------------------
SKIFF_PID="" WATCHDOG_PID="" APACHE_DIR="" SMOKE_PIDS=()
cleanup() {
    local p
    for p in "${SMOKE_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    SMOKE_PIDS=()
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
trap 'log interrupted; exit 130' INT TERM

# shellcheck source=tests/lib.sh
source "$ROOT/tests/lib.sh"

NAMESRV="" GRPC=""
start_apache() {
    local out
    out=$("$HERE/apache/start.sh" --proxy-cluster --dir "$WORK/apache" --max-lifetime "$MAX_LIFETIME") || return 1
    APACHE_DIR=$WORK/apache
    NAMESRV=$(sed -n 's/^NAMESRV=//p' <<<"$out" | tail -1)
    GRPC=$(sed -n 's/^GRPC=//p' <<<"$out" | tail -1)
}

start_skiff() {
    local skiff=${SKIFF_BIN:-}
    if [[ -z $skiff ]]; then
        log "building skiff (cargo build --release --bin skiff)"
        (cd "$ROOT" && nice -n 10 cargo build --release --bin skiff) >"$WORK/cargo.log" 2>&1 || {
            log "FAIL: cargo build; see $WORK/cargo.log"
            return 1
        }
        skiff=${CARGO_TARGET_DIR:-$ROOT/target}/release/skiff
        [[ $skiff == /* ]] || skiff=$ROOT/$skiff
    fi
    [[ -x $skiff ]] || { log "FAIL: no skiff binary at $skiff"; return 1; }
    local port grpc_port
    port=$(free_port)
    grpc_port=$(free_port)
    while [[ $grpc_port == "$port" ]]; do grpc_port=$(free_port); done
    mkdir -p "$WORK/skiff-data"
    NAMESRV=127.0.0.1:$port
    GRPC=127.0.0.1:$grpc_port
    log "skiff $skiff: remoting $NAMESRV, gRPC $GRPC, data $WORK/skiff-data"
    (cd "$WORK" && SKIFF_TRANSACTION_TIMEOUT_MS=3000 SKIFF_TRANSACTION_CHECK_INTERVAL_MS=2000 \
        SKIFF_AUTO_CREATE_TOPIC=false SKIFF_METRICS_LISTEN=off \
        exec env -u SKIFF_BIN "$skiff" serve --listen "$NAMESRV" --grpc-listen "$GRPC" --data-dir "$WORK/skiff-data") \
        >>"$WORK/skiff.log" 2>&1 </dev/null &
    SKIFF_PID=$!
    setsid bash -c 'sleep "$1"; kill -TERM "$2" 2>/dev/null; sleep 10; kill -KILL "$2" 2>/dev/null' \
        watchdog "$MAX_LIFETIME" "$SKIFF_PID" >/dev/null 2>&1 </dev/null &
    WATCHDOG_PID=$!
    local waited=0
    until grep -q 'skiff ready' "$WORK/skiff.log" 2>/dev/null; do
        kill -0 "$SKIFF_PID" 2>/dev/null || return 1
        ((waited++ < 300)) || return 1
        sleep 0.1
    done
    "$PYTHON" - "$grpc_port" "$SKIFF_PID" <<'EOF'
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
}

t0=$SECONDS
if [[ $BROKER == apache ]]; then start_apache; else start_skiff; fi
if (($? != 0)) || [[ -z $NAMESRV || -z $GRPC ]]; then
    fail_setup "the $BROKER broker did not start; logs in $WORK"
fi
log "$BROKER ready after $((SECONDS - t0))s: gRPC $GRPC, remoting/name server $NAMESRV"

# ---- topics and groups, then the smokes ---------------------------------------------------------
# rust.tls runs only when the server's certificate names the dialled IP in a SAN (skiff's does;
# the Apache proxy's test certificate, CN=localhost without SANs, does not): the crate gives
# tonic no TLS config, so rustls verifies with the platform roots, here SSL_CERT_FILE = the
# certificate the server presents (fetched unverified into WORK/server-cert.pem).
rust_tls_possible() {
    "$PYTHON" - "$GRPC" "$WORK/server-cert.pem" >"$WORK/server-cert.txt" 2>&1 <<'EOF'
import ssl, sys
host, port = sys.argv[1].rsplit(":", 1)
pem = ssl.get_server_certificate((host, int(port)))
open(sys.argv[2], "w").write(pem)
info = ssl._ssl._test_decode_cert(sys.argv[2])
print("subject", info.get("subject"), "SAN", info.get("subjectAltName", ()))
sys.exit(0 if ("IP Address", host) in info.get("subjectAltName", ()) else 1)
EOF
}

RUN=$(date +%s)$$
declare -A RESULT=()
RUNS=() ADMIN_ARGS=()
for c in "${CLIENTS[@]}"; do
    for m in "${MODES[@]}"; do
        n=$c.$m
        if [[ " ${BUILD_FAILED[*]} " == *" $c "* ]]; then
            RESULT[$n]="FAIL $n: the client did not install/build (see $WORK)"
        elif [[ $c == rust && $m == tls ]] && ! rust_tls_possible; then
            RESULT[$n]="SKIP $n: the rocketmq crate 5.0.0 sets no TLS config: tonic's default rustls check (platform roots, SSL_CERT_FILE honoured) needs the dialled IP ${GRPC%:*} among the certificate's SANs, and the server's certificate has none ($(cat "$WORK/server-cert.txt" 2>/dev/null))"
        else
            RUNS+=("$n")
            ADMIN_ARGS+=("topic=gcs_${c}_${m}_$RUN:NORMAL" "group=gcs_${c}_${m}_g_$RUN")
            # The Python client (5.1.1+) also sends priority messages and consumes lite topics.
            [[ $c == python ]] && ADMIN_ARGS+=("topic=gcs_${c}_${m}_prio_$RUN:PRIORITY:8"
                "topic=gcs_${c}_${m}_lite_$RUN:LITE" "group=gcs_${c}_${m}_lg_$RUN:gcs_${c}_${m}_lite_$RUN")
        fi
    done
done
if ((${#RUNS[@]})); then
    if ! timeout 120 java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
            -Duser.home="$WORK/client-home" -cp "$ADMIN_CP" SmokeAdmin "$NAMESRV" "${ADMIN_ARGS[@]}" \
            >"$WORK/admin.out" 2>&1; then
        tail -5 "$WORK/admin.out" >&2
        for n in "${RUNS[@]}"; do RESULT[$n]="FAIL $n: creating its topic and group failed (see $WORK/admin.out)"; done
        RUNS=()
    fi
fi
log "topics and groups created; running ${RUNS[*]}"

for n in "${RUNS[@]}"; do
    c=${n%.*} m=${n#*.}
    tls=off
    [[ $m == tls ]] && tls=on
    args=(--endpoint "$GRPC" --topic "gcs_${c}_${m}_$RUN" --group "gcs_${c}_${m}_g_$RUN" --tls "$tls")
    case $c in
        python) cmd=("$PY_VENV/bin/python" "$GC/python/smoke.py" "${args[@]}"
            --priority-topic "gcs_${c}_${m}_prio_$RUN"
            --lite-topic "gcs_${c}_${m}_lite_$RUN" --lite-group "gcs_${c}_${m}_lg_$RUN") ;;
        node) cmd=(env NODE_PATH="$NODE_DIR/node_modules" node "$GC/node/smoke.js" "${args[@]}") ;;
        rust) cmd=(env SSL_CERT_FILE="$WORK/server-cert.pem" "$RUST_BIN" "${args[@]}") ;;
    esac
    (cd "$WORK" && HOME=$WORK/client-home exec timeout --kill-after=10 180 "${cmd[@]}") \
        >"$WORK/$n.out" 2>"$WORK/$n.err" </dev/null &
    SMOKE_PIDS+=($!)
done
declare -A RC=()
for i in "${!RUNS[@]}"; do
    wait "${SMOKE_PIDS[$i]}"
    RC[${RUNS[$i]}]=$?
done
SMOKE_PIDS=()
cleanup

PASSED=0 FAILED=0
echo "== gRPC client smokes against $BROKER ($GRPC, TLS $TLS), $((SECONDS - T_START))s, work dir $WORK"
for c in "${CLIENTS[@]}"; do
    for m in "${MODES[@]}"; do
        n=$c.$m
        line=${RESULT[$n]:-}
        if [[ -z $line ]]; then
            line=$(grep -E "^(PASS|FAIL) ${n//./\\.}" "$WORK/$n.out" | tail -1)
            [[ -n $line ]] || line="FAIL $n: no result (exit ${RC[$n]:-?}; see $WORK/$n.err)"
            [[ $line == PASS* && ${RC[$n]:-1} != 0 ]] && line="FAIL $n: printed PASS but exited ${RC[$n]}"
        fi
        echo "$line"
        if [[ $line == FAIL* ]]; then
            grep -E '^  ' "$WORK/$n.out" 2>/dev/null | head -20
            FAILED=$((FAILED + 1))
        elif [[ $line == PASS* ]]; then
            PASSED=$((PASSED + 1))
        fi
    done
done
if ((FAILED == 0 && !KEEP)) && [[ -z ${CONFORMANCE_WORK_DIR:-} ]]; then
    rm -rf "$WORK"
fi
echo "$PASSED passed, $FAILED failed"
((FAILED == 0))
