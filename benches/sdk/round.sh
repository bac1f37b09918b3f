#!/usr/bin/env bash
# One round of consume and of push-to-pop latency against a fresh database
# and broker:
#   benches/sdk/round.sh BROKER_BINARY [MESSAGES]
# runs benches/sdk/consume.py (MESSAGES, default 30000, over 100 partitions,
# 5 processes x 2 consumers, batch 10, with the broker's and PostgreSQL's CPU
# per message) and benches/sdk/latency.py (50 msg/s over 10 partitions, 4
# long-polling consumers, 20 s), each on a queue of its own, and prints their
# two JSON lines. The database comes from benches/wrk/db.sh (PGHOST, PGPORT,
# PGUSER; CITUS_WORKERS for a Citus coordinator). PYTHON defaults to
# target/sdk-venv/bin/python (built by the test suite's SDK test).
set -euo pipefail
BIN=$1; MESSAGES=${2:-30000}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-$HERE/../../target/sdk-venv/bin/python}
. "$HERE/../wrk/db.sh"
create_db
start_broker "$BIN"
trap 'kill -INT $BPID 2>/dev/null || true' EXIT
"$PY" "$HERE/consume.py" --url "http://127.0.0.1:$PORT" --messages "$MESSAGES" --partitions 100 \
    --processes 5 --consumers 2 --batch 10 --broker-pid "$BPID"
"$PY" "$HERE/latency.py" --url "http://127.0.0.1:$PORT" --rate 50 --partitions 10 --consumers 4 --seconds 20
kill -INT $BPID; wait $BPID 2>/dev/null || true
trap - EXIT
drop_db
