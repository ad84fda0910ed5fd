//! Protocol v1 rendering of engine outcomes (`{"protocolVersion": 1, "response": {...}}`).

use super::PROTOCOL_VERSION;
use crate::engine::Outcome;
use crate::error::Error;
use crate::model::{Record, Relationship};
use crate::store::records::PropertyInfo;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// Serializes a record in the Protocol v1 shape `{id, label, properties, propertyTypes}`,
/// straight to the output (no intermediate JSON tree).
pub struct Proto<'a>(pub &'a Record);

/// Serializes a record as flat REST JSON: SPEC.md keys plus the system keys SDKs read. A user
/// property named `id` or `label` is shown under that key; the identity stays under
/// `__id`/`__label`.
pub struct Flat<'a>(pub &'a Record);

/// `{name: type}` of a record's properties.
struct Types<'a>(&'a Record);

impl Serialize for Types<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.props.len()))?;
        for (k, v) in &self.0.props {
            m.serialize_entry(k, v.ty.name())?;
        }
        m.end()
    }
}

struct Props<'a>(&'a Record);

impl Serialize for Props<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.props.len()))?;
        for (k, v) in &self.0.props {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl Serialize for Proto<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut buf = uuid::Uuid::encode_buffer();
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("id", r.id.hyphenated().encode_lower(&mut buf))?;
        m.serialize_entry("label", &r.label)?;
        m.serialize_entry("properties", &Props(r))?;
        m.serialize_entry("propertyTypes", &Types(r))?;
        m.end()
    }
}

impl Serialize for Flat<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut buf = uuid::Uuid::encode_buffer();
        let id: &str = r.id.hyphenated().encode_lower(&mut buf);
        let mut m = s.serialize_map(Some(r.props.len() + 5))?;
        if !r.props.contains_key("id") {
            m.serialize_entry("id", id)?;
        }
        if !r.props.contains_key("label") {
            m.serialize_entry("label", &r.label)?;
        }
        for (k, v) in &r.props {
            m.serialize_entry(k, v)?;
        }
        m.serialize_entry("__id", id)?;
        m.serialize_entry("__label", &r.label)?;
        m.serialize_entry("__proptypes", &Types(r))?;
        m.end()
    }
}

pub fn record(r: &Record) -> Value {
    serde_json::to_value(Proto(r)).unwrap_or(Value::Null)
}

pub fn flat_record(r: &Record) -> Value {
    serde_json::to_value(Flat(r)).unwrap_or(Value::Null)
}

pub fn property(p: &PropertyInfo) -> Value {
    json!({"id": p.id.to_string(), "name": p.name, "type": p.ty.name(),
           "recordsCount": p.records_count, "isArray": p.is_array})
}

/// A relationship with its endpoints' labels. Serializes as BEHAVIOUR.md §3's relationship
/// JSON `{id, sourceId, sourceLabel, targetId, targetLabel, type, properties}`, in its stored
/// orientation, straight to the output (no intermediate JSON tree).
#[derive(Debug, Clone)]
pub struct RelationshipView {
    pub rel: Relationship,
    pub source_label: String,
    pub target_label: String,
}

impl Serialize for RelationshipView {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = &self.rel;
        let mut buf = uuid::Uuid::encode_buffer();
        let mut m = s.serialize_map(Some(7))?;
        m.serialize_entry("id", r.id.hyphenated().encode_lower(&mut buf))?;
        m.serialize_entry("sourceId", r.source.hyphenated().encode_lower(&mut buf))?;
        m.serialize_entry("sourceLabel", &self.source_label)?;
        m.serialize_entry("targetId", r.target.hyphenated().encode_lower(&mut buf))?;
        m.serialize_entry("targetLabel", &self.target_label)?;
        m.serialize_entry("type", &r.rel_type)?;
        m.serialize_entry("properties", &r.props)?;
        m.end()
    }
}

