#!/usr/bin/env python3
"""W5 (relationships and graph search): dataset, loading, result checks and measurement for
benches/run-w5.sh. Runs in the benchmark's venv (ladybug, psycopg).

  w5.py gen         --dir D --customers C --orders O --items I --cm-records N
                    engine-LABEL.jsonl (one file per label, one record's properties a line,
                    for `engine import`), PostgreSQL COPY files, LadybugDB CSV files and
                    dataset.json
  w5.py link-engine --dir D --port P --token T --results R [--link-chunk K]
                    checks the engine holds every record (label counts), links orders to
                    customers and items to orders by key (create-many), checks the
                    relationship counts, writes the customers' engine ids (customer-ids.txt)
  w5.py load-pg     --dir D --dsn DSN --results R      tables, COPY, indexes, VACUUM ANALYZE
  w5.py load-lb     --dir D --db PATH --results R      node and rel tables, COPY FROM CSV
  w5.py bench       --dir D --results R ...            checks equal results across systems,
                    records plans, then measures, interleaved over --rounds rounds: the set
                    queries (c=1), point expansion over HTTP (wrk, c=32, engine and null
                    handler) and create-many by key (one-shot, every system)

The dataset is deterministic (seeded):
- CUSTOMER: customerId 1..C, country (20 values, uniform), tier (bronze/silver/gold/platinum,
  50/30/15/5 %), signupDate (a date in 2019..2024);
- ORDER: orderId 1..O, customerId (uniform over the customers), status (pending/paid/shipped/
  delivered/cancelled, 10/30/25/30/5 %), total (1.00..999.99, two decimals), createdAt;
- ITEM: itemId 1..I, orderId (uniform over the orders), category (12 values, uniform), qty
  (1..5), price (0.50..200.00);
- A and B (create-many): aId / bId 1..N and k; A's k is its aId, B's k a permutation of 1..N,
  so the key join pairs every A with exactly one B.
Relationships: ORDER -[PLACED_BY]-> CUSTOMER (every order), ORDER -[CONTAINS]-> ITEM (every
item), both linked by key (orders.customerId = customers.customerId, items.orderId =
orders.orderId).
"""
import argparse
import datetime as dt
import json
import os
import random
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, ".."))
from benchlib import Engine, cell_stats, cpu_split, disk_bytes, pin, run_cell  # noqa: E402

SEED = 20261205
COUNTRIES = ["DE", "FR", "GB", "IT", "ES", "NL", "BE", "AT", "CH", "PL", "SE", "NO", "DK", "FI",
             "PT", "IE", "CZ", "GR", "HU", "RO"]
TIERS = [("bronze", 50), ("silver", 30), ("gold", 15), ("platinum", 5)]
STATUSES = [("pending", 10), ("paid", 30), ("shipped", 25), ("delivered", 30), ("cancelled", 5)]
CATEGORIES = ["books", "toys", "garden", "kitchen", "sports", "music", "video", "tools", "beauty",
              "grocery", "office", "pets"]
# The values the queries filter on.
Q = {"status": "shipped", "country": "DE", "tier": "gold", "total_lo": 500, "total_hi": 510,
     "category": "books", "country2": "FR", "category2": "toys"}
# What each label is keyed by (its own running number), in the engine and the peers.
KEYS = {"CUSTOMER": "customerId", "ORDER": "orderId", "ITEM": "itemId", "A": "aId", "B": "bId"}
LB_TABLE = {"CUSTOMER": "Customer", "ORDER": "`Order`", "ITEM": "Item", "A": "A", "B": "B"}
CM_TYPE = "LINKED_AB"


def weighted(rng, choices):
    r = rng.randrange(sum(w for _, w in choices))
    for v, w in choices:
        if r < w:
            return v
        r -= w
    raise AssertionError


def money(cents):
    return cents // 100 if cents % 100 == 0 else cents / 100


# ---------------------------------------------------------------- dataset

