#!/usr/bin/env python3
"""Summary for benches/run-w1a-w9.sh (standard library only).

  report.py RESULTS_DIR   -> writes RESULTS_DIR/summary.md and prints it

Reads results.jsonl (one line per W1a load and per W9 cell), dataset.json, w9-check.json and
machine.txt. Each cell: the median over rounds (min–max across rounds). Ratios: ratio of the
medians, with the per-round ratios (same round) beside it.
"""
import json
import os
import statistics
import sys

NAMES = {
    "engine_rest": "engine: REST `POST /api/v1/records/import/json`",
    "engine_ingest": "engine: Protocol v1 `ingest`",
    "engine_cli": "engine: `engine import` loader",
    "postgres": "PostgreSQL 15: Python flatten, COPY, indexes",
    "duckdb": "DuckDB: SQL flatten, tables, indexes",
    "ladybug": "LadybugDB: Python flatten, COPY FROM CSV",
    "raw": "raw redb loop: same keys, no server (write loop only)",
}
ORDER = list(NAMES)
# (engine path, reference, target): W1a goals of the issue; None = context, no target.
GOALS = [("engine_ingest", "postgres", 1.2), ("engine_rest", "postgres", 1.2),
         ("engine_ingest", "raw", 0.6), ("engine_rest", "raw", 0.6),
         ("engine_cli", "postgres", None), ("engine_cli", "raw", None),
         ("engine_ingest", "duckdb", None), ("engine_ingest", "ladybug", None)]


def num(v):
    return f"{v:,.0f}" if v >= 100 else (f"{v:.1f}" if v >= 10 else f"{v:.2f}")


def mm(vals):
    return f"{num(statistics.median(vals))} ({num(min(vals))}–{num(max(vals))})"


def main(d):
    rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl")) if l.strip()]
    meta = json.load(open(os.path.join(d, "dataset.json")))
    loads = [r for r in rows if r.get("kind") == "load"]
    w9 = [r for r in rows if r.get("kind") == "w9"]
    out = []
    p = out.append
    rc = ", ".join(f"{n:,} {l}" for l, n in meta["records"].items())
    rl = ", ".join(f"{n:,} {k}" for k, n in meta["relationships"].items())
    p(f"W1a dataset: {meta['docs']:,} nested order documents ({meta['file_bytes'] / 1e6:,.1f} MB JSON Lines) = "
      f"{meta['records_total']:,} records ({rc}) and {meta['relationships_total']:,} relationships ({rl}).")
    p("")
    if loads:
        by = {}
        for r in loads:
            by.setdefault(r["system"], []).append(r)
        rounds = sorted({r["round"] for r in loads})
        b0 = next((r for r in loads if r["system"].startswith("engine_")), {})
        p(f"## W1a: raw file to queryable, each load into an empty store ({len(rounds)} round"
          f"{'s' if len(rounds) != 1 else ''}; engine: {b0.get('batch', '?')} documents per request, "
          f"{b0.get('conc', '?')} in flight)")
        p("")
        p("| system | records/s median (min–max) | seconds median | steps (median s) | on disk (median) |")
        p("|---|---:|---:|---|---:|")
        for s in ORDER + sorted(set(by) - set(ORDER)):
            if s not in by:
                continue
            rs = by[s]
            steps = {}
            for r in rs:
                for k, v in (r.get("steps") or {}).items():
                    steps.setdefault(k, []).append(v)
            st = ", ".join(f"{k.removesuffix('_s')} {statistics.median(v):.2f}" for k, v in steps.items())
            p(f"| {NAMES.get(s, s)} | {mm([r['records_per_s'] for r in rs])} | "
              f"{statistics.median(r['seconds'] for r in rs):.2f} | {st} | "
              f"{statistics.median(r['bytes'] for r in rs) / 1e6:,.0f} MB |")
        p("")
        p("records/s = all records of the file (every label) / seconds; every load wrote the same records and "
          "relationships (checked per label and per parent/child label).")
        p("")
        p("| ratio (records/s) | measured (ratio of medians) | per-round ratios | target | verdict |")
        p("|---|---:|---:|---:|---|")
        for a, b, target in GOALS:
            if a not in by or b not in by:
                continue
            ra = {r["round"]: r["records_per_s"] for r in by[a]}
            rb = {r["round"]: r["records_per_s"] for r in by[b]}
            med = statistics.median(ra.values()) / statistics.median(rb.values())
            per = [ra[k] / rb[k] for k in sorted(set(ra) & set(rb))]
            verdict = "context" if target is None else ("**met**" if med >= target else "**NOT met**")
            p(f"| {a} / {b} | {med:.2f}x | {min(per):.2f}–{max(per):.2f} | "
              f"{'' if target is None else f'>= {target}x'} | {verdict} |")
        p("")
    if w9:
        chk = {}
        cp = os.path.join(d, "w9-check.json")
        if os.path.exists(cp):
            chk = json.load(open(cp))
        p(f"## W9: CSV export, {chk.get('limit', 1000):,} records per request, random page of "
          f"{chk.get('pages', '?')} (checked: {chk.get('rows', '?'):,} rows equal on both systems)")
        p("")
        p("| system | clients | req/s median (min–max) | records/s | p50 ms | p99 ms | errors | engine / PostgreSQL |")
        p("|---|---:|---:|---:|---:|---:|---:|---:|")
        cells = {}
        for r in w9:
            cells.setdefault((r["system"], r["conc"]), []).append(r)
        for c in sorted({r["conc"] for r in w9}):
            for s in ("engine", "postgres"):
                rs = cells.get((s, c))
                if not rs:
                    continue
                ratio = ""
                if s == "engine" and ("postgres", c) in cells:
                    e = {r["round"]: r["req_per_s"] for r in rs}
                    g = {r["round"]: r["req_per_s"] for r in cells[("postgres", c)]}
                    per = [e[k] / g[k] for k in sorted(set(e) & set(g)) if g[k]]
                    if per:
                        ratio = (f"{statistics.median(e.values()) / statistics.median(g.values()):.2f}x "
                                 f"({min(per):.2f}–{max(per):.2f})")
                p(f"| {'engine `POST /api/v1/records/export/csv`' if s == 'engine' else 'PostgreSQL `COPY (...) TO STDOUT`'} "
                  f"| {c} | {mm([r['req_per_s'] for r in rs])} | {num(statistics.median(r['records_per_s'] for r in rs))} | "
                  f"{statistics.median(r['p50_ms'] for r in rs):.2f} | {statistics.median(r['p99_ms'] for r in rs):.2f} | "
                  f"{sum(r['errors'] for r in rs)} | {ratio} |")
        p("")
    mp = os.path.join(d, "machine.txt")
    if os.path.exists(mp):
        p("Machine and settings: `machine.txt`, `postgres-settings.txt`; every load and cell: `results.jsonl`.")
    text = "\n".join(out)
    with open(os.path.join(d, "summary.md"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1])