/// The `response` object of a successful operation.
pub fn response(outcome: &Outcome) -> Value {
    match outcome {
        Outcome::Record(r) => json!({"kind": "record", "record": record(r)}),
        Outcome::Records { records, total } => json!({"kind": "records",
            "records": records.iter().map(record).collect::<Vec<_>>(), "total": total}),
        Outcome::Affected(n) => json!({"kind": "mutation", "affected": n}),
        Outcome::BuildInfo(b) => json!({"kind": "buildInfo", "build": {
            "version": b.version, "protocolVersion": PROTOCOL_VERSION,
            "storageFormatVersion": b.storage_format_version, "multitenant": b.multitenant,
            "languages": Vec::<String>::new()}}),
        Outcome::Labels(labels) => {
            let counts: Map<String, Value> =
                labels.iter().map(|(l, c)| (l.clone(), json!(c))).collect();
            json!({"kind": "labels", "labels": labels.iter().map(|(l, _)| l).collect::<Vec<_>>(), "counts": counts})
        }
        Outcome::Properties(ps) => {
            json!({"kind": "properties", "properties": ps.iter().map(property).collect::<Vec<_>>()})
        }
        Outcome::Property(p) => json!({"kind": "property", "property": property(p)}),
        Outcome::Rows { rows, total } => json!({"kind": "rows", "rows": rows, "total": total}),
        Outcome::Explain(plan) => json!({"kind": "explain", "plan": plan}),
        Outcome::Schema(schema) => json!({"kind": "schema", "schema": schema}),
        Outcome::Indexes(indexes) => json!({"kind": "indexes", "indexes": indexes}),
        Outcome::Relationships {
            relationships,
            total,
        } => json!({"kind": "relationships", "relationships": relationships, "total": total}),
        Outcome::Ingested {
            count,
            relationships,
            records,
        } => {
            let mut v = json!({"kind": "ingested", "count": count, "relationships": relationships});
            if let Some(rs) = records {
                v["records"] = rs.iter().map(record).collect();
            }
            v
        }
        Outcome::TransactionBegun { id, ttl } => {
            json!({"kind": "transactionBegun", "transactionId": id.to_string(), "ttlMs": ttl})
        }
        Outcome::TransactionInfo { id, staged } => {
            json!({"kind": "transaction", "transactionId": id.to_string(), "status": "open", "staged": staged})
        }
        Outcome::TransactionStaged => json!({"kind": "transactionStaged"}),
        Outcome::TransactionGet(r) => {
            // `__label` too: the SDK reads the staged record's label under that key.
            let mut rec = record(r);
            rec["__label"] = json!(r.label);
            json!({"kind": "transactionGet", "record": rec})
        }
        Outcome::TransactionOutcome(o) => {
            let mut v = json!({"kind": "transactionOutcome", "transactionId": o.id.to_string(),
                "status": o.status, "retryable": o.retryable});
            if let Some(r) = &o.reason {
                v["reason"] = json!(r);
            }
            v
        }
        Outcome::TransactionRolledBack { id } => {
            json!({"kind": "transactionRolledBack", "transactionId": id.to_string()})
        }
        Outcome::Policy(p) => p.clone(),
        Outcome::Purged {
            tenant,
            records,
            relationships,
        } => {
            json!({"kind": "purged", "tenant": tenant, "records": records, "relationships": relationships})
        }
        Outcome::Backup { content } => {
            json!({"kind": "backup", "format": crate::store::snapshot::FORMAT, "content": content})
        }
        Outcome::Csv { content, count } => {
            json!({"kind": "csv", "content": content, "count": count})
        }
        Outcome::PropertyValues {
            property,
            values,
            min,
            max,
            ..
        } => json!({"kind": "propertyValues",
            "property": property, "values": values, "min": min, "max": max}),
    }
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum Fast<'a> {
    Record { record: Proto<'a> },
    Records { records: Vec<Proto<'a>>, total: u64 },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Success<T> {
    protocol_version: i64,
    response: T,
}

/// Record outcomes, serialized without an intermediate JSON tree.
fn fast(outcome: &Outcome) -> Option<Fast<'_>> {
    match outcome {
        Outcome::Record(r) => Some(Fast::Record { record: Proto(r) }),
        Outcome::Records { records, total } => Some(Fast::Records {
            records: records.iter().map(Proto).collect(),
            total: *total,
        }),
        _ => None,
    }
}

/// The success envelope as bytes.
pub fn success_bytes(outcome: &Outcome) -> Vec<u8> {
    let out = match fast(outcome) {
        Some(f) => serde_json::to_vec(&Success {
            protocol_version: PROTOCOL_VERSION,
            response: f,
        }),
        None => serde_json::to_vec(&Success {
            protocol_version: PROTOCOL_VERSION,
            response: response(outcome),
        }),
    };
    out.unwrap_or_default()
}

/// The response object alone as JSON text (gRPC's `response_json`).
pub fn response_text(outcome: &Outcome) -> String {
    match fast(outcome) {
        Some(f) => serde_json::to_string(&f).unwrap_or_default(),
        None => response(outcome).to_string(),
    }
}

pub fn error(e: &Error) -> Value {
    json!({"protocolVersion": PROTOCOL_VERSION, "error": {"code": e.code.as_str(), "message": e.message}})
}