def gen(args):
    """Writes every system's load files from one seeded pass. PostgreSQL ids: customers
    1..C, then orders, items, A and B in that order (offsets in dataset.json)."""
    C, O, I, N = args.customers, args.orders, args.items, args.cm_records
    d = args.dir
    os.makedirs(d, exist_ok=True)
    rng = random.Random(SEED)
    off = {"CUSTOMER": 0, "ORDER": C, "ITEM": C + O, "A": C + O + I, "B": C + O + I + N}
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    span = 2 * 365 * 86400
    d0 = dt.date(2019, 1, 1)
    orders_of = [0] * (C + 1)
    js = lambda o: json.dumps(o, separators=(",", ":"))  # noqa: E731
    engine_files = {label: open(os.path.join(d, f"engine-{label}.jsonl"), "w") for label in KEYS}
    with open(os.path.join(d, "pg-records.tsv"), "w") as pgr, \
            open(os.path.join(d, "pg-edges.tsv"), "w") as pge, \
            open(os.path.join(d, "lb-customer.csv"), "w") as lc, \
            open(os.path.join(d, "lb-order.csv"), "w") as lo, \
            open(os.path.join(d, "lb-item.csv"), "w") as li, \
            open(os.path.join(d, "lb-placed-by.csv"), "w") as lp, \
            open(os.path.join(d, "lb-contains.csv"), "w") as lct, \
            open(os.path.join(d, "lb-a.csv"), "w") as la, \
            open(os.path.join(d, "lb-b.csv"), "w") as lbb:

        def emit(label, data):
            engine_files[label].write(js(data) + "\n")
            pgr.write(f"{off[label] + data[KEYS[label]]}\t{label}\t{js(data)}\n")

        for cid in range(1, C + 1):
            data = {"customerId": cid, "country": COUNTRIES[rng.randrange(len(COUNTRIES))],
                    "tier": weighted(rng, TIERS),
                    "signupDate": (d0 + dt.timedelta(days=rng.randrange(6 * 365))).isoformat()}
            emit("CUSTOMER", data)
            lc.write(f"{cid},{data['country']},{data['tier']},{data['signupDate']}\n")
        for oid in range(1, O + 1):
            cid = rng.randint(1, C)
            orders_of[cid] += 1
            created = t0 + dt.timedelta(seconds=(oid - 1) * span // O + rng.randrange(max(1, span // O)))
            data = {"orderId": oid, "customerId": cid, "status": weighted(rng, STATUSES),
                    "total": money(rng.randint(100, 99_999)),
                    "createdAt": created.strftime("%Y-%m-%dT%H:%M:%SZ")}
            emit("ORDER", data)
            lo.write(f"{oid},{cid},{data['status']},{data['total']},{data['createdAt']}\n")
            pge.write(f"{off['ORDER'] + oid}\t{off['CUSTOMER'] + cid}\tPLACED_BY\n")
            lp.write(f"{oid},{cid}\n")
        for iid in range(1, I + 1):
            oid = rng.randint(1, O)
            data = {"itemId": iid, "orderId": oid, "category": CATEGORIES[rng.randrange(len(CATEGORIES))],
                    "qty": rng.randint(1, 5), "price": money(rng.randint(50, 20_000))}
            emit("ITEM", data)
            li.write(f"{iid},{oid},{data['category']},{data['qty']},{data['price']}\n")
            pge.write(f"{off['ORDER'] + oid}\t{off['ITEM'] + iid}\tCONTAINS\n")
            lct.write(f"{oid},{iid}\n")
        perm = list(range(1, N + 1))
        rng.shuffle(perm)
        for j in range(1, N + 1):
            emit("A", {"aId": j, "k": j})
            la.write(f"{j},{j}\n")
        for j in range(1, N + 1):
            emit("B", {"bId": j, "k": perm[j - 1]})
            lbb.write(f"{j},{perm[j - 1]}\n")
    for f in engine_files.values():
        f.close()
    meta = {"seed": SEED, "customers": C, "orders": O, "items": I, "cm_records": N, "pg_offsets": off,
            "q": Q, "countries": COUNTRIES, "categories": CATEGORIES, "statuses": [s for s, _ in STATUSES],
            "tiers": [t for t, _ in TIERS], "cm_type": CM_TYPE,
            "max_orders_per_customer": max(orders_of), "customers_without_orders": orders_of[1:].count(0)}
    json.dump(meta, open(os.path.join(d, "dataset.json"), "w"), indent=1)
    json.dump(orders_of, open(os.path.join(d, "orders-per-customer.json"), "w"))
    print(f"generated {C} customers, {O} orders, {I} items, 2 x {N} create-many records into {d} "
          f"({C + O + I + 2 * N} rows)")


# ---------------------------------------------------------------- engine: checks and links

def scan_keys(e, label, key, n, step=1000, with_ids=False):
    """Every record of `label` by index range on its key, 1..n. Returns {key: engine id}."""
    found = {}
    for lo in range(1, n + 1, step):
        d = e.post("/api/v1/records/search", {"labels": [label], "where": {key: {"$gte": lo, "$lt": lo + step}},
                                              "orderBy": {key: "asc"}, "limit": step})["data"]
        for r in d["data"]:
            if r[key] in found:
                raise SystemExit(f"{label} {key}={r[key]} exists twice in the engine")
            found[r[key]] = r["id"]
    return found


def link_engine(args):
    meta = json.load(open(os.path.join(args.dir, "dataset.json")))
    e = Engine(args.port, args.token)
    want = {"CUSTOMER": meta["customers"], "ORDER": meta["orders"], "ITEM": meta["items"],
            "A": meta["cm_records"], "B": meta["cm_records"]}
    info = {}
    counts = e.post("/api/v1/labels/search", {})["data"]
    if any(counts.get(l, 0) != n for l, n in want.items()):
        raise SystemExit(f"engine label counts {counts} != {want} after the load")
    info["label_counts"] = counts

    # Customer ids, for point expansion (wrk rotates over them).
    t = time.time()
    cust = scan_keys(e, "CUSTOMER", "customerId", meta["customers"])
    with open(os.path.join(args.dir, "customer-ids.txt"), "w") as f:
        for cid in range(1, meta["customers"] + 1):
            f.write(cust[cid] + "\n")
    info["customer_ids_read_s"] = round(time.time() - t, 2)

    # Links by key, in chunks of about `chunk` relationships: each request restricts both
    # sides to one range of the key (an index range in both), so no request scans a label whole.
    chunk = args.link_chunk
    steps = []
    for rtype, n, key, key_max, src, tgt in (
            ("PLACED_BY", meta["orders"], "customerId", meta["customers"], "ORDER", "CUSTOMER"),
            ("CONTAINS", meta["items"], "orderId", meta["orders"], "ORDER", "ITEM")):
        if n == 0:
            continue
        t = time.time()
        made = requests = 0
        step = max(1, -(-key_max * chunk // n))
        for lo in range(1, key_max + 1, step):
            rng = {key: {"$gte": lo, "$lt": lo + step}}
            body = {"source": {"label": src, "key": key, "where": rng},
                    "target": {"label": tgt, "key": key, "where": rng}, "type": rtype}
            made += e.post("/api/v1/relationships/create-many", body, ok=(201,))["data"]["count"]
            requests += 1
        secs = time.time() - t
        if made != n:
            raise SystemExit(f"create-many {rtype}: {made} relationships, expected {n}")
        steps.append({"type": rtype, "relationships": made, "requests": requests, "seconds": round(secs, 1)})
        print(f"engine: {made} {rtype} relationships by key in {secs:.1f} s ({made / secs:,.0f}/s, "
              f"{requests} create-many request{'s' if requests != 1 else ''})", file=sys.stderr)
    info["links"] = steps
    info["link_chunk"] = chunk
    schema = e.post("/protocol/v1/execute", {"protocolVersion": 1, "operation": {
        "kind": "describe", "describe": {"kind": "schema"}}})["response"]["schema"]
    info["relationship_counts"] = schema.get("relationships")
    json.dump(info, open(os.path.join(args.results, "engine-load.json"), "w"), indent=1)


# ---------------------------------------------------------------- loading the peers

PG_DDL = [
    "CREATE TABLE records (id bigint PRIMARY KEY, label text NOT NULL, props jsonb NOT NULL)",
    "CREATE TABLE edges (src bigint NOT NULL, dst bigint NOT NULL, type text NOT NULL)",
]
PG_INDEXES = [
    # Adjacency in both directions; (src, type, dst) unique, as the engine keeps one
    # relationship per (source, target, type).
    "CREATE UNIQUE INDEX edges_src ON edges (src, type, dst)",
    "CREATE INDEX edges_dst ON edges (dst, type, src)",
    # Every property a query filters on or create-many joins on, per label.
    "CREATE INDEX records_country ON records (label, (props->>'country'))",
    "CREATE INDEX records_tier ON records (label, (props->>'tier'))",
    "CREATE INDEX records_status ON records (label, (props->>'status'))",
    "CREATE INDEX records_total ON records (label, ((props->>'total')::numeric))",
    "CREATE INDEX records_category ON records (label, (props->>'category'))",
    "CREATE INDEX records_k ON records (label, ((props->>'k')::bigint))",
]


def load_pg(args):
    import psycopg
    steps = {}
    with psycopg.connect(args.dsn, autocommit=True) as c:
        for s in PG_DDL:
            c.execute(s)
        for table, cols, fname in (("records", "id, label, props", "pg-records.tsv"),
                                   ("edges", "src, dst, type", "pg-edges.tsv")):
            t = time.time()
            with c.cursor() as cur:
                with cur.copy(f"COPY {table} ({cols}) FROM STDIN") as cp:
                    with open(os.path.join(args.dir, fname), "rb") as f:
                        while chunk := f.read(1 << 20):
                            cp.write(chunk)
            steps[f"copy_{table}_s"] = round(time.time() - t, 1)
        for s in PG_INDEXES:
            t = time.time()
            c.execute(s)
            steps[s.split(" ON ")[0].split()[-1] + "_s"] = round(time.time() - t, 1)
        t = time.time()
        c.execute("VACUUM ANALYZE records")
        c.execute("VACUUM ANALYZE edges")
        steps["vacuum_analyze_s"] = round(time.time() - t, 1)
        rows = {r[0]: r[1] for r in c.execute("SELECT label, count(*) FROM records GROUP BY 1")}
        edges = {r[0]: r[1] for r in c.execute("SELECT type, count(*) FROM edges GROUP BY 1")}
        size = {r[0]: r[1] for r in c.execute(
            "SELECT relname, pg_size_pretty(pg_total_relation_size(oid)) FROM pg_class "
            "WHERE relname IN ('records', 'edges')")}
        idx = dict(c.execute("SELECT indexrelname, pg_size_pretty(pg_relation_size(indexrelid)) "
                             "FROM pg_stat_user_indexes ORDER BY 1").fetchall())
        defs = [r[0] for r in c.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY indexname")]
    info = {"rows": rows, "edges": edges, "steps": steps, "total_sizes": size, "index_sizes": idx, "index_defs": defs}
    json.dump(info, open(os.path.join(args.results, "postgres-load.json"), "w"), indent=1)
    print(f"PostgreSQL: {rows}; edges {edges}; {steps}; sizes {size}", file=sys.stderr)


LB_DDL = [
    "CREATE NODE TABLE Customer(customerId INT64, country STRING, tier STRING, signupDate DATE, PRIMARY KEY(customerId))",
    "CREATE NODE TABLE `Order`(orderId INT64, customerId INT64, status STRING, total DOUBLE, createdAt TIMESTAMP, "
    "PRIMARY KEY(orderId))",
    "CREATE NODE TABLE Item(itemId INT64, orderId INT64, category STRING, qty INT64, price DOUBLE, PRIMARY KEY(itemId))",
    "CREATE NODE TABLE A(aId INT64, k INT64, PRIMARY KEY(aId))",
    "CREATE NODE TABLE B(bId INT64, k INT64, PRIMARY KEY(bId))",
    "CREATE REL TABLE PLACED_BY(FROM `Order` TO Customer)",
    "CREATE REL TABLE CONTAINS(FROM `Order` TO Item)",
    f"CREATE REL TABLE {CM_TYPE}(FROM A TO B)",
]
LB_COPY = [("Customer", "lb-customer.csv"), ("`Order`", "lb-order.csv"), ("Item", "lb-item.csv"),
           ("A", "lb-a.csv"), ("B", "lb-b.csv"), ("PLACED_BY", "lb-placed-by.csv"),
           ("CONTAINS", "lb-contains.csv")]


def lb_open(path, buffer_mb):
    import ladybug
    return ladybug.Database(path, buffer_pool_size=buffer_mb << 20)


def load_lb(args):
    import ladybug
    t0 = time.time()
    db = lb_open(args.db, args.lb_buffer_mb)
    c = ladybug.Connection(db)
    steps = {}
    for s in LB_DDL:
        c.execute(s)
    for table, fname in LB_COPY:
        t = time.time()
        if os.path.getsize(os.path.join(args.dir, fname)) == 0:
            continue  # ITEMS=0: nothing to copy
        c.execute(f'COPY {table} FROM "{os.path.join(args.dir, fname)}"')
        steps[f"copy_{table.strip('`')}_s"] = round(time.time() - t, 1)
    c.execute("CHECKPOINT")
    counts = {t.strip("`"): c.execute(f"MATCH (n:{t}) RETURN count(*)").get_next()[0]
              for t in ("Customer", "`Order`", "Item", "A", "B")}
    for r in ("PLACED_BY", "CONTAINS"):
        counts[r] = c.execute(f"MATCH ()-[r:{r}]->() RETURN count(*)").get_next()[0]
    info = {"counts": counts, "steps": steps, "load_s": round(time.time() - t0, 1), "version": ladybug.__version__,
            "buffer_pool_mb": args.lb_buffer_mb, "db_bytes": disk_bytes(args.db)}
    c.close()
    db.close()
    json.dump(info, open(os.path.join(args.results, "ladybug-load.json"), "w"), indent=1)
    print(f"LadybugDB {info['version']}: {counts} in {info['load_s']} s", file=sys.stderr)


# ---------------------------------------------------------------- queries

def queries(meta):
    """The set queries: for each, the engine's SearchDto `where`, PostgreSQL's FROM/WHERE
    (root alias r) and LadybugDB's MATCH/WHERE (root variable r), and how each counts."""
    q = meta["q"]
    tot = "(o.props->>'total')::numeric"
    return [
        {"name": "hop1_orders", "hops": 1, "label": "ORDER",
         "desc": f"orders with status = {q['status']!r} placed by a customer with country = {q['country']!r}",
         "where": {"status": q["status"],
                   "CUSTOMER": {"$relation": {"type": "PLACED_BY", "direction": "out"}, "country": q["country"]}},
         "pg": "records r JOIN edges e ON e.src = r.id AND e.type = 'PLACED_BY' "
               "JOIN records c ON c.id = e.dst AND c.label = 'CUSTOMER' "
               "WHERE r.label = 'ORDER' AND r.props->>'status' = %(status)s AND c.props->>'country' = %(country)s",
         "pg_params": {"status": q["status"], "country": q["country"]},
         "lb": "MATCH (r:`Order`)-[:PLACED_BY]->(c:Customer) WHERE r.status = $status AND c.country = $country",
         "lb_params": {"status": q["status"], "country": q["country"]}, "lb_count": "count(*)"},
        {"name": "hop1_customers", "hops": 1, "label": "CUSTOMER",
         "desc": f"customers with tier = {q['tier']!r} who placed an order with "
                 f"{q['total_lo']} <= total < {q['total_hi']}",
         "where": {"tier": q["tier"],
                   "ORDER": {"$relation": {"type": "PLACED_BY", "direction": "in"},
                             "total": {"$gte": q["total_lo"], "$lt": q["total_hi"]}}},
         "pg": "records r WHERE r.label = 'CUSTOMER' AND r.props->>'tier' = %(tier)s AND EXISTS ("
               "SELECT 1 FROM edges e JOIN records o ON o.id = e.src AND o.label = 'ORDER' "
               f"WHERE e.dst = r.id AND e.type = 'PLACED_BY' AND {tot} >= %(lo)s AND {tot} < %(hi)s)",
         "pg_params": {"tier": q["tier"], "lo": q["total_lo"], "hi": q["total_hi"]},
         "lb": "MATCH (r:Customer)<-[:PLACED_BY]-(o:`Order`) WHERE r.tier = $tier AND o.total >= $lo AND o.total < $hi",
         "lb_params": {"tier": q["tier"], "lo": float(q["total_lo"]), "hi": float(q["total_hi"])},
         "lb_count": "count(DISTINCT r)"},
        {"name": "hop2_items", "hops": 2, "label": "ITEM",
         "desc": f"items with category = {q['category']!r} in an order placed by a customer with "
                 f"country = {q['country']!r}",
         "where": {"category": q["category"],
                   "ORDER": {"$relation": {"type": "CONTAINS", "direction": "in"},
                             "CUSTOMER": {"$relation": {"type": "PLACED_BY", "direction": "out"},
                                          "country": q["country"]}}},
         "pg": "records r JOIN edges e1 ON e1.dst = r.id AND e1.type = 'CONTAINS' "
               "JOIN records o ON o.id = e1.src AND o.label = 'ORDER' "
               "JOIN edges e2 ON e2.src = o.id AND e2.type = 'PLACED_BY' "
               "JOIN records c ON c.id = e2.dst AND c.label = 'CUSTOMER' "
               "WHERE r.label = 'ITEM' AND r.props->>'category' = %(category)s AND c.props->>'country' = %(country)s",
         "pg_params": {"category": q["category"], "country": q["country"]},
         "lb": "MATCH (r:Item)<-[:CONTAINS]-(o:`Order`)-[:PLACED_BY]->(c:Customer) "
               "WHERE r.category = $category AND c.country = $country",
         "lb_params": {"category": q["category"], "country": q["country"]}, "lb_count": "count(*)"},
        {"name": "hop2_customers", "hops": 2, "label": "CUSTOMER",
         "desc": f"customers with country = {q['country2']!r} who placed an order containing an item "
                 f"with category = {q['category2']!r}",
         "where": {"country": q["country2"],
                   "ORDER": {"$relation": {"type": "PLACED_BY", "direction": "in"},
                             "ITEM": {"$relation": {"type": "CONTAINS", "direction": "out"},
                                      "category": q["category2"]}}},
         "pg": "records r WHERE r.label = 'CUSTOMER' AND r.props->>'country' = %(country)s AND EXISTS ("
               "SELECT 1 FROM edges e1 JOIN records o ON o.id = e1.src AND o.label = 'ORDER' "
               "JOIN edges e2 ON e2.src = o.id AND e2.type = 'CONTAINS' "
               "JOIN records i ON i.id = e2.dst AND i.label = 'ITEM' "
               "WHERE e1.dst = r.id AND e1.type = 'PLACED_BY' AND i.props->>'category' = %(category)s)",
         "pg_params": {"country": q["country2"], "category": q["category2"]},
         "lb": "MATCH (r:Customer)<-[:PLACED_BY]-(o:`Order`)-[:CONTAINS]->(i:Item) "
               "WHERE r.country = $country AND i.category = $category",
         "lb_params": {"country": q["country2"], "category": q["category2"]}, "lb_count": "count(DISTINCT r)"},
    ]


def finish_query(q):
    """Adds the statements each system runs: the timed count, and the untimed check page
    (the 20 largest keys of the matching records)."""
    key = KEYS[q["label"]]
    q["key"] = key
    # Engine: the exact total comes with every search; one record is the smallest page.
    q["dto"] = {"labels": [q["label"]], "where": q["where"], "limit": 1}
    q["page_dto"] = {"labels": [q["label"]], "where": q["where"], "orderBy": {key: "desc"}, "limit": 20}
    q["doc"] = {"labels": [q["label"]], "predicate": q["where"], "limit": 1}
    q["pg_count"] = f"SELECT count(*) FROM {q['pg']}"
    q["pg_page"] = f"SELECT (r.props->>'{key}')::bigint AS k FROM {q['pg']} ORDER BY 1 DESC LIMIT 20"
    q["lb_count_q"] = f"{q['lb']} RETURN {q['lb_count']}"
    q["lb_page"] = f"{q['lb']} RETURN DISTINCT r.{key} AS k ORDER BY k DESC LIMIT 20"
    return q


# ---------------------------------------------------------------- the systems

class Systems:
    def __init__(self, args):
        import ladybug
        import psycopg
        self.args = args
        # Opened before the driver pins its own thread: LadybugDB's worker threads keep every CPU.
        self.lbdb = lb_open(args.db, args.lb_buffer_mb)
        self.lb = ladybug.Connection(self.lbdb)
        self.lb.execute("MATCH (n:Customer) RETURN count(*)").get_all()
        self.engine = Engine(args.port, args.token)
        self.null = Engine(args.null_port, args.token)
        self.pg = psycopg.connect(args.dsn, autocommit=True)
        self.bodies = {}

    def count(self, system, q):
        if system == "engine":
            body = self.bodies.get(q["name"])
            if body is None:
                body = self.bodies[q["name"]] = json.dumps(q["dto"], separators=(",", ":")).encode()
            return self.engine.post("/api/v1/records/search", body)["data"]["total"]
        if system == "postgres":
            return self.pg.execute(q["pg_count"], q["pg_params"], prepare=True).fetchone()[0]
        if system == "ladybug":
            return self.lb.execute(q["lb_count_q"], q["lb_params"]).get_next()[0]
        raise ValueError(system)

    def rtt(self, kind):
        if kind == "null_http":
            return self.null.post("/api/v1/records/search", b'{"labels":["ORDER"],"limit":1}')
        if kind == "pg_select1":
            return self.pg.execute("SELECT 1", prepare=True).fetchall()
        if kind == "lb_return1":
            return self.lb.execute("RETURN 1").get_all()
        raise ValueError(kind)

    def page(self, system, q):
        if system == "engine":
            return [r[q["key"]] for r in self.engine.post("/api/v1/records/search", q["page_dto"])["data"]["data"]]
        if system == "postgres":
            return [r[0] for r in self.pg.execute(q["pg_page"], q["pg_params"]).fetchall()]
        return [r[0] for r in self.lb.execute(q["lb_page"], q["lb_params"]).get_all()]

    # create-many by key over the A and B records: returns relationships created
    def create_many(self, system):
        if system == "engine":
            return self.engine.post("/api/v1/relationships/create-many", CM_BODY, ok=(201,))["data"]["count"]
        if system == "postgres":
            return self.pg.execute(PG_CM).rowcount
        if system == "ladybug":
            return self.lb.execute(LB_CM + " RETURN count(*)").get_next()[0]
        raise ValueError(system)

    def undo_create_many(self, system):
        if system == "engine":
            return self.engine.post("/api/v1/relationships/delete-many", CM_BODY)["data"]["count"]
        if system == "postgres":
            n = self.pg.execute(f"DELETE FROM edges WHERE type = '{CM_TYPE}'").rowcount
            self.pg.execute("VACUUM edges")
            return n
        if system == "ladybug":
            n = self.lb.execute(f"MATCH (:A)-[r:{CM_TYPE}]->(:B) DELETE r RETURN count(*)").get_next()[0]
            self.lb.execute("CHECKPOINT")
            return n
        raise ValueError(system)


CM_BODY = {"source": {"label": "A", "key": "k"}, "target": {"label": "B", "key": "k"}, "type": CM_TYPE}
# The engine keeps one relationship per (source, target, type): PostgreSQL gets the same rule
# from the unique index on (src, type, dst); LadybugDB's CREATE does not check.
PG_CM = (f"INSERT INTO edges (src, dst, type) SELECT a.id, b.id, '{CM_TYPE}' FROM records a "
         "JOIN records b ON ((b.props->>'k')::bigint) = ((a.props->>'k')::bigint) AND b.label = 'B' "
         "WHERE a.label = 'A' ON CONFLICT DO NOTHING")
LB_CM = f"MATCH (a:A), (b:B) WHERE a.k = b.k CREATE (a)-[:{CM_TYPE}]->(b)"
SYSTEMS = ["engine", "postgres", "ladybug"]


# ---------------------------------------------------------------- measurement

def bench(args):
    from w8w2_report import parse_wrk
    meta = json.load(open(os.path.join(args.dir, "dataset.json")))
    qs = [finish_query(q) for q in queries(meta)]
    if args.only:
        qs = [q for q in qs if q["name"] in args.only.split(",")]
    S = Systems(args)
    res = args.results
    all_cpus = os.sched_getaffinity(0)
    loadgen = {args.loadgen_cpu}

    def pin_for(system):
        pin(all_cpus if system in ("ladybug", "lb_return1") else loadgen)

    # 1. Results must agree before anything is timed: the exact count and the 20 largest keys
    #    of the matching records, on every system.
    checks = []
    expected = {}
    for q in qs:
        counts, pages = {}, {}
        for s in SYSTEMS:
            pin_for(s)
            counts[s] = S.count(s, q)
            pages[s] = S.page(s, q)
        ok = len(set(counts.values())) == 1 and all(pages[s] == pages["engine"] for s in SYSTEMS)
        checks.append({"query": q["name"], "counts": counts, "page_equal": ok, "page": pages["engine"][:5]})
        json.dump(checks, open(os.path.join(res, "checks.json"), "w"), indent=1)
        if not ok:
            raise SystemExit(f"RESULT MISMATCH on {q['name']}: counts {counts}; pages "
                             + json.dumps({s: pages[s][:5] for s in SYSTEMS}))
        expected[q["name"]] = counts["engine"]
        print(f"  check {q['name']}: {counts['engine']} on every system, 20 largest {q['key']} equal", file=sys.stderr)

    # Point expansion: the engine's answer for sampled customers against the dataset.
    pin(loadgen)
    ids = [l.strip() for l in open(os.path.join(args.dir, "customer-ids.txt"))]
    orders_of = json.load(open(os.path.join(args.dir, "orders-per-customer.json")))
    rng = random.Random(7)
    sample = sorted(rng.sample(range(1, len(ids) + 1), min(200, len(ids))))
    for cid in sample:
        d = S.engine.get(f"/api/v1/records/{ids[cid - 1]}/relationships")["data"]
        if d["total"] != orders_of[cid] or any(r["type"] != "PLACED_BY" for r in d["data"]):
            raise SystemExit(f"customer {cid}: {d['total']} relationships, expected {orders_of[cid]} PLACED_BY")
        d = S.engine.post(f"/api/v1/records/{ids[cid - 1]}/search", EXPAND_BODY)["data"]
        if d["total"] != orders_of[cid]:
            raise SystemExit(f"customer {cid}: {d['total']} related orders, expected {orders_of[cid]}")
    checks.append({"query": "expand", "customers_checked": len(sample),
                   "relationships": sum(orders_of[c] for c in sample)})
    print(f"  check expand: {len(sample)} customers' relationships and related orders match the dataset",
          file=sys.stderr)

    # create-many: once per system, unrecorded, checks the count and warms the path.
    cm_n = meta["cm_records"]
    for s in SYSTEMS:
        pin_for(s)
        n = S.create_many(s)
        u = S.undo_create_many(s)
        if n != cm_n or u != cm_n:
            raise SystemExit(f"create-many on {s}: created {n}, removed {u}, expected {cm_n}")
    checks.append({"query": "create_many", "counts": {s: cm_n for s in SYSTEMS}})
    json.dump(checks, open(os.path.join(res, "checks.json"), "w"), indent=1)
    print(f"  check create_many: {cm_n} relationships created and removed on every system", file=sys.stderr)

    # 2. Plans.
    with open(os.path.join(res, "explain.jsonl"), "w") as ex, open(os.path.join(res, "plans.txt"), "w") as pl:
        for q in qs:
            pin(loadgen)
            doc = {"protocolVersion": 1, "operation": {"kind": "describe",
                                                       "describe": {"kind": "explain", "query": q["doc"]}}}
            plan = S.engine.post("/protocol/v1/execute", doc)["response"]["plan"]
            ex.write(json.dumps({"query": q["name"], "plan": plan}) + "\n")
            pl.write(f"=== {q['name']}: {q['desc']}\n--- engine explain\n{json.dumps(plan, indent=1)}\n")
            pl.write("--- PostgreSQL EXPLAIN (ANALYZE, BUFFERS)\n")
            for r in S.pg.execute("EXPLAIN (ANALYZE, BUFFERS) " + q["pg_count"], q["pg_params"]).fetchall():
                pl.write(r[0] + "\n")
            pin(all_cpus)
            pl.write("--- LadybugDB PROFILE\n")
            for r in S.lb.execute("PROFILE " + q["lb_count_q"], q["lb_params"]).get_all():
                pl.write(str(r[-1]) + "\n")
            pl.write("\n")
        pl.write("=== create_many\n--- PostgreSQL EXPLAIN\n")
        for r in S.pg.execute("EXPLAIN " + PG_CM).fetchall():
            pl.write(r[0] + "\n")
        pl.write("--- LadybugDB EXPLAIN\n")
        for r in S.lb.execute("EXPLAIN " + LB_CM).get_all():
            pl.write(str(r[-1]) + "\n")

    # 3. Warm-up (not recorded).
    for q in qs:
        for s in SYSTEMS:
            pin_for(s)
            for _ in range(args.warmup):
                S.count(s, q)
    wrk_cells = expand_cells(args)
    if args.warmup:
        for cell in wrk_cells:
            for system in ("engine", "null"):
                run_wrk(args, cell, system, min(3, args.duration), os.devnull)

    # 4. Rounds.
    jsonl = open(os.path.join(res, "results.jsonl"), "a")
    raw_dir = os.path.join(res, "raw")
    os.makedirs(raw_dir, exist_ok=True)
    rounds_txt = open(os.path.join(res, "rounds.txt"), "a")

    def emit(r):
        jsonl.write(json.dumps(r) + "\n")
        jsonl.flush()

    def measure(rnd, name, system, fn, reps, check=None):
        pin_for(system)
        lat, bad, reopened = run_cell(fn, reps, args.min_reps, args.cell_seconds, check, (S.engine, S.null))
        if reopened:
            raise SystemExit(f"{name} on {system}: an HTTP connection was re-opened during a timed run")
        r = {"round": rnd, "kind": "set" if check is not None else "rtt", "query": name, "system": system,
             **cell_stats(lat, os.path.join(raw_dir, f"r{rnd}-{name}-{system}.txt")),
             "total": check, "totals_checked": len(lat) if check is not None else 0}
        if bad:
            raise SystemExit(f"{name} on {system}: count differed from the checked count in {bad} of {len(lat)} runs")
        emit(r)
        print(f"    r{rnd} {name:16s} {system:12s} n={r['reps']:4d} median={r['median_us'] / 1000:9.3f} ms "
              f"p99={r['p99_us'] / 1000:9.3f} ms qps={r['qps']:9.1f}" + (f" count={check}" if check is not None else ""),
              file=sys.stderr)

    def expand(rnd, cell, system):
        raw = os.path.join(raw_dir, f"r{rnd}-{cell['name']}-{system}-c{args.conc}.txt")
        pid = args.engine_pid if system == "engine" else args.null_pid
        server0, wrk0 = process_cpu_s(pid), children_cpu_s()
        run_wrk(args, cell, system, args.duration, raw)
        server1, wrk1 = process_cpu_s(pid), children_cpu_s()
        r = parse_wrk(rnd, cell["name"], system, args.conc, raw)
        r.update({"kind": "expand", "query": cell["name"]})
        # CPU per request of the server process and of wrk (user + system time; the kernel's
        # softirq work is in neither): tells a slower machine phase (both cost more per
        # request) from a server that answered fewer requests for the same CPU.
        if r["requests"]:
            r["loadgen_cpu_us"] = (wrk1 - wrk0) * 1e6 / r["requests"]
            if server0 is not None and server1 is not None:
                r["server_cpu_us"] = (server1 - server0) * 1e6 / r["requests"]
        emit(r)
        print(f"    r{rnd} {cell['name']:16s} {system:9s} c={args.conc} {r['ops']:9.0f} req/s "
              f"p50={r['p50_us']} us p99={r['p99_us']} us errors={r['errors']} "
              f"cpu/request: server {r.get('server_cpu_us', 0):.1f} us, wrk {r.get('loadgen_cpu_us', 0):.1f} us",
              file=sys.stderr)
        if r["errors"]:
            raise SystemExit(f"{cell['name']} on {system}: {r['errors']} errors (see {raw})")

    def create_many(rnd, system):
        pin_for(system)
        if system == "engine":
            S.engine.get("/health")  # re-opens an idle-closed connection outside the timing
        pid = args.engine_pid if system == "engine" else None
        cpu0, faults0 = process_cpu_s(pid), process_faults(pid)
        t0 = time.perf_counter()
        n = S.create_many(system)
        secs = time.perf_counter() - t0
        # The engine's CPU and minor page faults during its create-many: fresh memory is
        # zero-filled in page faults, dear in a virtual machine (docs/design.md "Allocator").
        cpu1, faults1 = process_cpu_s(pid), process_faults(pid)
        server = {}
        if None not in (cpu0, cpu1, faults0, faults1):
            server = {"server_cpu_s": cpu1 - cpu0, "server_faults": faults1 - faults0}
        t0 = time.perf_counter()
        u = S.undo_create_many(system)
        undo = time.perf_counter() - t0
        time.sleep(args.settle)  # lets background checkpoints of the write finish untimed
        if n != cm_n or u != cm_n:
            raise SystemExit(f"create-many on {system}, round {rnd}: created {n}, removed {u}, expected {cm_n}")
        emit({"round": rnd, "kind": "create_many", "query": "create_many", "system": system, "seconds": secs,
              "relationships": n, "per_s": n / secs, "undo_seconds": undo, **server})
        print(f"    r{rnd} {'create_many':16s} {system:9s} {n} relationships in {secs:8.3f} s "
              f"({n / secs:,.0f}/s; undo {undo:.2f} s"
              + (f"; server CPU {server['server_cpu_s']:.2f} s, {server['server_faults']:,} page faults" if server else "")
              + ")", file=sys.stderr)

    for rnd in range(1, args.rounds + 1):
        s0 = open("/proc/stat").readline()
        rounds_txt.write(f"round {rnd} start {time.strftime('%Y-%m-%dT%H:%M:%S')} "
                         f"loadavg {open('/proc/loadavg').read().split()[:3]}\n")
        print(f"round {rnd}/{args.rounds}", file=sys.stderr)
        # Client/transport round trips, as context for the per-query numbers.
        for kind in ("null_http", "pg_select1", "lb_return1"):
            measure(rnd, "rtt", kind, lambda k=kind: S.rtt(k), args.reps_rtt)
        for qi, q in enumerate(qs):
            k = (rnd + qi) % 3
            for s in SYSTEMS[k:] + SYSTEMS[:k]:
                measure(rnd, q["name"], s, lambda s=s, q=q: S.count(s, q), args.reps, expected[q["name"]])
        for cell in wrk_cells:
            for s in (["engine", "null"] if rnd % 2 else ["null", "engine"]):
                expand(rnd, cell, s)
        k = rnd % 3
        for s in SYSTEMS[k:] + SYSTEMS[:k]:
            create_many(rnd, s)
        rounds_txt.write(f"round {rnd} cpu: {cpu_split(s0, open('/proc/stat').readline())}\n")
        rounds_txt.flush()

    with open(os.path.join(res, "postgres-prepared.txt"), "w") as f:
        for r in S.pg.execute("SELECT generic_plans, custom_plans, statement FROM pg_prepared_statements "
                              "ORDER BY statement").fetchall():
            f.write(f"generic_plans={r[0]} custom_plans={r[1]}: {r[2]}\n")
    meta_out = {"queries": [{k: q[k] for k in ("name", "hops", "label", "desc", "dto", "pg_count", "pg_params",
                                               "lb_count_q", "lb_params")} for q in qs],
                "expand": wrk_cells, "create_many": {"engine": CM_BODY, "postgres": PG_CM, "ladybug": LB_CM,
                                                     "records_per_side": cm_n},
                "rounds": args.rounds, "reps": args.reps, "reps_rtt": args.reps_rtt, "settle": args.settle,
                "min_reps": args.min_reps,
                "cell_seconds": args.cell_seconds, "warmup": args.warmup, "loadgen_cpu": args.loadgen_cpu,
                "duration": args.duration, "conc": args.conc,
                "dataset": {k: meta[k] for k in ("customers", "orders", "items", "cm_records", "q",
                                                  "max_orders_per_customer", "customers_without_orders")}}
    json.dump(meta_out, open(os.path.join(res, "bench-meta.json"), "w"), indent=1)


EXPAND_BODY = {"labels": ["ORDER"], "limit": 100}


def expand_cells(args):
    """Point expansion requests, each for a customer drawn at random: its relationships, and
    (context) its related orders as records."""
    cells = [{"name": "expand_rels", "desc": "GET /api/v1/records/{id}/relationships", "suffix": "/relationships",
              "body": ""},
             {"name": "expand_records", "desc": "POST /api/v1/records/{id}/search " + json.dumps(EXPAND_BODY),
              "suffix": "/search", "body": json.dumps(EXPAND_BODY, separators=(",", ":"))}]
    if args.expand_cells:
        cells = [c for c in cells if c["name"] in args.expand_cells.split(",")]
    return cells


def process_stat(pid):
    """The fields of /proc/`pid`/stat after the command (field 3, the state, first); None when
    unknown."""
    if not pid:
        return None
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_cpu_s(pid):
    """User + system CPU seconds of process `pid` (all its threads) so far; None when unknown."""
    fields = process_stat(pid)
    # utime is field 14 and stime 15 (proc(5)).
    return None if fields is None else (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_faults(pid):
    """Minor page faults of process `pid` so far (field 10 of its stat); None when unknown."""
    fields = process_stat(pid)
    return None if fields is None else int(fields[7])


def children_cpu_s():
    """User + system CPU seconds of this process's waited-for children (wrk) so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_wrk(args, cell, system, secs, out):
    lua_dir = os.path.join(HERE, "..", "lua")
    env = dict(os.environ, BENCH_TOKEN=args.token, BENCH_IDS=os.path.join(args.dir, "customer-ids.txt"),
               BENCH_LUA_DIR=lua_dir, BENCH_PATH_SUFFIX=cell["suffix"], BENCH_BODY=cell["body"])
    port = args.port if system == "engine" else args.null_port
    with open(out, "w") as f:
        rc = subprocess.run(["taskset", "-c", str(args.loadgen_cpu), "wrk", "-t1", f"-c{args.conc}", f"-d{secs}s",
                             "--timeout", "10s", "-s", os.path.join(lua_dir, "get_by_id.lua"),
                             f"http://127.0.0.1:{port}/"], env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit(f"wrk failed ({rc}), see {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--dir", required=True)
    g.add_argument("--customers", type=int, required=True)
    g.add_argument("--orders", type=int, required=True)
    g.add_argument("--items", type=int, required=True)
    g.add_argument("--cm-records", type=int, required=True)
    x = sub.add_parser("link-engine")
    x.add_argument("--dir", required=True)
    x.add_argument("--port", type=int, required=True)
    x.add_argument("--token", required=True)
    x.add_argument("--results", required=True)
    x.add_argument("--link-chunk", type=int, default=100_000)
    p = sub.add_parser("load-pg")
    p.add_argument("--dir", required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--results", required=True)
    lb = sub.add_parser("load-lb")
    lb.add_argument("--dir", required=True)
    lb.add_argument("--db", required=True)
    lb.add_argument("--results", required=True)
    lb.add_argument("--lb-buffer-mb", type=int, default=4096)
    b = sub.add_parser("bench")
    b.add_argument("--dir", required=True)
    b.add_argument("--results", required=True)
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--null-port", type=int, required=True)
    b.add_argument("--engine-pid", type=int, default=0, help="the engine's pid (CPU per request; 0: unknown)")
    b.add_argument("--null-pid", type=int, default=0, help="the null handler's pid (CPU per request; 0: unknown)")
    b.add_argument("--token", required=True)
    b.add_argument("--dsn", required=True)
    b.add_argument("--db", required=True)
    b.add_argument("--lb-buffer-mb", type=int, default=4096)
    b.add_argument("--rounds", type=int, default=3)
    b.add_argument("--reps", type=int, default=50)
    b.add_argument("--reps-rtt", type=int, default=200)
    b.add_argument("--settle", type=float, default=2.0)
    b.add_argument("--min-reps", type=int, default=5)
    b.add_argument("--cell-seconds", type=float, default=10.0)
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--loadgen-cpu", type=int, default=0)
    b.add_argument("--duration", type=int, default=10)
    b.add_argument("--conc", type=int, default=32)
    b.add_argument("--only", default="")
    b.add_argument("--expand-cells", default="")
    a = ap.parse_args()
    {"gen": gen, "link-engine": link_engine, "load-pg": load_pg, "load-lb": load_lb, "bench": bench}[a.cmd](a)


if __name__ == "__main__":
    main()
