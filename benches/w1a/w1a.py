#!/usr/bin/env python3
"""W1a (nested bulk import) and W9 (CSV export): dataset, loads, checks and measurement for
benches/run-w1a-w9.sh. Runs in the benchmark's venv (duckdb, ladybug, psycopg).

  w1a.py gen         --dir D --docs N        orders.jsonl (one nested order document a line)
                                             and dataset.json (the exact expected counts)
  w1a.py load-engine --mode rest|ingest|cli ...   loads orders.jsonl into a running, empty
                     engine (REST import, Protocol v1 `ingest`, or the `engine import` loader),
                     BATCH documents per request, CONC requests in flight; checks the counts
  w1a.py load-pg     ...   flattens in Python, COPY into records/edges (JSONB), indexes
  w1a.py load-duck   ...   flattens in DuckDB SQL (read_json + unnest), typed tables, indexes
  w1a.py load-lb     ...   flattens in Python, LadybugDB COPY FROM CSV (node and rel tables)
  w1a.py raw         ...   runs the raw redb loop (benches/raw_redb_load.rs) and checks its counts
  w1a.py w9          ...   CSV export, 1,000 records per request: engine REST export against
                           PostgreSQL `COPY (SELECT ... LIMIT 1000 OFFSET k) TO STDOUT`

Every load appends one JSON line to --out: round, system, seconds (raw file to queryable),
records, relationships, records_per_s, bytes on disk, and its steps. Each load starts from an
empty store and is checked (records per label, relationships per (parent label, child label))
against dataset.json before its line is written.

The dataset (seeded): document i (1..N) is an ORDER {orderNo i, createdAt (time-ordered with i),
status, total} holding a CUSTOMER object {customerNo, name, email, country} and an ITEM array of
4 objects {line, sku, qty, price}; every 8th item (counted over the file) holds a PRODUCT object
{productNo, name, category}. Imported as the engine's nested import defines it (docs/bulk.md:
every object is its own record labelled by its key, linked parent -> child, no dedupe), a
document is 6 or 7 records and 5 or 6 relationships: N = 100,000 gives 650,000 records (100,000
ORDER, 100,000 CUSTOMER, 400,000 ITEM, 50,000 PRODUCT) and 550,000 relationships.
"""
import argparse
import csv
import datetime as dt
import itertools
import json
import multiprocessing as mp
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from benchlib import Engine, disk_bytes, pct, pin  # noqa: E402

SEED = 20261122
LABEL = "ORDER"
PRODUCT_EVERY = 8
REL_TYPE = "__SERVICE__RELATION__DEFAULT__"  # the engine's default nesting type (docs/bulk.md)
STATUSES = ["pending", "paid", "shipped", "delivered", "cancelled"]
COUNTRIES = ["DE", "FR", "GB", "IT", "ES", "NL", "BE", "AT", "CH", "PL", "SE", "NO", "DK", "FI", "PT", "IE"]
CATEGORIES = ["books", "toys", "garden", "kitchen", "sports", "music", "video", "tools", "beauty", "office"]
# Properties per label, in column order: (name, DuckDB type, LadybugDB type).
LABEL_PROPS = {
    "ORDER": [("orderNo", "BIGINT", "INT64"), ("createdAt", "TIMESTAMP", "TIMESTAMP"),
              ("status", "VARCHAR", "STRING"), ("total", "DOUBLE", "DOUBLE")],
    "CUSTOMER": [("customerNo", "BIGINT", "INT64"), ("name", "VARCHAR", "STRING"),
                 ("email", "VARCHAR", "STRING"), ("country", "VARCHAR", "STRING")],
    "ITEM": [("line", "BIGINT", "INT64"), ("sku", "VARCHAR", "STRING"), ("qty", "BIGINT", "INT64"),
             ("price", "DOUBLE", "DOUBLE")],
    "PRODUCT": [("productNo", "BIGINT", "INT64"), ("name", "VARCHAR", "STRING"),
                ("category", "VARCHAR", "STRING")],
}
# (parent label, child label) of every link, as "PARENT->CHILD".
PAIRS = ["ORDER->CUSTOMER", "ORDER->ITEM", "ITEM->PRODUCT"]


def money(cents):
    return cents // 100 if cents % 100 == 0 else cents / 100


