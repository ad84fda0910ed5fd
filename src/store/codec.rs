//! Value encodings. Invariant: every stored value starts with [`VALUE_FORMAT`], so a later
//! build can tell old values from new ones without a format change of the whole store.

use crate::error::{Error, Result};
use crate::model::{PropType, PropValue, Record, Relationship, Scalar};
use std::collections::BTreeMap;
use uuid::Uuid;

pub const VALUE_FORMAT: u8 = 1;

fn corrupt(what: &str) -> Error {
    Error::internal(format!("corrupt stored value: {what}"))
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A cursor over an encoded value.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    #[inline(always)]
    fn u8(&mut self) -> Result<u8> {
        let (&x, rest) = self.b.split_first().ok_or_else(|| corrupt("truncated"))?;
        self.b = rest;
        Ok(x)
    }
    #[inline(always)]
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.b.len() < n {
            return Err(corrupt("truncated"));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u64(&mut self) -> Result<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    #[inline(always)]
    fn varint(&mut self) -> Result<u64> {
        // Lengths and counts are nearly always below 128: one byte.
        if let Some((&b, rest)) = self.b.split_first() {
            if b < 0x80 {
                self.b = rest;
                return Ok(u64::from(b));
            }
        }
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7F) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(corrupt("varint"))
    }
    #[inline(always)]
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.varint()? as usize;
        self.take(n)
    }
    fn string(&mut self) -> Result<String> {
        self.str().map(str::to_string)
    }
    /// A length-prefixed string, borrowed from the value. Labels, types and names are mostly
    /// short ASCII, which `is_ascii` checks in fewer instructions than `from_utf8`.
    fn str(&mut self) -> Result<&'a str> {
        let b = self.bytes()?;
        if b.is_ascii() {
            // SAFETY: ASCII bytes are valid UTF-8.
            return Ok(unsafe { std::str::from_utf8_unchecked(b) });
        }
        std::str::from_utf8(b).map_err(|_| corrupt("utf-8"))
    }
}

#[inline(always)]
fn check_format(r: &mut Reader) -> Result<()> {
    match r.u8()? {
        VALUE_FORMAT => Ok(()),
        v => Err(corrupt(&format!("value format {v}"))),
    }
}

pub fn encode_u64(v: u64) -> Vec<u8> {
    let mut out = vec![VALUE_FORMAT];
    out.extend_from_slice(&v.to_be_bytes());
    out
}

pub fn decode_u64(b: &[u8]) -> Result<u64> {
    let mut r = Reader { b };
    check_format(&mut r)?;
    r.u64()
}

/// Two counters in one value (per (property, label): records, records holding an array).
pub fn encode_u64_pair(a: u64, b: u64) -> Vec<u8> {
    let mut out = encode_u64(a);
    out.extend_from_slice(&b.to_be_bytes());
    out
}

pub fn decode_u64_pair(b: &[u8]) -> Result<(u64, u64)> {
    let mut r = Reader { b };
    check_format(&mut r)?;
    Ok((r.u64()?, r.u64()?))
}

pub fn encode_uuid(id: &Uuid) -> Vec<u8> {
    let mut out = vec![VALUE_FORMAT];
    out.extend_from_slice(id.as_bytes());
    out
}

pub fn decode_uuid(b: &[u8]) -> Result<Uuid> {
    let mut r = Reader { b };
    check_format(&mut r)?;
    Uuid::from_slice(r.take(16)?).map_err(|_| corrupt("uuid"))
}

pub fn encode_str(s: &str) -> Vec<u8> {
    let mut out = vec![VALUE_FORMAT];
    put_bytes(&mut out, s.as_bytes());
    out
}

pub fn decode_str(b: &[u8]) -> Result<String> {
    let mut r = Reader { b };
    check_format(&mut r)?;
    r.string()
}

/// Property metadata value: name and type.
pub fn encode_prop_meta(name: &str, ty: PropType) -> Vec<u8> {
    let mut out = vec![VALUE_FORMAT, ty as u8];
    put_bytes(&mut out, name.as_bytes());
    out
}

