#!/usr/bin/env bash
# W5 (relationships and graph search): 100,000 customers, 1,000,000 orders each placed by one
# customer, and items each in one order, loaded into the engine, PostgreSQL 15 (records and
# edges tables, JSONB with expression btree indexes, indexed adjacency) and LadybugDB (PyPI
# `ladybug`, the maintained Kuzu fork; typed node and rel tables, in-process Cypher). Measures,
# with every system's count (and its 20 largest keys) checked equal before anything is timed,
# systems interleaved over several rounds:
#   - set queries at c=1: 1-hop with filters on both ends (orders -> customer, and customers
#     <- order with a range), 2-hop (items -> order -> customer, customers <- order -> item);
#   - point expansion over HTTP at c=32 (wrk): a random customer's relationships, engine
#     against the null handler on the engine's HTTP stack (and, as context, its related orders
#     as records);
#   - create-many by key joining 100,000 x 100,000 records, one-shot per system per round
#     (engine REST create-many, PostgreSQL INSERT .. SELECT join, LadybugDB MATCH .. CREATE),
#     undone (untimed) after each.
#
#   bash benches/run-w5.sh
#   CUSTOMERS=1000 ORDERS=10000 ITEMS=3000 CM_RECORDS=2000 bash benches/run-w5.sh   # small
#
# Environment (defaults in brackets):
#   CUSTOMERS [100000]    CUSTOMER records
#   ORDERS [1000000]      ORDER records, each PLACED_BY a customer drawn uniformly
#   ITEMS [300000]        ITEM records, each CONTAINed in an order drawn uniformly
#   CM_RECORDS [100000]   records per side (labels A and B) of the create-many join
#   ROUNDS [3]            rounds; each runs every set query on every system (order rotating),
#                         the point-expansion runs (engine and null handler alternating) and
#                         create-many on every system (order rotating)
#   REPS [50]             repetitions per set-query cell
#   CELL_SECONDS [10]     a set-query cell stops early after this long (with at least MIN_REPS [5] runs)
#   REPS_RTT [200]        repetitions per round of the round-trip context cells (null handler
#                         POST, PostgreSQL `SELECT 1`, LadybugDB `RETURN 1`)
#   SETTLE [2]            seconds of idle after each create-many undo (checkpoints finish untimed)
#   WARMUP [2]            unrecorded runs of every set query per system before round 1 (and,
#                         when > 0, a 3 s wrk run per expansion cell and system)
#   DURATION [10]         seconds per point-expansion wrk run
#   CONC [32]             wrk connections for point expansion
#   EXPAND [expand_rels,expand_records]   point-expansion cells to run
#   LOAD_BATCH [500]      records per request of the engine load (`engine import`, one
#                         Protocol v1 `ingest` per batch, one file per label)
#   LOAD_CONC [4]         requests in flight of the engine load
#   LINK_CHUNK [100000]   relationships per create-many request when linking the dataset
#   LB_BUFFER_MB [4096]   LadybugDB buffer pool
#   LOADGEN_CPU [0]       CPU the clients (wrk, the engine loader, the Python driver's engine
#                         and PostgreSQL calls) are pinned to; LadybugDB runs in the driver on
#                         every CPU
#   ENGINE_PORT [18381] NULL_PORT [18382] PG_PORT [55435]   loopback ports
#   ENGINE_BIN, NULL_BIN  use these binaries instead of building (both must be given)
#   VENV [target/w5-venv] Python venv with ladybug and psycopg[binary] from PyPI (made if missing)
#   BENCH_DIR [mktemp under /var/tmp]  data directories (engine, PostgreSQL, LadybugDB, dataset)
#   RESULTS_DIR [bench-results/w5-DATE under the repo]
#   KEEP_DATA [0]         1 keeps BENCH_DIR after the run
#   ONLY []               comma-separated set queries to measure (default: all)
#
# Placement: wrk, the engine loader and the driver's engine/PostgreSQL client thread are pinned
# to LOADGEN_CPU; the engine, the null handler and PostgreSQL are not pinned; LadybugDB, being
# in-process, runs its queries on the driver's threads with every CPU allowed.
# Needs root for apt-get and for running PostgreSQL as the `postgres` user.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