def emit(args, system, secs, records, rels, nbytes, **extra):
    r = {"round": args.round, "kind": "load", "system": system, "seconds": round(secs, 4), "records": records,
         "relationships": rels, "records_per_s": records / secs, "bytes": nbytes, **extra}
    with open(args.out, "a") as f:
        f.write(json.dumps(r) + "\n")
    print(f"    r{args.round} {system:14s} {records:,} records + {rels:,} relationships in {secs:8.2f} s "
          f"= {records / secs:10,.0f} records/s" + (f"  {extra['steps']}" if extra.get("steps") else ""),
          file=sys.stderr)


def check(system, meta, records, pairs):
    """records: {label: n}; pairs: {"PARENT->CHILD": n}. Ends the run on any difference."""
    want_r = meta["records"]
    want_p = meta["relationships"]
    got_r = {k: v for k, v in records.items() if v}
    got_p = {k: v for k, v in pairs.items() if v}
    if got_r != {k: v for k, v in want_r.items() if v} or got_p != {k: v for k, v in want_p.items() if v}:
        raise SystemExit(f"{system}: COUNT MISMATCH: records {got_r} (expected {want_r}); "
                         f"relationships {got_p} (expected {want_p})")


# ---------------------------------------------------------------- dataset

def gen(args):
    rng = random.Random(SEED)
    n = args.docs
    os.makedirs(args.dir, exist_ok=True)
    t0 = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    span = 365 * 86400
    customers = max(1, n // 5)
    records = {label: 0 for label in LABEL_PROPS}
    pairs = {p: 0 for p in PAIRS}
    item_no = 0
    path = os.path.join(args.dir, "orders.jsonl")
    with open(path, "w") as f:
        for i in range(1, n + 1):
            c = rng.randint(1, customers)
            items, cents = [], 0
            for line in range(1, 5):
                qty, price = rng.randint(1, 5), rng.randint(50, 20_000)
                cents += qty * price
                item = {"line": line, "sku": f"SKU-{rng.randrange(100_000):05d}", "qty": qty, "price": money(price)}
                if item_no % PRODUCT_EVERY == 0:
                    p = rng.randint(1, 20_000)
                    item["PRODUCT"] = {"productNo": p, "name": f"Product {p}",
                                       "category": CATEGORIES[rng.randrange(len(CATEGORIES))]}
                    records["PRODUCT"] += 1
                    pairs["ITEM->PRODUCT"] += 1
                item_no += 1
                items.append(item)
            created = t0 + dt.timedelta(seconds=(i - 1) * span // n)
            doc = {"orderNo": i, "createdAt": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "status": STATUSES[rng.randrange(len(STATUSES))], "total": money(cents),
                   "CUSTOMER": {"customerNo": c, "name": f"Customer {c}", "email": f"customer{c}@example.com",
                                "country": COUNTRIES[rng.randrange(len(COUNTRIES))]},
                   "ITEM": items}
            f.write(json.dumps(doc, separators=(",", ":")) + "\n")
            records["ORDER"] += 1
            records["CUSTOMER"] += 1
            records["ITEM"] += 4
            pairs["ORDER->CUSTOMER"] += 1
            pairs["ORDER->ITEM"] += 4
    meta = {"seed": SEED, "docs": n, "label": LABEL, "product_every": PRODUCT_EVERY, "records": records,
            "records_total": sum(records.values()), "relationships": pairs,
            "relationships_total": sum(pairs.values()), "rel_type": REL_TYPE, "file": path,
            "file_bytes": os.path.getsize(path),
            "label_props": {k: [p[0] for p in v] for k, v in LABEL_PROPS.items()}}
    json.dump(meta, open(os.path.join(args.dir, "dataset.json"), "w"), indent=1)
    print(f"generated {n:,} documents ({meta['records_total']:,} records, {meta['relationships_total']:,} "
          f"relationships, {meta['file_bytes'] / 1e6:,.1f} MB) into {path}", file=sys.stderr)


class Uuid7:
    """Time-ordered ids for the peers (the engine makes its own): UUIDv7 text, the Unix
    milliseconds of the load's start, then a counter in the 74 random bits, so each id is larger
    than the one before (RFC 9562's monotonic counter method)."""

    def __init__(self):
        self.ms = time.time_ns() // 1_000_000
        self.n = random.getrandbits(40)

    def __call__(self):
        self.n += 1
        v = (self.ms << 80) | (0x7 << 76) | ((self.n >> 62) & 0xFFF) << 64 | (0b10 << 62) | (self.n & ((1 << 62) - 1))
        h = f"{v:032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def flatten_file(path, label, on_record, on_edge):
    """The engine's nested import, in Python: in each document, scalars and arrays of scalars
    are properties, an object under key K is a child record labelled K, an array of objects one
    child per element, each child linked parent -> child. on_record(id, label, props), parents
    before children; on_edge(id, src, dst, src_label, dst_label)."""
    new_id = Uuid7()

    def record(lbl, obj):
        rid = new_id()
        props, kids = {}, []
        for k, v in obj.items():
            if isinstance(v, dict):
                kids.append((k, [v]))
            elif isinstance(v, list) and v and isinstance(v[0], dict):
                kids.append((k, v))
            elif v is not None:
                props[k] = v
        on_record(rid, lbl, props)
        for k, objs in kids:
            for o in objs:
                on_edge(new_id(), rid, record(k, o), lbl, k)
        return rid

    with open(path) as f:
        for line in f:
            if line.strip():
                record(label, json.loads(line))


# ---------------------------------------------------------------- engine

def engine_counts(e):
    """(records per label, relationships per "PARENT->CHILD") as the engine reports them."""
    records = e.post("/api/v1/labels/search", {})["data"]
    schema = e.post("/protocol/v1/execute", {"protocolVersion": 1, "operation": {
        "kind": "describe", "describe": {"kind": "schema"}}})["response"]["schema"]
    pairs = {}
    for r in schema.get("relationships", []):
        if r["type"] != REL_TYPE:
            raise SystemExit(f"engine: unexpected relationship type {r}")
        pairs[f"{r['sourceLabel']}->{r['targetLabel']}"] = r["count"]
    return records, pairs


def post_batches(args, lines):
    """Sends the documents in batches of args.batch, args.conc requests in flight (one
    keep-alive connection per thread). Returns (records, relationships, requests) as answered."""
    lab = json.dumps(LABEL).encode()
    if args.mode == "rest":
        path, ok = "/api/v1/records/import/json", (201,)
        head, tail = b'{"label":' + lab + b',"data":[', b"]}"
    else:
        path, ok = "/protocol/v1/execute", (200,)
        head = (b'{"protocolVersion":1,"operation":{"kind":"ingest","ingest":{"kind":"documents","label":'
                + lab + b',"documents":[')
        tail = b"]}}}"
    starts = list(range(0, len(lines), args.batch))
    next_batch = itertools.count()
    lock = threading.Lock()
    tot = {"records": 0, "relationships": 0}
    errors = []

    def worker():
        e = Engine(args.port, args.token)
        while not errors:
            i = next(next_batch)
            if i >= len(starts):
                return
            body = head + b",".join(lines[starts[i]:starts[i] + args.batch]) + tail
            try:
                ans = e.post(path, body, ok=ok)
            except BaseException as x:  # Engine.post ends with SystemExit on a non-2xx answer
                errors.append(f"batch {i} (documents {starts[i]}..): {x}")
                return
            if args.mode == "rest":
                n, r = ans["data"]["count"], 0
            else:
                n, r = ans["response"]["count"], ans["response"]["relationships"]
            with lock:
                tot["records"] += n
                tot["relationships"] += r

    threads = [threading.Thread(target=worker) for _ in range(args.conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"engine {args.mode} load failed: {errors[0]}")
    return tot["records"], tot["relationships"], len(starts)


def load_engine(args):
    meta = json.load(open(args.meta))
    pin({args.loadgen_cpu})
    e = Engine(args.port, args.token)
    if any(engine_counts(e)[0].values()):
        raise SystemExit("engine: the store is not empty before the load")
    t0 = time.perf_counter()
    if args.mode == "cli":
        r = subprocess.run([args.engine_bin, "import", "--label", LABEL, args.file, "--url",
                            f"http://127.0.0.1:{args.port}", "--token", args.token, "--batch-size", str(args.batch),
                            "--concurrency", str(args.conc), "--quiet"], capture_output=True, text=True)
        secs = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"engine import failed ({r.returncode}): {r.stdout[-2000:]} {r.stderr[-2000:]}")
        m = re.search(r" as (\d+) record\(s\) and (\d+) relationship", r.stdout)
        if not m:
            raise SystemExit(f"engine import: no summary in {r.stdout!r}")
        answered = {"records": int(m[1]), "relationships": int(m[2]), "summary": r.stdout.strip()}
        requests = -(-meta["docs"] // args.batch)
    else:
        with open(args.file, "rb") as f:
            lines = [l for l in f.read().split(b"\n") if l.strip()]
        n, rels, requests = post_batches(args, lines)
        secs = time.perf_counter() - t0
        answered = {"records": n, "relationships": rels}
    records, pairs = engine_counts(e)
    check(f"engine {args.mode}", meta, records, pairs)
    if answered["records"] != meta["records_total"]:
        raise SystemExit(f"engine {args.mode}: the answers counted {answered['records']} records, "
                         f"expected {meta['records_total']}")
    # Size once the engine has checkpointed (after 500 ms idle it writes redb and empties its redo log).
    wal = os.path.join(args.data_dir, "wal.log")
    for _ in range(150):
        if not os.path.exists(wal) or os.path.getsize(wal) == 0:
            break
        time.sleep(0.1)
    emit(args, f"engine_{args.mode}", secs, meta["records_total"], meta["relationships_total"], disk_bytes(args.data_dir),
         requests=requests, batch=args.batch, conc=args.conc, answered=answered)


# ---------------------------------------------------------------- PostgreSQL

PG_DDL = [
    "CREATE TABLE records (id uuid NOT NULL, label text NOT NULL, props jsonb NOT NULL)",
    "CREATE TABLE edges (id uuid NOT NULL, src uuid NOT NULL, dst uuid NOT NULL, type text NOT NULL)",
]


def pg_indexes():
    """What the engine keeps for the same data: the record by id, the label index (label, id),
    one property-index entry per property of each record (one partial expression index per
    property name, typed jsonb order), the relationship by id and adjacency both ways."""
    names = sorted({p[0] for props in LABEL_PROPS.values() for p in props})
    return (["ALTER TABLE records ADD PRIMARY KEY (id)",
             "CREATE INDEX records_label ON records (label, id)"]
            + [f"CREATE INDEX records_p_{n} ON records (label, (props->'{n}')) WHERE props ? '{n}'" for n in names]
            + ["ALTER TABLE edges ADD PRIMARY KEY (id)",
               "CREATE INDEX edges_out ON edges (src, type, dst)",
               "CREATE INDEX edges_in ON edges (dst, type, src)"])


def load_pg(args):
    import psycopg
    meta = json.load(open(args.meta))
    os.makedirs(args.tmp, exist_ok=True)
    rec_path, edge_path = os.path.join(args.tmp, "pg-records.tsv"), os.path.join(args.tmp, "pg-edges.tsv")
    steps = {}
    with psycopg.connect(args.dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS records, edges")
        c.execute("CHECKPOINT")
        t0 = time.perf_counter()
        with open(rec_path, "w") as rf, open(edge_path, "w") as ef:
            def on_record(rid, label, props):
                rf.write(f"{rid}\t{label}\t{json.dumps(props, separators=(',', ':')).replace(chr(92), chr(92) * 2)}\n")

            def on_edge(eid, src, dst, _sl, _dl):
                ef.write(f"{eid}\t{src}\t{dst}\t{REL_TYPE}\n")

            flatten_file(args.file, LABEL, on_record, on_edge)
        t1 = time.perf_counter()
        steps["flatten_s"] = round(t1 - t0, 3)
        for s in PG_DDL:
            c.execute(s)
        for table, cols, path in (("records", "id, label, props", rec_path), ("edges", "id, src, dst, type", edge_path)):
            t = time.perf_counter()
            with c.cursor() as cur, cur.copy(f"COPY {table} ({cols}) FROM STDIN") as cp, open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    cp.write(chunk)
            steps[f"copy_{table}_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        for s in pg_indexes():
            c.execute(s)
        steps["indexes_s"] = round(time.perf_counter() - t, 3)
        secs = time.perf_counter() - t0
        records = dict(c.execute("SELECT label, count(*) FROM records GROUP BY 1").fetchall())
        pairs = {f"{a}->{b}": n for a, b, n in c.execute(
            "SELECT s.label, d.label, count(*) FROM edges e JOIN records s ON s.id = e.src "
            "JOIN records d ON d.id = e.dst GROUP BY 1, 2").fetchall()}
        nbytes = c.execute("SELECT pg_total_relation_size('records') + pg_total_relation_size('edges')").fetchone()[0]
    os.remove(rec_path)
    os.remove(edge_path)
    check("PostgreSQL", meta, records, pairs)
    emit(args, "postgres", secs, meta["records_total"], meta["relationships_total"], nbytes, steps=steps,
         indexes=len(pg_indexes()))


# ---------------------------------------------------------------- DuckDB

def duck_statements(path):
    """Flatten in SQL: read the JSON Lines file with typed columns, unnest the items, give every
    record and link a UUIDv7, then one typed table per label and an edges table, with the
    engine's indexes (id, every property, adjacency both ways)."""
    def struct(label, extra=""):
        return "STRUCT(" + ", ".join(f"{n} {t}" for n, t, _ in LABEL_PROPS[label]) + extra + ")"
    cols = ", ".join([f"{n}: '{t}'" for n, t, _ in LABEL_PROPS["ORDER"]]
                     + [f"CUSTOMER: '{struct('CUSTOMER')}'", f"ITEM: '{struct('ITEM', ', PRODUCT ' + struct('PRODUCT'))}[]'"])
    sel = lambda label, src: ", ".join(f"{src}{n} AS {n}" for n, _, _ in LABEL_PROPS[label])  # noqa: E731
    quoted = path.replace("'", "''")
    st = [
        f"CREATE TEMP TABLE src AS SELECT row_number() OVER () AS d, * FROM read_json('{quoted}', "
        f"format = 'newline_delimited', columns = {{{cols}}})",
        f"CREATE TEMP TABLE o AS SELECT d, uuidv7() AS id, {sel('ORDER', '')} FROM src",
        f"CREATE TEMP TABLE c AS SELECT d, uuidv7() AS id, {sel('CUSTOMER', 'CUSTOMER.')} FROM src",
        f"CREATE TEMP TABLE i AS SELECT d, uuidv7() AS id, {sel('ITEM', 'it.')}, it.PRODUCT AS p "
        "FROM (SELECT d, unnest(ITEM) AS it FROM src)",
        f"CREATE TEMP TABLE p AS SELECT id AS item, uuidv7() AS id, {sel('PRODUCT', 'p.')} FROM i WHERE p IS NOT NULL",
    ]
    for label, tmp in (("ORDER", "o"), ("CUSTOMER", "c"), ("ITEM", "i"), ("PRODUCT", "p")):
        names = ", ".join(n for n, _, _ in LABEL_PROPS[label])
        st.append(f'CREATE TABLE "{label}" (id UUID PRIMARY KEY, '
                  + ", ".join(f"{n} {t}" for n, t, _ in LABEL_PROPS[label]) + ")")
        st.append(f'INSERT INTO "{label}" SELECT id, {names} FROM {tmp}')
    st += [
        "CREATE TABLE edges (id UUID PRIMARY KEY, src UUID NOT NULL, dst UUID NOT NULL, type VARCHAR NOT NULL)",
        f"INSERT INTO edges SELECT uuidv7(), o.id, c.id, '{REL_TYPE}' FROM o JOIN c USING (d) "
        f"UNION ALL SELECT uuidv7(), o.id, i.id, '{REL_TYPE}' FROM o JOIN i USING (d) "
        f"UNION ALL SELECT uuidv7(), item, id, '{REL_TYPE}' FROM p",
    ]
    for label, props in LABEL_PROPS.items():
        st += [f'CREATE INDEX "{label}_{n}" ON "{label}" ({n})' for n, _, _ in props]
    st += ["CREATE INDEX edges_out ON edges (src, type, dst)", "CREATE INDEX edges_in ON edges (dst, type, src)",
           "DROP TABLE src", "DROP TABLE o", "DROP TABLE c", "DROP TABLE i", "DROP TABLE p", "CHECKPOINT"]
    return st


def load_duck(args):
    import duckdb
    meta = json.load(open(args.meta))
    t0 = time.perf_counter()
    c = duckdb.connect(args.db)
    steps = {}
    for s in duck_statements(args.file):
        t = time.perf_counter()
        c.execute(s)
        key = "indexes_s" if s.startswith("CREATE INDEX") else ("flatten_s" if "TEMP" in s else "tables_s")
        steps[key] = steps.get(key, 0) + time.perf_counter() - t
    secs = time.perf_counter() - t0
    steps = {k: round(v, 3) for k, v in steps.items()}
    records = {label: c.execute(f'SELECT count(*) FROM "{label}"').fetchone()[0] for label in LABEL_PROPS}
    pairs = {}
    for a, b in (p.split("->") for p in PAIRS):
        pairs[f"{a}->{b}"] = c.execute(f'SELECT count(*) FROM edges e JOIN "{a}" s ON s.id = e.src '
                                       f'JOIN "{b}" t ON t.id = e.dst').fetchone()[0]
    version = duckdb.__version__
    c.close()
    check("DuckDB", meta, records, pairs)
    emit(args, "duckdb", secs, meta["records_total"], meta["relationships_total"], disk_bytes(args.db), steps=steps,
         version=version)


# ---------------------------------------------------------------- LadybugDB

def load_lb(args):
    import ladybug
    meta = json.load(open(args.meta))
    os.makedirs(args.tmp, exist_ok=True)
    steps = {}
    t0 = time.perf_counter()
    node_files = {label: open(os.path.join(args.tmp, f"lb-{label}.csv"), "w", newline="") for label in LABEL_PROPS}
    node_csv = {label: csv.writer(f) for label, f in node_files.items()}
    edge_files = {p: open(os.path.join(args.tmp, f"lb-{p.replace('->', '-')}.csv"), "w", newline="") for p in PAIRS}
    edge_csv = {p: csv.writer(f) for p, f in edge_files.items()}
    cols = {label: [n for n, _, _ in props] for label, props in LABEL_PROPS.items()}

    def on_record(rid, label, props):
        node_csv[label].writerow([rid] + [props.get(n, "") for n in cols[label]])

    def on_edge(_eid, src, dst, sl, dl):
        edge_csv[f"{sl}->{dl}"].writerow([src, dst])

    flatten_file(args.file, LABEL, on_record, on_edge)
    for f in list(node_files.values()) + list(edge_files.values()):
        f.close()
    steps["flatten_s"] = round(time.perf_counter() - t0, 3)
    t = time.perf_counter()
    db = ladybug.Database(args.db, buffer_pool_size=args.lb_buffer_mb << 20)
    c = ladybug.Connection(db)
    for label, props in LABEL_PROPS.items():
        c.execute(f"CREATE NODE TABLE `{label}`(id UUID, " + ", ".join(f"{n} {t}" for n, _, t in props)
                  + ", PRIMARY KEY(id))")
    c.execute("CREATE REL TABLE LINK(" + ", ".join(
        f"FROM `{a}` TO `{b}`" for a, b in (p.split("->") for p in PAIRS)) + ")")
    for label in LABEL_PROPS:
        if meta["records"][label]:
            c.execute(f'COPY `{label}` FROM "{node_files[label].name}"')
    for p in PAIRS:
        if meta["relationships"][p]:
            a, b = p.split("->")
            c.execute(f'COPY LINK FROM "{edge_files[p].name}" (from="{a}", to="{b}")')
    c.execute("CHECKPOINT")
    steps["copy_s"] = round(time.perf_counter() - t, 3)
    secs = time.perf_counter() - t0
    records = {label: c.execute(f"MATCH (n:`{label}`) RETURN count(*)").get_next()[0] for label in LABEL_PROPS}
    pairs = {}
    for p in PAIRS:
        a, b = p.split("->")
        pairs[p] = c.execute(f"MATCH (:`{a}`)-[:LINK]->(:`{b}`) RETURN count(*)").get_next()[0]
    c.close()
    db.close()
    for f in list(node_files.values()) + list(edge_files.values()):
        os.remove(f.name)
    check("LadybugDB", meta, records, pairs)
    emit(args, "ladybug", secs, meta["records_total"], meta["relationships_total"], disk_bytes(args.db), steps=steps,
         version=ladybug.__version__, buffer_pool_mb=args.lb_buffer_mb)


# ---------------------------------------------------------------- the raw redb loop

def raw(args):
    meta = json.load(open(args.meta))
    r = subprocess.run([args.raw_bin, "--file", args.file, "--dir", args.db, "--batch", str(args.batch),
                        "--label", LABEL], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"raw redb loop failed ({r.returncode}): {r.stdout[-2000:]} {r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    check("raw redb loop", meta, out["records_by_label"], out["relationships_by_pair"])
    emit(args, "raw", out["write_seconds"], meta["records_total"], meta["relationships_total"], out["db_bytes"],
         steps={"prepare_s": round(out["prepare_seconds"], 3), "write_s": round(out["write_seconds"], 3)},
         keys=out["keys"], commits=out["commits"])


# ---------------------------------------------------------------- W9: CSV export

def pg_export_sql(skip, limit):
    cols = ", ".join(f"props->>'{n}' AS \"{n}\"" for n in sorted(p[0] for p in LABEL_PROPS[LABEL]))
    return (f'COPY (SELECT id AS "__id", label AS "__label", {cols} FROM records WHERE label = \'{LABEL}\' '
            f"ORDER BY id LIMIT {limit} OFFSET {skip}) TO STDOUT WITH (FORMAT csv, HEADER)")


def engine_export_body(skip, limit):
    return json.dumps({"labels": [LABEL], "skip": skip, "limit": limit}, separators=(",", ":")).encode()


def export_page(system, conn, skip, limit):
    """One export request; returns the CSV text."""
    if system == "engine":
        return conn.post("/api/v1/records/export/csv", engine_export_body(skip, limit))["data"]["fileContent"]
    with conn.cursor() as cur, cur.copy(pg_export_sql(skip, limit)) as cp:
        return b"".join(bytes(b) for b in cp).decode()


def csv_rows(text):
    rows = list(csv.reader(text.splitlines()))
    return rows[0], rows[1:]


def w9_check(args, meta, pages):
    """Untimed: every page on both systems has `limit` rows and the same header; over all pages
    both systems export the same rows (every cell but __id, compared as multisets)."""
    import psycopg
    e = Engine(args.port, args.token)
    pg = psycopg.connect(args.dsn, autocommit=True)
    got = {}
    for system, conn in (("engine", e), ("postgres", pg)):
        header, all_rows = None, []
        for p in range(pages):
            h, rows = csv_rows(export_page(system, conn, p * args.limit, args.limit))
            if len(rows) != args.limit:
                raise SystemExit(f"W9 {system}: page {p} has {len(rows)} rows, expected {args.limit}")
            if header is None:
                header = h
            elif h != header:
                raise SystemExit(f"W9 {system}: page {p} header {h} != {header}")
            all_rows += [tuple(r[1:]) for r in rows]
        got[system] = (header, sorted(all_rows))
    pg.close()
    if got["engine"][0] != got["postgres"][0]:
        raise SystemExit(f"W9: headers differ: engine {got['engine'][0]}, PostgreSQL {got['postgres'][0]}")
    if got["engine"][1] != got["postgres"][1]:
        diff = next(i for i, (a, b) in enumerate(zip(*(got[s][1] for s in ("engine", "postgres")))) if a != b)
        raise SystemExit(f"W9: exported rows differ, e.g. engine {got['engine'][1][diff]} vs PostgreSQL "
                         f"{got['postgres'][1][diff]}")
    return {"pages": pages, "rows": len(got["engine"][1]), "header": got["engine"][0],
            "sample": got["engine"][1][:2]}


def w9_worker(args, system, seed, start, q):
    """One client: exports random pages back to back from `start` for args.duration seconds."""
    try:
        import psycopg
        conn = Engine(args.port, args.token) if system == "engine" else psycopg.connect(args.dsn, autocommit=True)
        rng = random.Random(seed)
        export_page(system, conn, 0, 1)  # connect and warm the path, untimed
        start.wait()
        lat, errors, nbytes = [], 0, 0
        t_end = time.perf_counter() + args.duration
        while time.perf_counter() < t_end:
            skip = rng.randrange(args.pages) * args.limit
            t0 = time.perf_counter_ns()
            try:
                text = export_page(system, conn, skip, args.limit)
                nbytes += len(text)
            except BaseException:  # counted, and the connection re-opened
                errors += 1
                conn = Engine(args.port, args.token) if system == "engine" else psycopg.connect(args.dsn, autocommit=True)
                continue
            lat.append((time.perf_counter_ns() - t0) / 1000.0)
        q.put({"lat": lat, "errors": errors, "bytes": nbytes})
    except BaseException as x:
        q.put({"error": repr(x)})


def w9_cell(args, rnd, system, conc, record=True):
    ctx = mp.get_context("fork")
    start, q = ctx.Event(), ctx.Queue()
    # Both systems get the same pages in the same order per (round, concurrency, client).
    procs = [ctx.Process(target=w9_worker, args=(args, system, rnd * 100_003 + conc * 1_009 + i, start, q))
             for i in range(conc)]
    for p in procs:
        p.start()
    time.sleep(0.5)
    t0 = time.perf_counter()
    start.set()
    parts = [q.get() for _ in procs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    bad = [p["error"] for p in parts if "error" in p]
    if bad:
        raise SystemExit(f"W9 {system} c={conc}: client failed: {bad[0]}")
    lat = sorted(v for p in parts for v in p["lat"])
    errors = sum(p["errors"] for p in parts)
    r = {"round": rnd, "kind": "w9", "system": system, "conc": conc, "requests": len(lat), "seconds": args.duration,
         "req_per_s": len(lat) / args.duration, "records_per_s": len(lat) * args.limit / args.duration,
         "p50_ms": pct(lat, 0.5) / 1000 if lat else None, "p99_ms": pct(lat, 0.99) / 1000 if lat else None,
         "mean_ms": statistics.fmean(lat) / 1000 if lat else None, "errors": errors,
         "bytes_per_request": sum(p["bytes"] for p in parts) / max(1, len(lat)), "wall_s": round(wall, 2)}
    if record:
        with open(args.out, "a") as f:
            f.write(json.dumps(r) + "\n")
        print(f"    r{rnd} W9 {system:8s} c={conc:<3d} {r['req_per_s']:8.1f} req/s  p50={r['p50_ms']:.2f} ms  "
              f"p99={r['p99_ms']:.2f} ms  errors={errors}", file=sys.stderr)
        if errors:
            raise SystemExit(f"W9 {system} c={conc}: {errors} failed requests")


def w9(args):
    meta = json.load(open(args.meta))
    pin({args.loadgen_cpu})
    args.pages = meta["records"][LABEL] // args.limit
    if args.pages < 1:
        raise SystemExit(f"W9 needs at least {args.limit} {LABEL} records")
    info = w9_check(args, meta, args.pages)
    info.update({"limit": args.limit, "engine_request": "POST /api/v1/records/export/csv "
                 + engine_export_body("SKIP", args.limit).decode().replace('"SKIP"', "SKIP"),
                 "postgres_statement": pg_export_sql("SKIP", args.limit)})
    json.dump(info, open(os.path.join(args.results, "w9-check.json"), "w"), indent=1)
    print(f"  W9 check: {info['rows']:,} rows over {args.pages} pages of {args.limit}, equal on both systems "
          f"(every cell but __id)", file=sys.stderr)
    concs = [int(c) for c in args.conc.split(",")]
    systems = ["engine", "postgres"]
    if args.warmup > 0:
        warm = argparse.Namespace(**{**vars(args), "duration": args.warmup})
        for s in systems:
            w9_cell(warm, 0, s, max(concs), record=False)
    for rnd in range(1, args.rounds + 1):
        for c in concs:
            for s in (systems if rnd % 2 else systems[::-1]):
                w9_cell(args, rnd, s, c)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--dir", required=True)
    g.add_argument("--docs", type=int, required=True)

    def common(p, batch=False):
        p.add_argument("--file", required=True)
        p.add_argument("--meta", required=True)
        p.add_argument("--round", type=int, required=True)
        p.add_argument("--out", required=True)
        if batch:
            p.add_argument("--batch", type=int, default=500)

    e = sub.add_parser("load-engine")
    common(e, batch=True)
    e.add_argument("--mode", choices=["rest", "ingest", "cli"], required=True)
    e.add_argument("--port", type=int, required=True)
    e.add_argument("--token", required=True)
    e.add_argument("--conc", type=int, default=4)
    e.add_argument("--engine-bin", default="engine")
    e.add_argument("--data-dir", required=True)
    e.add_argument("--loadgen-cpu", type=int, default=0)
    p = sub.add_parser("load-pg")
    common(p)
    p.add_argument("--dsn", required=True)
    p.add_argument("--tmp", required=True)
    d = sub.add_parser("load-duck")
    common(d)
    d.add_argument("--db", required=True)
    lb = sub.add_parser("load-lb")
    common(lb)
    lb.add_argument("--db", required=True)
    lb.add_argument("--tmp", required=True)
    lb.add_argument("--lb-buffer-mb", type=int, default=2048)
    r = sub.add_parser("raw")
    common(r, batch=True)
    r.add_argument("--db", required=True)
    r.add_argument("--raw-bin", required=True)
    w = sub.add_parser("w9")
    w.add_argument("--meta", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--results", required=True)
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--token", required=True)
    w.add_argument("--dsn", required=True)
    w.add_argument("--rounds", type=int, default=3)
    w.add_argument("--duration", type=float, default=10)
    w.add_argument("--warmup", type=float, default=2)
    w.add_argument("--conc", default="1,8")
    w.add_argument("--limit", type=int, default=1000)
    w.add_argument("--loadgen-cpu", type=int, default=0)
    a = ap.parse_args()
    {"gen": gen, "load-engine": load_engine, "load-pg": load_pg, "load-duck": load_duck, "load-lb": load_lb,
     "raw": raw, "w9": w9}[a.cmd](a)


if __name__ == "__main__":
    main()
