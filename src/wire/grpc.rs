//! gRPC front-end: Protocol v1 over tonic (proto/engine/v1/engine.proto). Like HTTP, it only
//! translates: the envelope's JSON operation decodes into the same `protocol::Operation`, the
//! engine decides, and errors map from the one `ErrorCode` table to gRPC status codes, with
//! the engine's code in the status details and in the `x-error-code` trailer.

use crate::config::Limits;
use crate::engine::{Engine, Envelope, Transport};
use crate::error::{Error, ErrorCode};
use crate::protocol::{self, render, Operation, PROTOCOL_VERSION};
use connection::{Driven, StreamInbox, Unvectored};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::{Stream, StreamExt};
use tonic::{metadata::MetadataMap, Request, Response, Status, Streaming};

mod connection;

pub mod pb {
    tonic::include_proto!("engine.v1");
    /// The descriptor set gRPC reflection serves.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("engine_descriptor");
}

use pb::engine_server::{Engine as EngineService, EngineServer};

/// Records per `ExecuteStream` message, at most.
pub const STREAM_BATCH: usize = 1000;

/// Bytes of record JSON after which an `ExecuteStream` message is closed, whatever its
/// count: a quarter of the 4 MiB that gRPC clients accept by default (grpcio, grpc-go,
/// grpc-java), so 1,000 large records never make a message the client refuses. Lower when
/// the server's own message cap (`limits.max_body_bytes`) is (`stream_batch_bytes`). A
/// single record larger than this travels alone.
pub const STREAM_BATCH_BYTES: usize = 1 << 20;

/// The batch byte bound under a message cap of `max_message` bytes: room is left for
/// protobuf's framing (a few bytes a record, at most `STREAM_BATCH` records).
fn stream_batch_bytes(max_message: usize) -> usize {
    let framing = 16 * STREAM_BATCH + 64;
    STREAM_BATCH_BYTES.min(max_message.saturating_sub(framing).max(1))
}

pub struct GrpcEngine {
    engine: Arc<Engine>,
    /// `limits.max_json_depth`, checked on `operation_json` before it is parsed.
    max_depth: usize,
    /// `limits.request_timeout_ms`: the time one `Execute`, one `ExecuteStream` query or one
    /// `Ingest` batch may take, as one HTTP request may.
    budget: std::time::Duration,
    /// Bytes of record JSON after which an `ExecuteStream` message is closed.
    batch_bytes: usize,
    /// The message cap both ways (`limits.max_body_bytes`).
    max_message: usize,
}

impl GrpcEngine {
    /// Decodes a gRPC envelope into the engine's, exactly as `/protocol/v1/execute` does.
    /// The credential was checked before the message was read (`caller_of`, in `serve`'s
    /// handler, for every engine method); the engine checks it again as it admits the
    /// envelope.
    fn envelope(&self, md: &MetadataMap, env: pb::Envelope) -> Result<Envelope, Error> {
        let (credential, tenant_header) = identity(md.as_ref());
        protocol::check_version(Some(env.protocol_version as i64), &env.protocol_version)?;
        crate::wire::check_depth(env.operation_json.as_bytes(), self.max_depth)
            .map_err(|e| Error::invalid(format!("operation_json: {}", e.message)))?;
        let op: serde_json::Value = serde_json::from_str(&env.operation_json)
            .map_err(|e| Error::invalid(format!("operation_json: malformed JSON: {e}")))?;
        let operation: Operation = protocol::decode(op, "operation")?;
        Ok(Envelope {
            credential,
            verified: None,
            tenant_header,
            // proto3 cannot tell an absent scope from "": an empty one names no tenant, as
            // an empty `context` does over HTTP.
            scope: env.context.map(|c| c.scope).filter(|s| !s.is_empty()),
            transport: Transport::Grpc,
            transaction: None,
            operation,
        })
    }

    /// `work` within the request time budget (the engine's `timeout` error past it, unless it
    /// has handed a write to the writer: `activity::within`).
    async fn within<T>(
        &self,
        work: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        crate::activity::within(self.budget, work)
            .await
            .unwrap_or_else(|| Err(crate::wire::over_budget(self.budget)))
    }
}

