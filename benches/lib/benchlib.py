"""Helpers shared by the benchmark drivers (benches/w3w4/w3w4.py, benches/w5/w5.py,
benches/w1a/w1a.py); standard library only: a keep-alive HTTP client for the engine, disk usage,
percentiles, CPU pinning, and the whole-machine CPU split over an interval."""
import http.client
import json
import os
import statistics
import time


class Engine:
    """One keep-alive HTTP/1.1 connection to the engine (or the null handler), bearer token."""

    def __init__(self, port, token):
        self.port = port
        self.hdrs = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        self.reconnects = 0

    def request(self, method, path, body=None, ok=(200,)):
        """Sends one request; returns the decoded JSON answer. Any status outside `ok` ends
        the run with the status and the start of the answer."""
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body, separators=(",", ":")).encode()
        try:
            self.conn.request(method, path, body=body, headers=self.hdrs)
            r = self.conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closes a keep-alive connection idle for 30 s (header_read_timeout):
            # reconnect once. Measured cells start with an unrecorded call, so this happens
            # outside the timings.
            self.reconnects += 1
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            self.conn.request(method, path, body=body, headers=self.hdrs)
            r = self.conn.getresponse()
        data = r.read()
        if r.status not in ok:
            raise SystemExit(f"engine {method} {path}: HTTP {r.status}: {data[:500]!r}")
        return json.loads(data)

    def post(self, path, body, ok=(200,)):
        return self.request("POST", path, body, ok)

    def get(self, path, ok=(200,)):
        return self.request("GET", path, None, ok)


def disk_bytes(path):
    """Bytes a file or directory tree takes on disk (allocated blocks, as `du`): preallocated
    and sparse files count what they use."""
    if os.path.isfile(path):
        return os.stat(path).st_blocks * 512
    return sum(os.stat(os.path.join(r, f)).st_blocks * 512 for r, _, fs in os.walk(path) for f in fs)


def pct(sorted_vals, p):
    return sorted_vals[int(round((len(sorted_vals) - 1) * p))]


def pin(cpus):
    os.sched_setaffinity(0, cpus)  # this thread only (Linux): in-process databases keep theirs


def run_cell(fn, reps, min_reps, cell_seconds, check=None, clients=()):
    """Times `fn` at c=1: one unrecorded call (it re-opens an idle-closed HTTP connection
    outside the timings), then up to `reps` calls, stopping after `cell_seconds` once `min_reps`
    are done. Returns (latencies in µs in run order, calls whose result differed from `check`,
    whether one of the Engine `clients` re-opened its connection during the timed calls)."""
    fn()
    rc0 = sum(c.reconnects for c in clients)
    lat, bad = [], 0
    t_end = time.perf_counter() + cell_seconds
    while len(lat) < reps and (len(lat) < min_reps or time.perf_counter() < t_end):
        t0 = time.perf_counter_ns()
        out = fn()
        lat.append((time.perf_counter_ns() - t0) / 1000.0)
        if check is not None and out != check:
            bad += 1
    return lat, bad, sum(c.reconnects for c in clients) != rc0


def cell_stats(lat, raw_path):
    """Writes every sample (µs, run order) to raw_path; returns the cell's summary fields."""
    with open(raw_path, "w") as f:
        f.write("\n".join(f"{v:.1f}" for v in lat) + "\n")
    s = sorted(lat)
    return {"reps": len(s), "median_us": statistics.median(s), "p99_us": pct(s, 0.99), "p90_us": pct(s, 0.90),
            "min_us": s[0], "max_us": s[-1], "mean_us": statistics.fmean(s), "qps": len(s) / (sum(s) / 1e6)}


CPU_FIELDS = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]


def cpu_split(stat0, stat1):
    """Whole-machine CPU split between two `/proc/stat` first lines, as `name=P%` text."""
    a = [int(x) for x in stat0.split()[1:9]]
    b = [int(x) for x in stat1.split()[1:9]]
    d = [y - x for x, y in zip(a, b)]
    t = sum(d) or 1
    return " ".join(f"{n}={100.0 * v / t:.1f}%" for n, v in zip(CPU_FIELDS, d))
