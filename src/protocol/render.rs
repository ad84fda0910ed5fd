//! Protocol v1 rendering of engine outcomes (`{"protocolVersion": 1, "response": {...}}`).

use super::PROTOCOL_VERSION;
use crate::engine::Outcome;
use crate::error::Error;
use crate::model::Record;
use crate::store::records::PropertyInfo;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// Serializes a record in the Protocol v1 shape `{id, label, properties, propertyTypes}`,
/// straight to the output (no intermediate JSON tree).
pub struct Proto<'a>(pub &'a Record);

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

/// `id` as `Uuid::hyphenated` writes it (lower-case hex, 8-4-4-4-12), two digits per byte
/// from a table.
pub fn uuid_text(id: &uuid::Uuid) -> [u8; 36] {
    const PAIRS: [[u8; 2]; 256] = {
        let hex = b"0123456789abcdef";
        let mut t = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = [hex[i >> 4], hex[i & 15]];
            i += 1;
        }
        t
    };
    let mut s = [b'-'; 36];
    let mut at = 0;
    for (i, b) in id.as_bytes().iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        s[at..at + 2].copy_from_slice(&PAIRS[*b as usize]);
        at += 2;
    }
    s
}

/// Appends a record as flat REST JSON: SPEC.md keys plus the system keys SDKs read. A user
/// property named `id` or `label` is shown under that key; the identity stays under
/// `__id`/`__label`. Written straight to bytes, compact, as serde_json would write it: serde's
/// per-field path (and its byte-by-byte escaping) was ~15% of the instructions of a read by
/// id; strings are escaped by serde_json only when they hold something to escape.
pub fn write_flat(out: &mut Vec<u8>, r: &Record) {
    let id = uuid_text(&r.id);
    // The engine's own keys, type names and ids need no escaping: written as they are.
    let plain = |out: &mut Vec<u8>, s: &[u8]| {
        out.push(b'"');
        out.extend_from_slice(s);
        out.push(b'"');
    };
    out.push(b'{');
    if !r.props.contains_key("id") {
        out.extend_from_slice(b"\"id\":");
        plain(out, &id);
        out.push(b',');
    }
    if !r.props.contains_key("label") {
        out.extend_from_slice(b"\"label\":");
        put_str(out, &r.label);
        out.push(b',');
    }
    put_entries(out, &r.props, put_value);
    if !r.props.is_empty() {
        out.push(b',');
    }
    out.extend_from_slice(b"\"__id\":");
    plain(out, &id);
    out.extend_from_slice(b",\"__label\":");
    put_str(out, &r.label);
    out.extend_from_slice(b",\"__proptypes\":{");
    put_entries(out, &r.props, |out, v| plain(out, v.ty.name().as_bytes()));
    out.extend_from_slice(b"}}");
}

/// Appends a map's entries as `"key":value` pairs separated by commas (no braces), each
/// value written by `value`.
fn put_entries(
    out: &mut Vec<u8>,
    map: &std::collections::BTreeMap<String, crate::model::PropValue>,
    value: impl Fn(&mut Vec<u8>, &crate::model::PropValue),
) {
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_str(out, k);
        out.push(b':');
        value(out, v);
    }
}

/// Appends `[item, ...]`, each written by `item`.
fn put_list<T>(out: &mut Vec<u8>, items: &[T], item: impl Fn(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        item(out, x);
    }
    out.push(b']');
}

fn put_value(out: &mut Vec<u8>, v: &crate::model::PropValue) {
    use crate::model::Scalar;
    let scalar = |out: &mut Vec<u8>, x: &Scalar| match x {
        Scalar::Str(s) => put_str(out, s),
        Scalar::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Scalar::Int(_) | Scalar::Float(_) => {
            let _ = serde_json::to_writer(&mut *out, x);
        }
    };
    match (v.array, v.items.first()) {
        (true, _) => put_list(out, &v.items, scalar),
        (false, Some(x)) => scalar(out, x),
        (false, None) => out.extend_from_slice(b"null"),
    }
}

/// Appends `s` as a JSON string, escaped as serde_json escapes it.
fn put_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    if needs_escape(b) {
        let _ = serde_json::to_writer(&mut *out, s);
        return;
    }
    out.reserve(b.len() + 2);
    out.push(b'"');
    out.extend_from_slice(b);
    out.push(b'"');
}

/// Whether serde_json escapes some byte of `b` (a control byte, `"` or `\\`), eight bytes at
/// a time (a string shorter than eight is widened with spaces; a longer one's last eight bytes
/// are read whole, overlapping the chunk before). Exact either way.
fn needs_escape(b: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Some byte of `x` is below `n` (n <= 128), exactly.
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH != 0;
    let escapes = |x: u64| {
        below(x, 0x20) || below(x ^ (ONES * b'"' as u64), 1) || below(x ^ (ONES * b'\\' as u64), 1)
    };
    let word = |c: &[u8]| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
    if b.len() < 8 {
        let mut w = [b' '; 8];
        w[..b.len()].copy_from_slice(b);
        return escapes(word(&w));
    }
    b.chunks_exact(8).any(|c| escapes(word(c))) || escapes(word(&b[b.len() - 8..]))
}

