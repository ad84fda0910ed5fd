//! One load client for gRPC and HTTP (issue 8: gRPC vs HTTP, benches/run-grpc.sh), so both
//! protocols are driven by the same code, the same runtime and the same operations.
//!
//!   grpc_http_load --mode grpc|http --target HOST:PORT --conc 32 --duration 10 \
//!                  --workload get|search --ids FILE [--token dev-token] [--system NAME] [--round N]
//!   grpc_http_load --mode null-grpc-server|null-h2-server --listen 127.0.0.1:PORT
//!   grpc_http_load --mode http-tx --target HOST:PORT --conc 32 --duration 10 --drain 3 \
//!                  --writes 10 --lat-out FILE [--token dev-token]
//!
//! Load modes: `conc` tasks on a tokio multi-thread runtime (worker threads = the CPUs this
//! process may run on, so 1 under `taskset -c 0`), each on its own connection (HTTP: one
//! keep-alive HTTP/1.1 connection per task, hyper `http1::handshake`; gRPC: one tonic Channel,
//! i.e. one HTTP/2 connection, per task), each sending one request at a time. Both carry the
//! identical Protocol v1 operation: gRPC `Execute` with `operation_json`, HTTP
//! `POST /protocol/v1/execute` with `{"protocolVersion":1,"operation":...}`. Request bodies are
//! built before the clock starts. Workloads, rotating over the N ids in FILE (task i starts at
//! i*N/conc):
//!   get     `{"kind":"query","query":{"kind":"record","id":ID}}`
//!   search  `{"kind":"query","query":{"kind":"records","query":{"labels":["BENCH"],"predicate":{"n":K},"limit":10}}}`
//!           with K = 0..N-1 (one match each on benches/run-grpc.sh's data)
//! Success: HTTP 200 with the body read, or gRPC OK with the message decoded; everything else
//! counts as an error. Connections are opened before the clock starts; a broken one is
//! reopened (counted as an error). Prints one JSON line: requests, errors, rps, p50/p99 µs.
//!
//! `http-tx` (W-TX, benches/run-tx.sh): `conc` tasks on a current-thread runtime, each on its
//! own keep-alive HTTP/1.1 connection (a lean client, `RawHttp`: requests written from one
//! buffer, answers parsed with httparse, as wrk and pgbench do; not hyper's client), each running client transactions one after another: `POST /api/v1/tx
//! {"ttl":30000}`, `writes` x `POST /api/v1/records` (a create, label `ORDER`) with
//! `X-Transaction-Id`, `POST /api/v1/tx/{id}/commit`. No transaction begins after `duration`
//! seconds; the open one is finished (up to `drain` more seconds). A write that is not staged
//! (not 201) rolls its transaction back. Counted: commits answered 200 (`commits`; those
//! answered within `duration`: `commits_window`), 409 conflicts, errors per step. Prints one
//! line `TXJSON {...}` with the fields benches/tx/tx.lua prints, and writes every committed
//! transaction's latency (begin sent to commit answer read, µs) to `lat-out`, one per line.
//!
//! `null-grpc-server`: the gRPC null-handler reference, mirror of benches/null_http.rs: an
//! `engine.v1.Engine` service on the engine's own tonic server setup (`Server::builder()`,
//! `serve_with_incoming` on a tokio listener) whose `Execute` answers every call at once with a
//! constant Response. Prints `listening grpc ADDR` once bound; SIGTERM/SIGINT stop it.

use bytes::Bytes;
use engine::wire::grpc::pb;
use engine::wire::grpc::pb::engine_client::EngineClient;
use engine::wire::grpc::pb::engine_server::{Engine as EngineService, EngineServer};
use http_body_util::{BodyExt, Full};
use std::io::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, Endpoint};

struct Args {
    mode: String,
    target: String,
    listen: String,
    conc: usize,
    duration: f64,
    workload: String,
    ids: String,
    token: String,
    system: String,
    round: u32,
    /// Connections the tasks share (gRPC); None: one per task.
    connections: Option<usize>,
    /// http-tx: writes per transaction, seconds to finish open transactions, latency file.
    writes: usize,
    drain: f64,
    lat_out: String,
}