pub fn decode_prop_meta(b: &[u8]) -> Result<(String, PropType)> {
    let mut r = Reader { b };
    check_format(&mut r)?;
    let ty = PropType::from_tag(r.u8()?).ok_or_else(|| corrupt("type tag"))?;
    Ok((r.string()?, ty))
}

pub const MARKER: &[u8] = &[VALUE_FORMAT];

/// Record layout: format, row, version, label, property count, then per property
/// name, type tag, array flag, element count, elements.
pub fn encode_record(rec: &Record) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put_record(&mut out, rec.row, rec.version, &rec.label, &rec.props);
    out
}

/// Appends the record layout (format byte included) of the given parts.
fn put_record(
    out: &mut Vec<u8>,
    row: u64,
    version: u64,
    label: &str,
    props: &BTreeMap<String, PropValue>,
) {
    out.push(VALUE_FORMAT);
    out.extend_from_slice(&row.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    put_bytes(out, label.as_bytes());
    put_varint(out, props.len() as u64);
    for (name, v) in props {
        put_bytes(out, name.as_bytes());
        out.push(v.ty as u8);
        out.push(u8::from(v.array));
        put_varint(out, v.items.len() as u64);
        for item in &v.items {
            match item {
                Scalar::Str(s) => put_bytes(out, s.as_bytes()),
                Scalar::Int(i) => {
                    out.push(0);
                    out.extend_from_slice(&i.to_be_bytes());
                }
                Scalar::Float(f) => {
                    out.push(1);
                    out.extend_from_slice(&f.to_bits().to_be_bytes());
                }
                Scalar::Bool(b) => out.push(u8::from(*b)),
            }
        }
    }
}

/// Decodes the label and only the `wanted` properties (None: all of them). Filters and sort
/// keys read a few fields; skipping the rest keeps scans cheap.
pub fn decode_record_fields(id: Uuid, b: &[u8], wanted: Option<&[&str]>) -> Result<Record> {
    let mut r = Reader { b };
    let (row, version, label) = record_head(&mut r)?;
    Ok(Record {
        id,
        label: label.to_string(),
        row,
        version,
        props: read_props(&mut r, wanted)?,
    })
}

/// The record layout's head: format, row, version and label (borrowed).
fn record_head<'a>(r: &mut Reader<'a>) -> Result<(u64, u64, &'a str)> {
    check_format(r)?;
    Ok((r.u64()?, r.u64()?, r.str()?))
}

/// The properties of the record layout (from their count on), only the `wanted` ones.
fn read_props(r: &mut Reader, wanted: Option<&[&str]>) -> Result<BTreeMap<String, PropValue>> {
    let n = r.varint()?;
    let mut props = BTreeMap::new();
    for _ in 0..n {
        let name = r.bytes()?;
        let ty = PropType::from_tag(r.u8()?).ok_or_else(|| corrupt("type tag"))?;
        let array = r.u8()? != 0;
        let count = r.varint()?;
        let keep = match wanted {
            None => true,
            Some(w) => w.iter().any(|f| short_eq(f.as_bytes(), name)),
        };
        if !keep {
            skip_elems(r, ty, count)?;
            continue;
        }
        let name = String::from_utf8(name.to_vec()).map_err(|_| corrupt("utf-8"))?;
        let mut items = Vec::with_capacity(count.min(1024) as usize);
        for _ in 0..count {
            items.push(read_elem(r, ty)?.to_owned());
        }
        props.insert(name, PropValue { ty, array, items });
    }
    Ok(props)
}

/// One scalar of an encoded record, borrowed from the value bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarRef<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl ScalarRef<'_> {
    pub fn to_owned(self) -> Scalar {
        match self {
            ScalarRef::Str(s) => Scalar::Str(s.to_string()),
            ScalarRef::Int(i) => Scalar::Int(i),
            ScalarRef::Float(f) => Scalar::Float(f),
            ScalarRef::Bool(b) => Scalar::Bool(b),
        }
    }
}

impl<'a> From<&'a Scalar> for ScalarRef<'a> {
    fn from(s: &'a Scalar) -> Self {
        match s {
            Scalar::Str(s) => ScalarRef::Str(s),
            Scalar::Int(i) => ScalarRef::Int(*i),
            Scalar::Float(f) => ScalarRef::Float(*f),
            Scalar::Bool(b) => ScalarRef::Bool(*b),
        }
    }
}

