#!/usr/bin/env python3
"""Parsing and reporting for benches/run-w8-w2.sh (standard library only).

  w8w2_report.py wrk     ROUND WORKLOAD SYSTEM CONC RAW           -> one JSON line on stdout
  w8w2_report.py pgbench ROUND WORKLOAD SYSTEM CONC RAW LOGPREFIX -> one JSON line on stdout
  w8w2_report.py fsync   ROUND RAW                                -> one JSON line on stdout
  w8w2_report.py summary RESULTS_DIR                              -> writes RESULTS_DIR/summary.md, prints it

RESULTS_DIR/results.jsonl holds one line per measurement:
  {"round", "workload", "system", "conc", "ops", "p50_us", "p99_us", "errors", "requests", "seconds"}
"""
import glob
import json
import os
import re
import statistics
import sys


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    i = round((len(sorted_vals) - 1) * p)
    return sorted_vals[int(i)]


def parse_wrk(rnd, workload, system, conc, raw):
    text = open(raw, encoding="utf-8", errors="replace").read()
    m = re.search(r"^WRKJSON (\{.*\})$", text, re.M)
    if not m:
        raise SystemExit(f"no WRKJSON line in {raw}:\n{text[-2000:]}")
    w = json.loads(m.group(1))
    secs = w["duration_us"] / 1e6
    errors = w["err_connect"] + w["err_read"] + w["err_write"] + w["err_status"] + w["err_timeout"]
    ok = w["requests"] - w["err_status"]
    return {
        "round": rnd, "workload": workload, "system": system, "conc": conc,
        "ops": ok / secs if secs > 0 else 0.0,
        "p50_us": w["lat_p50_us"], "p99_us": w["lat_p99_us"], "max_us": w["lat_max_us"],
        "errors": errors, "requests": w["requests"], "seconds": secs, "tool": "wrk",
    }


def parse_pgbench(rnd, workload, system, conc, raw, logprefix):
    text = open(raw, encoding="utf-8", errors="replace").read()
    m = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)", text, re.M)
    if not m:
        raise SystemExit(f"no tps line in {raw}:\n{text[-2000:]}")
    tps = float(m.group(1))
    failed = 0
    fm = re.search(r"^number of failed transactions: (\d+)", text, re.M)
    if fm:
        failed = int(fm.group(1))
    done = re.search(r"^number of transactions actually processed: (\d+)", text, re.M)
    lats = []
    logs = sorted(glob.glob(glob.escape(logprefix) + ".*"))
    for path in logs:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                # client_id transaction_no time_us script_no epoch epoch_us [...]
                if len(parts) >= 3 and parts[2].isdigit():
                    lats.append(int(parts[2]))
        if not os.environ.get("KEEP_PGBENCH_LOGS"):
            os.remove(path)
    lats.sort()
    dur = re.search(r"^duration: (\d+) s", text, re.M)
    return {
        "round": rnd, "workload": workload, "system": system, "conc": conc,
        "ops": tps, "p50_us": pct(lats, 0.50), "p99_us": pct(lats, 0.99),
        "max_us": lats[-1] if lats else None,
        "errors": failed, "requests": int(done.group(1)) if done else len(lats),
        "seconds": float(dur.group(1)) if dur else None, "tool": "pgbench",
    }


def parse_fsync(rnd, raw):
    text = open(raw, encoding="utf-8", errors="replace").read()
    m = re.search(r"^fsync_loop (.*)$", text, re.M)
    if not m:
        raise SystemExit(f"no fsync_loop line in {raw}:\n{text[-2000:]}")
    kv = dict(p.split("=", 1) for p in m.group(1).split())
    return {
        "round": rnd, "workload": "fsync", "system": "fsync_loop", "conc": 1,
        "ops": float(kv["ops_per_sec"]), "p50_us": int(kv["p50_us"]), "p99_us": int(kv["p99_us"]),
        "max_us": int(kv["max_us"]), "errors": 0, "requests": int(kv["ops"]),
        "seconds": float(kv["seconds"]), "tool": "fsync_loop",
    }


# ---------------------------------------------------------------- summary

