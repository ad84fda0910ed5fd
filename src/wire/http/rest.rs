//! REST routes under `/api/v1`. Each route is a translation into one Protocol v1
//! [`Operation`] plus a rendering of its outcome in the REST envelope (BEHAVIOUR.md §1, §4).

use super::{parse_json, rest_error, HttpResponse, HttpState, RequestMeta};
use crate::engine::{Outcome, Transport};
use crate::error::{Error, Result};
use crate::model::infer::PropertyInput;
use crate::model::Record;
use bytes::Bytes;
use std::io::Write;

use crate::protocol::{
    self, DeletePropertyOp, DeleteRecordOp, DescribeOp, DescribeQuery, DocQuery, IdRef,
    InlineVector, Mutation, Operation, PropertyValuesOp, PropertyValuesQuery, PutMode, PutRecordOp,
    QueryDocument, QueryOp, RecordQuery, WriteOptions,
};
use crate::store::records::PropertyInfo;
use hyper::{Method, Request};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::protocol::render;

mod bulk;
mod relationships;
mod transactions;

fn property_json(p: &PropertyInfo) -> Value {
    json!({"id": p.id.to_string(), "name": p.name, "type": p.ty.name(), "metadata": "", "recordsCount": p.records_count})
}

/// `{"success": true, "data": DATA}`, DATA written by `data` (a serialization error, which
/// the engine's types never give, answers an empty body as `json_response` does).
fn ok_with(
    status: u16,
    capacity: usize,
    data: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
) -> HttpResponse {
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(b"{\"success\":true,\"data\":");
    if data(&mut out).is_err() {
        out.clear();
    } else {
        out.push(b'}');
    }
    super::bytes_response(status, out)
}

/// A page: SPEC.md's `data: {data: [...], total}`, or flat `data: [...], total` (`--rest-envelope
/// flat`); the items written by `items`.
fn page_with(
    state: &HttpState,
    total: u64,
    capacity: usize,
    items: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
) -> HttpResponse {
    let flat = state.flat_lists;
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(if flat {
        b"{\"success\":true,\"data\":"
    } else {
        b"{\"success\":true,\"data\":{\"data\":"
    });
    if items(&mut out).is_err() {
        return super::bytes_response(200, Vec::new());
    }
    let _ = write!(out, ",\"total\":{total}}}");
    if !flat {
        out.push(b'}');
    }
    super::bytes_response(200, out)
}

pub(super) fn ok<T: serde::Serialize>(status: u16, data: T) -> HttpResponse {
    ok_with(status, 128, |out| serde_json::to_writer(out, &data))
}

/// A list result: SPEC.md's `data: {data, total}`, or flat `data: [...], total`.
pub(super) fn list<T: serde::Serialize>(
    state: &HttpState,
    items: Vec<T>,
    total: u64,
) -> HttpResponse {
    page_with(state, total, 128, |out| serde_json::to_writer(out, &items))
}

/// `{"success": true, "data": record}`, the record written straight to bytes
/// (`render::write_flat`, which keeps the flat record JSON off serde's per-field path).
pub(super) fn ok_record(status: u16, r: &Record) -> HttpResponse {
    ok_with(status, 256, |out| {
        render::write_flat(out, r);
        Ok(())
    })
}

/// `{"success": true, "data": [records]}`.
pub(super) fn ok_records(status: u16, records: &[Record]) -> HttpResponse {
    ok_with(status, 64 + 256 * records.len(), |out| {
        render::write_flat_list(out, records);
        Ok(())
    })
}

/// A page of records, in the shape `list` gives any page.
pub(super) fn list_records(state: &HttpState, records: &[Record], total: u64) -> HttpResponse {
    page_with(state, total, 96 + 256 * records.len(), |out| {
        render::write_flat_list(out, records);
        Ok(())
    })
}

/// A page of relationships, in the shape `list` gives any page, written straight to bytes
/// (`render::write_relationship_list`).
pub(super) fn list_relationships(
    state: &HttpState,
    rels: &[render::RelationshipView],
    total: u64,
) -> HttpResponse {
    page_with(state, total, 96 + 320 * rels.len(), |out| {
        render::write_relationship_list(out, rels);
        Ok(())
    })
}

