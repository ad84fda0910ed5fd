#!/usr/bin/env bash
# W1a (nested bulk import) and W9 (CSV export).
#
# W1a: DOCS nested order documents (order -> customer, order -> 4 items, every 8th item ->
# product; DOCS=100000 is 650,000 records and 550,000 relationships, ids time-ordered), loaded
# from the same JSON Lines file, each load into an empty store and counted from raw file to
# queryable, systems interleaved over ROUNDS rounds:
#   - engine, REST `POST /api/v1/records/import/json` {"label":"ORDER","data":[BATCH docs]};
#   - engine, Protocol v1 `ingest` documents, BATCH docs per request;
#   - engine, the `engine import` loader on the file;
#     (each CONC requests in flight; acknowledged = durable, the engine's default)
#   - PostgreSQL 15: flatten in Python, COPY into records(id uuid, label, props jsonb) and
#     edges(id, src, dst, type), then the engine's indexes (id, (label, id), one partial
#     expression index per property name, edge id, adjacency both ways); synchronous_commit=on;
#   - DuckDB (PyPI, in-process): flatten in SQL (read_json + unnest), typed tables per label
#     and an edges table, the same indexes;
#   - LadybugDB (PyPI `ladybug`, in-process): flatten in Python, COPY FROM CSV into typed node
#     tables (primary key id) and one rel table;
#   - the raw redb loop (benches/raw_redb_load.rs): the keys the engine's store writes for the
#     same data, straight into redb, one Durability::Immediate commit per BATCH documents.
# Every load's counts (records per label, relationships per parent/child label) are checked.
# W9: CSV export of 1,000 ORDER records per request at a random page (skip = k * 1000), engine
# `POST /api/v1/records/export/csv` against PostgreSQL `COPY (SELECT ... ORDER BY id LIMIT 1000
# OFFSET k) TO STDOUT WITH CSV HEADER`, at each of W9_CONC clients, requests/s; both systems'
# exports of every page are checked equal first.
#
#   bash benches/run-w1a-w9.sh
#   SMALL=1 RAW=0 ENGINE_BIN=/path/to/engine bash benches/run-w1a-w9.sh     # small-scale debug run
#
# Environment (defaults in brackets):
#   DOCS [100000]         order documents (SMALL=1: 2000)
#   BATCH [500]           documents per engine request and per raw-loop commit
#   CONC [4]              engine requests in flight (REST, ingest, and the loader's --concurrency)
#   ROUNDS [3]            W1a rounds (SMALL=1: 1); each loads once per system, order rotating
#   SYSTEMS [engine_rest,engine_ingest,engine_cli,postgres,duckdb,ladybug,raw]   W1a systems
#   RAW [1]               0 skips the raw redb loop (and building it)
#   RAW_BIN               the raw_redb_load executable; built with cargo when not given
#   SETTLE [2]            seconds of idle (after a `sync`) before every load
#   W9 [1]                0 skips W9
#   W9_ROUNDS [3]         W9 rounds (SMALL=1: 1); each runs every concurrency on both systems
#   W9_CONC [1,8]         W9 concurrencies (client processes, one connection each)
#   DURATION [10]         seconds per W9 cell (SMALL=1: 3)
#   WARMUP [2]            seconds of unrecorded W9 load per system before round 1
#   LB_BUFFER_MB [2048]   LadybugDB buffer pool
#   LOADGEN_CPU [0]       CPU the clients are pinned to (engine load clients and loader, W9
#                         clients); servers, PostgreSQL's Python flatten, DuckDB, LadybugDB and
#                         the raw loop are not pinned
#   ENGINE_PORT [18481] PG_PORT [25436]   loopback ports (both below the ephemeral range,
#                         32768-60999 here, so no client socket can hold them)
#   ENGINE_BIN            use this engine instead of building it
#   VENV [target/w1a-venv] Python venv with duckdb, ladybug, psycopg[binary] from PyPI (made if missing)
#   BENCH_DIR [mktemp under /var/tmp]  data directories and the dataset
#   RESULTS_DIR [bench-results/w1a-w9-DATE under the repo]
#   KEEP_DATA [0]         1 keeps BENCH_DIR after the run
#
# Needs root for apt-get and for running PostgreSQL as the `postgres` user.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

if [ "${SMALL:-0}" = 1 ]; then
  DOCS=${DOCS:-2000} ROUNDS=${ROUNDS:-1} W9_ROUNDS=${W9_ROUNDS:-1} DURATION=${DURATION:-3} WARMUP=${WARMUP:-1}
