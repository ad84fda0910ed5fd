#!/usr/bin/env bash
# W8 (durable single-record creates over HTTP) and W2 (read by id over HTTP keep-alive):
# the engine against PostgreSQL 15, interleaved over several rounds on one machine, with the
# physical references (a single-threaded fsync loop on the data disk, a null HTTP handler on
# the engine's own HTTP stack) recorded in the same run.
#
#   bash benches/run-w8-w2.sh
#
# Environment (defaults in brackets):
#   ROUNDS [3]          rounds; every round runs every measurement once, systems alternating
#   DURATION [10]       seconds per load run (wrk -d / pgbench -T)
#   FSYNC_SECONDS [5]   seconds per fsync-loop sample (two samples per round, around W8)
#   WARMUP [3]          seconds of unrecorded warm-up per system before round 1 (0 = none)
#   RECORDS [100000]    records preloaded into the engine for W2
#   PG_SCALE [1]        pgbench -i scale for W2 (1 = 100,000 pgbench_accounts rows)
#   LOADGEN_CPU [0]     CPU the load generators (wrk, pgbench) are pinned to with taskset
#   ENGINE_PORT [18181] NULL_PORT [18182] PG_PORT [55433]   loopback ports
#   BENCH_DIR [mktemp under /var/tmp]  data directories (engine, PostgreSQL, fsync loop)
#   RESULTS_DIR [bench-results/w8-w2-DATE under the repo]
#   KEEP_DATA [0]       1 keeps BENCH_DIR after the run
#   KEEP_PGBENCH_LOGS [] non-empty keeps pgbench per-transaction logs
#   ENGINE_BIN, NULL_BIN, FSYNC_BIN   use these binaries instead of building (all three)
#
# Placement: load generators pinned to LOADGEN_CPU, every server (engine, null handler,
# PostgreSQL) unpinned; wrk and pgbench run one thread each (-t1 / -j1).
# Needs root for apt-get and for running PostgreSQL as the `postgres` user.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
FSYNC_SECONDS=${FSYNC_SECONDS:-5}
WARMUP=${WARMUP:-3}
RECORDS=${RECORDS:-100000}
PG_SCALE=${PG_SCALE:-1}
LOADGEN_CPU=${LOADGEN_CPU:-0}
ENGINE_PORT=${ENGINE_PORT:-18181}
NULL_PORT=${NULL_PORT:-18182}
PG_PORT=${PG_PORT:-55433}
KEEP_DATA=${KEEP_DATA:-0}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench-results/w8-w2-$(date +%Y%m%dT%H%M%S)}
PGBIN=/usr/lib/postgresql/15/bin
LUA=$here/lua
REPORT=$here/w8w2_report.py

# shellcheck source=lib/common.sh
. "$here/lib/common.sh"

# ------------------------------------------------------------------ tools
ensure_tools() {
  ensure_apt wrk:wrk taskset:util-linux python3:python3 runuser:util-linux pg pgbench
  command -v cargo >/dev/null || [ -n "${ENGINE_BIN:-}" ] || die "cargo not found"
}

# ------------------------------------------------------------------ servers
# shellcheck source=lib/servers.sh
. "$here/lib/servers.sh"

# ------------------------------------------------------------------ setup
setup_data() {
  log "PostgreSQL: records table and pgbench -i -s $PG_SCALE"
  psql_bench -c "CREATE TABLE records(id uuid PRIMARY KEY DEFAULT gen_random_uuid(), label text, props jsonb)"
  "$PGBIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U bench -i -s "$PG_SCALE" -q bench \
    >"$RESULTS_DIR/pgbench-init.txt" 2>&1
  psql_bench -At -c "SELECT name || '=' || setting FROM pg_settings WHERE name IN
    ('fsync','synchronous_commit','wal_sync_method','full_page_writes','commit_delay','wal_level',
     'shared_buffers','server_version','max_wal_size','checkpoint_timeout') ORDER BY name" \
    >"$RESULTS_DIR/postgres-settings.txt"
  psql_bench -At -c "SELECT count(*) FROM pgbench_accounts" >"$RESULTS_DIR/pgbench-accounts-rows.txt"
  cat >"$RESULTS_DIR/pg-insert.sql" <<'SQL'
INSERT INTO records(label, props) VALUES ('ORDER', '{"status":"paid","total":12.5,"city":"Oslo","createdAt":"2026-01-01T10:00:00Z"}'::jsonb);
SQL

  log "engine: loading $RECORDS records over HTTP (wrk, c=32)"
  IDS=$RESULTS_DIR/engine-ids.txt
  local t0 t1
  t0=$(date +%s.%N)
  BENCH_TOKEN=$TOKEN BENCH_N=$RECORDS BENCH_IDS_OUT=$IDS \
    taskset -c "$LOADGEN_CPU" wrk -t1 -c32 -d600s -s "$LUA/load_records.lua" \
    "http://127.0.0.1:$ENGINE_PORT/" >"$RESULTS_DIR/engine-load.txt" 2>&1 || true
  t1=$(date +%s.%N)
  local n
  n=$(wc -l <"$IDS")
  [ "$n" -ge "$RECORDS" ] || die "loader stored only $n of $RECORDS ids (see $RESULTS_DIR/engine-load.txt)"
  log "engine: $n records loaded in $(python3 -c "print(f'{$t1-$t0:.1f}')") s"
}

