//! REST relationship routes (SPEC.md "Relationships"), each a translation into one Protocol
//! v1 operation: attach -> `linkRecordsById`, detach -> `unlinkRecordsById`, create-many /
//! delete-many -> `linkRecords` / `unlinkRecords`, list and search -> `query relationships`.

use super::{decode_body, list, list_records, list_relationships, ok, run, unexpected, SearchBody};
use crate::engine::Outcome;
use crate::error::{Error, Result};
use crate::protocol::{
    self, Command, DocQuery, LinkByIdCommand, LinkCommand, LinkSide, Mutation, OneOrMany,
    Operation, QueryOp, RelationshipQuery, RelationshipsQuery, UnlinkByIdCommand,
};
use crate::wire::http::{parse_json, HttpResponse, HttpState, RequestMeta};
use bytes::Bytes;
use hyper::Request;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// `targetIds` (required) or `typeOrTypes`: a string or an array of strings.
fn one_or_many(v: Option<&Value>, what: &str) -> Result<Option<OneOrMany>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => protocol::string_list(v, what).map(|l| Some(OneOrMany::Many(l))),
    }
}

fn opt_string(m: &Map<String, Value>, k: &str) -> Result<Option<String>> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(Error::invalid(format!("{k}: expected a string"))),
    }
}

fn body_object(state: &HttpState, req: &Request<Bytes>) -> Result<Map<String, Value>> {
    match parse_json(req.body(), &state.limits)? {
        Value::Object(m) => Ok(m),
        _ => Err(Error::invalid("body: expected a JSON object")),
    }
}

fn targets(m: &Map<String, Value>) -> Result<OneOrMany> {
    one_or_many(m.get("targetIds"), "targetIds")?
        .ok_or_else(|| Error::invalid("targetIds is required"))
}

/// `POST /records/{id}/relationships` and `POST /relationships/{id}`.
pub async fn attach(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
    id: &str,
) -> Result<HttpResponse> {
    // The path's id is named as such (the operation would call it `sourceIds[0]`).
    crate::model::parse_uuid_v7(id, "record id")?;
    let m = body_object(state, &req)?;
    let properties = match m.get("properties") {
        None | Some(Value::Null) => None,
        Some(Value::Object(p)) => Some(p.clone()),
        Some(_) => return Err(Error::invalid("properties: expected an object")),
    };
    let op = Operation::Mutate(Mutation::LinkRecordsById(Command {
        command: LinkByIdCommand {
            relation_type: opt_string(&m, "type")?,
            direction: opt_string(&m, "direction")?,
            source_ids: OneOrMany::One(id.to_string()),
            target_ids: targets(&m)?,
            properties,
        },
    }));
    match run(state, meta, op).await? {
        Outcome::Affected(_) => Ok(ok(
            201,
            json!({"message": format!("Relations to Record {id} have been successfully created")}),
        )),
        other => Ok(unexpected(other)),
    }
}

/// `PUT /records/{id}/relationships` and `PUT /relationships/{id}`.
pub async fn detach(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
    id: &str,
) -> Result<HttpResponse> {
    crate::model::parse_uuid_v7(id, "record id")?;
    let m = body_object(state, &req)?;
    let types = match one_or_many(m.get("typeOrTypes"), "typeOrTypes")? {
        Some(OneOrMany::Many(ts)) => ts,
        _ => vec![],
    };
    let op = Operation::Mutate(Mutation::UnlinkRecordsById(Command {
        command: UnlinkByIdCommand {
            relation_types: Some(types),
            source_ids: OneOrMany::One(id.to_string()),
            target_ids: targets(&m)?,
            direction: opt_string(&m, "direction")?,
        },
    }));
    match run(state, meta, op).await? {
        Outcome::Affected(n) => Ok(ok(
            200,
            json!({"message": format!("Relations to Record {id} have been successfully deleted"), "count": n}),
        )),
        other => Ok(unexpected(other)),
    }
}

/// `skip` / `limit` from the query string (integers), for list and search.
fn query_paging(query: Option<&str>) -> Result<(Option<i64>, Option<i64>)> {
    let (mut skip, mut limit) = (None, None);
    for pair in query.unwrap_or("").split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match k {
            "skip" => &mut skip,
            "limit" => &mut limit,
            _ => continue,
        };
        *slot = Some(v.parse::<i64>().map_err(|_| {
            Error::invalid(format!(
                "{k}: expected an integer, not '{}'",
                crate::model::truncate(v, 40)
            ))
        })?);
    }
    Ok((skip, limit))
}

fn relationships_list(state: &HttpState, o: Outcome) -> HttpResponse {
    match o {
        Outcome::Relationships {
            relationships,
            total,
        } => list_relationships(state, &relationships, total),
        other => unexpected(other),
    }
}

