#!/usr/bin/env bash
# Console test: skiff's web console and its JSON API (GET / and /api/v1 on the metrics listener)
# in headless Chromium, against `skiff serve` with data made by a real RocketMQ client.
#
#   bash tests/console/run.sh [--keep] [--no-screenshots]
#
# Starts ${SKIFF_BIN:-target/release/skiff} serve --listen 127.0.0.1:P --grpc-listen off
# --metrics-listen 127.0.0.1:H --data-dir WORK/data (never builds skiff), then runs
# browser_test.py: the PyPI rocketmq 0.4.4 client (rocketmq-client-cpp) produces to
# ConsoleOrders and consumes part of it with ConsoleGroup; every API endpoint is called with
# urllib (bad input included) and every page is opened with Selenium 4 in Debian's chromium
# (chromedriver /usr/bin/chromedriver, --headless=new --no-sandbox, 1280x900), and what they show
# is compared with `skiff admin` (topics, topic-status, progress, message). The checks are listed
# in browser_test.py's docstring. Screenshots of every page at 1024 and 1440 px wide go to
# docs/console-PAGE-WIDTH.png (not with --no-screenshots).
#
#   --keep            keep the work dir (skiff.log, browser_test.out, chromedriver.log, client
#                     logs) even when everything passed
#
# Installs what is missing: selenium and rocketmq==0.4.4 with pip, chromium and chromium-driver
# with apt-get. Everything binds 127.0.0.1; every process started here is stopped on exit, and
# skiff and the test also have a watchdog. Ends with `N passed, M failed`; exit 0 iff M = 0.
# Environment: SKIFF_BIN, CONSOLE_WORK_DIR (default: a new mktemp dir), PYTHON (python3),
# CHROMIUM (/usr/bin/chromium), CHROMEDRIVER (/usr/bin/chromedriver).

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python3}
KEEP=0 SHOTS=$ROOT/docs
usage="usage: $0 [--keep] [--no-screenshots]"
while (($#)); do
    case $1 in
        --keep) KEEP=1 ;;
        --no-screenshots) SHOTS="" ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
    shift
