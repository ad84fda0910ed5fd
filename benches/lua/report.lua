-- Shared `done` hook: prints one machine-readable line that run-w8-w2.sh parses.
-- Latencies are in microseconds, as wrk records them.
function wrk_report(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"err_connect":%d,"err_read":%d,' ..
    '"err_write":%d,"err_status":%d,"err_timeout":%d,"lat_mean_us":%.1f,"lat_p50_us":%d,' ..
    '"lat_p90_us":%d,"lat_p99_us":%d,"lat_max_us":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency.mean, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end
