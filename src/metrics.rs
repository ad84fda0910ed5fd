//! Request metrics in Prometheus text exposition. Labelled by route template and status,
//! never by ids or tenants, so the series count is bounded by the route table.

use crate::model::IdHash;
use crate::store::memo::MemoStats;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Histogram bucket upper bounds, seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

#[derive(Default)]
struct Latency {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Keyed by route templates, methods and statuses (a bounded set the engine names, never a
/// client's input): hashed by the engine's one-multiply hasher instead of SipHash.
#[derive(Default)]
struct Inner {
    requests: HashMap<(&'static str, &'static str, u16), u64, IdHash>,
    latency: HashMap<&'static str, Latency, IdHash>,
}

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    pub fn observe(
        &self,
        route: &'static str,
        method: &'static str,
        status: u16,
        elapsed: Duration,
    ) {
        let secs = elapsed.as_secs_f64();
        let Ok(mut m) = self.inner.lock() else { return };
        *m.requests.entry((route, method, status)).or_default() += 1;
        let l = m.latency.entry(route).or_default();
        l.count += 1;
        l.sum += secs;
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            l.buckets[i] += 1;
        }
    }

    /// Renders the exposition; `records`, `tenants` and `memo` are store-wide.
    pub fn render(&self, records: u64, tenants: u64, memo: MemoStats) -> String {
        let mut out = String::new();
        let Ok(m) = self.inner.lock() else { return out };
        out.push_str("# HELP engine_http_requests_total HTTP requests by route template, method and status.\n");
        out.push_str("# TYPE engine_http_requests_total counter\n");
        let mut reqs: Vec<_> = m.requests.iter().collect();
        reqs.sort();
        for ((route, method, status), n) in reqs {
            let _ = writeln!(out, "engine_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}");
        }
        out.push_str(
            "# HELP engine_http_request_duration_seconds HTTP request latency by route template.\n",
        );
        out.push_str("# TYPE engine_http_request_duration_seconds histogram\n");
        let mut lat: Vec<_> = m.latency.iter().collect();
        lat.sort_by_key(|(r, _)| *r);
        for (route, l) in lat {
            let mut cum = 0;
            for (b, n) in BUCKETS.iter().zip(l.buckets.iter()) {
                cum += n;
                let _ = writeln!(out, "engine_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{b}\"}} {cum}");
            }
            let _ = writeln!(
                out,
                "engine_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                l.count
            );
            let _ = writeln!(
                out,
                "engine_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                l.sum
            );
            let _ = writeln!(
                out,
                "engine_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                l.count
            );
        }
        out.push_str(
            "# HELP engine_records Records stored, all tenants.\n# TYPE engine_records gauge\n",
        );
        let _ = writeln!(out, "engine_records {records}");
        out.push_str("# HELP engine_tenants Tenants with data.\n# TYPE engine_tenants gauge\n");
        let _ = writeln!(out, "engine_tenants {tenants}");
        out.push_str("# HELP engine_key_memo_bytes Bytes of key runs and record labels held in the key memo.\n# TYPE engine_key_memo_bytes gauge\n");
        let _ = writeln!(out, "engine_key_memo_bytes {}", memo.bytes);
        out.push_str("# HELP engine_key_memo_runs Key runs held in the key memo.\n# TYPE engine_key_memo_runs gauge\n");
        let _ = writeln!(out, "engine_key_memo_runs {}", memo.runs);
        out.push_str("# HELP engine_key_memo_hits_total Key runs and record labels read from the key memo instead of the store.\n# TYPE engine_key_memo_hits_total counter\n");
        let _ = writeln!(out, "engine_key_memo_hits_total {}", memo.hits);
        out
    }
}
