# Helpers shared by the benchmark scripts (sourced, not run): logging, installing what is
# missing, building (or taking) the release binaries, the machine description common to every
# report, and loading data into the engine (a rows file with wrk, or a JSON Lines file with the
# `engine import` loader).
# Expects: PGBIN; build_release needs repo; load_rows needs TOKEN, ENGINE_PORT, LOADGEN_CPU,
# LOAD_CONC, RESULTS_DIR; engine_import needs ENGINE_BIN, TOKEN, ENGINE_PORT, LOADGEN_CPU;
# machine_common needs BENCH_DIR, ENGINE_BIN.
_lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ensure_apt NEED...: installs the Debian packages behind the needs that are missing (root
# only). A need is COMMAND:PACKAGE, `venv` (python3-venv), `pg` (PostgreSQL 15 server and psql)
# or `pgbench`.
ensure_apt() {
  local pkgs=() n
  for n in "$@"; do
    case $n in
      venv) python3 -c 'import venv, ensurepip' 2>/dev/null || pkgs+=(python3-venv) ;;
      pg) [ -x "$PGBIN/postgres" ] && [ -x "$PGBIN/psql" ] || pkgs+=(postgresql-15) ;;
      pgbench) [ -x "$PGBIN/pgbench" ] || pkgs+=(postgresql-15) ;;
      *:*) command -v "${n%%:*}" >/dev/null || pkgs+=("${n#*:}") ;;
      *) die "ensure_apt: unknown need $n" ;;
    esac
  done
  if [ "${#pkgs[@]}" -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "missing ${pkgs[*]} and not root: install them first"
    mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
    log "installing ${pkgs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
  fi
}

# ensure_venv DIR IMPORTS PIP_PACKAGE...: a Python venv at DIR in which `import IMPORTS`
# works, made (from PyPI) if it does not. Sets PY to its python.
ensure_venv() {
  local dir=$1 imports=$2; shift 2
  if ! "$dir/bin/python" -c "import $imports" 2>/dev/null; then
    log "creating $dir with $* (PyPI)"
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check "$@"
  fi
  PY=$dir/bin/python
}

# build_release VAR=KIND:TARGET...: sets each VAR to the release executable of a cargo
# target (KIND bin or bench). When every VAR is already set (environment) to an executable,
# nothing is built; setting only some of them is an error.
build_release() {
  local spec var rest given=0 missing=0 args=() want=()
  for spec in "$@"; do
    var=${spec%%=*} rest=${spec#*=}
    if [ -n "${!var:-}" ]; then given=$((given + 1)); else missing=$((missing + 1)); fi
    args+=("--${rest%%:*}" "${rest#*:}")
    want+=("${rest#*:}=$var")
  done
  if [ "$given" -gt 0 ]; then
    for spec in "$@"; do
      var=${spec%%=*}
      [ "$missing" = 0 ] && [ -x "${!var:-}" ] || die "give all of ${*%%=*} as executables, or none"
    done
    log "using $(for spec in "$@"; do var=${spec%%=*}; printf '%s=%s ' "$var" "${!var}"; done)(not building)"
    return
  fi
  log "building release binaries (${want[*]%%=*})"
  local json
  json=$(cd "$repo" && cargo build --release "${args[@]}" --message-format=json-render-diagnostics) \
    || die "cargo build failed"
  eval "$(printf '%s\n' "$json" | python3 -c '
import json, sys, shlex
want = dict(a.split("=", 1) for a in sys.argv[1:])
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] in want:
        print("%s=%s" % (want[m["target"]["name"]], shlex.quote(m["executable"])))
' "${want[@]}")"
  for spec in "$@"; do
    var=${spec%%=*}
    [ -x "${!var:-}" ] || die "could not locate the built $var from cargo's output"
  done
  log "$(for spec in "$@"; do var=${spec%%=*}; printf '%s=%s ' "$var" "${!var}"; done)"
}

