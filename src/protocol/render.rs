//! Protocol v1 rendering of engine outcomes (`{"protocolVersion": 1, "response": {...}}`).

use super::PROTOCOL_VERSION;
use crate::engine::Outcome;
use crate::error::Error;
use crate::model::Record;
use crate::store::records::PropertyInfo;
use serde_json::{json, Map, Value};

/// Protocol record shape: `{id, label, properties, propertyTypes}`.
pub fn record(r: &Record) -> Value {
    let mut props = Map::new();
    let mut types = Map::new();
    for (k, v) in &r.props {
        props.insert(k.clone(), v.to_json());
        types.insert(k.clone(), Value::String(v.ty.name().into()));
    }
    json!({"id": r.id.to_string(), "label": r.label, "properties": props, "propertyTypes": types})
}

/// The flat record JSON of REST and of aggregation rows: SPEC.md keys plus the system keys
/// SDKs read. A user property named `id` or `label` is shown under that key; the identity
/// stays under `__id`/`__label`.
pub fn flat_record(r: &Record) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(r.id.to_string()));
    m.insert("label".into(), json!(r.label));
    let mut types = Map::new();
    for (k, v) in &r.props {
        m.insert(k.clone(), v.to_json());
        types.insert(k.clone(), json!(v.ty.name()));
    }
    m.insert("__id".into(), json!(r.id.to_string()));
    m.insert("__label".into(), json!(r.label));
    m.insert("__proptypes".into(), Value::Object(types));
    Value::Object(m)
}

pub fn property(p: &PropertyInfo) -> Value {
    json!({"id": p.id.to_string(), "name": p.name, "type": p.ty.name(),
           "recordsCount": p.records_count, "isArray": p.is_array})
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

pub fn success(outcome: &Outcome) -> Value {
    json!({"protocolVersion": PROTOCOL_VERSION, "response": response(outcome)})
}

pub fn error(e: &Error) -> Value {
    json!({"protocolVersion": PROTOCOL_VERSION, "error": {"code": e.code.as_str(), "message": e.message}})
}
