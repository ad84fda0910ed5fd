#!/usr/bin/env python3
"""W3 (filtered search) and W4 (grouped aggregation): dataset, loading, result checks and
latency measurement for benches/run-w3-w4.sh. Runs in the benchmark's venv (duckdb, psycopg).

  w3w4.py gen      --records N --dir D          rows.jsonl (engine POST bodies) + dataset.json
  w3w4.py export   --dir D --port P --token T   reads every record back from the engine by seq,
                                                checks it against rows.jsonl, writes pg.tsv and
                                                duck.csv (rows in engine-id order, engine ids)
  w3w4.py load-pg  --dir D --dsn DSN            table, COPY, indexes, VACUUM ANALYZE
  w3w4.py load-duck --dir D --db FILE           typed table from duck.csv
  w3w4.py bench    --dir D --results R ...      checks equal results across systems, records
                                                plans, then measures every query on every
                                                system, interleaved over --rounds rounds

The dataset is deterministic (seeded): N rows, labels ORDER/ITEM/CUSTOMER by seq % 3, and 8
properties each: status (5 values), total (0..9999.99, every value distinct), createdAt (ISO
datetime rising with seq over two years), city (200 values), qty (1..20), sku (50,000 values),
channel (4 values), seq (0..N-1).
"""
import argparse
import csv
import datetime as dt
import json
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from benchlib import Engine, cell_stats, cpu_split, pin, run_cell  # noqa: E402

LABELS = ["ORDER", "ITEM", "CUSTOMER"]
STATUSES = ["pending", "paid", "shipped", "delivered", "cancelled"]
CHANNELS = ["web", "store", "phone", "partner"]
REAL_CITIES = ["Lima", "Oslo", "Madrid", "Manila", "Rome", "Lagos", "Quito", "Perth", "Dakar",
               "Porto", "Bern", "Cairo", "Kyoto", "Accra", "Hanoi", "Tunis"]
SEED = 20261122
PROPS = ["status", "total", "createdAt", "city", "qty", "sku", "channel", "seq"]


# ---------------------------------------------------------------- dataset

def city_names(n=200):
    rng = random.Random(SEED + 1)
    onset = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
             "br", "st", "tr", "gr"]
    vowel = ["a", "e", "i", "o", "u", "ia", "ou"]
    coda = ["", "", "n", "r", "s", "l", "x"]
    names = list(REAL_CITIES)
    seen = {c.lower() for c in names}
    while len(names) < n:
        k = rng.choice([2, 2, 3])
        s = "".join(rng.choice(onset) + rng.choice(vowel) for _ in range(k)) + rng.choice(coda)
        s = s.capitalize()
        if s.lower() not in seen:
            seen.add(s.lower())
            names.append(s)
    return names


