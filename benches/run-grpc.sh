#!/usr/bin/env bash
# Issue 8: reads by id (W2) and small searches over gRPC against the same over HTTP, on one
# engine, in the same run, with one load client for both (benches/grpc_http_load.rs), plus the
# null-handler references (benches/null_http.rs for HTTP, `grpc_http_load --mode
# null-grpc-server` for gRPC). Interleaved rounds, medians.
#
#   bash benches/run-grpc.sh
#
# Environment (defaults in brackets):
#   ROUNDS [3]          rounds; every round runs every cell once
#   DURATION [10]       seconds per load run
#   CONC [32]           concurrent requests (tasks, one request in flight each)
#   GRPC_CONNECTIONS [4] HTTP/2 connections the gRPC tasks share (multiplexed streams, as a
#                       gRPC client's channel pool does); HTTP/1.1 always uses one per task.
#                       The get cells are also run with one gRPC connection per task
#                       (systems *-grpc-conn-per-task).
#   WARMUP [3]          seconds of unrecorded warm-up per cell before round 1 (0 = none)
#   RECORDS [10000]     records preloaded (label BENCH, properties n = 0..RECORDS-1, payload)
#   LOADGEN_CPU [0]     CPU the load client is pinned to with taskset
#   SERVER_CPUS []      CPUs the servers (engine, null HTTP, null gRPC) are pinned to with
#                       taskset (for example 1: client and server each on a core of its own);
#                       empty leaves them unpinned, sharing LOADGEN_CPU with the client
#   ENGINE_PORT [18181] ENGINE_GRPC_PORT [18183] NULL_PORT [18182] NULL_GRPC_PORT [18184]
#   BENCH_DIR [mktemp under /var/tmp]  engine data directory
#   RESULTS_DIR [bench-results/grpc-DATE under the repo]
#   KEEP_DATA [0]       1 keeps BENCH_DIR after the run
#   ENGINE_BIN, NULL_BIN, LOAD_BIN   use these binaries instead of building (all three)
#
# Cells per round: engine-grpc and engine-http for `get` (query record by id) and `search`
# (query records, labels BENCH, predicate {n: K}, limit 10), null-grpc and null-http for `get`.
# Which protocol goes first alternates by round. The load client is pinned to LOADGEN_CPU;
# the servers to SERVER_CPUS when set.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONC=${CONC:-32}
GRPC_CONNECTIONS=${GRPC_CONNECTIONS:-4}
WARMUP=${WARMUP:-3}
RECORDS=${RECORDS:-10000}
LOADGEN_CPU=${LOADGEN_CPU:-0}
SERVER_CPUS=${SERVER_CPUS:-}
ENGINE_PORT=${ENGINE_PORT:-18181}
ENGINE_GRPC_PORT=${ENGINE_GRPC_PORT:-18183}
NULL_PORT=${NULL_PORT:-18182}
NULL_GRPC_PORT=${NULL_GRPC_PORT:-18184}
KEEP_DATA=${KEEP_DATA:-0}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench-results/grpc-$(date +%Y%m%dT%H%M%S)}
PGBIN=/usr/lib/postgresql/15/bin

# shellcheck source=lib/common.sh
. "$here/lib/common.sh"
# shellcheck source=lib/servers.sh
. "$here/lib/servers.sh"

NULL_GRPC_PID=
cleanup_grpc() {
  local rc=$?
  set +e
  if [ -n "$NULL_GRPC_PID" ] && kill -0 "$NULL_GRPC_PID" 2>/dev/null; then
    kill -TERM "$NULL_GRPC_PID"; wait "$NULL_GRPC_PID" 2>/dev/null
  fi
  (exit "$rc"); cleanup   # cleanup exits with the status it is entered with
}
trap cleanup_grpc EXIT

wait_grpc() { # FILE PID WHAT
  local i
  for i in $(seq 1 300); do
    grep -q '^listening grpc ' "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || die "$3 exited before listening on gRPC (see $1)"
    sleep 0.1
  done
  die "$3 did not report listening grpc within 30 s"
}

start_null_grpc() {
  port_in_use "$NULL_GRPC_PORT" && die "port $NULL_GRPC_PORT is in use (set NULL_GRPC_PORT)"
  "$LOAD_BIN" --mode null-grpc-server --listen "127.0.0.1:$NULL_GRPC_PORT" \
    >"$RESULTS_DIR/null-grpc.stdout" 2>&1 &
  NULL_GRPC_PID=$!
  wait_grpc "$RESULTS_DIR/null-grpc.stdout" "$NULL_GRPC_PID" "null gRPC server"
  log "null gRPC server listening on 127.0.0.1:$NULL_GRPC_PORT (pid $NULL_GRPC_PID)"
}