/// `GET /records/{id}/relationships` (`?skip=&limit=`), a plain read (`rest::read_of`).
pub(super) fn listing_of(id: &str, query: Option<&str>) -> Result<super::Read> {
    let (skip, limit) = query_paging(query)?;
    let op = Operation::Query(QueryOp::Relationships(RelationshipsQuery {
        query: RelationshipQuery {
            record_id: Some(id.to_string()),
            offset: skip,
            limit,
            ..Default::default()
        },
    }));
    Ok(super::Read {
        op,
        answer: relationships_list,
    })
}

#[derive(Debug, Default, Deserialize)]
struct EndpointBody {
    #[serde(default)]
    labels: Option<Vec<String>>,
    #[serde(default, rename = "where")]
    where_: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RelSearchBody {
    #[serde(default)]
    limit: Option<i64>,
    #[serde(default)]
    skip: Option<i64>,
    #[serde(default)]
    order_by: Option<Value>,
    #[serde(default, rename = "where")]
    where_: Option<Value>,
    #[serde(default)]
    source: Option<EndpointBody>,
    #[serde(default)]
    target: Option<EndpointBody>,
    #[serde(default)]
    direction: Option<String>,
    #[serde(default, rename = "type")]
    rel_type: Option<Value>,
    /// SearchDto's `labels` has no one meaning for a relationship: refused unless empty.
    #[serde(default)]
    labels: Option<Vec<String>>,
}

/// `POST /relationships/search`: paging from the query string or the body (the body wins).
pub async fn search(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
) -> Result<HttpResponse> {
    let (qs_skip, qs_limit) = query_paging(req.uri().query())?;
    let b: RelSearchBody = decode_body(state, &req)?;
    if b.labels.as_ref().is_some_and(|l| !l.is_empty()) {
        return Err(Error::invalid(
            "labels: relationship search takes the records' labels as source.labels and target.labels (and relationship types as where.type)",
        ));
    }
    let (source, target) = (b.source.unwrap_or_default(), b.target.unwrap_or_default());
    let op = Operation::Query(QueryOp::Relationships(RelationshipsQuery {
        query: RelationshipQuery {
            source_labels: source.labels,
            target_labels: target.labels,
            predicate: b.where_,
            source_predicate: source.where_,
            target_predicate: target.where_,
            relation_type: b.rel_type,
            offset: b.skip.or(qs_skip),
            limit: b.limit.or(qs_limit),
            direction: b.direction,
            order: b.order_by,
            record_id: None,
        },
    }));
    Ok(relationships_list(state, run(state, meta, op).await?))
}

#[derive(Debug, Default, Deserialize)]
struct BulkSide {
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default, rename = "where")]
    where_: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BulkBody {
    #[serde(default)]
    source: Option<BulkSide>,
    #[serde(default)]
    target: Option<BulkSide>,
    #[serde(default, rename = "type")]
    rel_type: Option<String>,
    #[serde(default)]
    direction: Option<String>,
    #[serde(default)]
    many_to_many: Option<bool>,
    #[serde(default)]
    properties: Option<Map<String, Value>>,
}

fn link_side(s: Option<BulkSide>, what: &str) -> Result<LinkSide> {
    let s = s.ok_or_else(|| Error::invalid(format!("{what} is required")))?;
    Ok(LinkSide {
        label: s
            .label
            .ok_or_else(|| Error::invalid(format!("{what}.label is required")))?,
        property: s.key,
        predicate: s.where_,
    })
}

/// `POST /relationships/create-many` and `POST /relationships/delete-many`.
pub async fn bulk(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
    delete: bool,
) -> Result<HttpResponse> {
    let b: BulkBody = decode_body(state, &req)?;
    let command = LinkCommand {
        relation_type: b.rel_type,
        direction: b.direction,
        allow_cartesian: b.many_to_many,
        properties: b.properties,
        source: link_side(b.source, "source")?,
        target: link_side(b.target, "target")?,
    };
    let op = Operation::Mutate(if delete {
        Mutation::UnlinkRecords(Command { command })
    } else {
        Mutation::LinkRecords(Command { command })
    });
    match run(state, meta, op).await? {
        Outcome::Affected(n) if delete => Ok(ok(
            200,
            json!({"message": format!("{n} relationship(s) deleted"), "count": n}),
        )),
        Outcome::Affected(n) => Ok(ok(
            201,
            json!({"message": format!("{n} relationship(s) created"), "count": n}),
        )),
        other => Ok(unexpected(other)),
    }
}

/// `POST /records/{id}/search`: a record search among the records related to one record.
pub async fn search_related(
    state: &HttpState,
    meta: &RequestMeta,
    req: Request<Bytes>,
    id: &str,
) -> Result<HttpResponse> {
    let b: SearchBody = decode_body(state, &req)?;
    let mut query = b.document();
    query.related_to = Some(id.to_string());
    let op = Operation::Query(QueryOp::Records(DocQuery { query }));
    match run(state, meta, op).await? {
        Outcome::Records { records, total } => Ok(list_records(state, &records, total)),
        Outcome::Rows { rows, total } => Ok(list(state, rows, total)),
        other => Ok(unexpected(other)),
    }
}