#[derive(Debug, Default, Deserialize)]
struct CreateBody {
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    data: Option<Map<String, Value>>,
    #[serde(default)]
    properties: Option<Vec<PropertyInput>>,
    #[serde(default)]
    options: Option<WriteOptions>,
    #[serde(default)]
    vectors: Option<Vec<InlineVector>>,
}

/// SearchDto (SPEC.md), translated into a QueryDocument.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SearchBody {
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    skip: Option<i64>,
    #[serde(default)]
    order_by: Option<Value>,
    #[serde(default, rename = "where")]
    where_: Option<Value>,
    #[serde(default)]
    select: Option<Value>,
    #[serde(default)]
    aggregate: Option<Value>,
    #[serde(default)]
    labels: Option<Vec<String>>,
    #[serde(default)]
    group_by: Option<Vec<String>>,
}

impl SearchBody {
    pub(super) fn document(self) -> QueryDocument {
        QueryDocument {
            labels: self.labels,
            predicate: self.where_,
            order: self.order_by,
            offset: self.skip,
            limit: self.limit,
            select: self.select,
            aggregate: self.aggregate,
            group_by: self.group_by,
            related_to: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ValuesBody {
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    order_by: Option<String>,
    #[serde(default)]
    skip: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
    /// Counted among the records of these labels only (as in a SearchDto).
    #[serde(default)]
    labels: Option<Vec<String>>,
    /// Counted among the records this where tree matches (as in a SearchDto).
    #[serde(default, rename = "where")]
    predicate: Option<Value>,
}

/// An edit body (PATCH/PUT). When it has neither `data` nor `properties`, it is flat: its
/// keys other than `label`, `options` and `vectors` are the data (BEHAVIOUR.md §1).
fn edit_op(id: &str, mode: PutMode, body: Value) -> Result<Operation> {
    let Value::Object(mut m) = body else {
        return Err(Error::invalid("body must be a JSON object"));
    };
    // `data` or `properties` sent as null is absent (as in a create body), also for deciding
    // whether the body is the flat form.
    for k in ["data", "properties"] {
        if m.get(k).is_some_and(Value::is_null) {
            m.remove(k);
        }
    }
    let flat = !m.contains_key("data") && !m.contains_key("properties");
    let label = match m.remove("label") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => return Err(Error::invalid("body.label: must be a string")),
    };
    // An optional field sent as null is absent, as in a create body.
    let take = |m: &mut Map<String, Value>, k: &str| m.remove(k).filter(|v| !v.is_null());
    let vectors: Option<Vec<InlineVector>> = take(&mut m, "vectors")
        .map(|v| protocol::decode(v, "body.vectors"))
        .transpose()?;
    let options: Option<WriteOptions> = take(&mut m, "options")
        .map(|v| protocol::decode(v, "body.options"))
        .transpose()?;
    let (data, typed) = if flat {
        (m, None)
    } else {
        let data: Option<Map<String, Value>> = take(&mut m, "data")
            .map(|v| protocol::decode(v, "body.data"))
            .transpose()?;
        let typed: Option<Vec<PropertyInput>> = take(&mut m, "properties")
            .map(|v| protocol::decode(v, "body.properties"))
            .transpose()?;
        (data.unwrap_or_default(), typed)
    };
    Ok(Operation::Mutate(Mutation::PutRecord(PutRecordOp {
        mode,
        label,
        id: Some(id.to_string()),
        properties: Some(data),
        typed_properties: typed,
        vectors,
        options,
    })))
}

/// Routes `/api/v1/...`; returns the route template and the response.
pub async fn route(state: &HttpState, req: Request<Bytes>) -> (&'static str, HttpResponse) {
    let mut meta = RequestMeta::from_headers(req.headers());
    let method = req.method().clone();
    // A clone of the URI shares its bytes (the request moves into the route).
    let uri = req.uri().clone();
    let path = uri.path().trim_end_matches('/');
    let rest = path.trim_start_matches("/api/v1/");
    // Segments borrow from the path, unless one has percent-encoded octets to decode.
    let plain = plain_segments(rest);
    let decoded: Vec<std::borrow::Cow<str>> = match plain {
        None => rest.split('/').map(percent_decoded).collect(),
        Some(_) => Vec::new(),
    };
    let segs: Vec<&str> = plain.unwrap_or_else(|| decoded.iter().map(|s| s.as_ref()).collect());
    // The credential is checked before any body is read or parsed.
    if let Err(e) = meta.verify(&state.engine) {
        let template = if later_route(&method, &segs).is_some() {
            "/api/v1/later"
        } else {
            "/api/v1"
        };
        return (template, rest_error(&e));
    }
    // Kept to decide, on a failed request, whether its body was unparseable (see below).
    let body = req.body().clone();
    // The plain reads (`read_of`) first: the same table answers them in `answer_now`.
    let read = read_of(&method, &segs, uri.query());
    let (template, result) = if let Some((template, read)) = read {
        let result = match read {
            Ok(Read { op, answer }) => run(state, &meta, op).await.map(|o| answer(state, o)),
            Err(e) => Err(e),
        };
        (template, result)
    } else {
        match (&method, segs.as_slice()) {
            (&Method::POST, ["records"]) => ("/api/v1/records", create(state, &meta, req).await),
            (&Method::POST, ["records", "search"]) => {
                ("/api/v1/records/search", search(state, &meta, req).await)
            }
            (&Method::POST, ["query", "records", "find"]) => (
                "/api/v1/query/records/find",
                search(state, &meta, req).await,
            ),
            (&Method::POST, ["records", "delete"]) => (
                "/api/v1/records/delete",
                delete_many(state, &meta, req).await,
            ),
            (&Method::PATCH, ["records", id]) => (
                "/api/v1/records/{id}",
                edit(state, &meta, req, id, PutMode::Merge).await,
            ),
            (&Method::PUT, ["records", id]) => (
                "/api/v1/records/{id}",
                edit(state, &meta, req, id, PutMode::Replace).await,
            ),
            (&Method::DELETE, ["records", id]) => ("/api/v1/records/{id}", {
                let op = Operation::Mutate(Mutation::DeleteRecord(DeleteRecordOp {
                    id: Some(id.to_string()),
                    record: None,
                }));
                run(state, &meta, op)
                    .await
                    .map(|_| ok(200, json!({"message": "Record deleted"})))
            }),
            (&Method::POST, ["labels", "search"]) => {
                ("/api/v1/labels/search", labels(state, &meta, req).await)
            }
            (&Method::POST, ["properties", "search"]) => (
                "/api/v1/properties/search",
                properties(state, &meta, req).await,
            ),
            (&Method::DELETE, ["properties", id]) => ("/api/v1/properties/{id}", {
                let op = Operation::Mutate(Mutation::DeleteProperty(DeletePropertyOp {
                    id: Some(id.to_string()),
                    name: None,
                }));
                run(state, &meta, op).await.map(|o| match o {
                    Outcome::Affected(n) => ok(
                        200,
                        json!({"message": format!("Property deleted from {n} record(s)")}),
                    ),
                    other => unexpected(other),
                })
            }),
            (&Method::POST, ["properties", id, "values"]) => ("/api/v1/properties/{id}/values", {
                let id = id.to_string();
                async {
                    // The path names a property by id; Protocol v1's `property` also takes a name,
                    // so the id is checked here (400 like GET and DELETE of a property).
                    crate::model::parse_uuid_v7(&id, "property id")?;
                    let b: ValuesBody = decode_body(state, &req)?;
                    let q = PropertyValuesQuery {
                        query: b.query,
                        order: b.order_by,
                        offset: b.skip,
                        limit: b.limit,
                        labels: b.labels,
                        predicate: b.predicate,
                    };
                    let op = Operation::Query(QueryOp::PropertyValues(PropertyValuesOp {
                        property: id,
                        query: q,
                    }));
                    run(state, &meta, op).await.map(|o| match o {
                        Outcome::PropertyValues {
                            values,
                            min,
                            max,
                            ty,
                            ..
                        } => ok(
                            200,
                            json!({"values": values, "min": min, "max": max, "type": ty}),
                        ),
                        other => unexpected(other),
                    })
                }
                .await
            }),
            (&Method::POST, ["tx"]) => (
                "/api/v1/tx",
                transactions::begin(state, &meta.outside_transaction(), req).await,
            ),
            (&Method::GET, ["tx", id]) => (
                "/api/v1/tx/{id}",
                transactions::status(state, &meta.outside_transaction(), id).await,
            ),
            (&Method::POST, ["tx", id, "commit"]) => (
                "/api/v1/tx/{id}/commit",
                transactions::commit(state, &meta.outside_transaction(), id).await,
            ),
            (&Method::POST, ["tx", id, "rollback"]) => (
                "/api/v1/tx/{id}/rollback",
                transactions::rollback(state, &meta.outside_transaction(), id).await,
            ),
            (&Method::POST, ["records", "import", "json"]) => (
                "/api/v1/records/import/json",
                bulk::import_json(state, &meta, req).await,
            ),
            (&Method::POST, ["records", "import", "csv"]) => (
                "/api/v1/records/import/csv",
                bulk::import_csv(state, &meta, req).await,
            ),
            (&Method::POST, ["records", "export", "csv"]) => (
                "/api/v1/records/export/csv",
                bulk::export_csv(state, &meta, req).await,
            ),
            (&Method::POST, ["records", id, "relationships"]) => (
                "/api/v1/records/{id}/relationships",
                relationships::attach(state, &meta, req, id).await,
            ),
            (&Method::PUT, ["records", id, "relationships"]) => (
                "/api/v1/records/{id}/relationships",
                relationships::detach(state, &meta, req, id).await,
            ),
            (&Method::POST, ["records", id, "search"]) => (
                "/api/v1/records/{id}/search",
                relationships::search_related(state, &meta, req, id).await,
            ),
            (&Method::POST, ["relationships", "search"]) => (
                "/api/v1/relationships/search",
                relationships::search(state, &meta, req).await,
            ),
            (&Method::POST, ["relationships", "create-many"]) => (
                "/api/v1/relationships/create-many",
                relationships::bulk(state, &meta, req, false).await,
            ),
            (&Method::POST, ["relationships", "delete-many"]) => (
                "/api/v1/relationships/delete-many",
                relationships::bulk(state, &meta, req, true).await,
            ),
            (&Method::POST, ["relationships", id]) if *id != "patterns" => (
                "/api/v1/relationships/{id}",
                relationships::attach(state, &meta, req, id).await,
            ),
            (&Method::PUT, ["relationships", id]) if *id != "patterns" => (
                "/api/v1/relationships/{id}",
                relationships::detach(state, &meta, req, id).await,
            ),
            (&Method::GET, ["sdk", "settings"]) => ("/api/v1/sdk/settings", {
                match state.engine.authenticate(meta.credential.as_deref()) {
                    Ok(_) => Ok(super::settings(state)),
                    Err(e) => Err(e),
                }
            }),
            _ => match later_route(&method, &segs) {
                Some((template, what)) => (template, {
                    state
                        .engine
                        .authenticate(meta.credential.as_deref())
                        .and_then(|_| Err(Error::unsupported(what)))
                }),
                None => (
                    "unmatched",
                    Err(Error::not_found(format!(
                        "no route for {method} {}",
                        crate::model::truncate(path, 200)
                    ))),
                ),
            },
        }
    };
    // SPEC.md: a body that cannot be parsed needs `write`; the engine decides, and only a
    // failed request pays for the check.
    let result = result.map_err(|e| {
        let unparseable = e.code == crate::error::ErrorCode::InvalidArgument
            && !body.iter().all(u8::is_ascii_whitespace)
            && serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err();
        if unparseable {
            super::unparseable(state, &meta, e)
        } else {
            e
        }
    });
    (template, result.unwrap_or_else(|e| rest_error(&e)))
}

/// A path segment with its percent-encoded octets decoded (RFC 3986 section 2.1: `%2D` is
/// `-`, so an id sent encoded names the same record); a segment whose encoding is malformed,
/// or decodes to something other than UTF-8, is kept as sent (and refused as such where an
/// id is expected).
fn percent_decoded(seg: &str) -> std::borrow::Cow<'_, str> {
    if !seg.contains('%') {
        return std::borrow::Cow::Borrowed(seg);
    }
    let b = seg.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let hex = b
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        let Some(v) = hex else {
            return std::borrow::Cow::Borrowed(seg);
        };
        out.push(v);
        i += 3;
    }
    String::from_utf8(out)
        .map(std::borrow::Cow::Owned)
        .unwrap_or(std::borrow::Cow::Borrowed(seg))
}

