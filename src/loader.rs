//! `engine import`: a bulk loader for a running server. It splits a JSON, JSON Lines or CSV
//! file into batches, sends each as one Protocol v1 `ingest` (one atomic, durable write per
//! batch), shows a progress bar, and prints a summary. The first failing batch stops the
//! load; the loader names it and exits non-zero (batches before it stay imported).

use crate::cli::ImportArgs;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Semaphore;

/// The file, split into batches of ready-to-send `ingest` payloads.
struct Batches {
    /// (first document index, documents in it, the `ingest` object)
    batches: Vec<(usize, usize, Value)>,
    documents: usize,
}

fn format_of(args: &ImportArgs) -> Result<String, String> {
    if let Some(f) = &args.format {
        return Ok(f.to_ascii_lowercase());
    }
    let ext = Path::new(&args.file)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "json" | "jsonl" | "ndjson" | "csv" => Ok(ext),
        _ => Err(format!(
            "cannot tell the format of {} from its extension: pass --format json|jsonl|csv",
            args.file.display()
        )),
    }
}

fn options(args: &ImportArgs) -> Value {
    let mut o = json!({});
    if let Some(m) = &args.merge_by {
        o["mergeBy"] = m
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
    }
    if let Some(s) = &args.merge_strategy {
        o["mergeStrategy"] = json!(s);
    }
    if let Some(t) = &args.relationship_type {
        o["relationshipType"] = json!(t);
    }
    o
}

fn document_batches(docs: Vec<Value>, args: &ImportArgs) -> Batches {
    let documents = docs.len();
    let opts = options(args);
    let mut batches = Vec::new();
    let mut it = docs.into_iter().peekable();
    let mut first = 0;
    while it.peek().is_some() {
        let chunk: Vec<Value> = it.by_ref().take(args.batch_size).collect();
        let n = chunk.len();
        batches.push((
            first,
            n,
            json!({"kind": "documents", "label": args.label, "documents": chunk, "options": opts}),
        ));
        first += n;
    }
    Batches { batches, documents }
}

fn csv_batches(text: &str, args: &ImportArgs) -> Result<Batches, String> {
    let delimiter = match args.delimiter.unwrap_or(',') {
        c if c.is_ascii() => c as u8,
        c => return Err(format!("--delimiter '{c}': must be an ASCII character")),
    };
    if let Some(line) = crate::bulk::csv::unclosed_quote(text.as_bytes(), delimiter) {
        return Err(format!(
            "{}: malformed CSV at line {line}: a quoted field is not closed",
            args.file.display()
        ));
    }
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .flexible(true)
        .from_reader(text.as_bytes());
    let header = reader
        .byte_headers()
        .map_err(|e| format!("{}: {e}", args.file.display()))?
        .clone();
    let mut config = json!({});
    if delimiter != b',' {
        config["delimiter"] = json!((delimiter as char).to_string());
    }
    let opts = options(args);
    let mut batches = Vec::new();
    let mut rows = reader.byte_records();
    let mut first = 0;
    loop {
        // Flexible: a short row is passed on as it is (the server reads its missing cells as
        // absent); a long one is refused here, with its line, as the server would.
        let mut w = csv::WriterBuilder::new()
            .delimiter(delimiter)
            .flexible(true)
            .from_writer(Vec::new());
        w.write_byte_record(&header).map_err(|e| e.to_string())?;
        let mut n = 0;
        for row in rows.by_ref() {
            let row = row.map_err(|e| format!("{}: {e}", args.file.display()))?;
            if row.len() > header.len() {
                return Err(format!(
                    "{}: malformed CSV at line {}: the row has {} fields, the header {}",
                    args.file.display(),
                    row.position().map_or(0, |p| crate::bulk::csv::record_line(
                        text.as_bytes(),
                        p.byte() as usize
                    )),
                    row.len(),
                    header.len()
                ));
            }
            w.write_byte_record(&row).map_err(|e| e.to_string())?;
            n += 1;
            if n == args.batch_size {
                break;
            }
        }
        if n == 0 {
            break;
        }
        let data = String::from_utf8(w.into_inner().map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        batches.push((
            first,
            n,
            json!({"kind": "csv", "label": args.label, "data": data, "parseConfig": config, "options": opts}),
        ));
        first += n;
    }
    Ok(Batches {
        batches,
        documents: first,
    })
}

fn read_batches(args: &ImportArgs) -> Result<Batches, String> {
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
    // A byte order mark some editors write is not part of the data.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    match format_of(args)?.as_str() {
        "json" => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(docs)) => Ok(document_batches(docs, args)),
            Ok(doc @ Value::Object(_)) => Ok(document_batches(vec![doc], args)),
            Ok(_) => Err(format!(
                "{}: expected an array of documents or one object",
                args.file.display()
            )),
            Err(e) => Err(format!("{}: malformed JSON: {e}", args.file.display())),
        },
        "jsonl" | "ndjson" => {
            let mut docs = Vec::new();
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                docs.push(serde_json::from_str(line).map_err(|e| {
                    format!(
                        "{} line {}: malformed JSON: {e}",
                        args.file.display(),
                        i + 1
                    )
                })?);
            }
            Ok(document_batches(docs, args))
        }
        "csv" => csv_batches(text, args),
        other => Err(format!(
            "unknown format '{other}': expected json, jsonl, ndjson or csv"
        )),
    }
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Why a batch failed, and whether the server said so.
struct Failure {
    message: String,
    /// The engine refused the batch (a 4xx in its error envelope): the batch wrote nothing.
    /// Otherwise (no answer, a dropped connection, a timeout, a 5xx, an answer that is not
    /// the engine's, such as a proxy's error page) it may or may not have been written.
    refused: bool,
}

