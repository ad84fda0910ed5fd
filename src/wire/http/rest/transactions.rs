//! REST transaction routes (SPEC.md "Transactions"), each a Protocol v1 `transaction`
//! operation. Writes and reads join a transaction with the `X-Transaction-Id` header, which
//! the engine handles for every route (docs/transactions.md).

use super::{ok, run, unexpected};
use crate::engine::Outcome;
use crate::error::{Error, ErrorCode, Result};
use crate::protocol::{BeginOp, Operation, TransactionOp, TransactionRef};
use crate::wire::http::{parse_json, HttpResponse, HttpState, RequestMeta};
use bytes::Bytes;
use hyper::Request;
use serde_json::{json, Value};

fn reference(id: &str) -> TransactionRef {
    TransactionRef {
        transaction_id: id.to_string(),
    }
}

/// `POST /tx {ttl?, autocommit?}`.
pub async fn begin(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
) -> Result<HttpResponse> {
    let body = parse_json(req.body(), &state.limits)?;
    // `ttl` here, `ttlMs` in Protocol v1: either name is taken on both surfaces.
    let given = |name: &'static str| body.get(name).filter(|v| !v.is_null()).map(|v| (name, v));
    let ttl_ms = match (given("ttl"), given("ttlMs")) {
        (Some(_), Some(_)) => return Err(Error::invalid("ttl: give `ttl` or `ttlMs`, not both")),
        (None, None) => None,
        (Some((name, v)), None) | (None, Some((name, v))) => {
            Some(crate::protocol::whole_ms(v).ok_or_else(|| {
                Error::invalid(format!("{name}: expected a whole number of milliseconds"))
            })?)
        }
    };
    let autocommit = match body.get("autocommit") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(Error::invalid("autocommit: expected true or false")),
    };
    let op = Operation::Transaction(TransactionOp::Begin(BeginOp { ttl_ms, autocommit }));
    match run(state, meta, op).await? {
        Outcome::TransactionBegun { id, ttl } => {
            Ok(ok(200, json!({"id": id.to_string(), "ttl": ttl})))
        }
        other => Ok(unexpected(other)),
    }
}

/// `GET /tx/{id}`: 200 while open.
pub async fn status(state: &HttpState, meta: &RequestMeta, id: &str) -> Result<HttpResponse> {
    let op = Operation::Transaction(TransactionOp::Status(reference(id)));
    match run(state, meta, op).await? {
        Outcome::TransactionInfo { id, staged } => Ok(ok(
            200,
            json!({"id": id.to_string(), "status": "open", "staged": staged}),
        )),
        other => Ok(unexpected(other)),
    }
}

/// `POST /tx/{id}/commit`: 200 when committed; 409 `conflict` with the reason when
/// validation failed; 404 `transaction_expired` after the ttl.
pub async fn commit(state: &HttpState, meta: &RequestMeta, id: &str) -> Result<HttpResponse> {
    let op = Operation::Transaction(TransactionOp::Commit(reference(id)));
    match run(state, meta, op).await? {
        Outcome::TransactionOutcome(o) => match o.status {
            "committed" => Ok(ok(
                200,
                json!({"message": format!("Transaction ({}) has been successfully committed.", o.id)}),
            )),
            "expired" => Err(Error::new(
                ErrorCode::TransactionExpired,
                o.reason
                    .unwrap_or_else(|| format!("transaction {} expired", o.id)),
            )),
            _ => Err(Error::conflict(format!(
                "transaction {} was not committed: {}",
                o.id,
                o.reason.unwrap_or_default()
            ))),
        },
        other => Ok(unexpected(other)),
    }
}

/// `POST /tx/{id}/rollback`.
pub async fn rollback(state: &HttpState, meta: &RequestMeta, id: &str) -> Result<HttpResponse> {
    let op = Operation::Transaction(TransactionOp::Rollback(reference(id)));
    match run(state, meta, op).await? {
        Outcome::TransactionRolledBack { id } => Ok(ok(
            200,
            json!({"message": format!("Transaction ({id}) has been rolled back.")}),
        )),
        other => Ok(unexpected(other)),
    }
}