/// One property of an encoded record, borrowed: its elements are decoded on demand.
#[derive(Debug, Clone, Copy)]
pub struct FieldRef<'a> {
    pub ty: PropType,
    pub array: bool,
    pub count: usize,
    raw: &'a [u8],
}

impl<'a> FieldRef<'a> {
    /// Calls `f` with each element in order.
    pub fn for_each(&self, mut f: impl FnMut(ScalarRef<'a>)) -> Result<()> {
        let mut r = Reader { b: self.raw };
        for _ in 0..self.count {
            f(read_elem(&mut r, self.ty)?);
        }
        Ok(())
    }
}

fn read_elem<'a>(r: &mut Reader<'a>, ty: PropType) -> Result<ScalarRef<'a>> {
    Ok(match ty {
        PropType::String | PropType::Datetime => {
            ScalarRef::Str(std::str::from_utf8(r.bytes()?).map_err(|_| corrupt("utf-8"))?)
        }
        PropType::Boolean => ScalarRef::Bool(r.u8()? != 0),
        PropType::Number => match r.u8()? {
            0 => ScalarRef::Int(r.u64()? as i64),
            _ => ScalarRef::Float(f64::from_bits(r.u64()?)),
        },
    })
}

fn skip_elems(r: &mut Reader, ty: PropType, count: u64) -> Result<()> {
    for _ in 0..count {
        match ty {
            PropType::String | PropType::Datetime => {
                r.bytes()?;
            }
            PropType::Boolean => {
                r.u8()?;
            }
            PropType::Number => {
                r.take(9)?;
            }
        }
    }
    Ok(())
}

/// Finds the `wanted` properties of an encoded record without allocating: `out[i]` becomes
/// the property named `wanted[i]` (None when absent). Returns the label's bytes.
pub fn record_fields<'a>(
    b: &'a [u8],
    wanted: &[&str],
    out: &mut [Option<FieldRef<'a>>],
) -> Result<&'a [u8]> {
    out.iter_mut().for_each(|o| *o = None);
    let mut r = Reader { b };
    check_format(&mut r)?;
    r.take(16)?;
    let label = r.bytes()?;
    let n = r.varint()?;
    for _ in 0..n {
        let name = r.bytes()?;
        let ty = PropType::from_tag(r.u8()?).ok_or_else(|| corrupt("type tag"))?;
        let array = r.u8()? != 0;
        let count = r.varint()?;
        let start = r.b;
        skip_elems(&mut r, ty, count)?;
        if let Some(i) = wanted.iter().position(|w| short_eq(w.as_bytes(), name)) {
            out[i] = Some(FieldRef {
                ty,
                array,
                count: count as usize,
                raw: &start[..start.len() - r.b.len()],
            });
        }
    }
    Ok(label)
}

/// Byte equality for short strings (names, labels) without a call to `memcmp`.
#[inline(always)]
pub fn short_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The label of an encoded record, without decoding the rest.
pub fn record_label(b: &[u8]) -> Result<&[u8]> {
    let mut r = Reader { b };
    check_format(&mut r)?;
    r.take(16)?;
    r.bytes()
}

pub fn decode_record(id: Uuid, b: &[u8]) -> Result<Record> {
    decode_record_fields(id, b, None)
}

/// Relationship layout: format, source id, target id, then the record layout with the type
/// in the label's place (so property encoding is shared with records).
pub fn encode_relationship(rel: &Relationship) -> Vec<u8> {
    let mut out = Vec::with_capacity(96);
    out.push(VALUE_FORMAT);
    out.extend_from_slice(rel.source.as_bytes());
    out.extend_from_slice(rel.target.as_bytes());
    put_relationship_body(&mut out, rel);
    out
}

/// A relationship's row, version, type and properties, in the record layout.
fn put_relationship_body(out: &mut Vec<u8>, rel: &Relationship) {
    put_record(out, rel.row, rel.version, &rel.rel_type, &rel.props);
}

