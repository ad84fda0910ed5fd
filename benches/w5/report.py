#!/usr/bin/env python3
"""Summary for benches/run-w5.sh (standard library only).

  report.py RESULTS_DIR   -> writes RESULTS_DIR/summary.md and prints it

Reads results.jsonl (one line per measurement: set query x system x round, expansion run,
create-many), checks.json, explain.jsonl, bench-meta.json and the load files. Each cell: the
median over rounds of the per-round value, (min–max) across rounds. Set-query ratios are engine
qps / peer qps at c=1 (= peer mean latency / engine mean latency); create-many ratios are peer
seconds / engine seconds; expansion ratios engine req/s / null-handler req/s. Each is the ratio
of the per-round medians, with the per-round ratios beside it.
"""
import json
import os
import statistics
import sys

SYSTEMS = ["engine", "postgres", "ladybug"]
NAMES = {"engine": "engine (HTTP)", "postgres": "PostgreSQL 15 (psycopg)", "ladybug": "LadybugDB (in-process)",
         "null": "null HTTP handler", "null_http": "null HTTP handler (POST), same client",
         "pg_select1": "PostgreSQL `SELECT 1`, same client", "lb_return1": "LadybugDB `RETURN 1`"}
TARGETS = {"ladybug": 1.0, "postgres": 2.0}   # set queries and create-many: engine / peer
NULL_TARGET = 0.7                               # point expansion: engine / null handler


def ms(us):
    v = us / 1000.0
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}" if v >= 0.1 else f"{v:.3f}"


def num(v):
    return f"{v:,.0f}" if v >= 100 else (f"{v:.1f}" if v >= 10 else f"{v:.2f}")


def secs(v):
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def load(d, name, default=None):
    p = os.path.join(d, name)
    return json.load(open(p)) if os.path.exists(p) else default