# machine_python MODULE...: machine.txt lines for the venv's Python (PY) and each MODULE's
# version (psycopg with its implementation), on stdout.
machine_python() {
  local m
  echo "python: $("$PY" --version 2>&1)"
  for m in "$@"; do
    if [ "$m" = psycopg ]; then
      echo "psycopg: $("$PY" -c 'import psycopg; print(psycopg.__version__, psycopg.pq.__impl__)')"
    else
      echo "$m: $("$PY" -c "import $m; print($m.__version__)")"
    fi
  done
}

# machine_common: the lines of machine.txt every benchmark writes (stdout).
machine_common() {
  echo "date: $(date -Is)"
  echo "git: $(cd "$repo" && git rev-parse HEAD 2>/dev/null)$(cd "$repo" && git diff --quiet HEAD -- src 2>/dev/null || echo ' (src has uncommitted changes)')"
  echo "kernel: $(uname -srm)"
  echo "nproc: $(nproc)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "data dir: $BENCH_DIR"
  echo "data fs: $(df -PT "$BENCH_DIR" | awk 'NR==2 {print $1, $2, $3" KiB total"}')"
  echo "wrk: $(wrk -v 2>&1 | head -n1)"
  echo "postgres: $("$PGBIN/postgres" --version)"
}

# load_rows ROWS OUT: creates every line of ROWS (one `POST /api/v1/records` body a line) in
# the engine with wrk (-t1 -c$LOAD_CONC, pinned to LOADGEN_CPU; load_rows.lua), wrk's output
# in OUT. Sets LOAD_S (seconds, without the loader's 2 s idle tail) and LOAD_CREATED.
load_rows() {
  local rows=$1 out=$2 n t0 t1
  n=$(wc -l <"$rows")
  t0=$(date +%s.%N)
  BENCH_TOKEN=$TOKEN BENCH_ROWS=$rows \
    taskset -c "$LOADGEN_CPU" wrk -t1 -c"$LOAD_CONC" -d1800s --timeout 30s -s "$_lib/../w3w4/load_rows.lua" \
    "http://127.0.0.1:$ENGINE_PORT/" >"$out" 2>&1 || die "engine load failed (see $out)"
  t1=$(date +%s.%N)
  grep -q "^LOADED .*failed=0" "$out" || die "engine load incomplete (see $out)"
  # The loader idles 2 s after the last create before it exits: not counted.
  LOAD_S=$(python3 -c "print(f'{$t1-$t0-2:.1f}')")
  LOAD_CREATED=$(grep -o 'created=[0-9]*' "$out" | cut -d= -f2)
  log "engine: created $LOAD_CREATED of $n rows in $LOAD_S s ($(python3 -c "print(f'{$LOAD_CREATED/($t1-$t0-2):,.0f}')")/s)"
}

# engine_import LABEL FILE OUT BATCH CONC: loads FILE (JSON Lines, one document a line) into
# the engine as LABEL with the `engine import` loader (Protocol v1 `ingest` of BATCH documents
# per request, CONC requests in flight, pinned to LOADGEN_CPU); the loader's output is appended
# to OUT. Sets IMPORT_S (wall-clock seconds around the loader), IMPORT_RECORDS and IMPORT_RELS
# (records and relationships written, from its summary line).
engine_import() {
  local label=$1 file=$2 out=$3 batch=$4 conc=$5 t0 t1 line
  t0=$(date +%s.%N)
  taskset -c "$LOADGEN_CPU" "$ENGINE_BIN" import --label "$label" "$file" --url "http://127.0.0.1:$ENGINE_PORT" \
    --token "$TOKEN" --batch-size "$batch" --concurrency "$conc" --quiet >>"$out" 2>&1 \
    || die "engine import of $file failed (see $out)"
  t1=$(date +%s.%N)
  line=$(grep '^imported ' "$out" | tail -n1)
  [[ $line =~ \ as\ ([0-9]+)\ record\(s\)\ and\ ([0-9]+)\ relationship ]] \
    || die "engine import: no summary line in $out"
  IMPORT_RECORDS=${BASH_REMATCH[1]} IMPORT_RELS=${BASH_REMATCH[2]}
  IMPORT_S=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
}