fn usage() -> ! {
    eprintln!(
        "usage: grpc_http_load --mode grpc|http --target HOST:PORT --conc N --duration SECONDS \
         --workload get|search --ids FILE [--token T] [--system NAME] [--round N]\n\
         \x20      grpc_http_load --mode null-grpc-server --listen HOST:PORT\n\
         \x20      grpc_http_load --mode http-tx --target HOST:PORT --conc N --duration SECONDS \
         --drain SECONDS --writes N --lat-out FILE [--token T]"
    );
    std::process::exit(2);
}

fn parse_args() -> Option<Args> {
    let mut a = Args {
        mode: String::new(),
        target: String::new(),
        listen: String::new(),
        conc: 32,
        duration: 10.0,
        workload: "get".into(),
        ids: String::new(),
        token: "dev-token".into(),
        system: String::new(),
        round: 0,
        connections: None,
        writes: 10,
        drain: 3.0,
        lat_out: String::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| usage());
        match k.as_str() {
            "--mode" => a.mode = val(),
            "--target" => a.target = val(),
            "--listen" => a.listen = val(),
            "--conc" => a.conc = val().parse().unwrap_or_else(|_| usage()),
            "--duration" => a.duration = val().parse().unwrap_or_else(|_| usage()),
            "--workload" => a.workload = val(),
            "--ids" => a.ids = val(),
            "--token" => a.token = val(),
            "--system" => a.system = val(),
            "--round" => a.round = val().parse().unwrap_or_else(|_| usage()),
            "--connections" => a.connections = Some(val().parse().unwrap_or_else(|_| usage())),
            "--writes" => a.writes = val().parse().unwrap_or_else(|_| usage()),
            "--drain" => a.drain = val().parse().unwrap_or_else(|_| usage()),
            "--lat-out" => a.lat_out = val(),
            // `cargo bench` passes --bench; ignore it.
            "--bench" => {}
            "-h" | "--help" => usage(),
            other => {
                eprintln!("grpc_http_load: unknown argument {other:?}");
                usage();
            }
        }
    }
    // `cargo bench` runs every bench target with just `--bench`: nothing to do without a mode.
    if a.mode.is_empty() {
        println!("grpc_http_load: load client for benches/run-grpc.sh; see --help");
        return None;
    }
    Some(a)
}

fn main() {
    let Some(args) = parse_args() else { return };
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    // The null servers run on the engine's default worker count, as the engine does.
    let server = args.mode.starts_with("null-");
    // http-tx runs on one thread (the client is pinned to one CPU): no work stealing.
    let rt = match args.mode.as_str() {
        "http-tx" => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(if server {
                engine::config::Runtime::default().worker_threads()
            } else {
                threads
            })
            .enable_all()
            .build(),
    }
    .expect("runtime");
    match args.mode.as_str() {
        "null-grpc-server" => rt.block_on(null_grpc_server(args.listen)),
        "null-h2-server" => rt.block_on(null_h2_server(args.listen)),
        "grpc" | "grpc-tonic" | "http" => rt.block_on(load(args, threads)),
        "http-tx" => rt.block_on(tx_load(args)),
        other => {
            eprintln!("grpc_http_load: unknown mode {other:?}");
            usage();
        }
    }
}

// ------------------------------------------------------------------ null gRPC server

struct NullEngine;

const NULL_RESPONSE: &str = r#"{"success":true}"#;

type NullStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::RecordBatch, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl EngineService for NullEngine {
    async fn execute(
        &self,
        _req: tonic::Request<pb::Envelope>,
    ) -> Result<tonic::Response<pb::Response>, tonic::Status> {
        Ok(tonic::Response::new(pb::Response {
            protocol_version: 1,
            response_json: NULL_RESPONSE.to_string(),
        }))
    }

    type ExecuteStreamStream = NullStream;

    async fn execute_stream(
        &self,
        _req: tonic::Request<pb::Envelope>,
    ) -> Result<tonic::Response<NullStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("null server"))
    }

    async fn ingest(
        &self,
        _req: tonic::Request<tonic::Streaming<pb::Envelope>>,
    ) -> Result<tonic::Response<pb::IngestSummary>, tonic::Status> {
        Err(tonic::Status::unimplemented("null server"))
    }
}

async fn null_grpc_server(listen: String) {
    if listen.is_empty() {
        usage();
    }
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .unwrap_or_else(|e| {
            eprintln!("grpc_http_load: cannot listen on {listen}: {e}");
            std::process::exit(1);
        });
    let bound = listener.local_addr().expect("local_addr");
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening grpc {bound}");
        let _ = out.flush();
    }
    // Same server construction as the engine's wire::grpc::serve (without health/reflection).
    tonic::transport::Server::builder()
        .add_service(EngineServer::new(NullEngine))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
        .await
        .unwrap_or_else(|e| {
            eprintln!("grpc_http_load: gRPC server: {e}");
            std::process::exit(1);
        });
}