def gen(args):
    n = args.records
    os.makedirs(args.dir, exist_ok=True)
    rng = random.Random(SEED)
    cities = city_names()
    # total: a permutation of n distinct cent values spread over 0..999,999 cents, so no two
    # records tie on total and every system must return the very same page.
    cents = [i * 1_000_000 // n for i in range(n)]
    rng.shuffle(cents)
    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    span = 2 * 365 * 86400
    with open(os.path.join(args.dir, "rows.jsonl"), "w", encoding="utf-8") as f:
        for seq in range(n):
            c = cents[seq]
            created = start + dt.timedelta(seconds=seq * span // n + rng.randrange(0, max(1, span // n)))
            data = {
                "status": STATUSES[rng.randrange(5)],
                "total": c // 100 if c % 100 == 0 else c / 100,
                "createdAt": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "city": cities[rng.randrange(len(cities))],
                "qty": rng.randint(1, 20),
                "sku": "SKU-%05d" % rng.randrange(50_000),
                "channel": CHANNELS[rng.randrange(4)],
                "seq": seq,
            }
            f.write(json.dumps({"label": LABELS[seq % 3], "data": data}, separators=(",", ":")))
            f.write("\n")
    meta = {"records": n, "seed": SEED, "cities": cities, "statuses": STATUSES,
            "channels": CHANNELS, "labels": LABELS, "props": PROPS}
    with open(os.path.join(args.dir, "dataset.json"), "w") as f:
        json.dump(meta, f)
    print(f"generated {n} rows into {args.dir}/rows.jsonl")


# ---------------------------------------------------------------- engine client

def export(args):
    """Reads every record back (index range on seq, 1,000 at a time), checks each against the
    dataset, and writes the PostgreSQL/DuckDB load files in engine-id (creation) order."""
    meta = json.load(open(os.path.join(args.dir, "dataset.json")))
    n = meta["records"]
    rows = [json.loads(l) for l in open(os.path.join(args.dir, "rows.jsonl"), encoding="utf-8")]
    assert len(rows) == n
    e = Engine(args.port, args.token)
    t0 = time.time()
    ids = [None] * n
    step = 1000

    def read_chunk(lo):
        hi = min(n, lo + step)
        d = e.post("/api/v1/records/search",
                   {"where": {"seq": {"$gte": lo, "$lt": hi}}, "orderBy": {"seq": "asc"}, "limit": step})["data"]
        if d["total"] != len(d["data"]):
            raise SystemExit(f"seq {lo}..{hi}: engine total {d['total']} but {len(d['data'])} records")
        seen = set()
        for rec in d["data"]:
            seq = rec["seq"]
            if seq in seen:
                raise SystemExit(f"seq {seq} was created twice")
            seen.add(seq)
            want = rows[seq]
            if rec["label"] != want["label"]:
                raise SystemExit(f"seq {seq}: label {rec['label']} != {want['label']}")
            for k, v in want["data"].items():
                got = rec.get(k)
                if (got != v) if not isinstance(v, float) else abs(got - v) > 1e-9:
                    raise SystemExit(f"seq {seq}: {k} = {got!r}, expected {v!r}")
            ids[seq] = rec["id"]
        return [s for s in range(lo, hi) if s not in seen]

    missing = []
    for lo in range(0, n, step):
        missing += read_chunk(lo)
    # A row the wrk loader did not get created (see load_rows.lua) is created now, one at a
    # time, and its chunk read again; export.json lists them.
    if len(missing) > max(64, n // 1000):
        raise SystemExit(f"{len(missing)} rows missing after the load")
    for seq in missing:
        e.conn.request("POST", "/api/v1/records", body=json.dumps(rows[seq], separators=(",", ":")).encode(),
                       headers=e.hdrs)
        r = e.conn.getresponse()
        body = r.read()
        if r.status != 201:
            raise SystemExit(f"re-creating seq {seq}: HTTP {r.status} {body[:300]!r}")
    for lo in sorted({s // step * step for s in missing}):
        if read_chunk(lo):
            raise SystemExit(f"rows still missing in seq {lo}..{lo + step}")
    tot = e.post("/api/v1/records/search", {"limit": 1})["data"]["total"]
    if tot != n or any(i is None for i in ids):
        raise SystemExit(f"engine holds {tot} records, expected {n}")
    if len(set(ids)) != n:
        raise SystemExit("duplicate engine ids")
    order = sorted(range(n), key=lambda s: ids[s])  # UUIDv7 text order = byte order = time order
    with open(os.path.join(args.dir, "pg.tsv"), "w", encoding="utf-8") as pg, \
            open(os.path.join(args.dir, "duck.csv"), "w", encoding="utf-8", newline="") as dk:
        w = csv.writer(dk)
        w.writerow(["id", "label"] + PROPS)
        for s in order:
            row = rows[s]
            props = json.dumps(row["data"], separators=(",", ":"))
            assert "\\" not in props and "\t" not in props
            pg.write(f"{ids[s]}\t{row['label']}\t{props}\n")
            d = row["data"]
            w.writerow([ids[s], row["label"]] + [d[p] for p in PROPS])
    # How far creation (id) order strays from seq order: the loader runs 32 creates at once.
    inversions = sum(1 for a, b in zip(order, order[1:]) if b < a)
    info = {"records": n, "seconds": round(time.time() - t0, 1), "recreated_after_load": missing,
            "adjacent_seq_inversions_in_id_order": inversions}
    json.dump(info, open(os.path.join(args.dir, "export.json"), "w"))
    print(f"read back and verified {n} records in {info['seconds']} s ({len(missing)} re-created after the load; "
          f"{inversions} adjacent seq inversions in id order)")


# ---------------------------------------------------------------- loading the peers

PG_DDL = [
    "CREATE TABLE records (id uuid PRIMARY KEY, label text NOT NULL, props jsonb NOT NULL)",
]
PG_INDEXES = [
    "CREATE INDEX records_props_gin ON records USING gin (props)",
    "CREATE INDEX records_label_city ON records (label, (props->>'city'))",
    "CREATE INDEX records_label_total ON records (label, ((props->>'total')::numeric))",
    "CREATE INDEX records_label_status ON records (label, (props->>'status'))",
]

DUCK_DDL = """CREATE TABLE records (id UUID PRIMARY KEY, label VARCHAR NOT NULL, status VARCHAR,
  total DOUBLE, createdAt TIMESTAMP, city VARCHAR, qty INTEGER, sku VARCHAR, channel VARCHAR,
  seq INTEGER)"""


def load_pg(args):
    import psycopg
    steps = {}
    with psycopg.connect(args.dsn, autocommit=True) as c:
        for s in PG_DDL:
            c.execute(s)
        t = time.time()
        with c.cursor() as cur:
            with cur.copy("COPY records (id, label, props) FROM STDIN") as cp:
                with open(os.path.join(args.dir, "pg.tsv"), "rb") as f:
                    while chunk := f.read(1 << 20):
                        cp.write(chunk)
        steps["copy_s"] = round(time.time() - t, 1)
        for s in PG_INDEXES:
            t = time.time()
            c.execute(s)
            steps[s.split()[2] + "_s"] = round(time.time() - t, 1)
        t = time.time()
        c.execute("VACUUM ANALYZE records")
        steps["vacuum_analyze_s"] = round(time.time() - t, 1)
        n = c.execute("SELECT count(*) FROM records").fetchone()[0]
        size = c.execute("SELECT pg_size_pretty(pg_total_relation_size('records')), "
                         "pg_size_pretty(pg_relation_size('records'))").fetchone()
        idx = c.execute("SELECT indexrelname, pg_size_pretty(pg_relation_size(indexrelid)) "
                        "FROM pg_stat_user_indexes WHERE relname = 'records' ORDER BY 1").fetchall()
        defs = [r[0] for r in c.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'records' ORDER BY indexname")]
    info = {"rows": n, "steps": steps, "total_size": size[0], "heap_size": size[1],
            "index_sizes": dict(idx), "index_defs": defs}
    json.dump(info, open(os.path.join(args.results, "postgres-load.json"), "w"), indent=1)
    print(f"PostgreSQL: {n} rows; {steps}; total {size[0]}")


def load_duck(args):
    import duckdb
    t = time.time()
    con = duckdb.connect(args.db)
    con.execute(DUCK_DDL)
    con.execute("INSERT INTO records SELECT * FROM read_csv(?, header = true, columns = {"
                "'id': 'UUID', 'label': 'VARCHAR', 'status': 'VARCHAR', 'total': 'DOUBLE', "
                "'createdAt': 'TIMESTAMP', 'city': 'VARCHAR', 'qty': 'INTEGER', 'sku': 'VARCHAR', "
                "'channel': 'VARCHAR', 'seq': 'INTEGER'})", [os.path.join(args.dir, "duck.csv")])
    con.execute("CHECKPOINT")
    n = con.execute("SELECT count(*) FROM records").fetchone()[0]
    secs = round(time.time() - t, 1)
    info = {"rows": n, "load_s": secs, "version": duckdb.__version__,
            "threads": con.execute("SELECT current_setting('threads')").fetchone()[0],
            "memory_limit": con.execute("SELECT current_setting('memory_limit')").fetchone()[0],
            "db_bytes": os.path.getsize(args.db)}
    con.close()
    json.dump(info, open(os.path.join(args.results, "duckdb-load.json"), "w"), indent=1)
    print(f"DuckDB {info['version']}: {n} rows in {secs} s")


# ---------------------------------------------------------------- queries

PAGE_COLS = "id, label, status, total, createdAt, city, qty, sku, channel, seq"


def record_query(name, cls, desc, label, engine_where, pg_where, duck_where, params,
                 engine_order, pg_order, duck_order, skip, limit=20):
    dto = {"labels": [label], "where": engine_where, "limit": limit}
    doc = {"labels": [label], "predicate": engine_where, "limit": limit}
    if engine_order is not None:
        dto["orderBy"] = engine_order
        doc["order"] = engine_order
    if skip:
        dto["skip"] = skip
        doc["offset"] = skip
    p = dict(params, label=label, lim=limit, off=skip)
    # PostgreSQL: one statement, one round trip. The exact count and the page are two
    # subqueries, so the planner may answer each its best way (e.g. a bitmap count and an
    # index-ordered page that stops after LIMIT+OFFSET rows); LEFT JOIN keeps the count when
    # the page is empty.
    pg = (f"SELECT c.n, p.id, p.label, p.props FROM "
          f"(SELECT count(*) AS n FROM records WHERE label = %(label)s AND {pg_where}) c "
          f"LEFT JOIN LATERAL (SELECT id, label, props FROM records WHERE label = %(label)s AND {pg_where} "
          f"ORDER BY {pg_order} LIMIT %(lim)s OFFSET %(off)s) p ON true")
    # DuckDB: two statements (in-process, so no extra round trip): count, then the page.
    dk_count = f"SELECT count(*) FROM records WHERE label = $label AND {duck_where}"
    dk_page = (f"SELECT {PAGE_COLS} FROM records WHERE label = $label AND {duck_where} "
               f"ORDER BY {duck_order} LIMIT $lim OFFSET $off")
    return {"name": name, "cls": cls, "desc": desc, "kind": "records", "dto": dto, "doc": doc,
            "pg": pg, "pg_params": p, "duck": [dk_count, dk_page], "duck_params": p}


def agg_query(name, desc, label, dim, prop):
    dto = {"aggregate": {"n": {"fn": "count", "alias": "$record"},
                         "avg": {"fn": "avg", "field": "total", "alias": "$record"},
                         "sum": {"fn": "sum", "field": "total", "alias": "$record"}},
           "groupBy": [f"$record.{dim}"]}
    # explain shows the access path the aggregation's scan uses (same planner); explaining the
    # aggregation itself would run a search returning every record.
    doc = {"limit": 1}
    if label:
        dto["labels"] = [label]
        doc["labels"] = [label]
    where_pg = "WHERE label = %(label)s " if label else ""
    where_dk = "WHERE label = $label " if label else ""
    pg = (f"SELECT props->>'{prop}' AS g, count(*), avg((props->>'total')::numeric), "
          f"sum((props->>'total')::numeric) FROM records {where_pg}GROUP BY 1 ORDER BY 1")
    dk = f"SELECT {prop} AS g, count(*), avg(total), sum(total) FROM records {where_dk}GROUP BY 1 ORDER BY 1"
    params = {"label": label} if label else {}
    return {"name": name, "cls": "W4", "desc": desc, "kind": "agg", "dim": dim, "dto": dto, "doc": doc,
            "pg": pg, "pg_params": params, "duck": [dk], "duck_params": params}


def params_for(sql, params, style):
    """Only the parameters a statement names (DuckDB refuses unused named parameters)."""
    pat = r"%\((\w+)\)s" if style == "pg" else r"\$(\w+)"
    used = set(re.findall(pat, sql))
    return {k: v for k, v in params.items() if k in used}


def queries(meta):
    qs = _queries(meta)
    for q in qs:
        q["pg_params"] = params_for(q["pg"], q["pg_params"], "pg")
        q["duck"] = [(sql, params_for(sql, q["duck_params"], "duck")) for sql in q["duck"]]
        del q["duck_params"]
    return qs


def _queries(meta):
    city = meta["cities"][0]
    rng_lo, rng_hi = 2500, 2600        # 1 % of totals: ~0.33 % of all records within ORDER
    wide_lo, wide_hi = 1000, 6000      # 50 % of totals: ~16.7 % of all records within ORDER
    total_desc_pg = "((props->>'total')::numeric) DESC, id DESC"
    total_desc_dk = "total DESC, id DESC"
    rng_where_e = {"total": {"$gte": rng_lo, "$lt": rng_hi}}
    wide_where_e = {"total": {"$gte": wide_lo, "$lt": wide_hi}}
    tot_pg = "(props->>'total')::numeric >= %(lo)s AND (props->>'total')::numeric < %(hi)s"
    tot_dk = "total >= $lo AND total < $hi"
    return [
        record_query("eq_city", "selective", f"ORDER, city = {city!r} (default order: id desc), limit 20",
                     "ORDER", {"city": city}, "props->>'city' = %(city)s", "city = $city", {"city": city},
                     None, "id DESC", "id DESC", 0),
        record_query("range_p1", "selective",
                     f"ORDER, {rng_lo} <= total < {rng_hi}, orderBy total desc, limit 20 (page 1)",
                     "ORDER", rng_where_e, tot_pg, tot_dk, {"lo": rng_lo, "hi": rng_hi},
                     {"total": "desc"}, total_desc_pg, total_desc_dk, 0),
        record_query("range_p50", "selective",
                     f"ORDER, {rng_lo} <= total < {rng_hi}, orderBy total desc, skip 980 limit 20 (page 50)",
                     "ORDER", rng_where_e, tot_pg, tot_dk, {"lo": rng_lo, "hi": rng_hi},
                     {"total": "desc"}, total_desc_pg, total_desc_dk, 980),
        record_query("eq_status", "other", "ORDER, status = 'shipped' (default order: id desc), limit 20",
                     "ORDER", {"status": "shipped"}, "props->>'status' = %(status)s", "status = $status",
                     {"status": "shipped"}, None, "id DESC", "id DESC", 0),
        record_query("range_wide_p1", "other",
                     f"ORDER, {wide_lo} <= total < {wide_hi}, orderBy total desc, limit 20 (page 1)",
                     "ORDER", wide_where_e, tot_pg, tot_dk, {"lo": wide_lo, "hi": wide_hi},
                     {"total": "desc"}, total_desc_pg, total_desc_dk, 0),
        record_query("range_wide_p50", "other",
                     f"ORDER, {wide_lo} <= total < {wide_hi}, orderBy total desc, skip 980 limit 20 (page 50)",
                     "ORDER", wide_where_e, tot_pg, tot_dk, {"lo": wide_lo, "hi": wide_hi},
                     {"total": "desc"}, total_desc_pg, total_desc_dk, 980),
        record_query("contains", "other", "ORDER, city $contains 'ma' (case-insensitive), limit 20",
                     "ORDER", {"city": {"$contains": "ma"}}, "props->>'city' ILIKE %(pat)s", "city ILIKE $pat",
                     {"pat": "%ma%"}, None, "id DESC", "id DESC", 0),
        agg_query("w4_status_order", "ORDER: count, avg(total), sum(total) grouped by status", "ORDER",
                  "status", "status"),
        agg_query("w4_channel_all", "all labels: count, avg(total), sum(total) grouped by channel", None,
                  "channel", "channel"),
    ]


# ---------------------------------------------------------------- running one query

class Systems:
    def __init__(self, args):
        import duckdb
        import psycopg
        self.args = args
        self.engine = Engine(args.port, args.token)
        self.null = Engine(args.null_port, args.token) if args.null_port else None
        self.pg = psycopg.connect(args.dsn, autocommit=True)
        # Created before the driver pins its own thread: DuckDB's worker threads keep every CPU.
        self.duck = duckdb.connect(args.db, read_only=True)
        self.duck.execute("SELECT count(*) FROM records").fetchall()
        self.bodies = {}

    def run(self, system, q):
        """Runs q once; returns (total, page) where page is a list of ids (record queries) or
        a list of (group, count, avg, sum) tuples (aggregations)."""
        if system == "engine":
            body = self.bodies.get(q["name"])
            if body is None:
                body = self.bodies[q["name"]] = json.dumps(q["dto"], separators=(",", ":")).encode()
            d = self.engine.post("/api/v1/records/search", body)["data"]
            if q["kind"] == "records":
                return d["total"], [r["id"] for r in d["data"]]
            return d["total"], [(r[q["dim"]], r["n"], r["avg"], r["sum"]) for r in d["data"]]
        if system == "postgres":
            rows = self.pg.execute(q["pg"], q["pg_params"], prepare=True).fetchall()
            if q["kind"] == "records":
                return rows[0][0], [str(r[1]) for r in rows if r[1] is not None]
            return len(rows), [(r[0], r[1], float(r[2]), float(r[3])) for r in rows]
        if system == "duckdb":
            if q["kind"] == "records":
                n = self.duck.execute(*q["duck"][0]).fetchone()[0]
                rows = self.duck.execute(*q["duck"][1]).fetchall()
                return n, [str(r[0]) for r in rows]
            rows = self.duck.execute(*q["duck"][0]).fetchall()
            return len(rows), [(r[0], r[1], float(r[2]), float(r[3])) for r in rows]
        raise ValueError(system)

    def null_rtt(self, kind):
        if kind == "null_http":
            self.null.post("/api/v1/records/search", b'{"labels":["ORDER"],"where":{"city":"Lima"},"limit":20}')
        elif kind == "pg_select1":
            self.pg.execute("SELECT 1", prepare=True).fetchall()
        elif kind == "duck_select1":
            self.duck.execute("SELECT 1").fetchall()


def same_groups(a, b):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x[0] != y[0] or x[1] != y[1]:
            return False
        for i in (2, 3):
            if abs(x[i] - y[i]) > 1e-9 * max(1.0, abs(y[i])):
                return False
    return True


def bench(args):
    meta = json.load(open(os.path.join(args.dir, "dataset.json")))
    qs = queries(meta)
    if args.only:
        qs = [q for q in qs if q["name"] in args.only.split(",")]
    S = Systems(args)
    res_dir = args.results
    systems = ["engine", "postgres", "duckdb"]
    all_cpus = os.sched_getaffinity(0)
    loadgen = {args.loadgen_cpu}

    def pin_for(system):
        pin(all_cpus if system in ("duckdb", "duck_select1") else loadgen)

    # 1. Results must agree: exact total and the very page (ids) or groups, on every system.
    expected = {}
    checks = []
    for q in qs:
        out = {}
        for s in systems:
            pin_for(s)
            out[s] = S.run(s, q)
        tot = {s: out[s][0] for s in systems}
        ok_total = len(set(tot.values())) == 1
        if q["kind"] == "records":
            ok_page = all(out[s][1] == out["engine"][1] for s in systems)
        else:
            ok_page = all(same_groups(out[s][1], out["engine"][1]) for s in systems)
        checks.append({"query": q["name"], "totals": tot, "page_len": len(out["engine"][1]),
                       "total_equal": ok_total, "page_equal": ok_page,
                       "page": out["engine"][1] if q["kind"] == "agg" else out["engine"][1][:3]})
        if not (ok_total and ok_page):
            json.dump(checks, open(os.path.join(res_dir, "checks.json"), "w"), indent=1)
            detail = {s: (out[s][0], out[s][1][:5]) for s in systems}
            raise SystemExit(f"RESULT MISMATCH on {q['name']}: {json.dumps(detail, default=str)}")
        expected[q["name"]] = tot["engine"]
        print(f"  check {q['name']}: total {tot['engine']} on every system, page of {len(out['engine'][1])} equal",
              file=sys.stderr)
    json.dump(checks, open(os.path.join(res_dir, "checks.json"), "w"), indent=1)

    # 2. Plans: the engine's explain, PostgreSQL's EXPLAIN ANALYZE, DuckDB's EXPLAIN ANALYZE.
    pin(loadgen)
    with open(os.path.join(res_dir, "explain.jsonl"), "w") as ex, \
            open(os.path.join(res_dir, "plans.txt"), "w") as pl:
        for q in qs:
            doc = {"protocolVersion": 1, "operation": {"kind": "describe",
                                                       "describe": {"kind": "explain", "query": q["doc"]}}}
            plan = S.engine.post("/protocol/v1/execute", doc)["response"]["plan"]
            if q["kind"] == "agg":
                plan["note"] = "scope of the aggregation (labels, limit 1): every match is then decoded and grouped"
            ex.write(json.dumps({"query": q["name"], "plan": plan}) + "\n")
            pl.write(f"=== {q['name']}: {q['desc']}\n--- engine explain\n{json.dumps(plan)}\n")
            pl.write("--- PostgreSQL EXPLAIN (ANALYZE, BUFFERS)\n")
            for r in S.pg.execute("EXPLAIN (ANALYZE, BUFFERS) " + q["pg"], q["pg_params"]).fetchall():
                pl.write(r[0] + "\n")
            pl.write("--- DuckDB EXPLAIN ANALYZE\n")
            for sql, params in q["duck"]:
                for r in S.duck.execute("EXPLAIN ANALYZE " + sql, params).fetchall():
                    pl.write(r[-1] + "\n")
            pl.write("\n")

    # 3. Warm-up (not recorded).
    for q in qs:
        for s in systems:
            pin_for(s)
            for _ in range(args.warmup):
                S.run(s, q)

    # 4. Rounds: every query on every system once per round; the system order rotates.
    jsonl = open(os.path.join(res_dir, "results.jsonl"), "a")
    raw_dir = os.path.join(res_dir, "raw")
    os.makedirs(raw_dir, exist_ok=True)
    rounds_txt = open(os.path.join(res_dir, "rounds.txt"), "a")

    def measure(rnd, name, system, fn, reps, cap, check=None):
        pin_for(system)
        clients = [S.engine] + ([S.null] if S.null else [])
        lat, bad, reopened = run_cell(fn, reps, args.min_reps, cap, check, clients)
        if reopened:
            raise SystemExit(f"{name} on {system}: an HTTP connection was re-opened during a timed run")
        if bad:
            raise SystemExit(f"{name} on {system}: total differed from the checked total in {bad} of {len(lat)} runs")
        r = {"round": rnd, "query": name, "system": system,
             **cell_stats(lat, os.path.join(raw_dir, f"r{rnd}-{name}-{system}.txt")),
             "total": check, "totals_checked": len(lat) if check is not None else 0}
        jsonl.write(json.dumps(r) + "\n")
        jsonl.flush()
        print(f"    r{rnd} {name:16s} {system:12s} n={r['reps']:4d} median={r['median_us'] / 1000:9.3f} ms "
              f"p99={r['p99_us'] / 1000:9.3f} ms qps={r['qps']:9.1f}", file=sys.stderr)

    for rnd in range(1, args.rounds + 1):
        s0 = open("/proc/stat").readline()
        rounds_txt.write(f"round {rnd} start {time.strftime('%Y-%m-%dT%H:%M:%S')} loadavg {open('/proc/loadavg').read().split()[:3]}\n")
        print(f"round {rnd}/{args.rounds}", file=sys.stderr)
        # Client/transport round trips, as context for the per-query numbers.
        for kind in (["null_http"] if S.null else []) + ["pg_select1", "duck_select1"]:
            measure(rnd, "rtt", kind, lambda k=kind: S.null_rtt(k), args.reps_selective, args.cell_seconds)
        for qi, q in enumerate(qs):
            order = systems[(rnd + qi) % 3:] + systems[:(rnd + qi) % 3]
            reps = {"selective": args.reps_selective, "other": args.reps_other, "W4": args.reps_w4}[q["cls"]]
            for s in order:
                measure(rnd, q["name"], s, lambda s=s, q=q: S.run(s, q)[0], reps, args.cell_seconds,
                        check=expected[q["name"]])
        rounds_txt.write(f"round {rnd} cpu: {cpu_split(s0, open('/proc/stat').readline())}\n")
        rounds_txt.flush()
    # Which plans PostgreSQL's plan cache used for the prepared statements (custom vs generic).
    with open(os.path.join(res_dir, "postgres-prepared.txt"), "w") as f:
        for r in S.pg.execute("SELECT generic_plans, custom_plans, statement FROM pg_prepared_statements "
                              "ORDER BY statement").fetchall():
            f.write(f"generic_plans={r[0]} custom_plans={r[1]}: {r[2]}\n")
    meta_out = {"queries": [{k: q[k] for k in ("name", "cls", "desc", "dto", "pg", "duck")} for q in qs],
                "rounds": args.rounds, "reps": {"selective": args.reps_selective, "other": args.reps_other,
                                                 "W4": args.reps_w4, "min": args.min_reps},
                "cell_seconds": args.cell_seconds, "warmup": args.warmup, "loadgen_cpu": args.loadgen_cpu,
                "records": meta["records"], "eq_city": meta["cities"][0]}
    json.dump(meta_out, open(os.path.join(res_dir, "bench-meta.json"), "w"), indent=1)


def profile(args):
    """Runs one query on the engine back to back for --seconds (perf samples the engine)."""
    meta = json.load(open(os.path.join(args.dir, "dataset.json")))
    q = [q for q in queries(meta) if q["name"] == args.query][0]
    e = Engine(args.port, args.token)
    body = json.dumps(q["dto"], separators=(",", ":")).encode()
    n, t_end = 0, time.time() + args.seconds
    while time.time() < t_end:
        e.post("/api/v1/records/search", body)
        n += 1
    print(f"profile {args.query}: {n} runs in {args.seconds} s", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--records", type=int, required=True)
    g.add_argument("--dir", required=True)
    x = sub.add_parser("export")
    x.add_argument("--dir", required=True)
    x.add_argument("--port", type=int, required=True)
    x.add_argument("--token", required=True)
    p = sub.add_parser("load-pg")
    p.add_argument("--dir", required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--results", required=True)
    d = sub.add_parser("load-duck")
    d.add_argument("--dir", required=True)
    d.add_argument("--db", required=True)
    d.add_argument("--results", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--dir", required=True)
    b.add_argument("--results", required=True)
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--null-port", type=int, default=0)
    b.add_argument("--token", required=True)
    b.add_argument("--dsn", required=True)
    b.add_argument("--db", required=True)
    b.add_argument("--rounds", type=int, default=3)
    b.add_argument("--reps-selective", type=int, default=500)
    b.add_argument("--reps-other", type=int, default=50)
    b.add_argument("--reps-w4", type=int, default=20)
    b.add_argument("--min-reps", type=int, default=5)
    b.add_argument("--cell-seconds", type=float, default=10.0)
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--loadgen-cpu", type=int, default=0)
    b.add_argument("--only", default="")
    f = sub.add_parser("profile")
    f.add_argument("--dir", required=True)
    f.add_argument("--port", type=int, required=True)
    f.add_argument("--token", required=True)
    f.add_argument("--query", required=True)
    f.add_argument("--seconds", type=float, default=5)
    a = ap.parse_args()
    {"gen": gen, "export": export, "load-pg": load_pg, "load-duck": load_duck, "bench": bench,
     "profile": profile}[a.cmd](a)


if __name__ == "__main__":
    main()