setup_data() {
  local docs=$BENCH_DIR/bench.jsonl out=$RESULTS_DIR/engine-import.txt
  python3 - "$RECORDS" "$docs" <<'EOF'
import json, sys
n, path = int(sys.argv[1]), sys.argv[2]
with open(path, "w") as f:
    for i in range(n):
        f.write(json.dumps({"n": i, "payload": "record %06d " % i + "x" * 88}) + "\n")
EOF
  log "engine: importing $RECORDS BENCH records (engine import)"
  engine_import BENCH "$docs" "$out" 500 4
  [ "$IMPORT_RECORDS" -ge "$RECORDS" ] || die "imported only $IMPORT_RECORDS of $RECORDS (see $out)"
  log "engine: $IMPORT_RECORDS records in $IMPORT_S s"
  # Their ids, through Protocol v1 `query records` pages (limit 1000).
  IDS=$RESULTS_DIR/engine-ids.txt
  : >"$IDS"
  local off=0
  while [ "$off" -lt "$RECORDS" ]; do
    curl -fsS -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' \
      -d "{\"protocolVersion\":1,\"operation\":{\"kind\":\"query\",\"query\":{\"kind\":\"records\",\"query\":{\"labels\":[\"BENCH\"],\"limit\":1000,\"offset\":$off}}}}" \
      "http://127.0.0.1:$ENGINE_PORT/protocol/v1/execute" \
      | python3 -c 'import json, sys
for r in json.load(sys.stdin)["response"]["records"]: print(r["id"])' >>"$IDS"
    off=$((off + 1000))
  done
  local n; n=$(sort -u "$IDS" | wc -l)
  [ "$n" -ge "$RECORDS" ] || die "fetched only $n distinct ids of $RECORDS"
  log "engine: $n ids in $IDS"
}

RAW= JSONL=
# run ROUND SYSTEM MODE PORT WORKLOAD [SECONDS]   (ROUND 0 = warm-up, not recorded)
# gRPC systems share GRPC_CONNECTIONS connections, except *-conn-per-task ones.
run() {
  local rnd=$1 sys=$2 mode=$3 port=$4 w=$5 secs=${6:-$DURATION}
  local raw=$RAW/r$rnd-$w-$sys.json err=$RAW/r$rnd-$w-$sys.stderr conns=$CONC
  [ "$mode" = grpc ] && [ "${sys%conn-per-task}" = "$sys" ] && conns=$GRPC_CONNECTIONS
  taskset -c "$LOADGEN_CPU" "$LOAD_BIN" --mode "$mode" --target "127.0.0.1:$port" --conc "$CONC" \
    --connections "$conns" \
    --duration "$secs" --workload "$w" --ids "$IDS" --token "$TOKEN" --system "$sys" --round "$rnd" \
    >"$raw" 2>"$err" || die "load client failed, see $err"
  [ "$rnd" = 0 ] && return
  cat "$raw" >>"$JSONL"
  python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).read())
print("    %-7s %-12s c=%s: %8.0f req/s  p50=%5d us  p99=%6d us  errors=%s"
      % (r["workload"], r["system"], r["conc"], r["rps"], r["p50_us"], r["p99_us"], r["errors"]))' "$raw" >&2
}

round() {
  local rnd=$1 w
  local g="engine-grpc grpc $ENGINE_GRPC_PORT" h="engine-http http $ENGINE_PORT"
  local ng="null-grpc grpc $NULL_GRPC_PORT" nh="null-http http $NULL_PORT"
  local g1="engine-grpc-conn-per-task grpc $ENGINE_GRPC_PORT"
  local ng1="null-grpc-conn-per-task grpc $NULL_GRPC_PORT"
  # shellcheck disable=SC2086
  for w in get search; do
    if [ $((rnd % 2)) = 1 ]; then run "$rnd" $g "$w"; run "$rnd" $h "$w"
    else run "$rnd" $h "$w"; run "$rnd" $g "$w"; fi
  done
  # shellcheck disable=SC2086
  if [ $((rnd % 2)) = 1 ]; then run "$rnd" $ng get; run "$rnd" $nh get
  else run "$rnd" $nh get; run "$rnd" $ng get; fi
  # shellcheck disable=SC2086
  run "$rnd" $g1 get; run "$rnd" $ng1 get
}