/// `null-h2-server`: the gRPC null handler on hyper's HTTP/2 server without tonic (the same
/// answer, framed by hand), to tell tonic's share of a call from HTTP/2's: on 2026-11-25 it
/// served 88-89k calls/s against `null-grpc-server`'s 85-94k with the same client, so the
/// cost is HTTP/2 (h2), not tonic.
async fn null_h2_server(listen: String) {
    let listener = tokio::net::TcpListener::bind(&listen).await.expect("bind");
    println!("listening grpc {}", listener.local_addr().unwrap());
    let frame = grpc_frame(&pb::Response {
        protocol_version: 1,
        response_json: NULL_RESPONSE.to_string(),
    });
    loop {
        let (s, _) = listener.accept().await.expect("accept");
        let _ = s.set_nodelay(true);
        let frame = frame.clone();
        tokio::spawn(async move {
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let frame = frame.clone();
                    async move {
                        let _ = req.into_body().collect().await;
                        let mut tr = hyper::HeaderMap::new();
                        tr.insert("grpc-status", hyper::header::HeaderValue::from_static("0"));
                        let frames: Vec<
                            Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
                        > = vec![
                            Ok(hyper::body::Frame::data(frame)),
                            Ok(hyper::body::Frame::trailers(tr)),
                        ];
                        let body = http_body_util::StreamBody::new(tokio_stream::iter(frames));
                        Ok::<_, std::convert::Infallible>(
                            hyper::Response::builder()
                                .header("content-type", "application/grpc")
                                .body(body)
                                .unwrap(),
                        )
                    }
                });
            let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                .await;
        });
    }
}

// ------------------------------------------------------------------ load

/// The operation JSON objects the run sends, one per id (get) or per K (search).
fn operations(workload: &str, ids: &[String]) -> Vec<String> {
    match workload {
        "get" => ids
            .iter()
            .map(|id| {
                serde_json::json!({"kind": "query", "query": {"kind": "record", "id": id}})
                    .to_string()
            })
            .collect(),
        "search" => (0..ids.len())
            .map(|k| {
                serde_json::json!({"kind": "query", "query": {"kind": "records",
                    "query": {"labels": ["BENCH"], "predicate": {"n": k}, "limit": 10}}})
                .to_string()
            })
            .collect(),
        other => {
            eprintln!("grpc_http_load: unknown workload {other:?}");
            usage();
        }
    }
}

#[derive(Default)]
struct TaskResult {
    lat_us: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
}

impl TaskResult {
    fn error(&mut self, e: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }
}

