#!/usr/bin/env python3
"""Parsing and reporting for benches/run-tx.sh (standard library only).

  tx_report.py rust|wrk ROUND RAW LATFILE SECONDS CPUFILE -> one JSON line on stdout (engine;
                   the client's TXJSON line: grpc_http_load --mode http-tx, or tx.lua)
  tx_report.py pgbench ROUND RAW LOGPREFIX CPUFILE       -> one JSON line on stdout (PostgreSQL)
CPUFILE: the load generator's `/usr/bin/time -f '%U %S %e'` output (user, sys, wall seconds).
  tx_report.py summary RESULTS_DIR                -> writes RESULTS_DIR/summary.md, prints it

RESULTS_DIR/results.jsonl holds one line per measurement:
  {"round", "system", "conc", "tps", "p50_us", "p99_us", "max_us", "committed", "errors", ...}
`tps` is committed transactions per second; latencies are whole transactions (begin to the
commit's answer). `committed` counts every committed transaction (for the row-count check).
"""
import glob
import json
import os
import re
import statistics
import sys


def client_cpu(path):
    u, s, _ = (float(x) for x in open(path).read().split()[:3])
    return round(u + s, 2)


def pct(sorted_vals, p):
    if not sorted_vals:
        return None
    return sorted_vals[int(round((len(sorted_vals) - 1) * p))]


def parse_engine_client(tool, rnd, raw, latfile, seconds):
    text = open(raw, encoding="utf-8", errors="replace").read()
    m = re.search(r"^TXJSON (\{.*\})$", text, re.M)
    if not m:
        raise SystemExit(f"no TXJSON line in {raw}:\n{text[-2000:]}")
    w = json.loads(m.group(1))
    lats = sorted(int(float(x)) for x in open(latfile) if x.strip())
    errors = sum(w[k] for k in ("conflicts", "err_begin", "err_write", "err_commit", "err_rollback",
                                "err_connect", "err_read", "err_write_sock", "err_timeout"))
    return {
        "round": rnd, "system": "engine", "conc": w["threads"],
        "tps": w["commits_window"] / seconds, "p50_us": pct(lats, 0.50), "p99_us": pct(lats, 0.99),
        "max_us": lats[-1] if lats else None, "committed": w["commits"],
        "committed_in_window": w["commits_window"], "conflicts": w["conflicts"],
        "aborted": w["aborted"], "unfinished": w["unfinished"], "open_tx": w["open_tx"],
        "errors": errors, "requests": w["requests"], "req_p50_us": w["req_p50_us"],
        "req_p99_us": w["req_p99_us"], "seconds": seconds, "tool": tool,
    }


def parse_pgbench(rnd, raw, logprefix):
    text = open(raw, encoding="utf-8", errors="replace").read()
    m = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)", text, re.M)
    if not m:
        raise SystemExit(f"no tps line in {raw}:\n{text[-2000:]}")
    failed = 0
    fm = re.search(r"^number of failed transactions: (\d+)", text, re.M)
    if fm:
        failed = int(fm.group(1))
    done = re.search(r"^number of transactions actually processed: (\d+)", text, re.M)
    conc = re.search(r"^number of clients: (\d+)", text, re.M)
    lats = []
    for path in sorted(glob.glob(glob.escape(logprefix) + ".*")):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                # client_id transaction_no time_us script_no epoch epoch_us
                if len(parts) >= 3 and parts[2].isdigit():
                    lats.append(int(parts[2]))
        if not os.environ.get("KEEP_PGBENCH_LOGS"):
            os.remove(path)
    lats.sort()
    dur = re.search(r"^duration: (\d+) s", text, re.M)
    return {
        "round": rnd, "system": "postgres", "conc": int(conc.group(1)) if conc else None,
        "tps": float(m.group(1)), "p50_us": pct(lats, 0.50), "p99_us": pct(lats, 0.99),
        "max_us": lats[-1] if lats else None,
        "committed": int(done.group(1)) if done else len(lats), "errors": failed,
        "seconds": float(dur.group(1)) if dur else None, "tool": "pgbench",
    }


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt_ms(us):
    return "—" if us is None else f"{us / 1000:.1f} ms"