summary() {
  python3 - "$RESULTS_DIR" <<'EOF'
import json, statistics, sys, os
d = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl")) if l.strip()]
cells = {}
for r in rows:
    cells.setdefault((r["workload"], r["system"]), []).append(r)
def med(k, key):
    v = [r[key] for r in cells.get(k, [])]
    return statistics.median(v) if v else None
def rng(k):
    v = [r["rps"] for r in cells.get(k, [])]
    return "%s–%s" % (f"{min(v):,.0f}", f"{max(v):,.0f}") if v else ""
def us(v):
    return "" if v is None else (f"{v/1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs")
def per_round(w, a, b):
    ra = {r["round"]: r["rps"] for r in cells.get((w, a), [])}
    rb = {r["round"]: r["rps"] for r in cells.get((w, b), [])}
    x = [ra[k] / rb[k] for k in sorted(ra) if k in rb and rb[k]]
    return "%.2f–%.2f" % (min(x), max(x)) if x else ""
out = []
out.append("| workload | system | req/s median (min–max) | p50 | p99 | errors |")
out.append("|---|---|---|---|---|---|")
order = [("get", "engine-grpc"), ("get", "engine-http"), ("search", "engine-grpc"),
         ("search", "engine-http"), ("get", "null-grpc"), ("get", "null-http"),
         ("get", "engine-grpc-conn-per-task"), ("get", "null-grpc-conn-per-task")]
for k in order:
    if k not in cells: continue
    errs = sum(r["errors"] for r in cells[k])
    out.append("| %s | %s | %s (%s) | %s | %s | %d |" % (k[0], k[1], f"{med(k, 'rps'):,.0f}", rng(k),
               us(med(k, "p50_us")), us(med(k, "p99_us")), errs))
out.append("")
out.append("| ratio (req/s medians) | value | per round | goal | verdict |")
out.append("|---|---|---|---|---|")
def ratio(w, a, b, goal=None):
    ma, mb = med((w, a), "rps"), med((w, b), "rps")
    if ma is None or mb is None: return
    x = ma / mb
    verdict = "" if goal is None else ("**met**" if x >= goal else "**NOT met**")
    out.append("| %s: %s / %s | %.2fx | %s | %s | %s |" % (w, a, b, x, per_round(w, a, b),
               "" if goal is None else ">= %.1fx" % goal, verdict))
ratio("get", "engine-grpc", "engine-http", 1.0)
ratio("search", "engine-grpc", "engine-http", 1.0)
ratio("get", "null-grpc", "null-http")
ratio("get", "engine-grpc", "null-grpc")
ratio("get", "engine-http", "null-http")
ratio("get", "engine-grpc-conn-per-task", "engine-http")
ratio("get", "null-grpc-conn-per-task", "null-http")
text = "\n".join(out) + "\n"
open(os.path.join(d, "summary.md"), "w").write(text)
print(text)
EOF
}

main() {
  command -v taskset >/dev/null || die "taskset not found (util-linux)"
  command -v curl >/dev/null || die "curl not found"
  command -v cargo >/dev/null || [ -n "${ENGINE_BIN:-}" ] || die "cargo not found"
  build_release ENGINE_BIN=bin:engine NULL_BIN=bench:null_http LOAD_BIN=bench:grpc_http_load
  mkdir -p "$RESULTS_DIR"
  RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
  RAW=$RESULTS_DIR/raw JSONL=$RESULTS_DIR/results.jsonl
  mkdir -p "$RAW"; : >"$JSONL"
  make_bench_dir
  log "results: $RESULTS_DIR; data: $BENCH_DIR"
  {
    echo "date: $(date -Is)"
    echo "git: $(cd "$repo" && git rev-parse HEAD)$(cd "$repo" && git diff --quiet HEAD -- src || echo ' (src has uncommitted changes)')"
    echo "kernel: $(uname -srm)"; echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "engine: $("$ENGINE_BIN" version 2>/dev/null || true)"
    echo "rounds=$ROUNDS duration=$DURATION conc=$CONC grpc_connections=$GRPC_CONNECTIONS warmup=$WARMUP records=$RECORDS loadgen_cpu=$LOADGEN_CPU server_cpus=${SERVER_CPUS:-unpinned}"
  } >"$RESULTS_DIR/machine.txt"

  start_engine
  wait_grpc "$RESULTS_DIR/engine.stdout" "$ENGINE_PID" engine
  start_null
  start_null_grpc
  if [ -n "$SERVER_CPUS" ]; then
    local p
    for p in "$ENGINE_PID" "$NULL_PID" "$NULL_GRPC_PID"; do
      taskset -a -pc "$SERVER_CPUS" "$p" >/dev/null || die "taskset -pc $SERVER_CPUS $p failed"
    done
    log "servers pinned to CPUs $SERVER_CPUS"
  fi
  setup_data

  if [ "$WARMUP" -gt 0 ]; then
    log "warm-up ($WARMUP s per cell, not recorded)"
    run 0 engine-grpc grpc "$ENGINE_GRPC_PORT" get "$WARMUP"
    run 0 engine-http http "$ENGINE_PORT" get "$WARMUP"
    run 0 engine-grpc grpc "$ENGINE_GRPC_PORT" search "$WARMUP"
    run 0 engine-http http "$ENGINE_PORT" search "$WARMUP"
    run 0 null-grpc grpc "$NULL_GRPC_PORT" get "$WARMUP"
    run 0 null-http http "$NULL_PORT" get "$WARMUP"
  fi

  local rnd
  for rnd in $(seq 1 "$ROUNDS"); do
    log "round $rnd/$ROUNDS"
    echo "round $rnd start $(date -Is) loadavg $(cut -d' ' -f1-3 /proc/loadavg)" >>"$RESULTS_DIR/rounds.txt"
    round "$rnd"
  done

  engine_epilogue
  echo
  summary
  log "raw results in $RESULTS_DIR"
}

main "$@"
