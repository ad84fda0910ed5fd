# Server lifecycle shared by the benchmark scripts (sourced, not run): the cleanup trap,
# waiting for a `listening` line, starting the engine and the null handler, psql access.
# Expects: log, die, RESULTS_DIR, BENCH_DIR, KEEP_DATA, PGBIN, ENGINE_BIN, NULL_BIN, TOKEN,
# ENGINE_PORT, NULL_PORT, PG_PORT.
ENGINE_PID= NULL_PID= PG_STARTED=0 BENCH_DIR_MADE=0
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

cleanup() {
  local rc=$?
  set +e
  if [ -n "$ENGINE_PID" ] && kill -0 "$ENGINE_PID" 2>/dev/null; then
    kill -TERM "$ENGINE_PID"; wait "$ENGINE_PID" 2>/dev/null
  fi
  if [ -n "$NULL_PID" ] && kill -0 "$NULL_PID" 2>/dev/null; then
    kill -TERM "$NULL_PID"; wait "$NULL_PID" 2>/dev/null
  fi
  if [ "$PG_STARTED" = 1 ]; then
    as_pg "$PGBIN/pg_ctl" -D "$BENCH_DIR/pg" -m fast -w stop >/dev/null 2>&1
    [ -f "$BENCH_DIR/pg/server.log" ] && cp "$BENCH_DIR/pg/server.log" "$RESULTS_DIR/postgres.log"
  fi
  if [ "$BENCH_DIR_MADE" = 1 ] && [ "$KEEP_DATA" != 1 ]; then
    rm -rf "$BENCH_DIR"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_listening() { # FILE PID WHAT
  local i
  for i in $(seq 1 300); do
    grep -q '^listening http ' "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || die "$3 exited before listening (see $1 and its log)"
    sleep 0.1
  done
  die "$3 did not report listening within 30 s"
}

start_engine() {
  port_in_use "$ENGINE_PORT" && die "port $ENGINE_PORT is in use (set ENGINE_PORT)"
  "$ENGINE_BIN" serve --data-dir "$BENCH_DIR/engine" --http-addr "127.0.0.1:$ENGINE_PORT" \
    --token "$TOKEN" >"$RESULTS_DIR/engine.stdout" 2>"$RESULTS_DIR/engine.log" &
  ENGINE_PID=$!
  wait_listening "$RESULTS_DIR/engine.stdout" "$ENGINE_PID" engine
  log "engine listening on 127.0.0.1:$ENGINE_PORT (pid $ENGINE_PID)"
}

start_null() {
  port_in_use "$NULL_PORT" && die "port $NULL_PORT is in use (set NULL_PORT)"
  "$NULL_BIN" --addr "127.0.0.1:$NULL_PORT" >"$RESULTS_DIR/null.stdout" 2>&1 &
  NULL_PID=$!
  wait_listening "$RESULTS_DIR/null.stdout" "$NULL_PID" "null handler"
  log "null handler listening on 127.0.0.1:$NULL_PORT (pid $NULL_PID)"
}

psql_bench() { "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U bench -d bench "$@"; }