fi
DOCS=${DOCS:-100000}
BATCH=${BATCH:-500}
CONC=${CONC:-4}
ROUNDS=${ROUNDS:-3}
SYSTEMS=${SYSTEMS:-engine_rest,engine_ingest,engine_cli,postgres,duckdb,ladybug,raw}
RAW=${RAW:-1}
SETTLE=${SETTLE:-2}
W9=${W9:-1}
W9_ROUNDS=${W9_ROUNDS:-3}
W9_CONC=${W9_CONC:-1,8}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
LB_BUFFER_MB=${LB_BUFFER_MB:-2048}
LOADGEN_CPU=${LOADGEN_CPU:-0}
ENGINE_PORT=${ENGINE_PORT:-18481}
PG_PORT=${PG_PORT:-25436}
KEEP_DATA=${KEEP_DATA:-0}
VENV=${VENV:-$repo/target/w1a-venv}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench-results/w1a-w9-$(date +%Y%m%dT%H%M%S)}
PGBIN=/usr/lib/postgresql/15/bin
W1A=$here/w1a

# shellcheck source=lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=lib/servers.sh
. "$here/lib/servers.sh"

if [ "$RAW" != 1 ]; then
  SYSTEMS=$(tr ',' '\n' <<<"$SYSTEMS" | grep -vx raw | paste -sd, -)
fi

ensure_tools() {
  ensure_apt taskset:util-linux runuser:util-linux curl:curl python3:python3 venv pg
  ensure_venv "$VENV" "duckdb, ladybug, psycopg" duckdb ladybug 'psycopg[binary]'
  command -v cargo >/dev/null || { [ -n "${ENGINE_BIN:-}" ] && { [ "$RAW" != 1 ] || [ -n "${RAW_BIN:-}" ]; }; } \
    || die "cargo not found: give ENGINE_BIN (and RAW_BIN, or RAW=0)"
}

machine_info() {
  {
    machine_common
    machine_python duckdb ladybug psycopg
    echo "engine: $("$ENGINE_BIN" version 2>/dev/null || true) ($ENGINE_BIN)"
    echo "raw_redb_load: ${RAW_BIN:-(not run)}"
    echo "docs=$DOCS batch=$BATCH conc=$CONC rounds=$ROUNDS systems=$SYSTEMS settle=$SETTLE w9=$W9" \
         "w9_rounds=$W9_ROUNDS w9_conc=$W9_CONC duration=$DURATION warmup=$WARMUP lb_buffer_mb=$LB_BUFFER_MB" \
         "loadgen_cpu=$LOADGEN_CPU"
  } >"$RESULTS_DIR/machine.txt"
}

# load ROUND SYSTEM: one W1a load into an empty store, its result line in results.jsonl.
load() {
  local rnd=$1 s=$2 dir=$BENCH_DIR/$2-r$1
  local common=(--file "$DATA/orders.jsonl" --meta "$DATA/dataset.json" --round "$rnd" --out "$RESULTS_DIR/results.jsonl")
  sync; sleep "$SETTLE"
  case $s in
    engine_rest|engine_ingest|engine_cli)
      start_engine "$dir" "engine-r$rnd-$s"
      "$PY" "$W1A/w1a.py" load-engine "${common[@]}" --mode "${s#engine_}" --port "$ENGINE_PORT" --token "$TOKEN" \
        --batch "$BATCH" --conc "$CONC" --engine-bin "$ENGINE_BIN" --data-dir "$dir" --loadgen-cpu "$LOADGEN_CPU" >&2
      stop_engine ;;
    postgres) "$PY" "$W1A/w1a.py" load-pg "${common[@]}" --dsn "$DSN" --tmp "$dir" >&2 ;;
    duckdb) "$PY" "$W1A/w1a.py" load-duck "${common[@]}" --db "$dir.duckdb" >&2 ;;
    ladybug) "$PY" "$W1A/w1a.py" load-lb "${common[@]}" --db "$dir.lbug" --tmp "$dir" --lb-buffer-mb "$LB_BUFFER_MB" >&2 ;;
    raw) "$PY" "$W1A/w1a.py" raw "${common[@]}" --batch "$BATCH" --db "$dir" --raw-bin "$RAW_BIN" >&2 ;;
    *) die "unknown system $s (SYSTEMS)" ;;
  esac
  rm -rf "$dir" "$dir.duckdb" "$dir.duckdb.wal" "$dir.lbug" "$dir.lbug.wal"
}

