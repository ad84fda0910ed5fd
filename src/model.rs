//! Records and typed property values: the engine's data model (BEHAVIOUR.md §1).

pub mod datetime;
pub mod infer;

use std::collections::BTreeMap;
use uuid::Uuid;

/// The four property types. The numeric tags are stored on disk; never renumber them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PropType {
    String = 1,
    Number = 2,
    Boolean = 3,
    Datetime = 4,
}

impl PropType {
    pub fn name(self) -> &'static str {
        match self {
            PropType::String => "string",
            PropType::Number => "number",
            PropType::Boolean => "boolean",
            PropType::Datetime => "datetime",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "string" => Some(PropType::String),
            "number" => Some(PropType::Number),
            "boolean" => Some(PropType::Boolean),
            "datetime" => Some(PropType::Datetime),
            _ => None,
        }
    }
    pub fn from_tag(t: u8) -> Option<Self> {
        match t {
            1 => Some(PropType::String),
            2 => Some(PropType::Number),
            3 => Some(PropType::Boolean),
            4 => Some(PropType::Datetime),
            _ => None,
        }
    }
}

/// One scalar. A datetime is kept as the text the client wrote (returned exactly as written);
/// its instant is derived when comparing or indexing.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Scalar::Str(s) => serde_json::Value::String(s.clone()),
            Scalar::Int(i) => serde_json::Value::from(*i),
            // Invariant: floats are finite (NaN and infinities are refused on input).
            Scalar::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Scalar::Bool(b) => serde_json::Value::Bool(*b),
        }
    }
}

/// A property value: its type, whether it was written as an array, and its elements.
/// Invariant: every element matches `ty` (strings for string and datetime, Int/Float for
/// number, Bool for boolean); a non-array value has exactly one element.
#[derive(Debug, Clone, PartialEq)]
pub struct PropValue {
    pub ty: PropType,
    pub array: bool,
    pub items: Vec<Scalar>,
}

impl PropValue {
    pub fn scalar(ty: PropType, v: Scalar) -> Self {
        PropValue {
            ty,
            array: false,
            items: vec![v],
        }
    }
    pub fn to_json(&self) -> serde_json::Value {
        if self.array {
            serde_json::Value::Array(self.items.iter().map(Scalar::to_json).collect())
        } else {
            self.items
                .first()
                .map(Scalar::to_json)
                .unwrap_or(serde_json::Value::Null)
        }
    }
}

impl serde::Serialize for Scalar {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Scalar::Str(x) => s.serialize_str(x),
            Scalar::Int(i) => s.serialize_i64(*i),
            // Invariant: floats are finite; serde_json writes non-finite floats as null.
            Scalar::Float(f) => s.serialize_f64(*f),
            Scalar::Bool(b) => s.serialize_bool(*b),
        }
    }
}

/// A value serializes as its scalar, or as an array of scalars when written as an array.
impl serde::Serialize for PropValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (self.array, self.items.first()) {
            (true, _) => self.items.serialize(s),
            (false, Some(x)) => x.serialize(s),
            (false, None) => s.serialize_none(),
        }
    }
}

/// A stored record. `row` is the per-tenant row number (Bolt integer ids); `version` is the
/// commit sequence number of the record's last write.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub id: Uuid,
    pub label: String,
    pub row: u64,
    pub version: u64,
    pub props: BTreeMap<String, PropValue>,
}

/// Property names starting with `__` are reserved for system keys.
pub fn check_property_name(name: &str) -> crate::error::Result<()> {
    if name.is_empty() {
        return Err(crate::error::Error::invalid(
            "property name must not be empty",
        ));
    }
    if name.starts_with("__") {
        return Err(crate::error::Error::invalid(format!(
            "property name '{name}' is reserved: names starting with '__' are system properties"
        )));
    }
    Ok(())
}

/// Parses an id: a hyphenated UUIDv7 in any case (BEHAVIOUR.md §1). Anything else is a 400
/// naming `what`.
pub fn parse_uuid_v7(s: &str, what: &str) -> crate::error::Result<Uuid> {
    let u = Uuid::try_parse(s)
        .ok()
        .filter(|u| s.len() == 36 && u.get_version_num() == 7)
        .ok_or_else(|| {
            crate::error::Error::invalid(format!(
                "{what} '{}' is not a valid UUIDv7",
                truncate(s, 64)
            ))
        })?;
    Ok(u)
}

/// Cuts a client-supplied string for inclusion in an error message.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Default relationship type (SPEC.md "Relationship").
pub const DEFAULT_RELATION_TYPE: &str = "__SERVICE__RELATION__DEFAULT__";
/// What the RushDB SDK sends for the default type; accepted on input as an alias of it.
pub const SDK_DEFAULT_RELATION_TYPE: &str = "__RUSHDB__RELATION__DEFAULT__";

/// Maps the SDK's default type to ours; other types pass through.
pub fn canonical_type(t: &str) -> &str {
    if t == SDK_DEFAULT_RELATION_TYPE {
        DEFAULT_RELATION_TYPE
    } else {
        t
    }
}

/// Relationship property names that are fields of the relationship JSON itself.
pub const RESERVED_RELATIONSHIP_NAMES: [&str; 7] = [
    "sourceId",
    "targetId",
    "sourceLabel",
    "targetLabel",
    "type",
    "direction",
    "id",
];

/// An edge direction as seen from one record: `Out` = (this)-[rel]->(other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Out = 0,
    In = 1,
}

impl Direction {
    pub fn parse(s: &str, what: &str) -> crate::error::Result<Direction> {
        match s {
            "out" => Ok(Direction::Out),
            "in" => Ok(Direction::In),
            _ => Err(crate::error::Error::invalid(format!(
                "{what} must be \"in\" or \"out\", not '{}'",
                truncate(s, 40)
            ))),
        }
    }
    pub fn reverse(self) -> Direction {
        match self {
            Direction::Out => Direction::In,
            Direction::In => Direction::Out,
        }
    }
}

/// A stored relationship: (source)-[type]->(target). Parallel relationships are distinct
/// rows with distinct ids; labels are the endpoints' current labels, read at query time.
#[derive(Debug, Clone, PartialEq)]
pub struct Relationship {
    pub id: Uuid,
    pub row: u64,
    pub version: u64,
    pub rel_type: String,
    pub source: Uuid,
    pub target: Uuid,
    pub props: BTreeMap<String, PropValue>,
}