/// Routes of SPEC.md whose capability has not landed yet: they answer 501 `unsupported`
/// (after authentication) rather than 404, naming the capability.
fn later_route(method: &Method, segs: &[&str]) -> Option<(&'static str, &'static str)> {
    Some(match (method, segs) {
        (_, ["relationships", "patterns", ..]) => (
            "/api/v1/relationships/patterns",
            "relationship-pattern suggestions (a hosted-offering feature)",
        ),
        (_, ["query", "raw"]) => (
            "/api/v1/query/raw",
            "raw graph queries (no customer-owned graph database is connected)",
        ),
        (_, ["ai", ..]) => ("/api/v1/ai", "embedding indexes and AI search"),
        (_, ["billing", ..]) => ("/api/v1/billing", "billing (a hosted-offering feature)"),
        _ => return None,
    })
}

/// The request body, parsed (depth-checked) and decoded into a request type.
pub(super) fn decode_body<T: serde::de::DeserializeOwned>(
    state: &HttpState,
    req: &Request<Bytes>,
) -> Result<T> {
    super::decode_json_body(req.body(), &state.limits)
}

pub(super) fn unexpected(o: Outcome) -> HttpResponse {
    rest_error(&Error::internal(format!(
        "unexpected outcome for route: {o:?}"
    )))
}