def fmt_ops(v):
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def fmt_us(v):
    if v is None:
        return "-"
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def summary(results_dir):
    rows = [json.loads(l) for l in open(os.path.join(results_dir, "results.jsonl")) if l.strip()]
    meta = {}
    mp = os.path.join(results_dir, "meta.json")
    if os.path.exists(mp):
        meta = json.load(open(mp))
    by = {}
    for r in rows:
        by.setdefault((r["workload"], r["system"], r["conc"]), []).append(r)
    rounds = sorted({r["round"] for r in rows})

    def series(w, s, c):
        return by.get((w, s, c), [])

    def med_ops(w, s, c):
        return med([r["ops"] for r in series(w, s, c)])

    def per_round(w, s, c):
        out = {}
        for r in series(w, s, c):
            out.setdefault(r["round"], []).append(r)
        return out

    out = []
    p = out.append
    p(f"Rounds: {len(rounds)}; each cell is the median over rounds, (min–max) across rounds.")
    if meta:
        p(f"Duration per run: {meta.get('duration')} s; fsync loop: {meta.get('fsync_seconds')} s x2 per round; "
          f"engine records preloaded for W2: {meta.get('records')}; pgbench scale: {meta.get('pg_scale')}.")
    p("")
    p("| workload | c | system | ops/s median (min–max) | p50 | p99 | errors | engine ratio (medians) |")
    p("|---|---:|---|---:|---:|---:|---:|---|")
    order_w = {"fsync": 0, "W8": 1, "W2": 2}
    order_s = {"fsync_loop": 0, "engine": 1, "postgres": 2, "null": 3}
    for (w, s, c) in sorted(by, key=lambda k: (order_w.get(k[0], 9), k[2], order_s.get(k[1], 9))):
        rs = by[(w, s, c)]
        ops = [r["ops"] for r in rs]
        name = {"fsync_loop": "fsync loop (1 thread, fdatasync per 100 B append)",
                "engine": "engine (HTTP)", "postgres": "PostgreSQL 15 (pgbench)",
                "null": "null HTTP handler"}.get(s, s)
        if w == "W8" and s == "null":
            name = "null HTTP handler (POST)"
        ratio = ""
        if s == "engine":
            parts = []
            mine = statistics.median(ops)
            for ref, tag in (("postgres", "PostgreSQL"), ("null", "null handler")):
                m = med_ops(w, ref, c)
                if m:
                    parts.append(f"{mine / m:.2f}x {tag}")
            if w == "W8":
                m = med_ops("fsync", "fsync_loop", 1)
                if m:
                    parts.append(f"{mine / m:.2f}x fsync loop")
            ratio = "; ".join(parts)
        p(f"| {w} | {c} | {name} | {fmt_ops(statistics.median(ops))} ({fmt_ops(min(ops))}–{fmt_ops(max(ops))}) "
          f"| {fmt_us(med([r['p50_us'] for r in rs]))} | {fmt_us(med([r['p99_us'] for r in rs]))} "
          f"| {sum(r['errors'] for r in rs)} | {ratio} |")
    p("")

    # Goals: ratio of medians, plus the range of per-round ratios (same round = same noise).
    goals = []

    def ratio_goal(label, num, den, op, target, field="ops"):
        nm = med([r[field] for r in series(*num)])
        dm = med([r[field] for r in series(*den)])
        if nm is None or dm is None or dm == 0:
            goals.append((label, "n/a", "n/a", "n/a", "not measured"))
            return
        ratio = nm / dm
        prn, prd = per_round(*num), per_round(*den)
        rr = []
        for rnd in sorted(set(prn) & set(prd)):
            a = statistics.mean(x[field] for x in prn[rnd])
            b = statistics.mean(x[field] for x in prd[rnd])
            if b:
                rr.append(a / b)
        ok = ratio >= target if op == ">=" else ratio <= target
        rng = f"{min(rr):.2f}–{max(rr):.2f}" if rr else "-"
        goals.append((label, f"{ratio:.2f}x", rng, f"{op} {target}x", "**met**" if ok else "**NOT met**"))

    ratio_goal("W8 c=1: engine / PostgreSQL creates/s", ("W8", "engine", 1), ("W8", "postgres", 1), ">=", 1.0)
    ratio_goal("W8 c=32: engine / PostgreSQL creates/s", ("W8", "engine", 32), ("W8", "postgres", 32), ">=", 1.5)
    ratio_goal("W8 c=32: engine creates/s / fsync-loop ops/s", ("W8", "engine", 32), ("fsync", "fsync_loop", 1), ">=", 4.0)
    ratio_goal("W2 c=8: engine / PostgreSQL reads/s", ("W2", "engine", 8), ("W2", "postgres", 8), ">=", 1.2)
    ratio_goal("W2 c=32: engine / PostgreSQL reads/s", ("W2", "engine", 32), ("W2", "postgres", 32), ">=", 1.2)
    for c in (1, 8, 32):
        ratio_goal(f"W2 c={c}: engine / null-handler req/s", ("W2", "engine", c), ("W2", "null", c), ">=", 0.7)
    ratio_goal("W2 c=1: engine p50 / null-handler p50", ("W2", "engine", 1), ("W2", "null", 1), "<=", 1.5, field="p50_us")
    # Context rows (no goal): W2 c=1 vs PostgreSQL, W8 c=1 vs fsync loop.
    p("| goal | measured (ratio of medians) | per-round ratios | target | verdict |")
    p("|---|---:|---:|---:|---|")
    for g in goals:
        p("| " + " | ".join(g) + " |")
    p("")
    ctx = []
    for (label, num, den) in [
        ("W2 c=1: engine / PostgreSQL reads/s", ("W2", "engine", 1), ("W2", "postgres", 1)),
        ("W8 c=1: engine / fsync-loop ops/s", ("W8", "engine", 1), ("fsync", "fsync_loop", 1)),
        ("W8 c=32: PostgreSQL / fsync-loop ops/s", ("W8", "postgres", 32), ("fsync", "fsync_loop", 1)),
        ("W8 c=1: engine / null-handler POST req/s", ("W8", "engine", 1), ("W8", "null", 1)),
        ("W8 c=32: engine / null-handler POST req/s", ("W8", "engine", 32), ("W8", "null", 32)),
    ]:
        nm, dm = med_ops(*num), med_ops(*den)
        if nm is not None and dm:
            ctx.append(f"| {label} | {nm / dm:.2f}x |")
    if ctx:
        p("Context (no goal attached):")
        p("")
        p("| ratio | ratio of medians |")
        p("|---|---:|")
        out.extend(ctx)
        p("")
    text = "\n".join(out)
    with open(os.path.join(results_dir, "summary.md"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    cmd = argv[1]
    if cmd == "wrk":
        r = parse_wrk(int(argv[2]), argv[3], argv[4], int(argv[5]), argv[6])
    elif cmd == "pgbench":
        r = parse_pgbench(int(argv[2]), argv[3], argv[4], int(argv[5]), argv[6], argv[7])
    elif cmd == "fsync":
        r = parse_fsync(int(argv[2]), argv[3])
    elif cmd == "summary":
        summary(argv[2])
        return 0
    else:
        print(__doc__)
        return 2
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
