# shellcheck shell=bash
# Shell functions the test scripts (and bench/lib.sh) share; sourced, not run. PYTHON names the
# interpreter (default python3).

PYTHON=${PYTHON:-python3}

# free_port: a free loopback port (bound, then released).
free_port() {
    "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
