#!/usr/bin/env bash
# Differential check of skiff's SQL92 selectors (actors/src/logic/sql92/) against RocketMQ's own
# parser and evaluator (org.apache.rocketmq:rocketmq-filter from the local Maven repository,
# which the Apache broker of the conformance suite puts there).
#
#   bash tests/conformance/sql92/run.sh [COUNT] [SEED]
#
# Two sets of random cases, each evaluated by both sides (P = refused, T = selected, F = not):
# - well-formed cases: every answer must agree;
# - cases with a stray character: skiff may refuse what Java accepts (Java's parser stops at the
#   first token it cannot use and ignores the rest, so `a = 1 )x` selects like `a = 1`; skiff
#   refuses trailing input), nothing else may differ.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
COUNT=${1:-20000}
SEED=${2:-1}
M2=${M2_REPO:-$HOME/.m2/repository}
filter_jar=$(find "$M2/org/apache/rocketmq/rocketmq-filter" -name 'rocketmq-filter-5*.jar' | sort | tail -1)
guava_jar=$(find "$M2/com/google/guava/guava" -name 'guava-*.jar' | sort | tail -1)
if [[ -z $filter_jar || -z $guava_jar ]]; then
    echo "rocketmq-filter 5.x or guava not found under $M2 (run the Apache conformance suite once)" >&2
    exit 2
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
CP="$filter_jar:$guava_jar"
javac -d "$WORK" -cp "$CP" "$HERE/SelectorOracle.java"

compare() { # name noise allowed-mismatch-awk-condition
    local name=$1 noise=$2
    python3 "$HERE/gen_cases.py" "$COUNT" "$SEED" "$noise" >"$WORK/$name.txt"
    java -cp "$CP:$WORK" SelectorOracle "$WORK/$name.txt" >"$WORK/$name.java"
    (cd "$ROOT" && SQL92_DIFF_CASES="$WORK/$name.txt" SQL92_DIFF_OUT="$WORK/$name.skiff" \
        cargo test -q --release -p skiff-actors --lib logic::sql92::tests::agrees_with_cases_from_file \
        -- --ignored >/dev/null)
    paste "$WORK/$name.java" "$WORK/$name.skiff" "$WORK/$name.txt" | awk -F'\t' -v strict="$3" -v name="$name" '
        $1 != $2 && (strict || $2 != "P") { bad++; if (bad <= 10) print "  java " $1 ", skiff " $2 ": " $3 }
        $1 != $2 && !strict && $2 == "P" { lenient++ }
        { n++; seen[$1]++ }
        END {
            printf "%s: %d cases (java: %d refused, %d selected, %d not); %d differ", name, n, seen["P"], seen["T"], seen["F"], bad + 0
            if (!strict) printf ", %d refused by skiff only (trailing input)", lenient + 0
            print ""
            exit bad > 0
        }'
}
status=0
compare well-formed 0 1 || status=1
compare stray-character 0.1 ${SQL92_DIFF_STRICT:-0} || status=1
exit $status
