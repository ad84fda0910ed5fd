#!/usr/bin/env bash
# W3 (filtered search: equality, range with orderBy + limit on page 1 and page 50, $contains)
# and W4 (count/avg/sum grouped by a low-cardinality property) on 1,000,000 records: the
# engine against PostgreSQL 15 (JSONB + GIN + expression btree indexes) and DuckDB (PyPI,
# typed columns, in-process), on the same rows, with every system's exact total and page
# checked equal before anything is timed. Systems are interleaved over several rounds.
#
#   bash benches/run-w3-w4.sh
#
# Environment (defaults in brackets):
#   RECORDS [1000000]     rows in the dataset (labels ORDER/ITEM/CUSTOMER in thirds, 8 properties)
#   ROUNDS [3]            rounds; every round runs every query once per system, order rotating
#   REPS_SELECTIVE [500]  repetitions per cell for the selective queries (and the round trips)
#   REPS_OTHER [50]       repetitions per cell for the other W3 queries
#   REPS_W4 [20]          repetitions per cell for W4
#   CELL_SECONDS [10]     a cell stops early after this long (with at least MIN_REPS [5] runs)
#   WARMUP [2]            unrecorded runs of every query per system before round 1
#   LOAD_CONC [32]        concurrent connections of the engine loader (wrk)
#   LOADGEN_CPU [0]       CPU the clients (wrk loader, the Python driver for the engine and
#                         PostgreSQL) are pinned to; DuckDB runs in the driver on every CPU
#   ENGINE_PORT [18281] NULL_PORT [18282] PG_PORT [55434]   loopback ports
#   ENGINE_BIN, NULL_BIN  use these binaries instead of building (both must be given)
#   VENV [target/w3w4-venv] Python venv with duckdb and psycopg[binary] from PyPI (made if missing)
#   BENCH_DIR [mktemp under /var/tmp]  data directories (engine, PostgreSQL, DuckDB, dataset)
#   RESULTS_DIR [bench-results/w3-w4-DATE under the repo]
#   KEEP_DATA [0]         1 keeps BENCH_DIR after the run
#   ONLY []               comma-separated query names to measure (default: all)
#   PROFILE [all]         after the rounds, queries to profile on the engine with perf (each run
#                         back to back for PROFILE_SECONDS [5]); "none" skips; needs perf
#
# Placement: the wrk loader and the driver's engine/PostgreSQL client thread are pinned to
# LOADGEN_CPU; the engine, the null handler and PostgreSQL are not pinned; DuckDB, being
# in-process, runs its queries on the driver's threads with every CPU allowed.
# Needs root for apt-get and for running PostgreSQL as the `postgres` user.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

RECORDS=${RECORDS:-1000000}
ROUNDS=${ROUNDS:-3}
REPS_SELECTIVE=${REPS_SELECTIVE:-500}
REPS_OTHER=${REPS_OTHER:-50}
REPS_W4=${REPS_W4:-20}
CELL_SECONDS=${CELL_SECONDS:-10}
MIN_REPS=${MIN_REPS:-5}
WARMUP=${WARMUP:-2}
LOAD_CONC=${LOAD_CONC:-32}
LOADGEN_CPU=${LOADGEN_CPU:-0}
ENGINE_PORT=${ENGINE_PORT:-18281}
NULL_PORT=${NULL_PORT:-18282}
PG_PORT=${PG_PORT:-55434}
KEEP_DATA=${KEEP_DATA:-0}
ONLY=${ONLY:-}
PROFILE=${PROFILE:-all}
PROFILE_SECONDS=${PROFILE_SECONDS:-5}
VENV=${VENV:-$repo/target/w3w4-venv}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench-results/w3-w4-$(date +%Y%m%dT%H%M%S)}
PGBIN=/usr/lib/postgresql/15/bin
W34=$here/w3w4

# shellcheck source=lib/common.sh
. "$here/lib/common.sh"

# ------------------------------------------------------------------ tools
ensure_tools() {
  ensure_apt wrk:wrk taskset:util-linux runuser:util-linux curl:curl python3:python3 venv pg
  ensure_venv "$VENV" "duckdb, psycopg" duckdb 'psycopg[binary]'
  command -v cargo >/dev/null || [ -n "${ENGINE_BIN:-}" ] || die "cargo not found"
}

# ------------------------------------------------------------------ servers
# shellcheck source=lib/servers.sh
. "$here/lib/servers.sh"