impl Failure {
    fn unknown(message: String) -> Failure {
        Failure {
            message,
            refused: false,
        }
    }
}

/// Sends one batch; answers (records, relationships) or why it failed.
async fn send(
    client: &HttpClient,
    args: &ImportArgs,
    ingest: &Value,
) -> Result<(u64, u64), Failure> {
    let budget = std::time::Duration::from_secs(args.timeout);
    match tokio::time::timeout(budget, send_once(client, args, ingest)).await {
        Ok(out) => out,
        Err(_) => Err(Failure::unknown(format!(
            "no answer within {} s (--timeout)",
            args.timeout
        ))),
    }
}

async fn send_once(
    client: &HttpClient,
    args: &ImportArgs,
    ingest: &Value,
) -> Result<(u64, u64), Failure> {
    let mut envelope =
        json!({"protocolVersion": 1, "operation": {"kind": "ingest", "ingest": ingest}});
    let mut req = hyper::Request::post(format!(
        "{}/protocol/v1/execute",
        args.url.trim_end_matches('/')
    ))
    .header("content-type", "application/json")
    .header("authorization", format!("Bearer {}", args.token));
    if let Some(t) = &args.tenant {
        envelope["context"] = json!({"scope": t});
        req = req.header("x-service-tenant", t);
    }
    let body = serde_json::to_vec(&envelope).map_err(|e| Failure::unknown(e.to_string()))?;
    let bytes_sent = body.len();
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| Failure::unknown(e.to_string()))?;
    let resp = client.request(req).await.map_err(|e| {
        // A server refuses a body over its cap with 413 before reading it and closes the
        // connection, which a client still sending sees as a dropped connection.
        let hint = if bytes_sent > LARGE_BATCH_BYTES {
            format!(
                " (the batch was {bytes_sent} bytes: if that is over the server's body cap, limits.max_body_bytes, default 32 MiB, lower --batch-size)"
            )
        } else {
            String::new()
        };
        Failure::unknown(format!("cannot reach {}: {e}{hint}", args.url))
    })?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| Failure::unknown(format!("reading the answer: {e}")))?
        .to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let text = || {
        let t = String::from_utf8_lossy(&bytes);
        t.chars().take(200).collect::<String>()
    };
    if !status.is_success() {
        let code = v["error"]["code"].as_str().unwrap_or("?");
        let msg = v["error"]["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(text);
        return Err(Failure {
            message: format!("HTTP {} {code}: {msg}", status.as_u16()),
            refused: engine_refusal(status.as_u16(), &v),
        });
    }
    // Only the engine's ingest result counts as written (a proxy's or another server's 2xx
    // page does not).
    let r = &v["response"];
    match (r["kind"].as_str(), r["count"].as_u64()) {
        (Some("ingested"), Some(count)) => Ok((count, r["relationships"].as_u64().unwrap_or(0))),
        _ => Err(Failure::unknown(format!(
            "HTTP {} with an answer that is not an ingest result (is --url the engine?): {}",
            status.as_u16(),
            text()
        ))),
    }
}

/// Batches above this size get a hint about the body cap when their connection drops.
const LARGE_BATCH_BYTES: usize = 1 << 20;

