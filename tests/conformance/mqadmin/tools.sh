# shellcheck shell=bash
# rocketmq-tools (mqadmin) for the suites that run it: mqadmin.sh, acl.sh, grpc-clients.sh.
# Sourced, not run; the caller defines HERE (tests/conformance), CACHE, log and fail_setup.

# shellcheck source=tests/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../lib.sh"

TOOLS_VERSION=$(sed -n 's:.*<rocketmq.version>\(.*\)</rocketmq.version>.*:\1:p' "$HERE/mqadmin/pom.xml")
TOOLS_CP_FILE=$CACHE/rocketmq-tools-$TOOLS_VERSION.classpath
TOOLS_ARCHIVE=$CACHE/rocketmq-tools-$TOOLS_VERSION.jsa

# resolve_tools: sets TOOLS_CP, the classpath of mqadmin/pom.xml's rocketmq-tools, resolved with
# Maven once (into ~/.m2 and TOOLS_CP_FILE), and TOOLS_JVM_FLAGS, which start an mqadmin JVM from
# a class-data archive of what a run loads. The archive is made once per classpath, by one run
# that Java records at its exit; a JVM started from it spends about 40% less CPU, and the suites
# start dozens of them side by side. A JVM that finds the archive does not match its classpath
# or its own version runs without it.
resolve_tools() {
    # Suites run side by side: one resolves while the others wait, then find it done.
    local lock
    exec {lock}>"$TOOLS_CP_FILE.lock"
    flock "$lock"
    if [[ ! -s $TOOLS_CP_FILE || $HERE/mqadmin/pom.xml -nt $TOOLS_CP_FILE ]]; then
        log "resolving rocketmq-tools $TOOLS_VERSION with Maven (once; cached in ~/.m2)"
        nice -n 10 mvn -q -B -f "$HERE/mqadmin/pom.xml" dependency:build-classpath \
            -Dmdep.outputFile="$TOOLS_CP_FILE.$$" >"$CACHE/mvn-tools.log" 2>&1 \
            || fail_setup "mvn dependency:build-classpath for rocketmq-tools (see $CACHE/mvn-tools.log)"
        mv "$TOOLS_CP_FILE.$$" "$TOOLS_CP_FILE"
    fi
    TOOLS_CP=$(cat "$TOOLS_CP_FILE")
    if [[ ! -s $TOOLS_ARCHIVE || $TOOLS_CP_FILE -nt $TOOLS_ARCHIVE ]]; then
        log "recording mqadmin's classes into a class-data archive (once per classpath)"
        # A route query to a port nobody listens on loads the client, the remoting layer and
        # the command line, and fails after its connect timeout.
        local closed_port
        closed_port=$(free_port)
        timeout --kill-after=5 60 java -XX:ArchiveClassesAtExit="$TOOLS_ARCHIVE.$$" -Xlog:disable \
            -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
            -Duser.home="$CACHE/mqadmin-archive-home" -Drocketmq.client.logUseSlf4j=false \
            -cp "$TOOLS_CP" org.apache.rocketmq.tools.command.MQAdminStartup \
            topicRoute -t archive -n "127.0.0.1:$closed_port" >/dev/null 2>&1
        if [[ -s $TOOLS_ARCHIVE.$$ ]]; then
            mv "$TOOLS_ARCHIVE.$$" "$TOOLS_ARCHIVE"
        else
            rm -f "$TOOLS_ARCHIVE.$$"
            log "no class-data archive was made; mqadmin runs without one"
        fi
    fi
    exec {lock}>&-
    TOOLS_JVM_FLAGS=()
    [[ -s $TOOLS_ARCHIVE ]] && TOOLS_JVM_FLAGS=(-XX:SharedArchiveFile="$TOOLS_ARCHIVE" -Xlog:disable)
}