/// A plain read: one operation whose outcome alone makes the answer (a record, a property,
/// a record's relationships).
struct Read {
    op: Operation,
    answer: fn(&HttpState, Outcome) -> HttpResponse,
}

/// The plain read a request is, with its route template; None for every other route. An
/// invalid query string is the read's error. The router and `answer_now` both take their
/// reads from here, so the two answer them alike.
fn read_of(
    method: &Method,
    segs: &[&str],
    query: Option<&str>,
) -> Option<(&'static str, Result<Read>)> {
    Some(match (method, segs) {
        (&Method::GET, ["records", id]) => (
            "/api/v1/records/{id}",
            Ok(Read {
                op: Operation::Query(QueryOp::Record(RecordQuery { id: id.to_string() })),
                answer: |_, o| match o {
                    Outcome::Record(r) => ok_record(200, &r),
                    other => unexpected(other),
                },
            }),
        ),
        (&Method::GET, ["properties", id]) => (
            "/api/v1/properties/{id}",
            Ok(Read {
                op: Operation::Describe(DescribeOp::Property(IdRef { id: id.to_string() })),
                answer: |_, o| match o {
                    Outcome::Property(p) => ok(200, property_json(&p)),
                    other => unexpected(other),
                },
            }),
        ),
        (&Method::GET, ["records", id, "relationships"]) => (
            "/api/v1/records/{id}/relationships",
            relationships::listing_of(id, query),
        ),
        _ => return None,
    })
}

