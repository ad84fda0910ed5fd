#!/usr/bin/env python3
"""Summary for benches/run-w3-w4.sh (standard library only).

  report.py RESULTS_DIR   -> writes RESULTS_DIR/summary.md and prints it

Reads results.jsonl (one line per query x system x round), checks.json, explain.jsonl and
bench-meta.json. Each cell: the median over rounds of the per-round value, (min–max) across
rounds. Ratios are engine qps / peer qps at c=1 (= peer mean latency / engine mean latency),
the ratio of the per-round medians, with the per-round ratios beside it.
"""
import json
import os
import statistics
import sys

SYSTEMS = ["engine", "postgres", "duckdb"]
NAMES = {"engine": "engine (HTTP)", "postgres": "PostgreSQL 15 (psycopg)", "duckdb": "DuckDB (in-process)",
         "null_http": "null HTTP handler, same client", "pg_select1": "PostgreSQL `SELECT 1`, same client",
         "duck_select1": "DuckDB `SELECT 1`"}


def ms(us):
    if us is None:
        return "-"
    v = us / 1000.0
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}" if v >= 0.1 else f"{v:.3f}"


def qps(v):
    return f"{v:,.0f}" if v >= 100 else (f"{v:.1f}" if v >= 10 else f"{v:.2f}")


def main(d):
    rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl")) if l.strip()]
    meta = json.load(open(os.path.join(d, "bench-meta.json")))
    checks = {c["query"]: c for c in json.load(open(os.path.join(d, "checks.json")))}
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

    def per_round_ratio(q, a, b):
        ra = {r["round"]: r["qps"] for r in by.get((q, a), [])}
        rb = {r["round"]: r["qps"] for r in by.get((q, b), [])}
        return [ra[k] / rb[k] for k in sorted(set(ra) & set(rb)) if rb[k]]

    out = []
    p = out.append
    rounds = sorted({r["round"] for r in rows})
    p(f"Records: {meta['records']:,}; rounds: {len(rounds)}; c=1 (one request at a time); repetitions per "
      f"cell: up to {meta['reps']['selective']} (selective), {meta['reps']['other']} (other), "
      f"{meta['reps']['W4']} (W4), stopping early after {meta['cell_seconds']:.0f} s (at least "
      f"{meta['reps']['min']}). Each cell: median over rounds of the per-round value (min–max across rounds).")
    p("")
    p("| query | class | system | median ms (min–max) | p99 ms (worst round) | queries/s (min–max) | total | runs with total checked |")
    p("|---|---|---|---:|---:|---:|---:|---:|")
    qnames = [q["name"] for q in meta["queries"]]
    qcls = {q["name"]: q["cls"] for q in meta["queries"]}
    for s in ("null_http", "pg_select1", "duck_select1"):
        if by.get(("rtt", s)):
            m = series("rtt", s, "median_us")
            p(f"| round trip | context | {NAMES[s]} | {ms(statistics.median(m))} ({ms(min(m))}–{ms(max(m))}) "
              f"| {ms(med('rtt', s, 'p99_us'))} ({ms(max(series('rtt', s, 'p99_us')))}) "
              f"| {qps(med('rtt', s, 'qps'))} | | |")
    for q in qnames:
        for s in SYSTEMS:
            if not by.get((q, s)):
                continue
            m = series(q, s, "median_us")
            qs = series(q, s, "qps")
            p99 = series(q, s, "p99_us")
            checked = sum(series(q, s, "totals_checked"))
            runs = sum(series(q, s, "reps"))
            tot = by[(q, s)][0]["total"]
            p(f"| {q} | {qcls[q]} | {NAMES[s]} | {ms(statistics.median(m))} ({ms(min(m))}–{ms(max(m))}) "
              f"| {ms(statistics.median(p99))} ({ms(max(p99))}) | {qps(statistics.median(qs))} "
              f"({qps(min(qs))}–{qps(max(qs))}) | {tot:,} | {checked}/{runs} |")
    p("")

    goals = []

    def goal(label, q, peer, target):
        a, b = med(q, "engine", "qps"), med(q, peer, "qps")
        if a is None or b is None:
            goals.append((label, "n/a", "-", f">= {target}x", "not measured"))
            return
        rr = per_round_ratio(q, "engine", peer)
        r = a / b
        goals.append((label, f"{r:.2f}x", f"{min(rr):.2f}–{max(rr):.2f}" if rr else "-", f">= {target}x",
                      "**met**" if r >= target else "**NOT met**"))

    for q in qnames:
        c = qcls[q]
        if c == "selective":
            goal(f"{q}: engine / PostgreSQL qps", q, "postgres", 2.0)
            goal(f"{q}: engine / DuckDB qps", q, "duckdb", 1.0)
            worst = max(series(q, "engine", "p99_us"))
            goals.append((f"{q}: engine p99", f"{ms(med(q, 'engine', 'p99_us'))} ms", f"worst round {ms(worst)} ms",
                          "< 10 ms", "**met**" if worst < 10_000 else "**NOT met**"))
        elif c == "other":
            goal(f"{q}: engine / PostgreSQL qps", q, "postgres", 1.0)
        else:
            goal(f"{q}: engine / PostgreSQL qps", q, "postgres", 1.5)
    p("| goal | measured (ratio of medians) | per round | target | verdict |")
    p("|---|---:|---:|---:|---|")
    for g in goals:
        p("| " + " | ".join(g) + " |")
    p("")
    p("Context, no goal: engine / DuckDB on the non-selective queries and W4.")
    p("")
    p("| query | engine / DuckDB qps | per round |")
    p("|---|---:|---:|")
    for q in qnames:
        if qcls[q] != "selective":
            a, b = med(q, "engine", "qps"), med(q, "duckdb", "qps")
            rr = per_round_ratio(q, "engine", "duckdb")
            if a and b:
                p(f"| {q} | {a / b:.2f}x | {min(rr):.2f}–{max(rr):.2f} |")
    p("")
    if explain:
        p("Engine access paths (`describe explain`):")
        p("")
        p("| query | access | estimated | actual | examined | covered | index order | returned |")
        p("|---|---|---:|---:|---:|---|---|---:|")
        for q in qnames:
            e = explain.get(q)
            if e:
                p(f"| {q} | {e.get('access')} | {e.get('estimatedRows')} | {e.get('actualRows')} | "
                  f"{e.get('examinedRows')} | {e.get('covered')} | {e.get('indexOrder')} | {e.get('returnedRows')} |")
        p("")
    p("Result checks (before round 1): " + "; ".join(
        f"{q}: total {checks[q]['totals']['engine']:,} on all, page equal" for q in qnames if q in checks))
    text = "\n".join(out)
    with open(os.path.join(d, "summary.md"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1])
