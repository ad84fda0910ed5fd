//! REST bulk routes (SPEC.md import/export), each a translation into one Protocol v1
//! operation: JSON and CSV import -> `ingest`, CSV export -> `query exportCsv`.

use super::{decode_body, ok, ok_records, run, unexpected, SearchBody};
use crate::engine::Outcome;
use crate::error::{Error, Result};
use crate::protocol::{
    DocQuery, IngestCsv, IngestDocuments, IngestOp, Operation, QueryOp, WriteOptions,
};
use crate::wire::check_depth;
use crate::wire::http::{HttpResponse, HttpState, RequestMeta};
use bytes::Bytes;
use hyper::Request;
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ImportJsonBody {
    #[serde(default)]
    data: Value,
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    parent_id: Option<String>,
    #[serde(default)]
    options: Option<WriteOptions>,
}

/// A string payload parsed per `format`: `json` (the default) is one JSON value,
/// `jsonl` / `ndjson` one document per non-blank line.
fn parse_payload(text: &str, format: Option<&str>, state: &HttpState) -> Result<Value> {
    let depth = state.limits.max_json_depth;
    match format.unwrap_or("json") {
        "json" => {
            check_depth(text.as_bytes(), depth)?;
            serde_json::from_str(text)
                .map_err(|e| Error::invalid(format!("data: malformed JSON: {e}")))
        }
        "jsonl" | "ndjson" => text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                check_depth(l.as_bytes(), depth)?;
                serde_json::from_str(l).map_err(|e| {
                    Error::invalid(format!("data line {}: malformed JSON: {e}", i + 1))
                })
            })
            .collect::<Result<Vec<Value>>>()
            .map(Value::Array),
        other => Err(Error::invalid(format!(
            "format: '{}' is not one of json, jsonl, ndjson",
            crate::model::truncate(other, 32)
        ))),
    }
}

/// The import answer: the records when `returnResult` got them, else `{message, count}`.
fn imported(outcome: Outcome) -> HttpResponse {
    match outcome {
        Outcome::Ingested {
            records: Some(rs), ..
        } => ok_records(201, &rs),
        Outcome::Ingested { count, .. } => ok(
            201,
            json!({"message": format!("{count} record(s) imported"), "count": count}),
        ),
        other => unexpected(other),
    }
}

/// `POST /records/import/json`.
pub async fn import_json(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
) -> Result<HttpResponse> {
    let b: ImportJsonBody = decode_body(state, &req)?;
    let label = b.label.filter(|l| !l.is_empty());
    let data = match b.data {
        Value::String(s) => parse_payload(&s, b.format.as_deref(), state)?,
        v => v,
    };
    let documents = match data {
        Value::Array(docs) if label.is_none() => {
            return Err(Error::invalid(format!(
                "label is required when data is an array ({} documents)",
                docs.len()
            )))
        }
        Value::Array(docs) => docs,
        v @ Value::Object(_) => vec![v],
        Value::Null => return Err(Error::invalid("data is required")),
        _ => {
            return Err(Error::invalid(
                "data: expected an object, an array or a string",
            ))
        }
    };
    let op = Operation::Ingest(IngestOp::Documents(IngestDocuments {
        label,
        documents,
        options: b.options,
        parent_id: b.parent_id,
    }));
    Ok(imported(run(state, meta, op).await?))
}

/// `POST /records/import/csv`.
pub async fn import_csv(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
) -> Result<HttpResponse> {
    // The body is the `ingest csv` payload itself (with the `parentId` extension).
    let csv: IngestCsv = decode_body(state, &req)?;
    Ok(imported(
        run(state, meta, Operation::Ingest(IngestOp::Csv(csv))).await?,
    ))
}

/// `POST /records/export/csv`: `{fileContent, dateTime}`.
pub async fn export_csv(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
) -> Result<HttpResponse> {
    let b: SearchBody = decode_body(state, &req)?;
    let op = Operation::Query(QueryOp::ExportCsv(DocQuery {
        query: b.document(),
    }));
    match run(state, meta, op).await? {
        Outcome::Csv { content, .. } => Ok(ok(
            200,
            json!({"fileContent": content, "dateTime": crate::model::datetime::now_iso()}),
        )),
        other => Ok(unexpected(other)),
    }
}