# ------------------------------------------------------------------ measurements
RAW= JSONL=
record() {
  "$@" >>"$JSONL"
  tail -n1 "$JSONL" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
print("    %s c=%s %s: %.0f ops/s  p50=%s us  p99=%s us  errors=%s"
      % (r["workload"], r["conc"], r["system"], r["ops"], r["p50_us"], r["p99_us"], r["errors"]))' >&2
}

# wrk_run ROUND WORKLOAD SYSTEM CONC SCRIPT PORT [SECONDS]
wrk_run() {
  local rnd=$1 w=$2 sys=$3 c=$4 script=$5 port=$6 secs=${7:-$DURATION}
  local raw=$RAW/r$rnd-$w-$sys-c$c.txt
  BENCH_TOKEN=$TOKEN BENCH_IDS=$IDS BENCH_LUA_DIR=$LUA \
    taskset -c "$LOADGEN_CPU" wrk -t1 -c"$c" -d"${secs}s" --timeout 10s -s "$LUA/$script" \
    "http://127.0.0.1:$port/" >"$raw" 2>&1 || die "wrk failed, see $raw"
  [ "$rnd" = 0 ] || record python3 "$REPORT" wrk "$rnd" "$w" "$sys" "$c" "$raw"
}

# pg_run ROUND WORKLOAD CONC [SECONDS]
pg_run() {
  local rnd=$1 w=$2 c=$3 secs=${4:-$DURATION}
  local raw=$RAW/r$rnd-$w-postgres-c$c.txt prefix=$RAW/r$rnd-$w-postgres-c$c.pgbench-log
  local mode
  if [ "$w" = W8 ]; then mode=(-f "$RESULTS_DIR/pg-insert.sql"); else mode=(-S); fi
  (cd "$RAW" && taskset -c "$LOADGEN_CPU" "$PGBIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U bench -n \
      -M prepared "${mode[@]}" -c "$c" -j 1 -T "$secs" -l --log-prefix="$prefix" bench) \
    >"$raw" 2>&1 || die "pgbench failed, see $raw"
  if [ "$rnd" = 0 ]; then rm -f "$prefix".*; return; fi
  record python3 "$REPORT" pgbench "$rnd" "$w" postgres "$c" "$raw" "$prefix"
}

fsync_run() {
  local rnd=$1 tag=$2
  local raw=$RAW/r$rnd-fsync-$tag.txt
  "$FSYNC_BIN" --dir "$BENCH_DIR/fsync" --seconds "$FSYNC_SECONDS" >"$raw" 2>&1 || die "fsync loop failed, see $raw"
  record python3 "$REPORT" fsync "$rnd" "$raw"
}

# Engine then PostgreSQL on odd rounds, PostgreSQL then engine on even rounds.
pair() { # ROUND WORKLOAD CONC
  local rnd=$1 w=$2 c=$3 script
  if [ "$w" = W8 ]; then script=post_create.lua; else script=get_by_id.lua; fi
  if [ $((rnd % 2)) = 1 ]; then
    wrk_run "$rnd" "$w" engine "$c" "$script" "$ENGINE_PORT"; pg_run "$rnd" "$w" "$c"
  else
    pg_run "$rnd" "$w" "$c"; wrk_run "$rnd" "$w" engine "$c" "$script" "$ENGINE_PORT"
  fi
}

machine_info() {
  {
    machine_common
    local dev; dev=$(df -P "$BENCH_DIR" | awk 'NR==2 {print $1}' | sed 's#/dev/##')
    echo "data fs mount: $(findmnt -no OPTIONS --target "$BENCH_DIR" 2>/dev/null)"
    [ -e "/sys/block/$dev/queue/rotational" ] && echo "block device $dev: rotational=$(cat /sys/block/$dev/queue/rotational) write_cache=$(cat /sys/block/$dev/queue/write_cache 2>/dev/null) scheduler=$(cat /sys/block/$dev/queue/scheduler 2>/dev/null)"
    echo "pgbench: $("$PGBIN/pgbench" --version)"
    echo "engine: $("$ENGINE_BIN" version 2>/dev/null || true)"
    echo "rounds=$ROUNDS duration=$DURATION fsync_seconds=$FSYNC_SECONDS warmup=$WARMUP records=$RECORDS pg_scale=$PG_SCALE loadgen_cpu=$LOADGEN_CPU"
  } >"$RESULTS_DIR/machine.txt"
  python3 - "$RESULTS_DIR/meta.json" <<EOF
import json, sys
json.dump({"rounds": $ROUNDS, "duration": $DURATION, "fsync_seconds": $FSYNC_SECONDS,
           "records": $RECORDS, "pg_scale": $PG_SCALE, "loadgen_cpu": $LOADGEN_CPU}, open(sys.argv[1], "w"))
EOF
}

# ------------------------------------------------------------------ main
main() {
  ensure_tools
  build_release ENGINE_BIN=bin:engine NULL_BIN=bench:null_http FSYNC_BIN=bench:fsync_loop
  mkdir -p "$RESULTS_DIR"
  RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
  RAW=$RESULTS_DIR/raw JSONL=$RESULTS_DIR/results.jsonl
  mkdir -p "$RAW"; : >"$JSONL"
  make_bench_dir
  mkdir -p "$BENCH_DIR/fsync"
  IDS=$RESULTS_DIR/engine-ids.txt
  log "results: $RESULTS_DIR; data: $BENCH_DIR"
  machine_info

  # Durable settings, stated explicitly: fsync=on, synchronous_commit=on (both the defaults),
  # wal_sync_method left at its default (fdatasync on Linux), full_page_writes default (on).
  start_postgres "-c fsync=on -c synchronous_commit=on -c shared_buffers=1GB -c max_connections=200"
  start_engine
  start_null
  setup_data

  if [ "$WARMUP" -gt 0 ]; then
    log "warm-up ($WARMUP s per system, not recorded)"
    wrk_run 0 W2 engine 8 get_by_id.lua "$ENGINE_PORT" "$WARMUP"
    pg_run 0 W2 8 "$WARMUP"
    wrk_run 0 W2 null 8 get_by_id.lua "$NULL_PORT" "$WARMUP"
    wrk_run 0 W8 engine 8 post_create.lua "$ENGINE_PORT" "$WARMUP"
    pg_run 0 W8 8 "$WARMUP"
  fi

  local rnd c s0 s1
  for rnd in $(seq 1 "$ROUNDS"); do
    log "round $rnd/$ROUNDS"
    s0=$(head -n1 /proc/stat)
    echo "round $rnd start $(date -Is) loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >>"$RESULTS_DIR/rounds.txt"
    fsync_run "$rnd" a
    for c in 1 32; do pair "$rnd" W8 "$c"; done
    fsync_run "$rnd" b
    for c in 1 32; do wrk_run "$rnd" W8 null "$c" post_create.lua "$NULL_PORT"; done
    for c in 1 8 32; do wrk_run "$rnd" W2 null "$c" get_by_id.lua "$NULL_PORT"; done
    for c in 1 8 32; do pair "$rnd" W2 "$c"; done
    s1=$(head -n1 /proc/stat)
    # Whole-machine CPU split over the round (everything, not just this benchmark): shows
    # competing load and hypervisor steal, two sources of the noise the rounds average out.
    python3 -c '
import sys
a = [int(x) for x in sys.argv[1].split()[1:9]]
b = [int(x) for x in sys.argv[2].split()[1:9]]
d = [y - x for x, y in zip(a, b)]
t = sum(d) or 1
names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
print("round %s cpu: " % sys.argv[3] + " ".join("%s=%.1f%%" % (n, 100.0 * v / t) for n, v in zip(names, d)))
' "$s0" "$s1" "$rnd" >>"$RESULTS_DIR/rounds.txt"
  done

  psql_bench -At -c "SELECT count(*) FROM records" >"$RESULTS_DIR/postgres-records-rows.txt" || true
  engine_epilogue

  echo
  python3 "$REPORT" summary "$RESULTS_DIR"
  echo
  log "raw results in $RESULTS_DIR"
}

main "$@"