pub fn record(r: &Record) -> Value {
    serde_json::to_value(Proto(r)).unwrap_or(Value::Null)
}

/// `[record, ...]` as flat REST JSON.
pub fn write_flat_list(out: &mut Vec<u8>, records: &[Record]) {
    put_list(out, records, write_flat);
}

/// A record as flat REST JSON, as a tree (for answers built as trees).
pub fn flat_record(r: &Record) -> Value {
    let mut out = Vec::with_capacity(256);
    write_flat(&mut out, r);
    serde_json::from_slice(&out).unwrap_or(Value::Null)
}

pub fn property(p: &PropertyInfo) -> Value {
    json!({"id": p.id.to_string(), "name": p.name, "type": p.ty.name(),
           "recordsCount": p.records_count, "isArray": p.is_array})
}

/// A relationship with its endpoints' labels. Serializes as BEHAVIOUR.md §3's relationship
/// JSON `{id, sourceId, sourceLabel, targetId, targetLabel, type, properties}`, in its stored
/// orientation, straight to the output (no intermediate JSON tree). Labels and the type are
/// shared strings: a page's relationships mostly repeat a few of each.
#[derive(Debug, Clone)]
pub struct RelationshipView {
    pub id: uuid::Uuid,
    pub source: uuid::Uuid,
    pub target: uuid::Uuid,
    pub rel_type: Arc<str>,
    pub props: std::collections::BTreeMap<String, crate::model::PropValue>,
    pub source_label: Arc<str>,
    pub target_label: Arc<str>,
}

/// Appends a relationship as BEHAVIOUR.md §3's JSON, written straight to bytes as serde_json
/// writes `RelationshipView`'s serialization (a unit test holds the two equal): serde's
/// byte-by-byte escaping of the three ids, labels and type was ~20% of the instructions of
/// a point expansion.
pub fn write_relationship(out: &mut Vec<u8>, v: &RelationshipView) {
    // One reservation for all but escapes and properties: keys and punctuation, three ids,
    // two labels and the type.
    out.reserve(97 + 3 * 36 + v.source_label.len() + v.target_label.len() + v.rel_type.len());
    out.extend_from_slice(b"{\"id\":\"");
    out.extend_from_slice(&uuid_text(&v.id));
    out.extend_from_slice(b"\",\"sourceId\":\"");
    out.extend_from_slice(&uuid_text(&v.source));
    out.extend_from_slice(b"\",\"sourceLabel\":");
    put_str(out, &v.source_label);
    out.extend_from_slice(b",\"targetId\":\"");
    out.extend_from_slice(&uuid_text(&v.target));
    out.extend_from_slice(b"\",\"targetLabel\":");
    put_str(out, &v.target_label);
    out.extend_from_slice(b",\"type\":");
    put_str(out, &v.rel_type);
    out.extend_from_slice(b",\"properties\":{");
    put_entries(out, &v.props, put_value);
    out.extend_from_slice(b"}}");
}

/// `[relationship, ...]`, each as [`write_relationship`] writes it.
pub fn write_relationship_list(out: &mut Vec<u8>, rels: &[RelationshipView]) {
    put_list(out, rels, write_relationship);
}

