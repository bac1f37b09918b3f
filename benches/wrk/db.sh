# Sourced by the round scripts: a fresh database for one round, its broker,
# and the database's drop.
# PGHOST/PGPORT/PGUSER name the PostgreSQL (defaults 127.0.0.1, 5432,
# postgres). With CITUS_WORKERS="PORT PORT" (workers on PGHOST) PGPORT is a
# Citus coordinator: the database is created on it and on each worker, with
# the citus extension in each, and the workers are added to the coordinator,
# so the broker's first boot distributes its schema there.
HOST=${PGHOST:-127.0.0.1}; PGP=${PGPORT:-5432}; USER_=${PGUSER:-postgres}
DB=r$RANDOM$RANDOM
psql_on() { psql -h "$HOST" -p "$1" -U "$USER_" -qAt "${@:2}"; }
create_db() {
  psql_on "$PGP" -c "create database $DB" >/dev/null
  if [ -n "${CITUS_WORKERS:-}" ]; then
    for w in $CITUS_WORKERS; do
      psql_on "$w" -c "create database $DB" >/dev/null
      psql_on "$w" -d "$DB" -c "create extension citus" >/dev/null
    done
    psql_on "$PGP" -d "$DB" -c "create extension citus" >/dev/null
    for w in $CITUS_WORKERS; do
      psql_on "$PGP" -d "$DB" -c "select citus_add_node('$HOST', $w)" >/dev/null
    done
  fi
}
drop_db() {
  psql_on "$PGP" -c "drop database $DB with (force)" >/dev/null
  for w in ${CITUS_WORKERS:-}; do psql_on "$w" -c "drop database $DB with (force)" >/dev/null; done
}
database_url() { echo "postgres://$USER_@$HOST:$PGP/$DB"; }
PORT=${PORT:-6700}
# Start broker binary $1 on the round's database and port (its log in
# /tmp/broker-DB.log), set BPID, and wait up to 20 s for /health.
start_broker() {
  QUEEN_DATABASE_URL="$(database_url)" FILE_BUFFER_DIR=/tmp/qb-$DB PORT=$PORT RUST_LOG=warn "$1" >/tmp/broker-$DB.log 2>&1 &
  BPID=$!
  for _ in $(seq 1 100); do curl -sf "localhost:$PORT/health" >/dev/null && break; sleep 0.2; done
}
# CPU clock ticks of every process of user postgres (all nodes of a local cluster).
pgcpu() { local t=0 s; for p in $(pgrep -u postgres postgres); do s=$(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0); t=$((t+s)); done; echo $t; }