def summary(results_dir):
    rows = [json.loads(l) for l in open(os.path.join(results_dir, "results.jsonl")) if l.strip()]
    meta = json.load(open(os.path.join(results_dir, "meta.json")))
    checks = open(os.path.join(results_dir, "checks.txt")).read().strip() \
        if os.path.exists(os.path.join(results_dir, "checks.txt")) else "(no checks file)"
    out = [f"# W-TX: transactions of {meta['writes']} writes, c={meta['conc']}, durable",
           "",
           f"rounds={meta['rounds']} duration={meta['duration']} s per run, medians over rounds; "
           "latency = whole transaction (begin to the commit's answer).",
           "",
           "| system | commits/s (median) | p50 | p99 (median) | per round commits/s | per round p99 | errors | client CPU / window |",
           "|---|---:|---:|---:|---|---|---:|---:|"]
    meds = {}
    for s in ("engine", "postgres"):
        r = sorted((x for x in rows if x["system"] == s), key=lambda x: x["round"])
        if not r:
            continue
        meds[s] = (med([x["tps"] for x in r]), med([x["p99_us"] for x in r]))
        out.append(f"| {s} | {meds[s][0]:,.0f} | {fmt_ms(med([x['p50_us'] for x in r]))} | "
                   f"{fmt_ms(meds[s][1])} | {', '.join('{:,.0f}'.format(x['tps']) for x in r)} | "
                   f"{', '.join(fmt_ms(x['p99_us']) for x in r)} | {sum(x['errors'] for x in r)} | "
                   f"{100 * med([x['client_cpu_s'] / meta['duration'] for x in r]):.0f}% of one CPU |")
    out.append("")
    if "engine" in meds and "postgres" in meds and meds["postgres"][0]:
        ratio = meds["engine"][0] / meds["postgres"][0]
        per = []
        for rnd in sorted({x["round"] for x in rows}):
            e = [x for x in rows if x["round"] == rnd and x["system"] == "engine"]
            p = [x for x in rows if x["round"] == rnd and x["system"] == "postgres"]
            if e and p and p[0]["tps"]:
                per.append(f"{e[0]['tps'] / p[0]['tps']:.2f}x")
        out.append(f"Goal engine >= 1.2x PostgreSQL commits/s: {ratio:.2f}x (median over median; "
                   f"per round {', '.join(per)}) -> {'MET' if ratio >= 1.2 else 'MISSED'}")
        out.append("")
    eng = [x for x in rows if x["system"] == "engine"]
    if eng:
        out.append(f"Engine per-request latency (all 12 request kinds, {eng[0].get('tool', 'wrk')} client), median p50/p99: "
                   f"{fmt_ms(med([x['req_p50_us'] for x in eng]))} / {fmt_ms(med([x['req_p99_us'] for x in eng]))}; "
                   f"conflicts {sum(x['conflicts'] for x in eng)}, rolled back after a failed write "
                   f"{sum(x['aborted'] for x in eng)}, threads that did not drain {sum(x['unfinished'] for x in eng)}.")
        out.append("")
    out.append("## Checks")
    out.append("")
    out.append("```")
    out.append(checks)
    out.append("```")
    text = "\n".join(out) + "\n"
    open(os.path.join(results_dir, "summary.md"), "w").write(text)
    print(text, end="")


def main(argv):
    if argv[1] in ("rust", "wrk"):
        r = parse_engine_client(argv[1], int(argv[2]), argv[3], argv[4], float(argv[5]))
        r["client_cpu_s"] = client_cpu(argv[6])
        print(json.dumps(r))
    elif argv[1] == "pgbench":
        r = parse_pgbench(int(argv[2]), argv[3], argv[4])
        r["client_cpu_s"] = client_cpu(argv[5])
        print(json.dumps(r))
    elif argv[1] == "summary":
        summary(argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
