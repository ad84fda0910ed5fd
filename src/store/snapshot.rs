//! Graph snapshots, format `graph-snapshot-v1`: what `engine export` writes and `engine
//! restore` reads, the migration path between storage format versions (SPEC.md
//! "Versioning"). See docs/operations.md "Export and restore" for the format.
//!
//! A snapshot is JSON Lines. The first line is the header (`format`, the engine version, the
//! storage format version it was read from, the tenancy mode); then, per tenant, a `tenant`
//! line followed by that tenant's `policy`, `property`, `record`, `vector` and
//! `relationship` lines, in that order; the last line is `end` with the counts, so a
//! truncated file is told from a whole one. Records and relationships come in row order (the
//! order a search without `orderBy` answers), so a restore, which numbers rows afresh in the
//! order it writes, keeps that order. Ids (records, relationships, properties) are kept.
//!
//! Values are exact: a property's JSON value is its scalar (or array, for an array property)
//! with its type beside it, integers as JSON integers and other numbers as floats written in
//! their shortest round-trip form (serde_json's `float_roundtrip` reads them back bit for
//! bit); datetimes keep the text they were written with.

use super::codec;
use super::keys::{self, Key};
use super::kv::KvRead;
use super::records::{self as rstore, PutMode, PutRecord, WriteOp};
use super::relationships::{self as rels, LinkRel};
use crate::error::{Error, Result};
use crate::model::{infer, PropType, PropValue, Record, Scalar};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::Write;
use uuid::Uuid;

pub const FORMAT: &str = "graph-snapshot-v1";

/// What a snapshot holds, as its `end` line counts it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub tenants: u64,
    pub records: u64,
    pub relationships: u64,
    pub vectors: u64,
    pub properties: u64,
}

impl Counts {
    fn to_json(self) -> Value {
        json!({"kind": "end", "tenants": self.tenants, "records": self.records,
               "relationships": self.relationships, "vectors": self.vectors,
               "properties": self.properties})
    }
}

fn header(multitenant: bool) -> Value {
    json!({"format": FORMAT, "engineVersion": env!("CARGO_PKG_VERSION"),
           "storageFormatVersion": super::STORAGE_FORMAT_VERSION, "multitenant": multitenant})
}

/// A failed write of the snapshot (a full disk, a closed pipe, a capped buffer): the
/// message keeps the cause, which the operator needs (it is not a fault of the engine's).
fn io(e: impl std::fmt::Display) -> Error {
    Error::new(
        crate::error::ErrorCode::Internal,
        format!("cannot write the snapshot: {e}"),
    )
}

fn line(out: &mut dyn Write, v: &Value) -> Result<()> {
    serde_json::to_writer(&mut *out, v).map_err(io)?;
    out.write_all(b"\n").map_err(io)
}

/// The first line.
pub fn header_line(out: &mut dyn Write, multitenant: bool) -> Result<()> {
    line(out, &header(multitenant))
}

/// A tenant's first line (`name` None: the single-tenant keyspace).
pub fn tenant_line(out: &mut dyn Write, name: Option<&str>, counts: &mut Counts) -> Result<()> {
    counts.tenants += 1;
    line(out, &json!({"kind": "tenant", "name": name}))
}

fn props_json(props: &BTreeMap<String, PropValue>) -> (Value, Value) {
    let mut values = Map::new();
    let mut types = Map::new();
    for (name, v) in props {
        values.insert(name.clone(), v.to_json());
        types.insert(name.clone(), Value::from(v.ty.name()));
    }
    (Value::Object(values), Value::Object(types))
}