/// Whether an error answer is the engine refusing the batch, which then wrote nothing: a
/// 4xx in the Protocol v1 error envelope whose code the table renders as that status. The
/// engine validates a batch before it writes, and its time budget never cuts a write short
/// (408 means nothing was written). A 5xx, or any other page (a proxy's), says nothing
/// about what was written.
fn engine_refusal(status: u16, answer: &Value) -> bool {
    let code = answer["error"]["code"]
        .as_str()
        .and_then(crate::error::ErrorCode::parse);
    (400..500).contains(&status)
        && answer["protocolVersion"] == 1
        && code.is_some_and(|c| c.http_status() == status)
}

fn progress(total: usize, quiet: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
    if quiet {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {pos}/{len} documents  {per_sec}  elapsed {elapsed}  ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// The server URL is `http://host:port` (an optional path prefix is kept): the loader speaks
/// plain HTTP only, so another scheme is refused before any file is read, not reported later
/// as a connection error.
fn check_url(url: &str) -> Result<(), String> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| format!("not a URL ({e}); expected http://HOST:PORT"))?;
    match uri.scheme_str() {
        Some("http") if uri.host().is_some_and(|h| !h.is_empty()) => Ok(()),
        Some("http") => Err("no host; expected http://HOST:PORT".into()),
        Some(other) => Err(format!(
            "the loader speaks plain http only, not {other}:// (TLS is not built in; reach the engine over http, e.g. through a local tunnel)"
        )),
        None => Err("no scheme; expected http://HOST:PORT".into()),
    }
}

/// Runs the loader; the exit code.
pub async fn run(args: ImportArgs) -> i32 {
    if args.batch_size == 0 || args.concurrency == 0 {
        eprintln!("error: --batch-size and --concurrency must be at least 1");
        return 2;
    }
    if let Err(e) = check_url(&args.url) {
        eprintln!("error: --url {}: {e}", args.url);
        return 2;
    }
    let batches = match read_batches(&args) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let started = Instant::now();
    let total = batches.documents;
    let bar = progress(total, args.quiet);
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let args = Arc::new(args);
    let permits = Arc::new(Semaphore::new(args.concurrency));
    let mut tasks = Vec::with_capacity(batches.batches.len());
    let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Ctrl-C (SIGINT) stops sending: the batches in flight finish (or fail) and the summary
    // says how far the load got.
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let interrupted = interrupted.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
    }
    for (i, (first, n, ingest)) in batches.batches.into_iter().enumerate() {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        if failed.load(std::sync::atomic::Ordering::Relaxed)
            || interrupted.load(std::sync::atomic::Ordering::Relaxed)
        {
            break;
        }
        let (client, args, bar, failed) =
            (client.clone(), args.clone(), bar.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            let out = send(&client, &args, &ingest).await;
            match &out {
                Ok(_) => bar.inc(n as u64),
                Err(_) => failed.store(true, std::sync::atomic::Ordering::Relaxed),
            }
            drop(permit);
            (i, first, n, out)
        }));
    }
    let (mut records, mut relationships, mut documents) = (0u64, 0u64, 0usize);
    let mut failure: Option<(usize, usize, usize, Failure)> = None;
    for t in tasks {
        match t.await {
            Ok((_, _, n, Ok((r, rel)))) => {
                records += r;
                relationships += rel;
                documents += n;
            }
            Ok((i, first, n, Err(e))) => {
                if failure.as_ref().is_none_or(|f| i < f.0) {
                    failure = Some((i, first, n, e));
                }
            }
            Err(e) => {
                failure = failure.or(Some((usize::MAX, 0, 0, Failure::unknown(e.to_string()))))
            }
        }
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let rate = records as f64 / secs.max(1e-9);
    println!(
        "imported {documents} document(s) from {} as {records} record(s) and {relationships} relationship(s) in {secs:.2} s ({rate:.0} records/s)",
        args.file.display()
    );
    match failure {
        None if documents < total && interrupted.load(std::sync::atomic::Ordering::Relaxed) => {
            eprintln!(
                "interrupted: the {documents} document(s) counted above were imported (with --concurrency above 1 they need not be the first ones of the file); --merge-by makes a re-run safe"
            );
            130
        }
        None => 0,
        Some((i, first, n, e)) => {
            eprintln!(
                "error: batch {} (documents {}..{} of the file) failed: {}",
                i + 1,
                first,
                first + n,
                e.message
            );
            let failing = if e.refused {
                "the failing batch wrote nothing"
            } else {
                "the failing batch may or may not have been written (the server did not say)"
            };
            eprintln!(
                "{failing}; the {documents} document(s) counted above were imported (with --concurrency above 1 they can include batches after it); --merge-by makes a re-run safe"
            );
            1
        }
    }
}
