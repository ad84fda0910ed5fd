#!/usr/bin/env bash
# W-TX (client transactions of 10 durable writes, c=32): the engine's REST transactions
# against PostgreSQL 15 running the same 10-statement transactions with pgbench, interleaved
# over several rounds on one machine; commits/s and whole-transaction p99, medians over rounds.
#
#   bash benches/run-tx.sh
#   DURATION=2 ROUNDS=1 WARMUP=0 bash benches/run-tx.sh      # smoke test (not a result)
#
# Environment (defaults in brackets):
#   ROUNDS [3]          rounds; every round runs each system once, alternating which goes first
#   DURATION [10]       seconds per load run (the engine client's window / pgbench -T)
#   CONC [32]           concurrent clients (wrk connections / pgbench -c)
#   WRITES [10]         writes per transaction (the engine client; pg-tx.sql holds 10 INSERTs)
#   WARMUP [3]          seconds of unrecorded warm-up per system before round 1 (0 = none)
#   DRAIN [3]           extra seconds the engine's client runs after DURATION so each connection
#                       finishes the transaction it has open (no new ones begin after DURATION)
#   CLIENT [rust]       the engine's load client: `rust` (benches/grpc_http_load.rs --mode
#                       http-tx, compiled like pgbench) or `wrk` (benches/tx/tx.lua, LuaJIT)
#   LOADGEN_CPU [0]     CPU the load generators (engine client, pgbench) are pinned to (taskset)
#   ENGINE_PORT [18181] PG_PORT [55433]   loopback ports
#   BENCH_DIR [mktemp under /var/tmp]  data directories (engine, PostgreSQL)
#   RESULTS_DIR [bench-results/tx-DATE under the repo]
#   KEEP_DATA [0]       1 keeps BENCH_DIR after the run
#   KEEP_PGBENCH_LOGS [] non-empty keeps pgbench per-transaction logs
#   ENGINE_BIN, LOAD_BIN  use these binaries instead of building (cargo build --release)
#
# Engine transaction: POST /api/v1/tx {"ttl":30000} -> 10 x POST /api/v1/records (creates,
# X-Transaction-Id; creates never conflict) -> POST /api/v1/tx/{id}/commit; 12 HTTP requests,
# keep-alive, one connection per client. CLIENT=rust: CONC tokio tasks on one current-thread
# runtime (the process is pinned to LOADGEN_CPU), each a transaction loop on its own HTTP/1.1
# connection, a lean client (requests written from one buffer, answers parsed by httparse;
# runs 1-26 used hyper's client, ~5x pgbench's user CPU). CLIENT=wrk: wrk keeps Lua state per thread, so it runs
# -tCONC -cCONC (one connection per thread, each thread a transaction state machine), all
# threads pinned to LOADGEN_CPU; its 32 threads cost about twice pgbench's CPU.
# Latency: begin sent -> commit answer read, per transaction.
# PostgreSQL transaction (benches/tx/pg-tx.sql): BEGIN; 10 x INSERT INTO records(label, props);
# COMMIT; with pgbench -n -M prepared -c CONC -j 2 -T DURATION -l, pinned to LOADGEN_CPU; table
# records(id uuid primary key default gen_random_uuid(), label text, props jsonb) with a btree on
# label and a GIN on props (the engine indexes the label and every property of a record).
# Both durable: the engine's commit answers 200 after its fdatasynced redo-log frame;
# PostgreSQL fsync=on, synchronous_commit=on.
# Checks (checks.txt): the engine's ORDER count = 10 x every committed transaction (warm-up
# included) with no threads left mid-transaction, and PostgreSQL's row count = 10 x pgbench's
# processed transactions.
# Needs root for apt-get and for running PostgreSQL as the `postgres` user.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONC=${CONC:-32}
WRITES=${WRITES:-10}
WARMUP=${WARMUP:-3}
DRAIN=${DRAIN:-3}
LOADGEN_CPU=${LOADGEN_CPU:-0}
ENGINE_PORT=${ENGINE_PORT:-18181}
PG_PORT=${PG_PORT:-55433}
KEEP_DATA=${KEEP_DATA:-0}
CLIENT=${CLIENT:-rust}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench-results/tx-$(date +%Y%m%dT%H%M%S)}
PGBIN=/usr/lib/postgresql/15/bin
TXD=$here/tx
REPORT=$TXD/tx_report.py
NULL_BIN= NULL_PORT=0 # servers.sh expects them; this benchmark has no null handler

# shellcheck source=lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=lib/servers.sh
. "$here/lib/servers.sh"

ensure_tools() {
  case $CLIENT in rust|wrk) ;; *) die "CLIENT must be rust or wrk, not $CLIENT" ;; esac
  ensure_apt wrk:wrk taskset:util-linux python3:python3 runuser:util-linux pg pgbench
  command -v cargo >/dev/null || [ -n "${ENGINE_BIN:-}" ] || die "cargo not found"
}