def main(d):
    rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl")) if l.strip()]
    meta = json.load(open(os.path.join(d, "bench-meta.json")))
    checks = {c["query"]: c for c in load(d, "checks.json", [])}
    explain = {}
    ep = os.path.join(d, "explain.jsonl")
    if os.path.exists(ep):
        for l in open(ep):
            if l.strip():
                e = json.loads(l)
                explain[e["query"]] = e["plan"]
    by = {}
    for r in rows:
        by.setdefault((r["query"], r["system"]), []).append(r)

    def series(q, s, f):
        return [r[f] for r in sorted(by.get((q, s), []), key=lambda r: r["round"])]

    def med(q, s, f):
        v = series(q, s, f)
        return statistics.median(v) if v else None

    def ratios(q, a, b, f, invert=False):
        ra = {r["round"]: r[f] for r in by.get((q, a), [])}
        rb = {r["round"]: r[f] for r in by.get((q, b), [])}
        out = [(rb[k] / ra[k] if invert else ra[k] / rb[k]) for k in sorted(set(ra) & set(rb)) if ra[k] and rb[k]]
        return out

    ds = meta["dataset"]
    out = []
    p = out.append
    rounds = sorted({r["round"] for r in rows})
    p(f"Dataset: {ds['customers']:,} customers, {ds['orders']:,} orders (PLACED_BY one customer each), "
      f"{ds['items']:,} items (CONTAINED in one order each), 2 x {ds['cm_records']:,} create-many records; "
      f"rounds: {len(rounds)}.")
    p("")
    p(f"**Set queries** at c=1 (one request at a time), up to {meta['reps']} repetitions per cell, stopping "
      f"early after {meta['cell_seconds']:.0f} s (at least {meta['min_reps']}). Each cell: median over rounds "
      f"of the per-round value (min–max across rounds).")
    p("")
    p("| query | hops | system | median ms (min–max) | p99 ms (worst round) | queries/s (min–max) | count | runs with count checked |")
    p("|---|---:|---|---:|---:|---:|---:|---:|")
    qnames = [q["name"] for q in meta["queries"]]
    hops = {q["name"]: q["hops"] for q in meta["queries"]}
    for s in ("null_http", "pg_select1", "lb_return1"):
        if by.get(("rtt", s)):
            m, p99 = series("rtt", s, "median_us"), series("rtt", s, "p99_us")
            p(f"| round trip | | {NAMES[s]} | {ms(statistics.median(m))} ({ms(min(m))}–{ms(max(m))}) "
              f"| {ms(statistics.median(p99))} ({ms(max(p99))}) | {num(med('rtt', s, 'qps'))} | | |")
    for q in qnames:
        for s in SYSTEMS:
            if not by.get((q, s)):
                continue
            m, qs, p99 = series(q, s, "median_us"), series(q, s, "qps"), series(q, s, "p99_us")
            p(f"| {q} | {hops[q]} | {NAMES[s]} | {ms(statistics.median(m))} ({ms(min(m))}–{ms(max(m))}) "
              f"| {ms(statistics.median(p99))} ({ms(max(p99))}) | {num(statistics.median(qs))} "
              f"({num(min(qs))}–{num(max(qs))}) | {by[(q, s)][0]['total']:,} | "
              f"{sum(series(q, s, 'totals_checked'))}/{sum(series(q, s, 'reps'))} |")
    p("")
    cells = meta.get("expand", [])
    if cells:
        p(f"**Point expansion** over HTTP, wrk -t1 -c{meta['conc']}, {meta['duration']} s per run, a customer "
          f"drawn at random per request (~{ds['orders'] / ds['customers']:.0f} orders each); the null handler "
          f"answers the same requests with `200 {{\"success\":true}}`.")
        p("")
        p("| request | system | req/s median (min–max) | p50 µs | p99 µs | errors "
          "| server CPU µs/request, per round | wrk CPU µs/request, per round |")
        p("|---|---|---:|---:|---:|---:|---:|---:|")

        def per_round(name, s, key):
            # Older results have no CPU figures: a dash.
            v = [r.get(key) for r in sorted(by[(name, s)], key=lambda r: r["round"])]
            return " / ".join("–" if x is None else f"{x:.1f}" for x in v)

        for c in cells:
            for s in ("engine", "null"):
                if not by.get((c["name"], s)):
                    continue
                o = series(c["name"], s, "ops")
                p(f"| {c['name']}: `{c['desc']}` | {NAMES[s]} | {num(statistics.median(o))} ({num(min(o))}–{num(max(o))}) "
                  f"| {statistics.median(series(c['name'], s, 'p50_us')):,.0f} "
                  f"| {statistics.median(series(c['name'], s, 'p99_us')):,.0f} | {sum(series(c['name'], s, 'errors'))} "
                  f"| {per_round(c['name'], s, 'server_cpu_us')} | {per_round(c['name'], s, 'loadgen_cpu_us')} |")
        p("")
        p("CPU per request: user and system time of the server's process and of wrk over each run, "
          "divided by its requests (the kernel's softirq work is in neither). The null handler's rate "
          "is bound by wrk's CPU, the engine's by its worker's (one on a 2-CPU machine).")
        p("")
    if any(by.get(("create_many", s)) for s in SYSTEMS):
        cm = meta["create_many"]
        p(f"**Create-many by key**, {cm['records_per_side']:,} x {cm['records_per_side']:,} records (labels A "
          f"and B, 1:1 on property k), one-shot per system per round, undone (untimed) after each.")
        p("")
        p("| system | seconds median (min–max) | relationships/s | undo s (median) | server CPU s, page faults (per round) |")
        p("|---|---:|---:|---:|---:|")
        for s in SYSTEMS:
            if by.get(("create_many", s)):
                t = series("create_many", s, "seconds")
                rows = [r for r in by[("create_many", s)] if "server_faults" in r]
                server = (" / ".join(f"{r['server_cpu_s']:.2f} s, {r['server_faults']:,}" for r in rows)
                          if rows else "–")
                p(f"| {NAMES[s]} | {secs(statistics.median(t))} ({secs(min(t))}–{secs(max(t))}) "
                  f"| {num(med('create_many', s, 'per_s'))} | {secs(med('create_many', s, 'undo_seconds'))} "
                  f"| {server} |")
        p("")
        p("Server CPU and page faults: the engine process's user + system time and minor page faults "
          "during its create-many (the other systems: –).")
        p("")

    goals = []

    def goal(label, q, a, b, f, target, invert=False):
        x, y = med(q, a, f), med(q, b, f)
        if x is None or y is None:
            goals.append((label, "n/a", "-", f">= {target}x", "not measured"))
            return
        rr = ratios(q, a, b, f, invert)
        r = y / x if invert else x / y
        goals.append((label, f"{r:.2f}x", f"{min(rr):.2f}–{max(rr):.2f}" if rr else "-", f">= {target}x",
                      "**met**" if r >= target else "**NOT met**"))

    for q in qnames:
        for peer in ("ladybug", "postgres"):
            goal(f"{q}: engine / {peer_name(peer)} qps", q, "engine", peer, "qps", TARGETS[peer])
    for peer in ("ladybug", "postgres"):
        goal(f"create_many: {peer_name(peer)} s / engine s", "create_many", "engine", peer, "seconds",
             TARGETS[peer], invert=True)
    if by.get(("expand_rels", "engine")):
        goal("expand_rels c=32: engine / null-handler req/s", "expand_rels", "engine", "null", "ops", NULL_TARGET)
    p("Create-many is held to the set-query targets (it is a set operation: a key join of two labels).")
    p("")
    p("| goal | measured (ratio of medians) | per round | target | verdict |")
    p("|---|---:|---:|---:|---|")
    for g in goals:
        p("| " + " | ".join(g) + " |")
    p("")
    if by.get(("expand_records", "engine")) and by.get(("expand_records", "null")):
        rr = ratios("expand_records", "engine", "null", "ops")
        p(f"Context, no goal: expand_records engine / null-handler req/s "
          f"{med('expand_records', 'engine', 'ops') / med('expand_records', 'null', 'ops'):.2f}x "
          f"(per round {min(rr):.2f}–{max(rr):.2f}).")
        p("")
    if explain:
        p("Engine plans (`describe explain`):")
        p("")
        p("| query | access | estimated | actual | examined | traversal |")
        p("|---|---|---:|---:|---:|---|")
        for q in qnames:
            e = explain.get(q)
            if e:
                trav = "; ".join(json.dumps(t, separators=(",", ":")) if not isinstance(t, str) else t
                                 for t in (e.get("traversal") or []))
                p(f"| {q} | {e.get('access')} | {e.get('estimatedRows')} | {e.get('actualRows')} | "
                  f"{e.get('examinedRows')} | {trav.replace('|', '/')} |")
        p("")
    loads = load_table(d)
    if loads:
        p("Loading:")
        p("")
        p("| system | what | time | size |")
        p("|---|---|---:|---:|")
        for l in loads:
            p("| " + " | ".join(l) + " |")
        p("")
    p("Result checks (before round 1): " + "; ".join(
        f"{q}: count {checks[q]['counts']['engine']:,} on all, 20 largest keys equal" for q in qnames if q in checks)
      + ("; expand: " + f"{checks['expand']['customers_checked']} customers' relationships match the dataset"
         if "expand" in checks else "")
      + ("; create_many: " + f"{checks['create_many']['counts']['engine']:,} relationships on all"
         if "create_many" in checks else ""))
    text = "\n".join(out)
    with open(os.path.join(d, "summary.md"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text)


def peer_name(s):
    return {"ladybug": "LadybugDB", "postgres": "PostgreSQL"}[s]


def load_table(d):
    sizes = {}
    sp = os.path.join(d, "sizes.txt")
    if os.path.exists(sp):
        for line in open(sp):
            k, _, v = line.strip().partition("=")
            sizes[k] = v
    mb = lambda k: f"{int(sizes[k]) / 1e6:,.0f} MB" if k in sizes else "-"  # noqa: E731
    out = []
    el = load(d, "engine-load.json")
    if "engine_load_seconds" in sizes:
        out.append(("engine", "records with `engine import` (Protocol v1 `ingest`, one file per label)",
                    f"{sizes['engine_load_seconds']} s",
                    mb("engine_data_dir_bytes")))
    if el:
        for l in el.get("links", []):
            out.append(("engine", f"{l['relationships']:,} {l['type']} by key ({l['requests']} create-many "
                        f"request{'s' if l['requests'] != 1 else ''})",
                        f"{l['seconds']} s", ""))
    pg = load(d, "postgres-load.json")
    if pg:
        st = pg["steps"]
        copy = sum(v for k, v in st.items() if k.startswith("copy"))
        idx = sum(v for k, v in st.items() if not k.startswith(("copy", "vacuum")))
        out.append(("PostgreSQL 15", f"COPY records and edges {copy:.1f} s, {len(pg['index_defs']) - 1} indexes "
                    f"{idx:.1f} s, VACUUM ANALYZE {st['vacuum_analyze_s']} s", f"{sum(st.values()):.1f} s",
                    mb("postgres_data_dir_bytes")))
    lb = load(d, "ladybug-load.json")
    if lb:
        out.append((f"LadybugDB {lb['version']}", "COPY FROM CSV (node and rel tables)", f"{lb['load_s']} s",
                    mb("ladybug_bytes")))
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1])