w9() {
  log "W9: engine loaded with \`engine import\` (untimed), PostgreSQL from its last load"
  start_engine "$BENCH_DIR/engine-w9" engine
  "$PY" "$W1A/w1a.py" load-engine --file "$DATA/orders.jsonl" --meta "$DATA/dataset.json" --round 0 \
    --out "$RESULTS_DIR/w9-setup.jsonl" --mode cli --port "$ENGINE_PORT" --token "$TOKEN" --batch "$BATCH" \
    --conc "$CONC" --engine-bin "$ENGINE_BIN" --data-dir "$BENCH_DIR/engine-w9" --loadgen-cpu "$LOADGEN_CPU" >&2
  if [ "$(psql_bench -At -c "SELECT to_regclass('records') IS NOT NULL")" != t ]; then
    "$PY" "$W1A/w1a.py" load-pg --file "$DATA/orders.jsonl" --meta "$DATA/dataset.json" --round 0 \
      --out "$RESULTS_DIR/w9-setup.jsonl" --dsn "$DSN" --tmp "$BENCH_DIR/pg-w9" >&2
  fi
  psql_bench -c "VACUUM ANALYZE records"
  "$PY" "$W1A/w1a.py" w9 --meta "$DATA/dataset.json" --out "$RESULTS_DIR/results.jsonl" --results "$RESULTS_DIR" \
    --port "$ENGINE_PORT" --token "$TOKEN" --dsn "$DSN" --rounds "$W9_ROUNDS" --duration "$DURATION" \
    --warmup "$WARMUP" --conc "$W9_CONC" --loadgen-cpu "$LOADGEN_CPU" >&2
}

main() {
  ensure_tools
  build_release ENGINE_BIN=bin:engine
  if [ "$RAW" = 1 ]; then build_release RAW_BIN=bench:raw_redb_load; fi
  mkdir -p "$RESULTS_DIR"
  RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
  : >"$RESULTS_DIR/results.jsonl"
  make_bench_dir
  DATA=$BENCH_DIR/data
  DSN="host=127.0.0.1 port=$PG_PORT user=bench dbname=bench"
  log "results: $RESULTS_DIR; data: $BENCH_DIR"
  machine_info
  local t_start; t_start=$(date +%s)

  # PostgreSQL 15 defaults except memory (shared_buffers=1GB, maintenance_work_mem=512MB for the
  # index builds) and max_wal_size=4GB (no forced checkpoint mid-load); durability stated
  # explicitly: fsync=on, synchronous_commit=on (the defaults). Read back into postgres-settings.txt.
  start_postgres "-c shared_buffers=1GB -c max_wal_size=4GB -c maintenance_work_mem=512MB -c fsync=on \
    -c synchronous_commit=on" --locale=C
  pg_settings_file "$RESULTS_DIR/postgres-settings.txt"
  psql_bench -At -c "SELECT name || '=' || current_setting(name) FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit',
    'wal_level', 'max_wal_size', 'max_parallel_maintenance_workers', 'full_page_writes') ORDER BY 1" \
    >>"$RESULTS_DIR/postgres-settings.txt"

  "$PY" "$W1A/w1a.py" gen --dir "$DATA" --docs "$DOCS" >&2
  cp "$DATA/dataset.json" "$RESULTS_DIR/"

  local rnd k s systems s0
  IFS=, read -r -a systems <<<"$SYSTEMS"
  for rnd in $(seq 1 "$ROUNDS"); do
    log "W1a round $rnd/$ROUNDS"
    echo "round $rnd start $(date -Is) loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >>"$RESULTS_DIR/rounds.txt"
    s0=$(head -n1 /proc/stat)
    for k in "${!systems[@]}"; do
      s=${systems[$(( (k + rnd - 1) % ${#systems[@]} ))]}
      load "$rnd" "$s"
    done
    # Whole-machine CPU split over the round: competing load and steal, next to the results.
    echo "round $rnd cpu: $(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); from benchlib import cpu_split
print(cpu_split(sys.argv[2], sys.argv[3]))' "$here/lib" "$s0" "$(head -n1 /proc/stat)")" >>"$RESULTS_DIR/rounds.txt"
  done

  if [ "$W9" = 1 ]; then w9; fi
  engine_epilogue

  echo
  python3 "$W1A/report.py" "$RESULTS_DIR"
  echo
  log "whole run $(( $(date +%s) - t_start )) s; raw results in $RESULTS_DIR"
}

main "$@"