/// The gRPC status for an engine error: the code from the one table, the message as is, and
/// the engine code in the details (`rich_status`) and the `x-error-code` trailer.
pub fn status(e: &Error) -> Status {
    let code = match e.code {
        ErrorCode::InvalidArgument | ErrorCode::ScopeMismatch => tonic::Code::InvalidArgument,
        ErrorCode::Unauthenticated => tonic::Code::Unauthenticated,
        ErrorCode::PermissionDenied | ErrorCode::Unauthorized => tonic::Code::PermissionDenied,
        ErrorCode::NotFound | ErrorCode::TransactionExpired => tonic::Code::NotFound,
        ErrorCode::Conflict => tonic::Code::Aborted,
        ErrorCode::PayloadTooLarge | ErrorCode::TooManyRequests => tonic::Code::ResourceExhausted,
        ErrorCode::Timeout => tonic::Code::DeadlineExceeded,
        ErrorCode::Unsupported => tonic::Code::Unimplemented,
        ErrorCode::Internal => tonic::Code::Internal,
    };
    let details = rich_status(code, &e.message, e.code.as_str());
    let mut s = Status::with_details(code, e.message.clone(), details.into());
    if let Ok(v) = e.code.as_str().parse() {
        s.metadata_mut().insert("x-error-code", v);
    }
    s
}

/// A call's credential and tenant header (metadata `authorization`, `x-service-tenant`), the
/// credential checked (and bound to the tenant header on a multitenant engine).
fn caller_of(
    engine: &Engine,
    headers: &hyper::HeaderMap,
) -> Result<(Option<String>, Option<String>), Error> {
    // As over HTTP: the first value stands for the credential (and the tenant) while it is
    // checked; different values are refused after that.
    let (credentials, wrong) = crate::wire::credentials(headers.get_all("authorization"), []);
    let tenants = tenants_of(headers);
    // An unreadable tenant is refused after the credential, as every other input.
    let tenant = tenants.as_ref().ok().and_then(|t| t.first().cloned());
    let credential = credentials.first().cloned();
    engine.authenticate_for(credential.as_deref(), tenant.as_deref())?;
    let tenants = tenants?;
    if let Some(e) = wrong {
        return Err(e);
    }
    crate::wire::one_value("authorization", credentials)?;
    crate::wire::one_value("x-service-tenant", tenants)?;
    Ok((credential, tenant))
}

/// The `x-service-tenant` values of a call, each readable or the error naming it.
fn tenants_of(headers: &hyper::HeaderMap) -> Result<Vec<String>, Error> {
    headers
        .get_all("x-service-tenant")
        .iter()
        .map(|v| crate::wire::header_text("x-service-tenant", v.as_bytes()).map(str::to_string))
        .collect()
}

/// The credential and tenant a call stands for: its first Bearer token and its first tenant
/// (`caller_of` refuses a call whose values differ or cannot be read).
fn identity(headers: &hyper::HeaderMap) -> (Option<String>, Option<String>) {
    let credential = crate::wire::credentials(headers.get_all("authorization"), [])
        .0
        .into_iter()
        .next();
    let tenant = tenants_of(headers).ok().and_then(|t| t.into_iter().next());
    (credential, tenant)
}

