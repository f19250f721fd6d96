#!/usr/bin/env bash
# Interop test: RocketMQ clients that nobody on this project wrote, against `skiff serve`.
#
#   bash tests/interop/run.sh            # all clients (rust python)
#   INTEROP_CLIENTS=python bash tests/interop/run.sh
#
# For each client (the clients side by side): start `skiff serve` on a free loopback port with a
# fresh data dir, produce COUNT messages, consume all of them with a push consumer group (which
# then lingers past one 5 s offset-persist period and shuts down cleanly), stop skiff with
# SIGTERM, start it again on the same data dir, and run the same group with --expect-none:
# nothing already committed may arrive, and a probe message sent after the quiet window must (the
# consumer was live).
#
# Clients:
#   rust    tests/interop/rust-client  (crate rocketmq-client-rust, own Cargo project)
#   python  tests/interop/python       (PyPI rocketmq==0.4.4, bundles rocketmq-client-cpp)
#
# Environment (all optional):
#   INTEROP_CLIENTS          clients to run, default "rust python"
#   INTEROP_COUNT            messages per client, default 1000
#   INTEROP_QUIET_SECS       --expect-none window, default 25 (covers one 20 s rebalance period of
#                            the Rust client and two 10 s periods of the C++ client)
#   INTEROP_CLIENT_TARGET_DIR  target dir of the Rust client build (outside the repository),
#                            default ${XDG_CACHE_HOME:-$HOME/.cache}/skiff-interop/rust-client-target
#   INTEROP_WORK_DIR         logs and data dirs, default a new mktemp dir (kept on failure)
#   INTEROP_PROXY=1          route all client traffic through frame_proxy.py and log every frame
#                            (skiff advertises the proxy's address), for diagnosis
#   INTEROP_SKIP_BUILD=1     use already-built binaries
#   INTEROP_SKIFF_BIN                skiff binary to use (default: built from this checkout)
#   PYTHON                   python interpreter, default python3
#   RUST_LOG                 passed to skiff and the Rust client
#
# Exit status: 0 when every client passed. Everything binds 127.0.0.1; every background
# process started here is killed on exit.