impl Serialize for RelationshipView {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = uuid::Uuid::encode_buffer();
        let mut m = s.serialize_map(Some(7))?;
        m.serialize_entry("id", self.id.hyphenated().encode_lower(&mut buf))?;
        m.serialize_entry("sourceId", self.source.hyphenated().encode_lower(&mut buf))?;
        m.serialize_entry("sourceLabel", &*self.source_label)?;
        m.serialize_entry("targetId", self.target.hyphenated().encode_lower(&mut buf))?;
        m.serialize_entry("targetLabel", &*self.target_label)?;
        m.serialize_entry("type", &*self.rel_type)?;
        m.serialize_entry("properties", &self.props)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PropType, PropValue, Scalar};
    use serde::ser::SerializeMap;

    /// The serde rendering `write_flat` replaced, kept as its oracle.
    struct SerdeFlat<'a>(&'a Record);

    impl Serialize for SerdeFlat<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let r = self.0;
            let id = r.id.to_string();
            let mut m = s.serialize_map(None)?;
            if !r.props.contains_key("id") {
                m.serialize_entry("id", &id)?;
            }
            if !r.props.contains_key("label") {
                m.serialize_entry("label", &r.label)?;
            }
            for (k, v) in &r.props {
                m.serialize_entry(k, v)?;
            }
            m.serialize_entry("__id", &id)?;
            m.serialize_entry("__label", &r.label)?;
            m.serialize_entry("__proptypes", &Types(r))?;
            m.end()
        }
    }

    #[test]
    fn needs_escape_is_what_serde_json_escapes() {
        // Every ASCII byte (and a multi-byte character) at every position of strings up to
        // 19 bytes: short strings (widened to eight bytes), whole words and the overlap.
        let mut cases: Vec<String> = Vec::new();
        for len in 1..20 {
            for at in 0..len {
                for c in (0u8..128).map(char::from).chain(['é']) {
                    let mut s: String = "a".repeat(len - 1);
                    s.insert(at, c);
                    cases.push(s);
                }
            }
        }
        for s in cases {
            let escaped = serde_json::to_string(&s).unwrap() != format!("\"{s}\"");
            assert_eq!(needs_escape(s.as_bytes()), escaped, "{s:?}");
        }
    }

    #[test]
    fn uuid_text_is_the_hyphenated_form() {
        let mut ids = vec![uuid::Uuid::nil(), uuid::Uuid::max()];
        ids.extend((0..200).map(|_| uuid::Uuid::now_v7()));
        ids.extend((0..=255u8).map(|b| uuid::Uuid::from_bytes([b; 16])));
        for id in ids {
            assert_eq!(uuid_text(&id).as_slice(), id.to_string().as_bytes());
        }
    }

    #[test]
    fn write_flat_writes_what_serde_json_writes() {
        // Strings that need escaping at every position of an 8-byte chunk and in the tail,
        // and ones that only look close (non-ASCII, DEL, bytes just above the controls).
        let mut texts: Vec<String> = vec![
            "".into(),
            "id".into(),
            "plain text".into(),
            "é名前🙂".into(),
            "\u{7f}".into(),
            " !#[]".into(),
            "a\"b".into(),
            "back\\slash".into(),
            "tab\tnew\nline\r".into(),
            "\u{0}\u{1}\u{1f}".into(),
            "0123456789abcdef\"".into(),
        ];
        for at in 0..17 {
            for c in ['"', '\\', '\n', '\u{1}', '\u{1f}', 'x'] {
                let mut t: String = "abcdefghijklmnopq".chars().take(17).collect();
                t.insert(at, c);
                texts.push(t);
            }
        }
        let scalars = vec![
            Scalar::Int(0),
            Scalar::Int(i64::MIN),
            Scalar::Int(i64::MAX),
            Scalar::Float(0.1),
            Scalar::Float(-2.5e-7),
            Scalar::Float(1e21),
            Scalar::Float(123456789.125),
            Scalar::Float(f64::MAX),
            Scalar::Bool(true),
            Scalar::Bool(false),
        ];
        let mut records = Vec::new();
        for (i, t) in texts.iter().enumerate() {
            let mut props = std::collections::BTreeMap::new();
            props.insert(
                t.clone(),
                PropValue::scalar(PropType::String, Scalar::Str(t.clone())),
            );
            props.insert(
                format!("n{i}"),
                PropValue::scalar(PropType::Number, scalars[i % scalars.len()].clone()),
            );
            props.insert(
                "list".into(),
                PropValue {
                    ty: PropType::String,
                    array: true,
                    items: vec![Scalar::Str(t.clone()), Scalar::Str("x".into())],
                },
            );
            props.insert(
                "none".into(),
                PropValue {
                    ty: PropType::Number,
                    array: false,
                    items: vec![],
                },
            );
            props.insert(
                "empty".into(),
                PropValue {
                    ty: PropType::Boolean,
                    array: true,
                    items: vec![],
                },
            );
            if i % 3 == 0 {
                props.insert(
                    "id".into(),
                    PropValue::scalar(PropType::Number, Scalar::Int(7)),
                );
            }
            if i % 4 == 0 {
                props.insert(
                    "label".into(),
                    PropValue::scalar(PropType::String, Scalar::Str("L".into())),
                );
            }
            records.push(Record {
                id: uuid::Uuid::now_v7(),
                label: t.clone(),
                row: i as u64,
                version: 1,
                props,
            });
        }
        for r in &records {
            let mut out = Vec::new();
            write_flat(&mut out, r);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(&SerdeFlat(r)).unwrap()
            );
        }
        let mut out = Vec::new();
        write_flat_list(&mut out, &records);
        let all: Vec<Value> = records
            .iter()
            .map(|r| serde_json::to_value(SerdeFlat(r)).unwrap())
            .collect();
        assert_eq!(
            serde_json::from_slice::<Value>(&out).unwrap(),
            Value::Array(all)
        );
        assert_eq!(
            flat_record(&records[0]),
            serde_json::to_value(SerdeFlat(&records[0])).unwrap()
        );
        // Relationships: the same texts as labels, types and properties, against
        // RelationshipView's serde rendering.
        let views: Vec<RelationshipView> = records
            .iter()
            .enumerate()
            .map(|(i, r)| RelationshipView {
                id: uuid::Uuid::now_v7(),
                source: r.id,
                target: uuid::Uuid::now_v7(),
                rel_type: texts[(i + 1) % texts.len()].as_str().into(),
                props: if i % 5 == 0 {
                    Default::default()
                } else {
                    r.props.clone()
                },
                source_label: r.label.as_str().into(),
                target_label: texts[(i + 2) % texts.len()].as_str().into(),
            })
            .collect();
        for v in &views {
            let mut out = Vec::new();
            write_relationship(&mut out, v);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(v).unwrap()
            );
        }
        let mut out = Vec::new();
        write_relationship_list(&mut out, &views);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            serde_json::to_string(&views).unwrap()
        );
    }
}
