//! gRPC front-end: Protocol v1 over tonic (proto/engine/v1/engine.proto). Like HTTP, it only
//! translates: the envelope's JSON operation decodes into the same `protocol::Operation`, the
//! engine decides, and errors map from the one `ErrorCode` table to gRPC status codes, with
//! the engine's code in the status details and in the `x-error-code` trailer.

use crate::config::Limits;
use crate::engine::{Engine, Envelope, Transport};
use crate::error::{Error, ErrorCode};
use crate::protocol::{self, render, Operation, PROTOCOL_VERSION};
use std::pin::Pin;
use std::sync::Arc;
use tokio_stream::{Stream, StreamExt};
use tonic::{metadata::MetadataMap, Request, Response, Status, Streaming};

pub mod pb {
    tonic::include_proto!("engine.v1");
    /// The descriptor set gRPC reflection serves.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("engine_descriptor");
}

use pb::engine_server::{Engine as EngineService, EngineServer};

/// Records per `ExecuteStream` message.
pub const STREAM_BATCH: usize = 1000;

pub struct GrpcEngine {
    engine: Arc<Engine>,
}

/// The gRPC status for an engine error: the code from the one table, the message as is, and
/// `{"code": "..."}` in the details.
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
    let details = serde_json::json!({"code": e.code.as_str()}).to_string();
    let mut s = Status::with_details(code, e.message.clone(), details.into());
    if let Ok(v) = e.code.as_str().parse() {
        s.metadata_mut().insert("x-error-code", v);
    }
    s
}

fn bearer(md: &MetadataMap) -> Option<String> {
    let v = md.get("authorization")?.to_str().ok()?;
    let t = v
        .strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("bearer "))?;
    Some(t.trim().to_string())
}

/// Decodes a gRPC envelope into the engine's, exactly as `/protocol/v1/execute` does.
fn envelope(md: &MetadataMap, env: pb::Envelope) -> Result<Envelope, Error> {
    protocol::check_version(Some(env.protocol_version as i64), &env.protocol_version)?;
    let op: serde_json::Value = serde_json::from_str(&env.operation_json)
        .map_err(|e| Error::invalid(format!("operation_json: malformed JSON: {e}")))?;
    let operation: Operation = protocol::decode(op, "operation")?;
    Ok(Envelope {
        credential: bearer(md),
        tenant_header: md
            .get("x-service-tenant")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        scope: env.context.map(|c| c.scope),
        transport: Transport::Grpc,
        transaction: None,
        operation,
    })
}

type BatchStream = Pin<Box<dyn Stream<Item = Result<pb::RecordBatch, Status>> + Send>>;

#[tonic::async_trait]
impl EngineService for GrpcEngine {
    async fn execute(&self, req: Request<pb::Envelope>) -> Result<Response<pb::Response>, Status> {
        let (md, _, env) = req.into_parts();
        let env = envelope(&md, env).map_err(|e| status(&e))?;
        let outcome = self.engine.execute(env).await.map_err(|e| status(&e))?;
        Ok(Response::new(pb::Response {
            protocol_version: PROTOCOL_VERSION as u32,
            response_json: render::response_text(&outcome),
        }))
    }

    type ExecuteStreamStream = BatchStream;

    async fn execute_stream(
        &self,
        req: Request<pb::Envelope>,
    ) -> Result<Response<Self::ExecuteStreamStream>, Status> {
        let (md, _, env) = req.into_parts();
        let env = envelope(&md, env).map_err(|e| status(&e))?;
        let (records, total) = self.engine.query_all(env).await.map_err(|e| status(&e))?;
        let mut batches: Vec<pb::RecordBatch> = records
            .chunks(STREAM_BATCH)
            .map(|c| pb::RecordBatch {
                records_json: c.iter().map(|r| render::record(r).to_string()).collect(),
                total: 0,
            })
            .collect();
        match batches.first_mut() {
            Some(b) => b.total = total,
            None => batches.push(pb::RecordBatch {
                records_json: vec![],
                total,
            }),
        }
        let stream = tokio_stream::iter(batches.into_iter().map(Ok));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn ingest(
        &self,
        req: Request<Streaming<pb::Envelope>>,
    ) -> Result<Response<pb::IngestSummary>, Status> {
        let (md, _, mut stream) = req.into_parts();
        let mut sum = pb::IngestSummary::default();
        while let Some(env) = stream.next().await {
            let env = envelope(&md, env?).map_err(|e| status(&e))?;
            if !matches!(env.operation, Operation::Ingest(_)) {
                return Err(status(&Error::invalid(format!(
                    "Ingest takes `ingest` operations; batch {} is {}",
                    sum.batches + 1,
                    env.operation.name()
                ))));
            }
            // Each batch is one durable commit before the next is read.
            match self.engine.execute(env).await {
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
                Err(e) => {
                    let message = format!(
                        "batch {} failed (the {} before it are committed): {}",
                        sum.batches + 1,
                        sum.batches,
                        e.message
                    );
                    return Err(status(&Error::new(e.code, message)));
                }
            }
        }
        Ok(Response::new(sum))
    }
}

/// The gRPC router: the engine service, the standard health service, and reflection.
pub async fn serve(
    engine: Arc<Engine>,
    limits: &Limits,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    let max = limits.max_body_bytes.min(usize::MAX as u64) as usize;
    let service = EngineServer::new(GrpcEngine { engine })
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
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(service)
        .serve_with_incoming_shutdown(
            // No Nagle delay: small answers must not wait for the client's delayed ACK.
            tokio_stream::wrappers::TcpListenerStream::new(listener).map(|s| {
                if let Ok(s) = &s {
                    let _ = s.set_nodelay(true);
                }
                s
            }),
            shutdown,
        )
        .await
        .map_err(|e| format!("gRPC server: {e}"))
}