CUSTOMERS=${CUSTOMERS:-100000}
ORDERS=${ORDERS:-1000000}
ITEMS=${ITEMS:-300000}
CM_RECORDS=${CM_RECORDS:-100000}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-50}
CELL_SECONDS=${CELL_SECONDS:-10}
MIN_REPS=${MIN_REPS:-5}
REPS_RTT=${REPS_RTT:-200}
SETTLE=${SETTLE:-2}
WARMUP=${WARMUP:-2}
DURATION=${DURATION:-10}
CONC=${CONC:-32}
EXPAND=${EXPAND:-expand_rels,expand_records}
LOAD_BATCH=${LOAD_BATCH:-500}
LOAD_CONC=${LOAD_CONC:-4}
LINK_CHUNK=${LINK_CHUNK:-100000}
LB_BUFFER_MB=${LB_BUFFER_MB:-4096}
LOADGEN_CPU=${LOADGEN_CPU:-0}
ENGINE_PORT=${ENGINE_PORT:-18381}
NULL_PORT=${NULL_PORT:-18382}
PG_PORT=${PG_PORT:-55435}
KEEP_DATA=${KEEP_DATA:-0}
ONLY=${ONLY:-}
VENV=${VENV:-$repo/target/w5-venv}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench-results/w5-$(date +%Y%m%dT%H%M%S)}
PGBIN=/usr/lib/postgresql/15/bin
W5=$here/w5

# shellcheck source=lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=lib/servers.sh
. "$here/lib/servers.sh"

ensure_tools() {
  ensure_apt wrk:wrk taskset:util-linux runuser:util-linux curl:curl python3:python3 venv pg
  ensure_venv "$VENV" "ladybug, psycopg" ladybug 'psycopg[binary]'
  command -v cargo >/dev/null || [ -n "${ENGINE_BIN:-}" ] || die "cargo not found"
}

setup_data() {
  local data=$BENCH_DIR/data t0
  mkdir -p "$data"
  log "dataset: $CUSTOMERS customers, $ORDERS orders, $ITEMS items, 2 x $CM_RECORDS create-many records"
  "$PY" "$W5/w5.py" gen --dir "$data" --customers "$CUSTOMERS" --orders "$ORDERS" --items "$ITEMS" \
    --cm-records "$CM_RECORDS" >&2
  cp "$data/dataset.json" "$RESULTS_DIR/"

  log "engine: loading $((CUSTOMERS + ORDERS + ITEMS + 2 * CM_RECORDS)) records with \`engine import\`" \
      "(ingest, $LOAD_BATCH documents per request, $LOAD_CONC in flight)"
  local label n loaded=0 secs=0
  : >"$RESULTS_DIR/engine-load.txt"
  for label in CUSTOMER ORDER ITEM A B; do
    n=$(wc -l <"$data/engine-$label.jsonl")
    [ "$n" -gt 0 ] || continue
    engine_import "$label" "$data/engine-$label.jsonl" "$RESULTS_DIR/engine-load.txt" "$LOAD_BATCH" "$LOAD_CONC"
    [ "$IMPORT_RECORDS" = "$n" ] || die "engine import of $label wrote $IMPORT_RECORDS records, expected $n"
    loaded=$((loaded + n))
    secs=$(awk -v a="$secs" -v b="$IMPORT_S" 'BEGIN {printf "%.3f", a + b}')
  done
  ENGINE_LOAD_S=$(python3 -c "print(f'{$secs:.1f}')")
  log "engine: $loaded records in $ENGINE_LOAD_S s ($(python3 -c "print(f'{$loaded/$secs:,.0f}')") records/s)"
  log "engine: checking the counts, linking by key (create-many), reading the customers' ids"
  t0=$(date +%s.%N)
  "$PY" "$W5/w5.py" link-engine --dir "$data" --port "$ENGINE_PORT" --token "$TOKEN" --results "$RESULTS_DIR" \
    --link-chunk "$LINK_CHUNK" >&2
  ENGINE_LINK_S=$(python3 -c "print(f'{$(date +%s.%N)-$t0:.1f}')")

  log "PostgreSQL: COPY, indexes, VACUUM ANALYZE"
  "$PY" "$W5/w5.py" load-pg --dir "$data" --dsn "$DSN" --results "$RESULTS_DIR" >&2
  log "LadybugDB: COPY FROM CSV"
  "$PY" "$W5/w5.py" load-lb --dir "$data" --db "$BENCH_DIR/ladybug" --results "$RESULTS_DIR" \
    --lb-buffer-mb "$LB_BUFFER_MB" >&2
  rm -f "$data"/pg-*.tsv "$data"/lb-*.csv "$data"/engine-*.jsonl

  pg_settings_file "$RESULTS_DIR/postgres-settings.txt"
  {
    echo "engine_load_seconds=$ENGINE_LOAD_S"
    echo "engine_link_seconds=$ENGINE_LINK_S"
    echo "engine_data_dir_bytes=$(du -sb "$BENCH_DIR/engine" | cut -f1)"
    echo "postgres_data_dir_bytes=$(du -sb "$BENCH_DIR/pg" | cut -f1)"
    echo "ladybug_bytes=$(du -sb "$BENCH_DIR/ladybug" | cut -f1)"
  } >"$RESULTS_DIR/sizes.txt"
}