set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$ROOT/tests/interop"
CLIENTS=${INTEROP_CLIENTS:-rust python}
COUNT=${INTEROP_COUNT:-1000}
QUIET=${INTEROP_QUIET_SECS:-25}
PYTHON=${PYTHON:-python3}
CLIENT_TARGET=${INTEROP_CLIENT_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/skiff-interop/rust-client-target}
WORK=${INTEROP_WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/skiff-interop.XXXXXX")}
mkdir -p "$WORK"

# Timeouts (seconds) for each step; every wait below is bounded.
T_BUILD=${INTEROP_BUILD_TIMEOUT:-3000}
T_READY=30        # skiff accepting connections
T_STOP=30         # skiff exiting after SIGTERM
T_PRODUCE=300     # whole producer process
T_CONSUME=150     # consumer's own deadline for all bodies (process gets more, see below)
T_PROBE=60        # expect-none: probe message must arrive within this

log() { printf '[interop %(%H:%M:%S)T] %s\n' -1 "$*"; }

# ---- process bookkeeping: every background pid is killed on exit -------------------------
BG_PIDS=()
cleanup() {
    local pid
    for pid in "${BG_PIDS[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null
        fi
    done
    for pid in "${BG_PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
    done
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

forget_pid() {
    local keep=() p
    for p in "${BG_PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    BG_PIDS=("${keep[@]}")
}

# Run a command in the background under `timeout`, wait for it, return its exit status.
run_bounded() {
    local secs=$1 out=$2
    shift 2
    timeout --kill-after=10 "$secs" "$@" >"$out" 2>"$out.stderr" &
    local pid=$!
    BG_PIDS+=("$pid")
    wait "$pid"
    local rc=$?
    forget_pid "$pid"
    return "$rc"
}

# shellcheck source=tests/lib.sh
source "$ROOT/tests/lib.sh"

# Bounded retry loop until 127.0.0.1:$1 accepts a connection; fails early if $2 (pid) died.
wait_port() {
    local port=$1 pid=$2 deadline=$((SECONDS + T_READY))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "process $pid exited before 127.0.0.1:$port accepted connections"
            return 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    log "127.0.0.1:$port did not accept connections within ${T_READY}s"
    return 1
}

# ---- skiff lifecycle ------------------------------------------------------------------------
SKIFF_PID=""
PROXY_PID=""
# start_skiff DATA_DIR PORT LOG [ADVERTISED]
start_skiff() {
    local dir=$1 port=$2 logf=$3 adv=${4:-}
    if [[ -n $adv ]]; then
        SKIFF_ADVERTISED_ADDRESS=$adv "$SKIFF" serve --listen "127.0.0.1:$port" --data-dir "$dir" >>"$logf" 2>&1 &
    else
        "$SKIFF" serve --listen "127.0.0.1:$port" --data-dir "$dir" >>"$logf" 2>&1 &
    fi
    SKIFF_PID=$!
    BG_PIDS+=("$SKIFF_PID")
    wait_port "$port" "$SKIFF_PID"
}

# SIGTERM, then wait (bounded) for a clean exit with status 0.
stop_skiff() {
    local pid=$SKIFF_PID rc
    [[ -n $pid ]] || return 0
    kill -TERM "$pid" 2>/dev/null
    local deadline=$((SECONDS + T_STOP))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        log "skiff (pid $pid) still running ${T_STOP}s after SIGTERM; killing it"
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        forget_pid "$pid"
        SKIFF_PID=""
        return 1
    fi
    wait "$pid"
    rc=$?
    forget_pid "$pid"
    SKIFF_PID=""
    if ((rc != 0)); then
        log "skiff exited with status $rc after SIGTERM"
        return 1
    fi
}

start_proxy() {
    local port=$1 upstream=$2 logf=$3
    "$PYTHON" "$HERE/frame_proxy.py" --listen "127.0.0.1:$port" --upstream "$upstream" --log "$logf" \
        >>"$logf.stderr" 2>&1 &
    PROXY_PID=$!
    BG_PIDS+=("$PROXY_PID")
    wait_port "$port" "$PROXY_PID"
}

stop_proxy() {
    [[ -n $PROXY_PID ]] || return 0
    kill -TERM "$PROXY_PID" 2>/dev/null
    wait "$PROXY_PID" 2>/dev/null
    forget_pid "$PROXY_PID"
    PROXY_PID=""
}

# ---- build ----------------------------------------------------------------------------------
t_start=$SECONDS
if [[ ${INTEROP_SKIP_BUILD:-0} != 1 ]]; then
    if [[ -z ${INTEROP_SKIFF_BIN:-} ]]; then
        log "building skiff (release)"
        if ! (cd "$ROOT" && timeout "$T_BUILD" nice -n 10 cargo build --release --bin skiff); then
            log "FAIL: building skiff"
            exit 1
        fi
    fi
    if [[ " $CLIENTS " == *" rust "* ]]; then
        log "building the Rust client (target dir $CLIENT_TARGET)"
        # The dev profile (its Cargo.toml: no debug info, no incremental state): the client drives
        # a thousand messages, and a release build of its dependency tree takes CI 10 minutes.
        if ! timeout "$T_BUILD" nice -n 10 cargo build --locked \
            --manifest-path "$HERE/rust-client/Cargo.toml" --target-dir "$CLIENT_TARGET"; then
            log "FAIL: building tests/interop/rust-client"
            exit 1
        fi
    fi
fi
if [[ " $CLIENTS " == *" python "* ]]; then
    if ! "$PYTHON" -c 'import importlib.metadata as m, sys; sys.exit(m.version("rocketmq") != "0.4.4")' 2>/dev/null; then
        log "installing rocketmq==0.4.4 for $PYTHON"
        if ! timeout 600 "$PYTHON" -m pip install --quiet --disable-pip-version-check rocketmq==0.4.4; then
            log "FAIL: pip install rocketmq==0.4.4"
            exit 1
        fi
    fi
    if ! "$PYTHON" -c 'import rocketmq.client' 2>"$WORK/python-import.err"; then
        log "FAIL: import rocketmq.client: $(tail -1 "$WORK/python-import.err")"
        exit 1
    fi
fi
if [[ -n ${INTEROP_SKIFF_BIN:-} ]]; then
    SKIFF=$INTEROP_SKIFF_BIN
else
    SKIFF=${CARGO_TARGET_DIR:-$ROOT/target}/release/skiff
    [[ $SKIFF == /* ]] || SKIFF=$ROOT/$SKIFF
fi
RUST_CLIENT=$CLIENT_TARGET/debug/interop-rust-client
log "builds ready after $((SECONDS - t_start))s; skiff=$SKIFF work=$WORK"
[[ -x $SKIFF ]] || { log "FAIL: no skiff binary at $SKIFF"; exit 1; }

client_cmd() {
    case $1 in
        rust) echo "$RUST_CLIENT" ;;
        python) echo "$PYTHON $HERE/python/interop_client.py --log-dir $WORK/python/client-logs" ;;
    esac
}

result_field() { # result_field FILE KEY -> value of KEY=... on the RESULT line
    sed -n 's/^RESULT .*[[:space:]]'"$2"'=\([^[:space:]]*\).*/\1/p' "$1" | tail -1
}

show_failure() { # show_failure FILE...
    local f
    for f in "$@"; do
        [[ -s $f ]] || continue
        echo "---- tail of $f"
        tail -n 15 "$f"
    done
}

# ---- one client -------------------------------------------------------------------------------
SUMMARY=()
PASSED=0
FAILED=0

run_client() {
    local c=$1 dir="$WORK/$1" port upstream ns adv="" status=PASS reason=""
    local topic="InteropTopic_$1" group="interop_$1_cg"
    local -a cmd
    read -r -a cmd <<<"$(client_cmd "$c")"
    mkdir -p "$dir/data"
    port=$(free_port)
    ns="127.0.0.1:$port"
    if [[ ${INTEROP_PROXY:-0} == 1 ]]; then
        upstream=$ns
        ns="127.0.0.1:$(free_port)"
        adv=$ns
    fi
    local common=(--namesrv "$ns" --topic "$topic" --group "$group" --count "$COUNT")
    local sent="-" distinct="-" dups="-" old="-" probe="-" t0=$SECONDS

    log "[$c] skiff serve on 127.0.0.1:$port, data dir $dir/data"
    if ! start_skiff "$dir/data" "$port" "$dir/skiff-1.log" "$adv"; then
        status=FAIL reason="skiff did not start"
    fi
    if [[ $status == PASS && -n $adv ]]; then
        start_proxy "${ns##*:}" "$upstream" "$dir/frames.log" || { status=FAIL reason="proxy did not start"; }
    fi

    if [[ $status == PASS ]]; then
        log "[$c] produce $COUNT"
        run_bounded "$T_PRODUCE" "$dir/produce.out" "${cmd[@]}" "${common[@]}" --mode produce
        local rc=$?
        sent=$(result_field "$dir/produce.out" sent_ok)
        cat "$dir/produce.out"
        if ((rc != 0)); then
            status=FAIL reason="produce exited $rc"
            show_failure "$dir/produce.out.stderr" "$dir/skiff-1.log"
        fi
    fi

    if [[ $status == PASS ]]; then
        log "[$c] consume $COUNT with group $group"
        run_bounded $((T_CONSUME + 60)) "$dir/consume.out" "${cmd[@]}" "${common[@]}" --mode consume \
            --timeout "$T_CONSUME" --linger 6
        local rc=$?
        distinct=$(result_field "$dir/consume.out" distinct)
        dups=$(result_field "$dir/consume.out" duplicates)
        cat "$dir/consume.out"
        if ((rc != 0)); then
            status=FAIL reason="consume exited $rc"
            show_failure "$dir/consume.out.stderr" "$dir/skiff-1.log"
        fi
    fi

    stop_proxy
    if [[ -n $SKIFF_PID ]]; then
        log "[$c] SIGTERM skiff"
        if ! stop_skiff; then
            [[ $status == PASS ]] && status=FAIL reason="skiff did not stop cleanly"
            show_failure "$dir/skiff-1.log"
        fi
    fi

    if [[ $status == PASS ]]; then
        log "[$c] restart skiff on the same data dir"
        if ! start_skiff "$dir/data" "$port" "$dir/skiff-2.log" "$adv"; then
            status=FAIL reason="skiff did not restart"
            show_failure "$dir/skiff-2.log"
        fi
        if [[ $status == PASS && -n $adv ]]; then
            start_proxy "${ns##*:}" "$upstream" "$dir/frames-2.log" || { status=FAIL reason="proxy did not start"; }
        fi
    fi

    if [[ $status == PASS ]]; then
        log "[$c] same group again, expecting nothing for ${QUIET}s, then a probe"
        run_bounded $((QUIET + T_PROBE + 60)) "$dir/expect-none.out" "${cmd[@]}" "${common[@]}" --mode consume \
            --expect-none "$QUIET" --timeout "$T_PROBE"
        local rc=$?
        old=$(result_field "$dir/expect-none.out" old_received)
        probe=$(result_field "$dir/expect-none.out" probe_received)
        cat "$dir/expect-none.out"
        if ((rc != 0)); then
            status=FAIL reason="second run after restart: exit $rc"
            show_failure "$dir/expect-none.out.stderr" "$dir/skiff-2.log"
        fi
    fi

    stop_proxy
    if [[ -n $SKIFF_PID ]]; then
        if ! stop_skiff; then
            [[ $status == PASS ]] && status=FAIL reason="skiff did not stop cleanly after the second run"
        fi
    fi

    local line
    line=$(printf '%-6s sent=%s/%s consumed_distinct=%s duplicates=%s after_restart: old_received=%s probe_received=%s  %ss  %s%s' \
        "$c" "${sent:--}" "$COUNT" "${distinct:--}" "${dups:--}" "${old:--}" "${probe:--}" \
        "$((SECONDS - t0))" "$status" "${reason:+ ($reason)}")
    SUMMARY+=("$line")
    if [[ $status == PASS ]]; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); fi
}

# The clients run side by side, each against its own skiff; a client's log is shown whole once
# it is done, its summary line comes back through WORK/CLIENT.summary and its verdict as the exit
# status.
LANES=()
for c in $CLIENTS; do
    case $c in
        rust | python)
            (
                trap cleanup EXIT
                run_client "$c"
                printf '%s\n' "${SUMMARY[@]}" >"$WORK/$c.summary"
                ((FAILED == 0))
            ) >"$WORK/$c.log" 2>&1 &
            LANES+=("$!:$c")
            ;;
        *) log "unknown client $c"; SUMMARY+=("$c: unknown client  FAIL"); FAILED=$((FAILED + 1)) ;;
    esac
done
for lane in "${LANES[@]}"; do
    c=${lane#*:}
    if wait "${lane%%:*}"; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); fi
    cat "$WORK/$c.log"
    if [[ -s $WORK/$c.summary ]]; then
        SUMMARY+=("$(cat "$WORK/$c.summary")")
    else
        SUMMARY+=("$c: no summary (see $WORK/$c.log)  FAIL")
    fi
done

echo
echo "== interop summary (count=$COUNT, quiet window ${QUIET}s, total $((SECONDS - t_start))s, logs in $WORK)"
for line in "${SUMMARY[@]}"; do echo "INTEROP $line"; done
echo "interop: $PASSED passed, $FAILED failed"
if ((FAILED == 0)) && [[ ${INTEROP_KEEP:-0} != 1 && -z ${INTEROP_WORK_DIR:-} ]]; then
    rm -rf "$WORK"
fi
((FAILED == 0))