/// `google.rpc.Status` (the gRPC rich error model) for `grpc-status-details-bin`, which
/// clients decode as one (grpc-go turns a trailer that is not into INTERNAL): the status code,
/// the message, and one `google.rpc.ErrorInfo` detail whose `reason` is the engine code.
fn rich_status(code: tonic::Code, message: &str, engine_code: &str) -> Vec<u8> {
    use prost::Message;
    #[derive(Clone, PartialEq, prost::Message)]
    struct RpcStatus {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(string, tag = "2")]
        message: String,
        #[prost(message, repeated, tag = "3")]
        details: Vec<Any>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Any {
        #[prost(string, tag = "1")]
        type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        value: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct ErrorInfo {
        #[prost(string, tag = "1")]
        reason: String,
        #[prost(string, tag = "2")]
        domain: String,
    }
    let info = ErrorInfo {
        reason: engine_code.to_string(),
        domain: ERROR_DOMAIN.to_string(),
    };
    RpcStatus {
        code: code as i32,
        message: message.to_string(),
        details: vec![Any {
            type_url: "type.googleapis.com/google.rpc.ErrorInfo".into(),
            value: info.encode_to_vec(),
        }],
    }
    .encode_to_vec()
}

/// The path prefix of the engine service's methods.
const ENGINE_METHODS: &str = "/engine.v1.Engine/";

/// `ErrorInfo.domain` of the engine's errors.
const ERROR_DOMAIN: &str = "engine.v1";

/// tonic answers a request message it cannot decode (not protobuf, a string field that is not
/// UTF-8) with INTERNAL, which this engine keeps for its own faults: it is the client's input,
/// `invalid_argument` (INVALID_ARGUMENT).
fn undecodable(s: &Status) -> Option<Error> {
    // tonic's words for a message it could not take: not protobuf, framing cut short or
    // missing, a compression flag it cannot honour.
    const CLIENT_FAULTS: [&str; 5] = [
        "failed to decode Protobuf",
        "Unexpected EOF decoding stream",
        "Missing request message",
        "protocol error: received message with compressed-flag",
        "invalid compression flag",
    ];
    (s.code() == tonic::Code::Internal && CLIENT_FAULTS.iter().any(|p| s.message().starts_with(p)))
        .then(|| {
            Error::invalid(format!(
                "the request message is not a valid Envelope: {}",
                s.message()
            ))
        })
}

/// A request stream's failure to deliver its next message, as the engine's error: the
/// client's input (undecodable, over the message cap) or the stream's end otherwise.
fn stream_error(s: &Status) -> Error {
    match undecodable(s) {
        Some(e) => e,
        None if s.code() == tonic::Code::OutOfRange => Error::new(
            ErrorCode::PayloadTooLarge,
            format!("a message is over the message cap: {}", s.message()),
        ),
        None => Error::invalid(format!("the request stream failed: {}", s.message())),
    }
}

/// An answer tonic built from a decoding failure, as `undecodable` says it should be.
fn undecodable_is_invalid(
    resp: hyper::Response<tonic::body::Body>,
) -> hyper::Response<tonic::body::Body> {
    match Status::from_header_map(resp.headers()).and_then(|s| undecodable(&s)) {
        Some(e) => status(&e).into_http(),
        None => resp,
    }
}

type BatchStream = Pin<Box<dyn Stream<Item = Result<pb::RecordBatch, Status>> + Send>>;

/// One `ExecuteStream` batch: the records from `from` on that fit it (it closes before the
/// record that would take it past STREAM_BATCH records or `batch_bytes`; a larger record
/// travels alone). Answers the batch and where the next one starts.
fn render_batch(
    records: &[crate::model::Record],
    from: usize,
    batch_bytes: usize,
) -> (Vec<String>, usize) {
    let (mut open, mut bytes, mut at) = (Vec::new(), 0, from);
    while let Some(r) = records.get(at) {
        let json = render::record(r).to_string();
        if !open.is_empty() && (open.len() == STREAM_BATCH || bytes + json.len() > batch_bytes) {
            break;
        }
        bytes += json.len();
        open.push(json);
        at += 1;
    }
    (open, at)
}

/// Sends `records` on `tx` batch by batch, each rendered on the blocking pool and sent when
/// the reader has room (two batches ahead at most): waiting for a slow reader holds no
/// thread. The first batch (also when there is no record) carries `total`. Stops when the
/// call has ended; a rendering that fails ends the stream with INTERNAL.
async fn send_batches(
    records: Vec<crate::model::Record>,
    total: u64,
    batch_bytes: usize,
    tx: tokio::sync::mpsc::Sender<Result<pb::RecordBatch, Status>>,
) {
    let records = Arc::new(records);
    let mut from = 0;
    loop {
        let rs = records.clone();
        let rendered = tokio::task::spawn_blocking(move || render_batch(&rs, from, batch_bytes));
        let (records_json, next) = match rendered.await {
            Ok(b) => b,
            Err(e) => {
                let e = Error::internal(format!("rendering a stream batch failed: {e}"));
                let _ = tx.send(Err(status(&e))).await;
                return;
            }
        };
        let batch = pb::RecordBatch {
            records_json,
            total: if from == 0 { total } else { 0 },
        };
        if tx.send(Ok(batch)).await.is_err() || next >= records.len() {
            return;
        }
        from = next;
    }
}

#[tonic::async_trait]
impl EngineService for GrpcEngine {
    async fn execute(&self, req: Request<pb::Envelope>) -> Result<Response<pb::Response>, Status> {
        let (md, _, env) = req.into_parts();
        let env = self.envelope(&md, env).map_err(|e| status(&e))?;
        let outcome = self
            .within(self.engine.execute(env))
            .await
            .map_err(|e| status(&e))?;
        let response_json = render::response_text(&outcome);
        // An answer over the message cap would fail in tonic's encoder as OUT_OF_RANGE
        // without the engine's code: said here, with where to get it instead.
        if response_json.len() + 64 > self.max_message {
            return Err(status(&Error::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "the answer is {} bytes, over the {} byte message cap (limits.max_body_bytes): page it, stream records with ExecuteStream, or ask over HTTP",
                    response_json.len(),
                    self.max_message
                ),
            )));
        }
        Ok(Response::new(pb::Response {
            protocol_version: PROTOCOL_VERSION as u32,
            response_json,
        }))
    }

    type ExecuteStreamStream = BatchStream;

    async fn execute_stream(
        &self,
        req: Request<pb::Envelope>,
    ) -> Result<Response<Self::ExecuteStreamStream>, Status> {
        let (md, _, env) = req.into_parts();
        let deadline = md
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(grpc_timeout)
            .map(|d| (tokio::time::Instant::now() + d, d));
        let env = self.envelope(&md, env).map_err(|e| status(&e))?;
        let (records, total) = self
            .within(self.engine.query_all(env))
            .await
            .map_err(|e| status(&e))?;
        // Rendering a large answer takes long (~1 s for 200,000 records): it runs off the
        // runtime's workers, a batch at a time, each sent as soon as it is ready; a slow
        // reader holds the renderer back (two batches ahead at most).
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tokio::spawn(send_batches(records, total, self.batch_bytes, tx));
        // The call's grpc-timeout bounds the whole answer, not only the query: a body still
        // streaming when it passes ends with DEADLINE_EXCEEDED.
        let stream = futures_util::stream::unfold((rx, false), move |(mut rx, ended)| async move {
            if ended {
                return None;
            }
            let next = match deadline {
                None => rx.recv().await,
                Some((at, d)) => match tokio::time::timeout_at(at, rx.recv()).await {
                    Ok(next) => next,
                    Err(_) => {
                        let e = Error::new(
                            ErrorCode::Timeout,
                            format!("the call's grpc-timeout of {} ms expired", d.as_millis()),
                        );
                        return Some((Err(status(&e)), (rx, true)));
                    }
                },
            };
            next.map(|b| (b, (rx, false)))
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn ingest(
        &self,
        req: Request<Streaming<pb::Envelope>>,
    ) -> Result<Response<pb::IngestSummary>, Status> {
        // The credential was checked before any message is read (`serve`'s handler), so an
        // empty call of a caller without one is refused too.
        let (md, _, mut stream) = req.into_parts();
        let mut sum = pb::IngestSummary::default();
        while let Some(item) = stream.next().await {
            // Every failure names its batch and what is committed before it.
            let n = sum.batches;
            let failed = |e: Error| {
                let message = format!(
                    "batch {} failed (the {n} before it are committed): {}",
                    n + 1,
                    e.message
                );
                status(&Error::new(e.code, message))
            };
            let env = match item {
                Ok(env) => env,
                Err(s) => return Err(failed(stream_error(&s))),
            };
            let env = self.envelope(&md, env).map_err(failed)?;
            if !matches!(env.operation, Operation::Ingest(_)) {
                return Err(failed(Error::invalid(format!(
                    "Ingest takes `ingest` operations, not {}",
                    env.operation.name()
                ))));
            }
            // Each batch is one durable commit before the next is read.
            match self.within(self.engine.execute(env)).await {
                Ok(crate::engine::Outcome::Ingested {
                    count,
                    relationships,
                    ..
                }) => {
                    sum.batches += 1;
                    sum.records += count;
                    sum.relationships += relationships;
                }
                Ok(other) => {
                    return Err(status(&Error::internal(format!(
                        "ingest answered {other:?}"
                    ))))
                }
                Err(e) => return Err(failed(e)),
            }
        }
        Ok(Response::new(sum))
    }
}

/// The gRPC listener: the engine service, the standard health service and reflection, each
/// accepted connection served on one task (see `connection`). Stops accepting when
/// `shutdown` resolves, then lets every connection finish its calls (HTTP/2 GOAWAY).
pub async fn serve(
    engine: Arc<Engine>,
    limits: &Limits,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let max = limits.max_body_bytes.min(usize::MAX as u64) as usize;
    let send_stall = std::time::Duration::from_millis(limits.request_timeout_ms);
    let auth = engine.clone();
    let service = EngineServer::new(GrpcEngine {
        engine,
        max_depth: limits.max_json_depth,
        budget: std::time::Duration::from_millis(limits.request_timeout_ms),
        batch_bytes: stream_batch_bytes(max),
        max_message: max,
    })
    .max_decoding_message_size(max)
    .max_encoding_message_size(max);
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<EngineServer<GrpcEngine>>().await;
    // Reflection in both versions clients ask for (grpcurl: v1; grpcio-reflection: v1alpha).
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection()
        .build_v1()
        .map_err(|e| format!("gRPC reflection: {e}"))?;
    let reflection_v1alpha = reflection()
        .build_v1alpha()
        .map_err(|e| format!("gRPC reflection: {e}"))?;
    let routes = tonic::service::Routes::new(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(service)
        .prepare();
    let handler = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        // A body that is not gRPC's (`application/grpc`, optionally `+format` or parameters)
        // is refused before it is read (gRPC over HTTP/2: 415).
        let grpc_body = req
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .is_some_and(|v| {
                let t = v.as_bytes();
                t.strip_prefix(b"application/grpc")
                    .is_some_and(|rest| rest.is_empty() || rest[0] == b'+' || rest[0] == b';')
            });
        // The engine's methods check the credential before tonic reads the message, so a
        // caller without a valid one cannot make the server buffer it (UNAUTHENTICATED
        // whatever the input, as over HTTP). Health and reflection stay open.
        let refused = req
            .uri()
            .path()
            .starts_with(ENGINE_METHODS)
            .then(|| caller_of(&auth, req.headers()).err())
            .flatten();
        let deadline = deadline(req.headers());
        let call = match refused {
            Some(e) => Err(e),
            None => {
                let call =
                    crate::activity::serve(tonic::codegen::Service::call(&mut routes.clone(), req));
                Ok(async move { call.await.map(undecodable_is_invalid) })
            }
        };
        async move {
            if !grpc_body {
                let mut r = hyper::Response::new(tonic::body::Body::empty());
                *r.status_mut() = hyper::StatusCode::UNSUPPORTED_MEDIA_TYPE;
                return Ok(r);
            }
            let call = match call {
                Ok(call) => call,
                Err(e) => return Ok(status(&e).into_http()),
            };
            let Some(d) = deadline else { return call.await };
            match tokio::time::timeout(d, call).await {
                Ok(answer) => answer,
                Err(_) => Ok(status(&Error::new(
                    ErrorCode::Timeout,
                    format!("the call's grpc-timeout of {} ms expired", d.as_millis()),
                ))
                .into_http()),
            }
        }
    });

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            stream = crate::wire::accept(&listener, "gRPC") => {
                let inbox = StreamInbox::default();
                let conn = http2_builder(inbox.clone())
                    .serve_connection(
                        Unvectored(crate::wire::stall::SendTimeout::new(
                            TokioIo::new(stream),
                            send_stall,
                        )),
                        handler.clone(),
                    );
                let mut stop = stop_rx.clone();
                tokio::spawn(async move {
                    let mut driven = Driven::new(conn, inbox);
                    tokio::select! {
                        _ = &mut driven => return,
                        _ = stop.wait_for(|s| *s) => {}
                    }
                    driven.conn().graceful_shutdown();
                    let _ = driven.await;
                    drop(stop); // the listener waits for every connection's receiver
                });
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    drop(stop_rx);
    let _ = stop_tx.send(true);
    stop_tx.closed().await;
    Ok(())
}

/// HTTP/2 settings of a gRPC connection: hyper's defaults (200 concurrent streams per
/// connection, 16 KiB of headers), streams run by the connection's own task.
fn http2_builder(inbox: StreamInbox) -> hyper::server::conn::http2::Builder<StreamInbox> {
    let mut b = hyper::server::conn::http2::Builder::new(inbox);
    b.timer(hyper_util::rt::TokioTimer::new());
    b
}

/// The call's `grpc-timeout` (gRPC over HTTP/2: up to 8 digits and a unit of H, M, S, m, u
/// or n). An unreadable value is ignored, as tonic's own server does.
fn deadline(headers: &hyper::HeaderMap) -> Option<std::time::Duration> {
    grpc_timeout(headers.get("grpc-timeout")?.to_str().ok()?)
}

/// A `grpc-timeout` value as a duration.
fn grpc_timeout(v: &str) -> Option<std::time::Duration> {
    use std::time::Duration;
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::deadline;
    use std::time::Duration;

    #[test]
    fn grpc_timeout_units() {
        let of = |v: &str| {
            let mut h = hyper::HeaderMap::new();
            h.insert("grpc-timeout", v.parse().unwrap());
            deadline(&h)
        };
        assert_eq!(of("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(of("3M"), Some(Duration::from_secs(180)));
        assert_eq!(of("5S"), Some(Duration::from_secs(5)));
        assert_eq!(of("250m"), Some(Duration::from_millis(250)));
        assert_eq!(of("7u"), Some(Duration::from_micros(7)));
        assert_eq!(of("99999999n"), Some(Duration::from_nanos(99_999_999)));
        assert_eq!(of("123456789S"), None, "more than 8 digits");
        assert_eq!(of("10x"), None);
        assert_eq!(of("S"), None);
        assert_eq!(of("-1S"), None);
    }
}
