# Server lifecycle shared by the benchmark scripts (sourced, not run): the cleanup trap,
# waiting for a `listening` line, starting the engine, the null handler and a throwaway
# PostgreSQL 15, psql access.
# Expects: log, die, RESULTS_DIR, BENCH_DIR, KEEP_DATA, PGBIN, ENGINE_BIN, NULL_BIN, TOKEN,
# ENGINE_PORT, NULL_PORT, PG_PORT.
ENGINE_PID= NULL_PID= PG_STARTED=0 BENCH_DIR_MADE=0
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

cleanup() {
  local rc=$?
  set +e
  stop_engine
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

# make_bench_dir: BENCH_DIR as given (must not exist yet) or a fresh one under /var/tmp, removed
# at exit unless KEEP_DATA=1; also draws the run's bearer TOKEN.
make_bench_dir() {
  if [ -z "${BENCH_DIR:-}" ]; then
    BENCH_DIR=$(mktemp -d /var/tmp/engine-bench.XXXXXX)
  else
    [ -e "$BENCH_DIR" ] && die "BENCH_DIR $BENCH_DIR exists; give a new path"
    mkdir -p "$BENCH_DIR"
  fi
  BENCH_DIR_MADE=1
  chmod 755 "$BENCH_DIR"
  TOKEN=bench-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
}

# engine_epilogue: the running engine's /metrics into RESULTS_DIR, and a warning when its logs
# (RESULTS_DIR/engine*.log) have error or warning lines.
engine_epilogue() {
  local warn
  curl -fsS -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$ENGINE_PORT/metrics" \
    >"$RESULTS_DIR/engine-metrics.txt" 2>/dev/null || true
  warn=$(cat "$RESULTS_DIR"/engine*.log | grep -ciE 'error|warn|panic' || true)
  [ "$warn" = 0 ] || log "engine logs have $warn error/warning lines: $RESULTS_DIR/engine*.log"
}

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

# start_engine [DATA_DIR [NAME]]: the engine on 127.0.0.1:ENGINE_PORT with DATA_DIR (default
# BENCH_DIR/engine), its output in RESULTS_DIR/NAME.stdout and NAME.log (NAME default `engine`).
start_engine() {
  local dir=${1:-$BENCH_DIR/engine} name=${2:-engine}
  port_in_use "$ENGINE_PORT" && die "port $ENGINE_PORT is in use (set ENGINE_PORT)"
  "$ENGINE_BIN" serve --data-dir "$dir" --http-addr "127.0.0.1:$ENGINE_PORT" \
    --grpc-addr "127.0.0.1:${ENGINE_GRPC_PORT:-0}" --token "$TOKEN" >"$RESULTS_DIR/$name.stdout" 2>"$RESULTS_DIR/$name.log" &
  ENGINE_PID=$!
  wait_listening "$RESULTS_DIR/$name.stdout" "$ENGINE_PID" engine
  log "engine listening on 127.0.0.1:$ENGINE_PORT (pid $ENGINE_PID, data $dir)"
}

# stop_engine: stops the engine start_engine started (SIGTERM, then waits for it to exit).
stop_engine() {
  if [ -n "$ENGINE_PID" ] && kill -0 "$ENGINE_PID" 2>/dev/null; then
    kill -TERM "$ENGINE_PID"; wait "$ENGINE_PID" 2>/dev/null
  fi
  ENGINE_PID=
  return 0
}

start_null() {
  port_in_use "$NULL_PORT" && die "port $NULL_PORT is in use (set NULL_PORT)"
  "$NULL_BIN" --addr "127.0.0.1:$NULL_PORT" >"$RESULTS_DIR/null.stdout" 2>&1 &
  NULL_PID=$!
  wait_listening "$RESULTS_DIR/null.stdout" "$NULL_PID" "null handler"
  log "null handler listening on 127.0.0.1:$NULL_PORT (pid $NULL_PID)"
}

# start_postgres SETTINGS [INITDB_ARG...]: a throwaway PostgreSQL 15 cluster in BENCH_DIR/pg,
# listening on 127.0.0.1:PG_PORT only, trust authentication, user and database `bench`.
# SETTINGS: the server's extra `-c name=value` options (each script states and explains its own).
start_postgres() {
  local settings=$1 d=$BENCH_DIR/pg
  shift
  port_in_use "$PG_PORT" && die "port $PG_PORT is in use (set PG_PORT)"
  mkdir -p "$d"
  if [ "$(id -u)" = 0 ]; then
    chown postgres:postgres "$d"
    runuser -u postgres -- test -w "$d" || die "the postgres user cannot reach $d; set BENCH_DIR to a world-traversable place"
  fi
  as_pg "$PGBIN/initdb" -D "$d" -U bench --auth=trust -E UTF8 "$@" >/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$d" -l "$d/server.log" -w start -o "-c listen_addresses=127.0.0.1 \
    -c port=$PG_PORT -c unix_socket_directories=$d $settings" >/dev/null
  PG_STARTED=1
  as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U bench bench
  log "PostgreSQL listening on 127.0.0.1:$PG_PORT"
}

# pg_settings_file FILE: the PostgreSQL settings that shape query plans, read back.
pg_settings_file() {
  psql_bench -At -c "SELECT name || '=' || current_setting(name) FROM pg_settings WHERE name IN
    ('server_version','shared_buffers','work_mem','effective_cache_size','max_parallel_workers_per_gather',
     'max_parallel_workers','jit','jit_above_cost','random_page_cost','plan_cache_mode',
     'default_statistics_target','maintenance_work_mem','lc_collate') ORDER BY name" >"$1"
}

psql_bench() { "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U bench -d bench "$@"; }