done
log() { printf '[console %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
fail_setup() { log "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
MAX_LIFETIME=900 # seconds: the watchdog stops skiff and the test past this
T_TEST=780       # the test's own limit, inside the watchdog's

# ---- what the test needs ------------------------------------------------------------------------
SKIFF=${SKIFF_BIN:-$ROOT/target/release/skiff}
[[ -x $SKIFF ]] || fail_setup "no skiff binary at $SKIFF (set SKIFF_BIN or build it)"
if ! "$PYTHON" -c 'import selenium, sys; sys.exit(int(selenium.__version__.split(".")[0]) < 4)' 2>/dev/null; then
    log "installing selenium for $PYTHON"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore selenium==4.51.0 \
        || fail_setup "pip install selenium"
fi
if ! "$PYTHON" -c 'import importlib.metadata as m, sys; sys.exit(m.version("rocketmq") != "0.4.4")' 2>/dev/null; then
    log "installing rocketmq==0.4.4 for $PYTHON"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore rocketmq==0.4.4 \
        || fail_setup "pip install rocketmq==0.4.4"
fi
CHROMIUM=${CHROMIUM:-/usr/bin/chromium} CHROMEDRIVER=${CHROMEDRIVER:-/usr/bin/chromedriver}
if [[ ! -x $CHROMIUM || ! -x $CHROMEDRIVER ]]; then
    log "installing chromium and chromium-driver with apt-get"
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver; } \
        >"${TMPDIR:-/tmp}/skiff-console-apt.log" 2>&1 \
        || fail_setup "apt-get install chromium chromium-driver (see ${TMPDIR:-/tmp}/skiff-console-apt.log)"
fi
export CHROMIUM CHROMEDRIVER

WORK=${CONSOLE_WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/skiff-console.XXXXXX")}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

# ---- cleanup: every process started here, by its id ---------------------------------------------
SKIFF_PID="" WATCHDOG_PID="" TEST_PID=""
cleanup() {
    # The test runs in its own session (setsid): its group holds chromedriver and Chromium too.
    if [[ -n $TEST_PID ]] && kill -0 "$TEST_PID" 2>/dev/null; then
        kill -TERM -- "-$TEST_PID" 2>/dev/null
        for _ in $(seq 50); do kill -0 "$TEST_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$TEST_PID" 2>/dev/null
    fi
    TEST_PID=""
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
}
trap cleanup EXIT
# Further signals are ignored once interrupted, so a second one cannot cut the cleanup short.
trap 'trap "" INT TERM; log interrupted; exit 130' INT TERM

# shellcheck source=tests/lib.sh
source "$ROOT/tests/lib.sh"

# ---- skiff ------------------------------------------------------------------------------------------
port=$(free_port)
http_port=$(free_port)
while [[ $http_port == "$port" ]]; do http_port=$(free_port); done
NAMESRV=127.0.0.1:$port HTTP=http://127.0.0.1:$http_port
mkdir -p "$WORK/data"
t0=$SECONDS
log "skiff $SKIFF: remoting $NAMESRV, console $HTTP/, data $WORK/data"
# Rates and lag sampled every second rather than every 10 s: the charts have their points
# within seconds.
(cd "$WORK" && SKIFF_CONSOLE_SAMPLE_INTERVAL_MS=1000 exec "$SKIFF" serve --listen "$NAMESRV" \
    --grpc-listen off --metrics-listen "127.0.0.1:$http_port" \
    --data-dir "$WORK/data") >>"$WORK/skiff.log" 2>&1 </dev/null &
SKIFF_PID=$!
setsid bash -c 'sleep "$1"; kill -TERM "$2" 2>/dev/null; sleep 10; kill -KILL "$2" 2>/dev/null' \
    watchdog "$MAX_LIFETIME" "$SKIFF_PID" >/dev/null 2>&1 </dev/null &
WATCHDOG_PID=$!
waited=0
until grep -q 'skiff ready' "$WORK/skiff.log" 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$http_port") 2>/dev/null; do
    kill -0 "$SKIFF_PID" 2>/dev/null || fail_setup "skiff exited; see $WORK/skiff.log"
    ((waited++ < 300)) || fail_setup "skiff not ready (or its HTTP port closed) after 30 s; see $WORK/skiff.log"
    sleep 0.1
done
log "skiff ready after $((SECONDS - t0))s; work dir $WORK"

# ---- the test ---------------------------------------------------------------------------------------
args=(--namesrv "$NAMESRV" --http "$HTTP" --skiff "$SKIFF" --work "$WORK")
[[ -n $SHOTS ]] && args+=(--screenshots "$SHOTS")
setsid -w timeout --kill-after=10 "$T_TEST" "$PYTHON" -u "$HERE/browser_test.py" "${args[@]}" \
    >"$WORK/browser_test.out" 2>"$WORK/browser_test.err" </dev/null &
TEST_PID=$!
wait "$TEST_PID"
rc=$?
TEST_PID=""
cleanup

echo "== console test against skiff (remoting $NAMESRV, console $HTTP/), $((SECONDS - t0))s, work dir $WORK"
grep -E '^(PASS|FAIL) ' "$WORK/browser_test.out"
PASSED=$(grep -c '^PASS ' "$WORK/browser_test.out")
FAILED=$(grep -c '^FAIL ' "$WORK/browser_test.out")
if ((rc != 0 && FAILED == 0)); then
    # Killed, or crashed before reporting a failure: that is a failure too.
    echo "FAIL browser_test: exit status $rc without a failed check ($(tail -1 "$WORK/browser_test.err"))"
    FAILED=$((FAILED + 1))
fi
if ((FAILED == 0 && !KEEP)) && [[ -z ${CONSOLE_WORK_DIR:-} ]]; then
    rm -rf "$WORK"
fi
echo "$PASSED passed, $FAILED failed"
((FAILED == 0))