machine_info() {
  {
    machine_common
    machine_python ladybug psycopg
    echo "engine: $("$ENGINE_BIN" version 2>/dev/null || true) ($ENGINE_BIN)"
    echo "customers=$CUSTOMERS orders=$ORDERS items=$ITEMS cm_records=$CM_RECORDS rounds=$ROUNDS reps=$REPS" \
         "reps_rtt=$REPS_RTT settle=$SETTLE cell_seconds=$CELL_SECONDS warmup=$WARMUP duration=$DURATION conc=$CONC loadgen_cpu=$LOADGEN_CPU" \
         "load_batch=$LOAD_BATCH load_conc=$LOAD_CONC link_chunk=$LINK_CHUNK lb_buffer_mb=$LB_BUFFER_MB"
  } >"$RESULTS_DIR/machine.txt"
}

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

  # PostgreSQL 15 defaults except memory: shared_buffers=1GB holds both tables and their
  # indexes; max_wal_size and maintenance_work_mem for the load and index builds. work_mem,
  # parallel workers, JIT and planner costs stay at their defaults (postgres-settings.txt).
  start_postgres "-c shared_buffers=1GB -c max_wal_size=4GB -c maintenance_work_mem=512MB" --locale=C
  start_engine
  start_null
  setup_data
  log "setup done in $(( $(date +%s) - t_start )) s"

  log "checks, plans, warm-up, then $ROUNDS rounds"
  "$PY" "$W5/w5.py" bench --dir "$BENCH_DIR/data" --results "$RESULTS_DIR" \
    --port "$ENGINE_PORT" --null-port "$NULL_PORT" --engine-pid "$ENGINE_PID" --null-pid "$NULL_PID" --token "$TOKEN" --dsn "$DSN" --db "$BENCH_DIR/ladybug" \
    --lb-buffer-mb "$LB_BUFFER_MB" --rounds "$ROUNDS" --reps "$REPS" --min-reps "$MIN_REPS" \
    --reps-rtt "$REPS_RTT" --settle "$SETTLE" \
    --cell-seconds "$CELL_SECONDS" --warmup "$WARMUP" --loadgen-cpu "$LOADGEN_CPU" --duration "$DURATION" \
    --conc "$CONC" --expand-cells "$EXPAND" ${ONLY:+--only "$ONLY"}

  engine_epilogue

  echo
  python3 "$W5/report.py" "$RESULTS_DIR"
  echo
  log "whole run $(( $(date +%s) - t_start )) s; raw results in $RESULTS_DIR"
}

main "$@"