/// Writes one tenant (`name` None: the single-tenant keyspace) as seen by `kv`.
pub fn export_tenant<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    name: Option<&str>,
    out: &mut dyn Write,
    counts: &mut Counts,
) -> Result<()> {
    tenant_line(out, name, counts)?;
    if let Some(p) = kv.get(&Key::tenant(tenant, keys::POLICY).0)? {
        let policy: Value = serde_json::from_slice(&p)
            .map_err(|e| Error::internal(format!("stored policy unreadable: {e}")))?;
        line(out, &json!({"kind": "policy", "policy": policy}))?;
    }
    let prefix = Key::tenant(tenant, keys::PROP_BY_ID).0;
    let mut props = Vec::new();
    kv.scan_prefix(&prefix, false, &mut |k, v| {
        let id = Uuid::from_slice(&k[prefix.len()..])
            .map_err(|_| Error::internal("corrupt property key"))?;
        props.push((id, codec::decode_prop_meta(v)?));
        Ok(true)
    })?;
    for (id, (pname, ty)) in props {
        line(
            out,
            &json!({"kind": "property", "id": id.to_string(), "name": pname, "type": ty.name()}),
        )?;
        counts.properties += 1;
    }
    // Rows first (ids and row numbers only), then each record in row order.
    let prefix = Key::tenant(tenant, keys::RECORD).0;
    let mut rows = Vec::new();
    kv.scan_prefix(&prefix, false, &mut |k, v| {
        let id = Uuid::from_slice(&k[prefix.len()..])
            .map_err(|_| Error::internal("corrupt record key"))?;
        rows.push((codec::decode_record_fields(id, v, Some(&[]))?.row, id));
        Ok(true)
    })?;
    rows.sort_unstable();
    for (_, id) in &rows {
        let Some(r) = rstore::get_record(kv, tenant, id)? else {
            continue;
        };
        let (properties, types) = props_json(&r.props);
        line(
            out,
            &json!({"kind": "record", "id": r.id.to_string(), "label": r.label,
                    "properties": properties, "propertyTypes": types}),
        )?;
        counts.records += 1;
    }
    let prefix = Key::tenant(tenant, keys::INLINE_VECTOR).0;
    let mut failed = None;
    kv.scan_prefix(&prefix, false, &mut |k, v| {
        let rest = &k[prefix.len()..];
        let record = rest
            .get(..16)
            .and_then(|b| Uuid::from_slice(b).ok())
            .ok_or_else(|| Error::internal("corrupt vector key"))?;
        let (property, _) =
            keys::read_escaped(&rest[16..]).ok_or_else(|| Error::internal("corrupt vector key"))?;
        let values: Vec<f64> = v
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let l = json!({"kind": "vector", "record": record.to_string(),
                       "property": String::from_utf8_lossy(&property), "values": values});
        if let Err(e) = line(out, &l) {
            failed = Some(e);
            return Ok(false);
        }
        counts.vectors += 1;
        Ok(true)
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    // As for records: (row, id) first, then each relationship in row order.
    let mut rows = Vec::new();
    rels::scan_relationships(kv, tenant, &mut |r| {
        rows.push((r.row, r.id));
        Ok(true)
    })?;
    rows.sort_unstable();
    for (_, id) in rows {
        let Some(r) = rels::get_relationship(kv, tenant, &id)? else {
            continue;
        };
        let (properties, types) = props_json(&r.props);
        line(
            out,
            &json!({"kind": "relationship", "id": r.id.to_string(), "type": r.rel_type,
                    "source": r.source.to_string(), "target": r.target.to_string(), "properties": properties, "propertyTypes": types}),
        )?;
        counts.relationships += 1;
    }
    Ok(())
}

pub fn end(out: &mut dyn Write, counts: Counts) -> Result<()> {
    line(out, &counts.to_json())?;
    out.flush().map_err(io)
}

/// One parsed line of a snapshot, as restore applies it.
#[derive(Debug)]
pub enum Item {
    Tenant(Option<String>),
    Policy(Vec<u8>),
    Property {
        id: Uuid,
        name: String,
        ty: PropType,
    },
    Record(Record),
    Vector {
        record: Uuid,
        property: String,
        values: Vec<f64>,
    },
    Relationship(LinkRel),
    End(Counts),
}

/// The header's tenancy mode (`multitenant`), after checking the format.
pub fn read_header(text: &str) -> Result<bool> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| Error::invalid(format!("line 1: not a snapshot header ({e})")))?;
    match v.get("format").and_then(Value::as_str) {
        Some(FORMAT) => {}
        Some(other) => {
            return Err(Error::invalid(format!(
                "line 1: snapshot format {:?}; this build reads {FORMAT}",
                crate::model::truncate(other, 64)
            )))
        }
        None => return Err(Error::invalid("line 1: not a snapshot header (no format)")),
    }
    v.get("multitenant")
        .and_then(Value::as_bool)
        .ok_or_else(|| Error::invalid("line 1: the header has no multitenant flag"))
}

/// A name the store holds (a label, property, relationship type or tenant): not empty. The
/// rules for new names (lengths, spaces) are not applied: a store may hold names written
/// before them, and a restore keeps what the store held.
pub fn stored_name<'a>(what: &str, name: &'a str) -> Result<&'a str> {
    if name.is_empty() {
        return Err(Error::invalid(format!("{what} must not be empty")));
    }
    Ok(name)
}

fn field<'a>(v: &'a Value, name: &str) -> Result<&'a Value> {
    v.get(name)
        .ok_or_else(|| Error::invalid(format!("{name} is missing")))
}

fn str_field<'a>(v: &'a Value, name: &str) -> Result<&'a str> {
    field(v, name)?
        .as_str()
        .ok_or_else(|| Error::invalid(format!("{name} must be a string")))
}

fn id_field(v: &Value, name: &str) -> Result<Uuid> {
    crate::model::parse_uuid_v7(str_field(v, name)?, name)
}