setup_data() {
  log "PostgreSQL: records table (btree label, GIN props)"
  psql_bench -c "CREATE TABLE records(id uuid PRIMARY KEY DEFAULT gen_random_uuid(), label text, props jsonb)" \
    -c "CREATE INDEX records_label ON records(label)" \
    -c "CREATE INDEX records_props ON records USING gin (props)"
  psql_bench -At -c "SELECT name || '=' || setting FROM pg_settings WHERE name IN
    ('fsync','synchronous_commit','wal_sync_method','full_page_writes','commit_delay','wal_level',
     'shared_buffers','server_version','max_wal_size','checkpoint_timeout') ORDER BY name" \
    >"$RESULTS_DIR/postgres-settings.txt"
  cp "$TXD/pg-tx.sql" "$RESULTS_DIR/pg-tx.sql"
  [ "$(grep -c '^INSERT' "$TXD/pg-tx.sql")" = "$WRITES" ] || die "pg-tx.sql has not $WRITES INSERTs (WRITES=$WRITES)"
  # The engine's probe: one transaction by hand, its answers kept.
  local a="Authorization: Bearer $TOKEN" u="http://127.0.0.1:$ENGINE_PORT/api/v1" t id
  t=$(curl -sS -XPOST -H "$a" -H 'Content-Type: application/json' -d '{"ttl":30000}' "$u/tx")
  id=$(printf '%s' "$t" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["id"])' 2>/dev/null) \
    || die "engine: POST /api/v1/tx answered $t (does this build support transactions?)"
  curl -sS -XPOST -H "$a" -H "X-Transaction-Id: $id" "$u/tx/$id/rollback" >/dev/null
}

engine_count() { # the engine's ORDER records (search total)
  curl -fsS -XPOST -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    -d '{"labels":["ORDER"],"limit":1}' "http://127.0.0.1:$ENGINE_PORT/api/v1/records/search" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["total"])'
}

RAW= JSONL= ENGINE_COMMITTED=0 PG_COMMITTED=0 ENGINE_UNFINISHED=0
record() {
  "$@" >>"$JSONL"
  tail -n1 "$JSONL" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read())
print("    round %s %s c=%s: %.0f commits/s  p50=%s us  p99=%s us  committed=%s  errors=%s"
      % (r["round"], r["system"], r["conc"], r["tps"], r["p50_us"], r["p99_us"], r["committed"], r["errors"]))' >&2
}