/// A request [`answer_now`] took.
pub(super) enum Now<'a> {
    /// Answered on the calling task.
    Answered(&'static str, HttpResponse),
    /// The engine's answer to come (a large listing), then rendered.
    Pending(
        &'static str,
        std::pin::Pin<Box<dyn std::future::Future<Output = HttpResponse> + Send + 'a>>,
    ),
}

/// The segments of a path under `/api/v1/` as they stand, or None when one carries
/// percent-encoded octets (the router decodes those).
fn plain_segments(rest: &str) -> Option<Vec<&str>> {
    (!rest.contains('%')).then(|| rest.split('/').collect())
}

/// A plain read (`read_of`) of a body-less request, answered without the request's own
/// future when the engine answers it on the calling task (`Engine::execute_now`; a read it
/// does not answer at once, a large listing or a transaction's, comes back as `Pending`).
/// None for anything else: another route, a percent-encoded path, a refused credential or
/// unreadable header, a bad query string. Such a request takes the router, which checks and
/// answers it as ever; a refusal is found again there, and nothing is read or written twice
/// but those checks.
pub(super) fn answer_now<'a>(
    state: &'a HttpState,
    method: &Method,
    uri: &hyper::Uri,
    headers: &hyper::HeaderMap,
) -> Option<Now<'a>> {
    let segs = plain_segments(uri.path().trim_end_matches('/').strip_prefix("/api/v1/")?)?;
    let (template, Ok(Read { op, answer })) =
        read_of(super::routed_as(method), &segs, uri.query())?
    else {
        return None;
    };
    let mut meta = RequestMeta::from_headers(headers);
    meta.verify(&state.engine).ok()?;
    let finish = move |r: Result<Outcome>| match r {
        Ok(o) => answer(state, o),
        Err(e) => rest_error(&e),
    };
    Some(
        match state
            .engine
            .execute_now(meta.envelope(Transport::Rest, None, op))
        {
            crate::engine::Executed::Now(r) => Now::Answered(template, finish(r)),
            crate::engine::Executed::Later(work) => {
                Now::Pending(template, Box::pin(async move { finish(work.await) }))
            }
        },
    )
}