struct HttpConn {
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

/// A client socket to `target` with TCP_NODELAY, as hyper's handshakes take it.
async fn tcp(target: &str) -> Result<hyper_util::rt::TokioIo<tokio::net::TcpStream>, String> {
    let stream = tokio::net::TcpStream::connect(target)
        .await
        .map_err(|e| format!("connect {target}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    Ok(hyper_util::rt::TokioIo::new(stream))
}

async fn http_connect(target: &str) -> Result<HttpConn, String> {
    let io = tcp(target).await?;
    let (send, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(HttpConn { send })
}

/// gRPC on the same client library as HTTP: one hyper HTTP/2 connection, the call framed by
/// hand (`POST /engine.v1.Engine/Execute`, a 5-byte length prefix before the protobuf
/// message, `grpc-status` in the trailers). Leaves tonic's client (a buffer task per channel)
/// out of the comparison; the server is the engine's tonic server either way.
struct H2Conn {
    send: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
}

async fn h2_connect(target: &str) -> Result<H2Conn, String> {
    let io = tcp(target).await?;
    let (send, conn) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(H2Conn { send })
}

/// One gRPC message frame: uncompressed flag, big-endian length, the encoded message.
fn grpc_frame(msg: &impl prost::Message) -> Bytes {
    let body = msg.encode_to_vec();
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(0);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Bytes::from(out)
}

/// A POST of `body` to `uri` with the run's token, a content type and one more header.
fn post(
    uri: &str,
    (name, value): (&str, &str),
    content_type: &str,
    sh: &Shared,
    body: &Bytes,
) -> hyper::Request<Full<Bytes>> {
    hyper::Request::post(uri)
        .header(name, value)
        .header(hyper::header::CONTENT_TYPE, content_type)
        .header(hyper::header::AUTHORIZATION, &sh.auth)
        .body(Full::new(body.clone()))
        .expect("request")
}

/// A failed send: the connection is gone.
fn sent(e: hyper::Error) -> (String, bool) {
    (format!("send: {e}"), true)
}

async fn h2_call(c: &mut H2Conn, sh: &Shared, i: usize) -> Result<(), (String, bool)> {
    if c.send.ready().await.is_err() {
        return Err(("connection closed".into(), true));
    }
    let req = post(
        &format!("http://{}/engine.v1.Engine/Execute", sh.host),
        ("te", "trailers"),
        "application/grpc",
        sh,
        &sh.grpc_frames[i],
    );
    let resp = c.send.send_request(req).await.map_err(sent)?;
    let (parts, body) = resp.into_parts();
    let collected = body
        .collect()
        .await
        .map_err(|e| (format!("body: {e}"), true))?;
    // grpc-status comes in the trailers, or in the headers of a trailers-only answer.
    let status = collected
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| parts.headers.get("grpc-status"))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("missing")
        .to_string();
    let data = collected.to_bytes();
    if parts.status != hyper::StatusCode::OK || status != "0" {
        return Err((format!("HTTP {} grpc-status {status}", parts.status), false));
    }
    if data.len() < 5 {
        return Err(("short gRPC message".into(), false));
    }
    <pb::Response as prost::Message>::decode(&data[5..])
        .map_err(|e| (format!("decode: {e}"), false))?;
    Ok(())
}

async fn grpc_connect(target: &str) -> Result<EngineClient<Channel>, String> {
    let ch = Endpoint::from_shared(format!("http://{target}"))
        .map_err(|e| e.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|e| format!("connect {target}: {e}"))?;
    Ok(EngineClient::new(ch).max_decoding_message_size(64 << 20))
}

enum Conn {
    Http(HttpConn),
    H2(H2Conn),
    Grpc(EngineClient<Channel>),
}

async fn connect(mode: &str, target: &str) -> Result<Conn, String> {
    match mode {
        "http" => http_connect(target).await.map(Conn::Http),
        "grpc" => h2_connect(target).await.map(Conn::H2),
        _ => grpc_connect(target).await.map(Conn::Grpc),
    }
}

struct Shared {
    mode: String,
    target: String,
    host: String,
    auth: String,
    auth_md: MetadataValue<Ascii>,
    /// HTTP bodies: the full Protocol v1 envelope.
    http_bodies: Vec<Bytes>,
    /// gRPC: the operation JSON (the envelope's other fields are protobuf fields).
    ops: Vec<String>,
    /// gRPC over hyper: each Envelope already framed.
    grpc_frames: Vec<Bytes>,
}

/// Sends `req` on an HTTP/1.1 connection and reads the whole answer.
async fn exchange(
    c: &mut HttpConn,
    req: hyper::Request<Full<Bytes>>,
) -> Result<(hyper::StatusCode, Bytes), (String, bool)> {
    if c.send.ready().await.is_err() {
        return Err(("connection closed".into(), true));
    }
    let resp = c.send.send_request(req).await.map_err(sent)?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| (format!("body: {e}"), true))?
        .to_bytes();
    Ok((status, body))
}

/// One request; Ok(()) on success, Err((message, reconnect)) otherwise.
async fn one(conn: &mut Conn, sh: &Shared, i: usize) -> Result<(), (String, bool)> {
    match conn {
        Conn::Http(c) => {
            let req = post(
                "/protocol/v1/execute",
                ("host", &sh.host),
                "application/json",
                sh,
                &sh.http_bodies[i],
            );
            let (status, body) = exchange(c, req).await?;
            if status != hyper::StatusCode::OK {
                return Err((
                    format!("HTTP {status}: {}", String::from_utf8_lossy(&body)),
                    false,
                ));
            }
            Ok(())
        }
        Conn::H2(c) => h2_call(c, sh, i).await,
        Conn::Grpc(c) => {
            let mut req = tonic::Request::new(pb::Envelope {
                protocol_version: 1,
                context: None,
                operation_json: sh.ops[i].clone(),
            });
            req.metadata_mut()
                .insert("authorization", sh.auth_md.clone());
            match c.execute(req).await {
                Ok(_) => Ok(()),
                Err(s) => {
                    let reconnect = matches!(s.code(), tonic::Code::Unavailable);
                    Err((format!("gRPC {:?}: {}", s.code(), s.message()), reconnect))
                }
            }
        }
    }
}

async fn load(args: Args, threads: usize) {
    if args.target.is_empty() || args.ids.is_empty() || args.conc == 0 {
        usage();
    }
    let text = std::fs::read_to_string(&args.ids).unwrap_or_else(|e| {
        eprintln!("grpc_http_load: cannot read {}: {e}", args.ids);
        std::process::exit(1);
    });
    let ids: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if ids.is_empty() {
        eprintln!("grpc_http_load: no ids in {}", args.ids);
        std::process::exit(1);
    }
    let ops = operations(&args.workload, &ids);
    let http_bodies = ops
        .iter()
        .map(|op| Bytes::from(format!(r#"{{"protocolVersion":1,"operation":{op}}}"#)))
        .collect();
    let grpc_frames = ops
        .iter()
        .map(|op| {
            grpc_frame(&pb::Envelope {
                protocol_version: 1,
                context: None,
                operation_json: op.clone(),
            })
        })
        .collect();
    let auth = format!("Bearer {}", args.token);
    let sh = Arc::new(Shared {
        mode: args.mode.clone(),
        target: args.target.clone(),
        host: args.target.clone(),
        auth_md: auth.parse().expect("token is not valid metadata"),
        auth,
        http_bodies,
        ops,
        grpc_frames,
    });

    // Open every connection first; the clock starts when all are up. With fewer connections
    // than tasks (gRPC only), tasks share them round-robin as multiplexed HTTP/2 streams.
    let wanted = args.connections.unwrap_or(args.conc).clamp(1, args.conc);
    if wanted != args.conc && args.mode == "http" {
        eprintln!(
            "grpc_http_load: HTTP/1.1 cannot share connections: --connections must equal --conc"
        );
        std::process::exit(2);
    }
    let mut opened = Vec::with_capacity(wanted);
    for _ in 0..wanted {
        match connect(&sh.mode, &sh.target).await {
            Ok(c) => opened.push(c),
            Err(e) => {
                eprintln!("grpc_http_load: {e}");
                std::process::exit(1);
            }
        }
    }
    let conns: Vec<Conn> = if wanted == args.conc {
        opened
    } else {
        (0..args.conc)
            .map(|t| match &opened[t % wanted] {
                Conn::H2(c) => Conn::H2(H2Conn {
                    send: c.send.clone(),
                }),
                Conn::Grpc(c) => Conn::Grpc(c.clone()),
                Conn::Http(_) => unreachable!("HTTP connections are not shared"),
            })
            .collect()
    };
    let n = sh.ops.len();
    let dur = Duration::from_secs_f64(args.duration);
    let start = Instant::now();
    let deadline = start + dur;
    let mut handles = Vec::with_capacity(args.conc);
    for (t, mut conn) in conns.into_iter().enumerate() {
        let sh = sh.clone();
        let mut i = t * n / args.conc;
        handles.push(tokio::spawn(async move {
            let mut r = TaskResult {
                lat_us: Vec::with_capacity(1 << 16),
                ..Default::default()
            };
            loop {
                let t0 = Instant::now();
                if t0 >= deadline {
                    break;
                }
                match one(&mut conn, &sh, i).await {
                    Ok(()) => {
                        let us = t0.elapsed().as_micros().min(u32::MAX as u128) as u32;
                        r.lat_us.push(us);
                    }
                    Err((e, reconnect)) => {
                        r.error(e);
                        if reconnect {
                            match connect(&sh.mode, &sh.target).await {
                                Ok(c) => conn = c,
                                Err(e) => {
                                    r.error(e);
                                    tokio::time::sleep(Duration::from_millis(50)).await;
                                }
                            }
                        }
                    }
                }
                i += 1;
                if i == n {
                    i = 0;
                }
            }
            r
        }));
    }
    let mut lat: Vec<u32> = Vec::new();
    let mut errors = 0u64;
    let mut first_error = None;
    for h in handles {
        let r = h.await.expect("task");
        lat.extend_from_slice(&r.lat_us);
        errors += r.errors;
        if first_error.is_none() {
            first_error = r.first_error;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    lat.sort_unstable();
    let pct = |p: f64| -> u32 {
        if lat.is_empty() {
            return 0;
        }
        let k = ((p / 100.0) * lat.len() as f64).ceil() as usize;
        lat[k.clamp(1, lat.len()) - 1]
    };
    let requests = lat.len() as u64;
    let mean = if lat.is_empty() {
        0.0
    } else {
        lat.iter().map(|&v| v as f64).sum::<f64>() / lat.len() as f64
    };
    if let Some(e) = &first_error {
        eprintln!("grpc_http_load: {errors} error(s); first: {e}");
    }
    let line = serde_json::json!({
        "round": args.round,
        "system": args.system,
        "mode": args.mode,
        "workload": args.workload,
        "conc": args.conc,
        "connections": args.connections.unwrap_or(args.conc),
        "threads": threads,
        "duration_s": (elapsed * 1000.0).round() / 1000.0,
        "requests": requests,
        "errors": errors,
        "rps": (requests as f64 / elapsed * 10.0).round() / 10.0,
        "p50_us": pct(50.0),
        "p99_us": pct(99.0),
        "mean_us": mean.round(),
        "max_us": lat.last().copied().unwrap_or(0),
    });
    println!("{line}");
}

// ------------------------------------------------------------------ http-tx (W-TX)

/// The W8 create body, as benches/tx/tx.lua sends it.
const TX_WRITE_BODY: &str = r#"{"label":"ORDER","data":{"status":"paid","total":12.5,"city":"Oslo","createdAt":"2026-01-01T10:00:00Z"}}"#;

/// One task's counts (the fields of tx.lua's TXJSON line) and latencies.
#[derive(Default)]
struct TxCounts {
    commits: u64,
    commits_window: u64,
    conflicts: u64,
    aborted: u64,
    err_begin: u64,
    err_write: u64,
    err_commit: u64,
    err_rollback: u64,
    err_connect: u64,
    requests: u64,
    finished: bool,
    tx_lat_us: Vec<u32>,
    req_lat_us: Vec<u32>,
    odd: Option<String>,
}

impl TxCounts {
    fn note(&mut self, step: &str, e: &str) {
        if self.odd.is_none() {
            self.odd = Some(format!(
                "{step} {}",
                e.chars().take(300).collect::<String>()
            ));
        }
    }
}

struct TxShared {
    host: String,
    auth: String,
    begin_body: Bytes,
    write_body: Bytes,
}

/// A lean HTTP/1.1 keep-alive client for `http-tx`, in the spirit of wrk and pgbench: one
/// request at a time, written from one buffer, the answer read into another and parsed by
/// httparse (the parser hyper uses). hyper's client hands each request and answer between two
/// tasks over channels; with 32 connections on one CPU that cost ~5x pgbench's user CPU, time
/// taken from the engine on a 2-core machine. Answers must carry `Content-Length` (the
/// engine's do on these routes); anything else is an error.
struct RawHttp {
    stream: tokio::net::TcpStream,
    req: Vec<u8>,
    buf: Vec<u8>,
    /// Where the last answer's body is in `buf`.
    body: std::ops::Range<usize>,
}

impl RawHttp {
    async fn connect(target: &str) -> Result<RawHttp, String> {
        let stream = tokio::net::TcpStream::connect(target)
            .await
            .map_err(|e| format!("connect {target}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(RawHttp {
            stream,
            req: Vec::with_capacity(512),
            buf: Vec::with_capacity(4096),
            body: 0..0,
        })
    }

    /// The last answer's body.
    fn body(&self) -> &[u8] {
        &self.buf[self.body.clone()]
    }

    /// Sends `POST path` and reads the whole answer; its status, or Err((message,
    /// reconnect)).
    async fn post(
        &mut self,
        sh: &TxShared,
        path: &str,
        txid: Option<&str>,
        body: &[u8],
    ) -> Result<u16, (String, bool)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.req.clear();
        let _ = write!(
            self.req,
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\n",
            sh.host, sh.auth
        );
        if let Some(id) = txid {
            let _ = write!(self.req, "X-Transaction-Id: {id}\r\n");
        }
        if !body.is_empty() {
            self.req
                .extend_from_slice(b"Content-Type: application/json\r\n");
        }
        let _ = write!(self.req, "Content-Length: {}\r\n\r\n", body.len());
        self.req.extend_from_slice(body);
        self.stream
            .write_all(&self.req)
            .await
            .map_err(|e| (format!("send: {e}"), true))?;
        self.buf.clear();
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut headers);
            let parsed = match resp.parse(&self.buf) {
                Ok(httparse::Status::Complete(head)) => {
                    let len: usize = resp
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                        .ok_or_else(|| ("an answer without Content-Length".to_string(), true))?;
                    let end = head
                        .checked_add(len)
                        .filter(|_| len <= 64 << 20)
                        .ok_or_else(|| (format!("an answer of {len} bytes"), true))?;
                    Some((resp.code.unwrap_or(0), head, end))
                }
                Ok(httparse::Status::Partial) => None,
                Err(e) => return Err((format!("answer: {e}"), true)),
            };
            if let Some((status, head, end)) = parsed {
                if self.buf.len() > end {
                    // One request at a time: bytes past the answer mean the stream is lost.
                    return Err(("bytes after the answer".into(), true));
                }
                if self.buf.len() == end {
                    self.body = head..end;
                    return Ok(status);
                }
            }
            let n = self
                .stream
                .read_buf(&mut self.buf)
                .await
                .map_err(|e| (format!("read: {e}"), true))?;
            if n == 0 {
                return Err(("connection closed".into(), true));
            }
        }
    }
}

/// Sends one step of a transaction (`POST path`, with the transaction id and a body when
/// given), timing it; Err carries the answer or the failure.
async fn tx_step(
    c: &mut RawHttp,
    sh: &TxShared,
    r: &mut TxCounts,
    (path, txid, body): (&str, Option<&str>, &[u8]),
    want: u16,
) -> Result<(), (Option<u16>, String, bool)> {
    let t0 = Instant::now();
    r.requests += 1;
    match c.post(sh, path, txid, body).await {
        Ok(status) => {
            r.req_lat_us
                .push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
            if status == want {
                Ok(())
            } else {
                let text = String::from_utf8_lossy(c.body()).into_owned();
                Err((Some(status), format!("{status} {text}"), false))
            }
        }
        Err((e, reconnect)) => Err((None, e, reconnect)),
    }
}

/// The transaction id in a begin answer (`{"success":true,"data":{"id":"...",...}}`).
fn tx_id(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("data")?.get("id")?.as_str().map(str::to_string)
}

/// One task: transactions one after another until `deadline`, the open one finished.
async fn tx_task(
    mut c: RawHttp,
    sh: Arc<TxShared>,
    target: String,
    writes: usize,
    deadline: Instant,
) -> TxCounts {
    let mut r = TxCounts {
        tx_lat_us: Vec::with_capacity(1 << 12),
        req_lat_us: Vec::with_capacity(1 << 16),
        ..Default::default()
    };
    let mut broken = false;
    while Instant::now() < deadline {
        if broken {
            match RawHttp::connect(&target).await {
                Ok(n) => (c, broken) = (n, false),
                Err(e) => {
                    r.err_connect += 1;
                    r.note("connect", &e);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        }
        let t_begin = Instant::now();
        let begin = ("/api/v1/tx", None, &sh.begin_body[..]);
        let id = match tx_step(&mut c, &sh, &mut r, begin, 200).await {
            Ok(()) => match tx_id(c.body()) {
                Some(id) => id,
                None => {
                    r.err_begin += 1;
                    r.note("begin", &String::from_utf8_lossy(c.body()));
                    continue;
                }
            },
            Err((_, e, reconnect)) => {
                r.err_begin += 1;
                r.note("begin", &e);
                broken = reconnect;
                continue;
            }
        };
        let mut staged = true;
        for _ in 0..writes {
            let w = ("/api/v1/records", Some(id.as_str()), &sh.write_body[..]);
            if let Err((_, e, reconnect)) = tx_step(&mut c, &sh, &mut r, w, 201).await {
                r.err_write += 1;
                r.note("write", &e);
                broken = reconnect;
                staged = false;
                break;
            }
        }
        if broken {
            continue; // the transaction expires on the server (ttl)
        }
        if !staged {
            // Not every write was staged: roll back, so no partial transaction commits.
            let path = format!("/api/v1/tx/{id}/rollback");
            match tx_step(&mut c, &sh, &mut r, (&path, Some(&id), b""), 200).await {
                Ok(_) => r.aborted += 1,
                Err((_, e, reconnect)) => {
                    r.err_rollback += 1;
                    r.note("rollback", &e);
                    broken = reconnect;
                }
            }
            continue;
        }
        let path = format!("/api/v1/tx/{id}/commit");
        match tx_step(&mut c, &sh, &mut r, (&path, Some(&id), b""), 200).await {
            Ok(_) => {
                let now = Instant::now();
                r.commits += 1;
                if now <= deadline {
                    r.commits_window += 1;
                }
                r.tx_lat_us
                    .push((now - t_begin).as_micros().min(u32::MAX as u128) as u32);
            }
            Err((Some(409), _, _)) => r.conflicts += 1,
            Err((_, e, reconnect)) => {
                r.err_commit += 1;
                r.note("commit", &e);
                broken = reconnect;
            }
        }
    }
    r.finished = true;
    r
}

async fn tx_load(args: Args) {
    if args.target.is_empty() || args.conc == 0 || args.writes == 0 || args.lat_out.is_empty() {
        usage();
    }
    let sh = Arc::new(TxShared {
        host: args.target.clone(),
        auth: format!("Bearer {}", args.token),
        begin_body: Bytes::from_static(br#"{"ttl":30000}"#),
        write_body: Bytes::from_static(TX_WRITE_BODY.as_bytes()),
    });
    let mut conns = Vec::with_capacity(args.conc);
    for _ in 0..args.conc {
        match RawHttp::connect(&args.target).await {
            Ok(c) => conns.push(c),
            Err(e) => {
                eprintln!("grpc_http_load: {e}");
                std::process::exit(1);
            }
        }
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(args.duration);
    let handles: Vec<_> = conns
        .into_iter()
        .map(|c| {
            let task = tx_task(c, sh.clone(), args.target.clone(), args.writes, deadline);
            tokio::spawn(task)
        })
        .collect();
    // A task still running `drain` seconds after the window is counted as unfinished.
    let drain_end = deadline + Duration::from_secs_f64(args.drain);
    let mut all = TxCounts::default();
    let mut unfinished = 0u64;
    let mut odds = Vec::new();
    for mut h in handles {
        let r = match tokio::time::timeout_at(drain_end.into(), &mut h).await {
            Ok(r) => r.expect("task"),
            Err(_) => {
                h.abort();
                unfinished += 1;
                continue;
            }
        };
        all.commits += r.commits;
        all.commits_window += r.commits_window;
        all.conflicts += r.conflicts;
        all.aborted += r.aborted;
        all.err_begin += r.err_begin;
        all.err_write += r.err_write;
        all.err_commit += r.err_commit;
        all.err_rollback += r.err_rollback;
        all.err_connect += r.err_connect;
        all.requests += r.requests;
        all.tx_lat_us.extend_from_slice(&r.tx_lat_us);
        all.req_lat_us.extend_from_slice(&r.req_lat_us);
        if let Some(o) = r.odd {
            if odds.len() < 5 {
                odds.push(o);
            }
        }
    }
    let elapsed = start.elapsed();
    let mut out = String::with_capacity(all.tx_lat_us.len() * 6);
    for v in &all.tx_lat_us {
        out.push_str(&v.to_string());
        out.push('\n');
    }
    std::fs::write(&args.lat_out, out).unwrap_or_else(|e| {
        eprintln!("grpc_http_load: cannot write {}: {e}", args.lat_out);
        std::process::exit(1);
    });
    all.req_lat_us.sort_unstable();
    let pct = |p: f64| -> u32 {
        let l = &all.req_lat_us;
        if l.is_empty() {
            return 0;
        }
        l[(((l.len() - 1) as f64) * p).round() as usize]
    };
    for o in &odds {
        println!("ODD {o}");
    }
    let line = serde_json::json!({
        "commits": all.commits,
        "commits_window": all.commits_window,
        "conflicts": all.conflicts,
        "aborted": all.aborted,
        "unfinished": unfinished,
        "open_tx": unfinished,
        "err_begin": all.err_begin,
        "err_write": all.err_write,
        "err_commit": all.err_commit,
        "err_rollback": all.err_rollback,
        "requests": all.requests,
        "duration_us": elapsed.as_micros() as u64,
        "err_connect": all.err_connect,
        "err_read": 0,
        "err_write_sock": 0,
        "err_status": 0,
        "err_timeout": 0,
        "req_p50_us": pct(0.50),
        "req_p99_us": pct(0.99),
        "threads": args.conc,
    });
    println!("TXJSON {line}");
}