# engine_run ROUND [SECONDS]
engine_run() {
  local rnd=$1 secs=${2:-$DURATION}
  local raw=$RAW/r$rnd-engine.txt lat=$RAW/r$rnd-engine.lat cpu=$RAW/r$rnd-engine.cpu c
  # The client's own CPU time (user+sys, from /usr/bin/time) shows whether it is the bottleneck.
  if [ "$CLIENT" = rust ]; then
    /usr/bin/time -f '%U %S %e' -o "$cpu" taskset -c "$LOADGEN_CPU" "$LOAD_BIN" --mode http-tx \
      --target "127.0.0.1:$ENGINE_PORT" --conc "$CONC" --duration "$secs" --drain "$DRAIN" \
      --writes "$WRITES" --lat-out "$lat" --token "$TOKEN" >"$raw" 2>&1 \
      || die "grpc_http_load failed, see $raw"
  else
    BENCH_TOKEN=$TOKEN BENCH_SECONDS=$secs BENCH_WRITES=$WRITES BENCH_LAT_OUT=$lat \
      /usr/bin/time -f '%U %S %e' -o "$cpu" taskset -c "$LOADGEN_CPU" wrk -t"$CONC" -c"$CONC" \
      -d"$((secs + DRAIN))s" --timeout 10s -s "$TXD/tx.lua" "http://127.0.0.1:$ENGINE_PORT/" \
      >"$raw" 2>&1 || die "wrk failed, see $raw"
  fi
  grep -q '^TXJSON ' "$raw" || die "no TXJSON line in $raw"
  c=$(python3 -c 'import json,sys; w=json.loads(open(sys.argv[1]).read().split("TXJSON ",1)[1].splitlines()[0]); print(w["commits"], w["unfinished"])' "$raw")
  ENGINE_COMMITTED=$((ENGINE_COMMITTED + ${c% *})) ENGINE_UNFINISHED=$((ENGINE_UNFINISHED + ${c#* }))
  grep '^ODD ' "$raw" >&2 || true
  log "  $CLIENT CPU: $(awk -v s="$secs" '{printf "user %.1f s + sys %.1f s = %.0f%% of one CPU over the %s s window (%.1f s wall with the drain)", $1, $2, 100*($1+$2)/s, s, $3}' "$cpu")"
  [ "$rnd" = 0 ] || record python3 "$REPORT" "$CLIENT" "$rnd" "$raw" "$lat" "$secs" "$cpu"
}

# pg_run ROUND [SECONDS]
pg_run() {
  local rnd=$1 secs=${2:-$DURATION}
  local raw=$RAW/r$rnd-postgres.txt prefix=$RAW/r$rnd-postgres.pgbench-log cpu=$RAW/r$rnd-postgres.cpu n
  (cd "$RAW" && /usr/bin/time -f '%U %S %e' -o "$cpu" taskset -c "$LOADGEN_CPU" "$PGBIN/pgbench" \
      -h 127.0.0.1 -p "$PG_PORT" -U bench -n -M prepared -f "$TXD/pg-tx.sql" -c "$CONC" -j 2 \
      -T "$secs" -l --log-prefix="$prefix" bench) >"$raw" 2>&1 || die "pgbench failed, see $raw"
  n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$raw")
  PG_COMMITTED=$((PG_COMMITTED + n))
  log "  pgbench CPU: $(awk '{printf "user %.1f s + sys %.1f s over %.1f s wall = %.0f%% of one CPU", $1, $2, $3, 100*($1+$2)/$3}' "$cpu")"
  if [ "$rnd" = 0 ]; then rm -f "$prefix".*; return; fi
  record python3 "$REPORT" pgbench "$rnd" "$raw" "$prefix" "$cpu"
}

machine_info() {
  {
    machine_common
    echo "pgbench: $("$PGBIN/pgbench" --version)"
    echo "engine: $("$ENGINE_BIN" version 2>/dev/null || true) ($ENGINE_BIN)"
    echo "rounds=$ROUNDS duration=$DURATION conc=$CONC writes=$WRITES warmup=$WARMUP drain=$DRAIN loadgen_cpu=$LOADGEN_CPU"
  } >"$RESULTS_DIR/machine.txt"
  python3 - "$RESULTS_DIR/meta.json" <<EOF
import json, sys
json.dump({"rounds": $ROUNDS, "duration": $DURATION, "conc": $CONC, "writes": $WRITES,
           "warmup": $WARMUP, "loadgen_cpu": $LOADGEN_CPU}, open(sys.argv[1], "w"))
EOF
}

checks() {
  local ecount pcount ok=1
  ecount=$(engine_count) pcount=$(psql_bench -At -c "SELECT count(*) FROM records")
  {
    echo "engine: ORDER records $ecount; committed transactions $ENGINE_COMMITTED (x$WRITES = $((ENGINE_COMMITTED * WRITES))); connections left mid-transaction $ENGINE_UNFINISHED"
    echo "postgres: records rows $pcount; processed transactions $PG_COMMITTED (x$WRITES = $((PG_COMMITTED * WRITES)))"
  } >"$RESULTS_DIR/checks.txt"
  [ "$ecount" = $((ENGINE_COMMITTED * WRITES)) ] && [ "$ENGINE_UNFINISHED" = 0 ] || ok=0
  [ "$pcount" = $((PG_COMMITTED * WRITES)) ] || ok=0
  if [ "$ok" = 1 ]; then echo "row counts: OK" >>"$RESULTS_DIR/checks.txt"
  else echo "row counts: MISMATCH" >>"$RESULTS_DIR/checks.txt"; fi
  cat "$RESULTS_DIR/checks.txt" >&2
}

main() {
  ensure_tools
  if [ "$CLIENT" = rust ]; then
    build_release ENGINE_BIN=bin:engine LOAD_BIN=bench:grpc_http_load
  else
    build_release ENGINE_BIN=bin:engine
  fi
  mkdir -p "$RESULTS_DIR"
  RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
  RAW=$RESULTS_DIR/raw JSONL=$RESULTS_DIR/results.jsonl
  mkdir -p "$RAW"; : >"$JSONL"
  make_bench_dir
  log "results: $RESULTS_DIR; data: $BENCH_DIR"
  machine_info

  # Durable settings, stated explicitly: fsync=on, synchronous_commit=on (the defaults).
  start_postgres "-c fsync=on -c synchronous_commit=on -c shared_buffers=1GB -c max_connections=200"
  start_engine
  setup_data

  if [ "$WARMUP" -gt 0 ]; then
    log "warm-up ($WARMUP s per system, not recorded)"
    engine_run 0 "$WARMUP"
    pg_run 0 "$WARMUP"
  fi

  local rnd s0 s1
  for rnd in $(seq 1 "$ROUNDS"); do
    log "round $rnd/$ROUNDS"
    s0=$(head -n1 /proc/stat)
    echo "round $rnd start $(date -Is) loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >>"$RESULTS_DIR/rounds.txt"
    if [ $((rnd % 2)) = 1 ]; then engine_run "$rnd"; pg_run "$rnd"; else pg_run "$rnd"; engine_run "$rnd"; fi
    s1=$(head -n1 /proc/stat)
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

  checks
  engine_epilogue
  echo
  python3 "$REPORT" summary "$RESULTS_DIR"
  echo
  log "raw results in $RESULTS_DIR"
}

main "$@"