/// The relationship whose body (`put_relationship_body`) is `b`.
fn relationship_from_body(id: Uuid, source: Uuid, target: Uuid, b: &[u8]) -> Result<Relationship> {
    let rec = decode_record(id, b)?;
    Ok(Relationship {
        id,
        row: rec.row,
        version: rec.version,
        rel_type: rec.label,
        source,
        target,
        props: rec.props,
    })
}

pub fn decode_relationship(id: Uuid, b: &[u8]) -> Result<Relationship> {
    let mut r = Reader { b };
    check_format(&mut r)?;
    let source = Uuid::from_slice(r.take(16)?).map_err(|_| corrupt("source id"))?;
    let target = Uuid::from_slice(r.take(16)?).map_err(|_| corrupt("target id"))?;
    relationship_from_body(id, source, target, r.b)
}

/// Adjacency value (storage format 2): format, the other end's label, then the relationship's
/// row, version, type and properties laid out as a record (`encode_record`). The ids are in
/// the key. Invariant: both entries of a relationship carry its current body, and each
/// carries the current label of the record at its other end (writes that change either
/// rewrite the entries: `store::relationships`).
pub fn encode_adjacency(other_label: &str, rel: &Relationship) -> Vec<u8> {
    let mut out = Vec::with_capacity(48 + other_label.len() + rel.rel_type.len());
    out.push(VALUE_FORMAT);
    put_bytes(&mut out, other_label.as_bytes());
    put_relationship_body(&mut out, rel);
    out
}

/// An adjacency value read in place: the other end's label, the relationship's row, version
/// and type borrowed from the value; its properties decoded only when asked for.
#[derive(Debug, Clone, Copy)]
pub struct AdjacencyView<'a> {
    pub other_label: &'a str,
    pub row: u64,
    pub version: u64,
    pub rel_type: &'a str,
    /// The record layout's properties, from their count on.
    props: &'a [u8],
}

impl AdjacencyView<'_> {
    pub fn props(&self) -> Result<BTreeMap<String, PropValue>> {
        read_props(&mut Reader { b: self.props }, None)
    }
}

pub fn adjacency_view(b: &[u8]) -> Result<AdjacencyView<'_>> {
    let mut r = Reader { b };
    check_format(&mut r)?;
    let other_label = r.str()?;
    let (row, version, rel_type) = record_head(&mut r)?;
    Ok(AdjacencyView {
        other_label,
        row,
        version,
        rel_type,
        props: r.b,
    })
}

/// An adjacency value: the other end's label and the relationship (`source` and `target`
/// come from the key).
pub fn decode_adjacency(
    id: Uuid,
    source: Uuid,
    target: Uuid,
    b: &[u8],
) -> Result<(String, Relationship)> {
    let v = adjacency_view(b)?;
    let rel = Relationship {
        id,
        row: v.row,
        version: v.version,
        rel_type: v.rel_type.to_string(),
        source,
        target,
        props: v.props()?,
    };
    Ok((v.other_label.to_string(), rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip() {
        let mut props = BTreeMap::new();
        props.insert(
            "a".into(),
            PropValue::scalar(PropType::Number, Scalar::Int(-5)),
        );
        props.insert(
            "b".into(),
            PropValue::scalar(PropType::Number, Scalar::Float(2.5)),
        );
        props.insert(
            "c".into(),
            PropValue {
                ty: PropType::String,
                array: true,
                items: vec![Scalar::Str("x".into()), Scalar::Str("".into())],
            },
        );
        props.insert(
            "d".into(),
            PropValue::scalar(PropType::Boolean, Scalar::Bool(true)),
        );
        props.insert(
            "e".into(),
            PropValue::scalar(PropType::Datetime, Scalar::Str("2024-01-01".into())),
        );
        props.insert(
            "f".into(),
            PropValue {
                ty: PropType::String,
                array: true,
                items: vec![],
            },
        );
        let rec = Record {
            id: Uuid::now_v7(),
            label: "L".into(),
            row: 7,
            version: 9,
            props,
        };
        let back = decode_record(rec.id, &encode_record(&rec)).unwrap();
        assert_eq!(back, rec);
        assert!(decode_record(rec.id, &[2, 0]).is_err());
        assert!(decode_record(rec.id, &encode_record(&rec)[..10]).is_err());
    }
}
