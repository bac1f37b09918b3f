#!/usr/bin/env bash
# One round of single-message pushes against a fresh database and broker:
#   benches/wrk/round.sh BROKER_BINARY PARTITIONS [SECONDS] [CONNECTIONS]
# prints one line: msg/s, p99, and PostgreSQL's and the broker's CPU per
# message (from /proc; PostgreSQL is every process of user postgres, so run
# nothing else on that cluster). PGHOST/PGPORT/PGUSER name a PostgreSQL the
# script may create and drop databases on (defaults: 127.0.0.1, 5432,
# postgres); CITUS_WORKERS="9701 9702" makes PGPORT a Citus coordinator
# (benches/wrk/db.sh). Alternate builds round by round to compare them:
#   for r in 1 2 3; do for b in old new; do benches/wrk/round.sh bin/$b 100 15; done; done
set -euo pipefail
BIN=$1; PARTS=$2; DUR=${3:-10}; CONNS=${4:-50}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/db.sh"
create_db
start_broker "$BIN"
trap 'kill -INT $BPID 2>/dev/null || true' EXIT
# Warm-up: creates the queue and its partitions.
QUEUE=w$PARTS PARTS=$PARTS wrk -t2 -c"$CONNS" -d2s -s "$HERE/push.lua" "http://127.0.0.1:$PORT" >/dev/null
bcpu() { awk '{print $14+$15}' "/proc/$BPID/stat"; }
p0=$(pgcpu); b0=$(bcpu)
out=$(QUEUE=w$PARTS PARTS=$PARTS wrk -t2 -c"$CONNS" -d"${DUR}s" --latency -s "$HERE/push.lua" "http://127.0.0.1:$PORT")
p1=$(pgcpu); b1=$(bcpu)
reqs=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
p99=$(echo "$out" | awk '$1=="99%" {print $2}')
kill -INT $BPID; wait $BPID 2>/dev/null || true
trap - EXIT
drop_db
awk -v b="$BIN" -v parts="$PARTS" -v r="$reqs" -v p99="$p99" -v dp=$((p1-p0)) -v db=$((b1-b0)) \
    -v t="$(getconf CLK_TCK)" -v d="$DUR" \
    'BEGIN{m=r*d; printf "%s p%s %.0f msg/s p99 %s pg %.1f us/msg broker %.1f us/msg\n", b, parts, r, p99, dp/t*1e6/m, db/t*1e6/m}'