# ------------------------------------------------------------------ setup
setup_data() {
  local data=$BENCH_DIR/data
  mkdir -p "$data"
  log "dataset: $RECORDS rows"
  "$PY" "$W34/w3w4.py" gen --records "$RECORDS" --dir "$data" >&2

  log "engine: loading $RECORDS records over HTTP (wrk -t1 -c$LOAD_CONC, one POST per row)"
  load_rows "$data/rows.jsonl" "$RESULTS_DIR/engine-load.txt"
  ENGINE_LOAD_S=$LOAD_S

  log "engine: reading every record back, checking it, writing the peers' load files"
  "$PY" "$W34/w3w4.py" export --dir "$data" --port "$ENGINE_PORT" --token "$TOKEN" >&2
  cp "$data/export.json" "$data/dataset.json" "$RESULTS_DIR/"

  log "PostgreSQL: COPY, indexes, VACUUM ANALYZE"
  "$PY" "$W34/w3w4.py" load-pg --dir "$data" --dsn "$DSN" --results "$RESULTS_DIR" >&2
  log "DuckDB: load"
  "$PY" "$W34/w3w4.py" load-duck --dir "$data" --db "$BENCH_DIR/duck.db" --results "$RESULTS_DIR" >&2
  rm -f "$data/pg.tsv" "$data/duck.csv"

  pg_settings_file "$RESULTS_DIR/postgres-settings.txt"
  {
    echo "engine_load_seconds=$ENGINE_LOAD_S"
    echo "engine_data_dir_bytes=$(du -sb "$BENCH_DIR/engine" | cut -f1)"
    echo "postgres_data_dir_bytes=$(du -sb "$BENCH_DIR/pg" | cut -f1)"
    echo "duckdb_file_bytes=$(stat -c %s "$BENCH_DIR/duck.db")"
  } >"$RESULTS_DIR/sizes.txt"
}

machine_info() {
  {
    machine_common
    machine_python duckdb psycopg
    echo "engine: $("$ENGINE_BIN" version 2>/dev/null || true) ($ENGINE_BIN)"
    echo "records=$RECORDS rounds=$ROUNDS reps_selective=$REPS_SELECTIVE reps_other=$REPS_OTHER reps_w4=$REPS_W4 cell_seconds=$CELL_SECONDS warmup=$WARMUP loadgen_cpu=$LOADGEN_CPU load_conc=$LOAD_CONC"
  } >"$RESULTS_DIR/machine.txt"
}

# ------------------------------------------------------------------ profiles
# Flat CPU profiles of the engine process (all its threads) while one query runs back to back:
# where the engine's time goes, per query. Taken after the rounds, so they perturb nothing.
profiles() {
  [ "$PROFILE" = none ] && return
  command -v perf >/dev/null || { log "perf not found: no profiles"; return; }
  local names q pdir=$RESULTS_DIR/profiles perf_pid
  mkdir -p "$pdir"
  if [ "$PROFILE" = all ]; then
    names=$("$PY" -c 'import json, sys; print(" ".join(q["name"] for q in json.load(open(sys.argv[1]))["queries"]))' \
      "$RESULTS_DIR/bench-meta.json")
  else
    names=${PROFILE//,/ }
  fi
  for q in $names; do
    perf record -F 999 -p "$ENGINE_PID" -o "$pdir/$q.perf.data" >/dev/null 2>"$pdir/$q.perf-record.txt" &
    perf_pid=$!
    sleep 0.2
    taskset -c "$LOADGEN_CPU" "$PY" "$W34/w3w4.py" profile --dir "$BENCH_DIR/data" --port "$ENGINE_PORT" \
      --token "$TOKEN" --query "$q" --seconds "$PROFILE_SECONDS" 2>>"$pdir/runs.txt"
    kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
    perf report -i "$pdir/$q.perf.data" --stdio --no-children --sort symbol --percent-limit 0.5 \
      >"$pdir/$q.txt" 2>/dev/null || true
    rm -f "$pdir/$q.perf.data"
    log "$(tail -n1 "$pdir/runs.txt")"
  done
}

# ------------------------------------------------------------------ main
main() {
  ensure_tools
  build_release ENGINE_BIN=bin:engine NULL_BIN=bench:null_http
  mkdir -p "$RESULTS_DIR"
  RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
  make_bench_dir
  DSN="host=127.0.0.1 port=$PG_PORT user=bench dbname=bench"
  log "results: $RESULTS_DIR; data: $BENCH_DIR"
  machine_info
  local t_start; t_start=$(date +%s)

  # Defaults except the memory a 1M-row benchmark wants: shared_buffers=1GB holds the table
  # and its indexes; everything else (work_mem, parallel workers, JIT, planner costs) stays
  # at PostgreSQL 15's defaults and is read back into postgres-settings.txt.
  start_postgres "-c shared_buffers=1GB -c max_wal_size=4GB -c maintenance_work_mem=512MB" --locale=C
  start_engine
  start_null
  setup_data
  log "setup done in $(( $(date +%s) - t_start )) s"

  log "checks, plans, warm-up, then $ROUNDS rounds"
  "$PY" "$W34/w3w4.py" bench --dir "$BENCH_DIR/data" --results "$RESULTS_DIR" \
    --port "$ENGINE_PORT" --null-port "$NULL_PORT" --token "$TOKEN" --dsn "$DSN" --db "$BENCH_DIR/duck.db" \
    --rounds "$ROUNDS" --reps-selective "$REPS_SELECTIVE" --reps-other "$REPS_OTHER" --reps-w4 "$REPS_W4" \
    --min-reps "$MIN_REPS" --cell-seconds "$CELL_SECONDS" --warmup "$WARMUP" --loadgen-cpu "$LOADGEN_CPU" \
    ${ONLY:+--only "$ONLY"}

  engine_epilogue
  profiles

  echo
  python3 "$W34/report.py" "$RESULTS_DIR"
  echo
  log "whole run $(( $(date +%s) - t_start )) s; raw results in $RESULTS_DIR"
}

main "$@"