fn count_field(v: &Value, name: &str) -> Result<u64> {
    field(v, name)?
        .as_u64()
        .ok_or_else(|| Error::invalid(format!("{name} must be a count")))
}

fn scalar(ty: PropType, v: &Value, at: &str) -> Result<Scalar> {
    let bad = || Error::invalid(format!("{at}: not a {} value", ty.name()));
    match (ty, v) {
        (PropType::String, Value::String(s)) => Ok(Scalar::Str(s.clone())),
        (PropType::Datetime, Value::String(s)) => {
            crate::model::datetime::parse(s).ok_or_else(bad)?;
            Ok(Scalar::Str(s.clone()))
        }
        (PropType::Number, Value::Number(n)) => infer::number_scalar(n),
        (PropType::Boolean, Value::Bool(b)) => Ok(Scalar::Bool(*b)),
        _ => Err(bad()),
    }
}

fn props(v: &Value) -> Result<BTreeMap<String, PropValue>> {
    let values = field(v, "properties")?
        .as_object()
        .ok_or_else(|| Error::invalid("properties must be an object"))?;
    let types = field(v, "propertyTypes")?
        .as_object()
        .ok_or_else(|| Error::invalid("propertyTypes must be an object"))?;
    if let Some(extra) = types.keys().find(|k| !values.contains_key(*k)) {
        return Err(Error::invalid(format!(
            "propertyTypes.{extra} names no property of properties"
        )));
    }
    let mut out = BTreeMap::new();
    for (name, value) in values {
        stored_name("a property name", name)?;
        let ty = types
            .get(name)
            .and_then(Value::as_str)
            .and_then(PropType::parse)
            .ok_or_else(|| Error::invalid(format!("propertyTypes.{name} is missing or unknown")))?;
        let at = format!("properties.{name}");
        let pv = match value {
            Value::Array(items) => PropValue {
                ty,
                array: true,
                items: items
                    .iter()
                    .map(|i| scalar(ty, i, &at))
                    .collect::<Result<_>>()?,
            },
            one => PropValue::scalar(ty, scalar(ty, one, &at)?),
        };
        out.insert(name.clone(), pv);
    }
    Ok(out)
}

/// Parses one line after the header.
pub fn parse_item(text: &str) -> Result<Item> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| Error::invalid(format!("not JSON ({e})")))?;
    Ok(match str_field(&v, "kind")? {
        "tenant" => Item::Tenant(match field(&v, "name")? {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            _ => return Err(Error::invalid("name must be a string or null")),
        }),
        "policy" => Item::Policy(
            serde_json::to_vec(field(&v, "policy")?).map_err(|e| Error::internal(e.to_string()))?,
        ),
        "property" => Item::Property {
            id: id_field(&v, "id")?,
            name: { stored_name("name", str_field(&v, "name")?)?.to_string() },
            ty: PropType::parse(str_field(&v, "type")?)
                .ok_or_else(|| Error::invalid("type is not a property type"))?,
        },
        "record" => {
            let label = stored_name("label", str_field(&v, "label")?)?;
            Item::Record(Record {
                id: id_field(&v, "id")?,
                label: label.to_string(),
                row: 0,
                version: 0,
                props: props(&v)?,
            })
        }
        "vector" => {
            let values = crate::bulk::vector_values(Some(field(&v, "values")?), "values")?;
            Item::Vector {
                record: id_field(&v, "record")?,
                property: stored_name("property", str_field(&v, "property")?)?.to_string(),
                values,
            }
        }
        "relationship" => {
            let rel_type = stored_name("type", str_field(&v, "type")?)?;
            Item::Relationship(LinkRel {
                id: id_field(&v, "id")?,
                source: id_field(&v, "source")?,
                target: id_field(&v, "target")?,
                rel_type: rel_type.to_string(),
                props: props(&v)?,
                // Parallel relationships are kept as they were.
                unique: false,
                seen: None,
            })
        }
        "end" => Item::End(Counts {
            tenants: count_field(&v, "tenants")?,
            records: count_field(&v, "records")?,
            relationships: count_field(&v, "relationships")?,
            vectors: count_field(&v, "vectors")?,
            properties: count_field(&v, "properties")?,
        }),
        other => {
            return Err(Error::invalid(format!(
                "unknown kind {:?}",
                crate::model::truncate(other, 64)
            )))
        }
    })
}

/// The write of a restored record: a create with its own id (rows are numbered afresh, in
/// the order records are written).
pub fn record_op(r: Record) -> WriteOp {
    WriteOp::Put(PutRecord {
        id: r.id,
        mode: PutMode::Create,
        label: Some(r.label),
        props: r.props.into_iter().map(|(k, v)| (k, Some(v))).collect(),
    })
}