/// Runs an operation as this request's. Not an `async fn`: the operation moves into the
/// engine's boxed future at once, so a route awaiting this holds that box, not the operation.
pub(super) fn run<'a>(
    state: &'a HttpState,
    meta: &RequestMeta,
    op: Operation,
) -> crate::engine::BoxedOutcome<'a> {
    state
        .engine
        .execute(meta.envelope(Transport::Rest, None, op))
}

async fn create(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
) -> Result<HttpResponse> {
    let b: CreateBody = decode_body(state, &req)?;
    let return_result = b
        .options
        .as_ref()
        .and_then(|o| o.return_result)
        .unwrap_or(false);
    let op = Operation::Mutate(Mutation::PutRecord(PutRecordOp {
        mode: PutMode::Create,
        label: Some(b.label.unwrap_or_default()),
        id: None,
        properties: b.data,
        typed_properties: b.properties,
        vectors: b.vectors,
        options: b.options,
    }));
    match run(state, meta, op).await? {
        Outcome::Record(r) if return_result => Ok(ok_record(201, &r)),
        Outcome::Record(r) => Ok(ok(
            201,
            json!({"id": r.id.to_string(), "message": "Record created"}),
        )),
        other => Ok(unexpected(other)),
    }
}

async fn edit(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
    id: &str,
    mode: PutMode,
) -> Result<HttpResponse> {
    // A replace with no body at all would remove every property: a missing body is more
    // likely a client's mistake than a request to empty the record (`{}` says that).
    if mode == PutMode::Replace && req.body().iter().all(u8::is_ascii_whitespace) {
        return Err(Error::invalid(
            "PUT needs a JSON body (send {} to remove every property)",
        ));
    }
    let op = edit_op(id, mode, parse_json(req.body(), &state.limits)?)?;
    match run(state, meta, op).await? {
        Outcome::Record(r) => Ok(ok_record(201, &r)),
        other => Ok(unexpected(other)),
    }
}

async fn search(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
) -> Result<HttpResponse> {
    let b: SearchBody = decode_body(state, &req)?;
    let op = Operation::Query(QueryOp::Records(DocQuery {
        query: b.document(),
    }));
    match run(state, meta, op).await? {
        Outcome::Records { records, total } => Ok(list_records(state, &records, total)),
        Outcome::Rows { rows, total } => Ok(list(state, rows, total)),
        other => Ok(unexpected(other)),
    }
}

async fn delete_many(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
) -> Result<HttpResponse> {
    let b: SearchBody = decode_body(state, &req)?;
    let op = Operation::Mutate(Mutation::DeleteRecords(DocQuery {
        query: b.document(),
    }));
    match run(state, meta, op).await? {
        Outcome::Affected(n) => Ok(ok(
            201,
            json!({"message": format!("{n} record(s) deleted")}),
        )),
        other => Ok(unexpected(other)),
    }
}

async fn labels(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
) -> Result<HttpResponse> {
    let b: SearchBody = decode_body(state, &req)?;
    let op = Operation::Describe(DescribeOp::Labels(DescribeQuery {
        query: Some(b.document()),
    }));
    match run(state, meta, op).await? {
        Outcome::Labels(ls) => Ok(ok(
            200,
            Value::Object(ls.into_iter().map(|(l, c)| (l, json!(c))).collect()),
        )),
        other => Ok(unexpected(other)),
    }
}

async fn properties(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
) -> Result<HttpResponse> {
    let b: SearchBody = decode_body(state, &req)?;
    let op = Operation::Describe(DescribeOp::Properties(DescribeQuery {
        query: Some(b.document()),
    }));
    match run(state, meta, op).await? {
        Outcome::Properties(ps) => {
            let n = ps.len() as u64;
            Ok(list(state, ps.iter().map(property_json).collect(), n))
        }
        other => Ok(unexpected(other)),
    }
}
