# shellcheck shell=bash
# Shell functions the bench scripts share (grpc-bench.sh, lite-bench.sh, java-bench.sh, scale.sh); sourced,
# not run. PYTHON names the interpreter (default python3).

# free_port comes from the test scripts' functions.
# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../tests/lib.sh"

# wait_port PORT PID...: until PORT accepts connections (60 s), while the PIDs live; 2 when one
# of them exited, 1 at the deadline.
wait_port() {
    "$PYTHON" - "$@" <<'EOF'
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
        time.sleep(0.2)
sys.exit(1)
EOF
}

# stop_pid PID: SIGTERM, SIGKILL after 10 s, then reaps it (a child of this shell).
stop_pid() {
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# grpc_bench_classpath NAME: compiles bench/grpc (Maven, at nice SKIFF_BENCH_NICE, default 10)
# unless its classes are newer than its sources, and prints its classpath; NAME tells the log
# file and messages apart. 1 when the build failed (the log's tail on stderr).
grpc_bench_classpath() {
    local jdir cp_file mvn_log
    jdir=$(dirname "${BASH_SOURCE[0]}")/grpc
    cp_file=$jdir/target/classpath.txt
    if [[ ! -s $cp_file || ! -d $jdir/target/classes \
        || -n $(find "$jdir/src" "$jdir/pom.xml" -newer "$cp_file" -print -quit) ]]; then
        echo "[$1] building bench/grpc (mvn compile)" >&2
        mvn_log=${TMPDIR:-/tmp}/skiff-$1-mvn.log
        if ! nice -n "${SKIFF_BENCH_NICE:-10}" mvn -q -B -f "$jdir/pom.xml" compile >"$mvn_log" 2>&1; then
            tail -20 "$mvn_log" >&2
            echo "[$1] FAIL: mvn compile; see $mvn_log" >&2
            return 1
        fi
        touch "$cp_file"
    fi
    echo "$(cd "$jdir" && pwd)/target/classes:$(cat "$cp_file")"
}
