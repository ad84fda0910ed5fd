//! Physical reference for HTTP benchmarks: a null handler on the engine's own HTTP stack
//! (tokio multi-thread runtime with the engine's default worker count, hyper 1 http1
//! keep-alive, TCP_NODELAY). Every request gets
//! `200 {"success":true}` with `content-type: application/json`; request bodies are drained.
//! `--body-bytes N` makes the answer a JSON object of N bytes instead (`{"success":true,
//! "data":"xxx..."}`), the reference for routes whose answers are that large.
//!
//!   null_http --addr 127.0.0.1:PORT [--body-bytes N]     (127.0.0.1:0 picks a free port)
//!
//! Prints `listening http ADDR` on stdout once bound; SIGTERM/SIGINT stop it (default action).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::io::Write;
use std::time::Duration;

static BODY: &[u8] = br#"{"success":true}"#;

/// The answer of `--body-bytes N`: a JSON object of exactly `n` bytes (at least the default's).
fn body_of(n: usize) -> Bytes {
    let (head, tail) = (r#"{"success":true,"data":""#, r#""}"#);
    let fill = n.saturating_sub(head.len() + tail.len());
    Bytes::from(format!("{head}{}{tail}", "x".repeat(fill)))
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    body: Bytes,
) -> Result<Response<Full<Bytes>>, Infallible> {
    // Read the body like a real handler would (POST benchmarks send one).
    let _ = req.into_body().collect().await;
    let mut r = Response::new(Full::new(body));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(r)
}

fn main() {
    let mut addr: Option<String> = None;
    let mut body = Bytes::from_static(BODY);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--addr" => addr = Some(args.next().expect("--addr needs a value")),
            "--body-bytes" => {
                let n = args.next().and_then(|v| v.parse::<usize>().ok());
                body = body_of(n.expect("--body-bytes needs a number of bytes"));
            }
            // `cargo bench` passes --bench; ignore it and any other libtest-style flags.
            "--bench" => {}
            "-h" | "--help" => {
                println!("usage: null_http --addr 127.0.0.1:PORT [--body-bytes N]");
                return;
            }
            other => {
                eprintln!("null_http: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    // `cargo bench` runs every bench target with just `--bench`: a server that never returns
    // would hang it, so without --addr there is nothing to do.
    let Some(addr) = addr else {
        println!("null_http: reference server for benches/run-w8-w2.sh; start it with --addr 127.0.0.1:PORT");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(engine::config::Runtime::default().worker_threads())
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .unwrap_or_else(|e| {
                eprintln!("null_http: cannot listen on {addr}: {e}");
                std::process::exit(1);
            });
        let bound = listener.local_addr().expect("local_addr");
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "listening http {bound}");
            let _ = out.flush();
        }
        // Same builder settings as the engine's wire::http::connection_builder().
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .keep_alive(true)
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(Duration::from_secs(30))
            .max_buf_size(1024 * 1024);
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(c) => c,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let body = body.clone();
            let conn = builder.serve_connection(
                TokioIo::new(stream),
                service_fn(move |req| handle(req, body.clone())),
            );
            tokio::spawn(async move {
                let _ = conn.await;
            });
        }
    });
}
