//! Records and typed property values: the engine's data model (BEHAVIOUR.md §1).

pub mod datetime;
pub mod infer;

use std::collections::BTreeMap;
use uuid::Uuid;

/// A set of record ids hashed by [`IdHash`]: what traversal and search keep their reached
/// records in (SipHash, the default, was ~8% of a traversal's time).
pub type IdSet = std::collections::HashSet<Uuid, IdHash>;
/// A map keyed by record ids, hashed by [`IdHash`].
pub type IdMap<V> = std::collections::HashMap<Uuid, V, IdHash>;

/// Hashes a UUID's 16 bytes with a folded multiply per 8-byte word (the 128-bit product's
/// halves XORed, as in wyhash) from a per-process random seed. A UUIDv7's last 8 bytes are
/// mostly random already; the seed and the folding make the bucket of a chosen id unknown to
/// whoever chose it. A write batch's maps keyed by strings and byte keys use it too (counter
/// keys, property ids, created links by type): a byte key is hashed with its length, but a
/// string is not, and its last word is zero-padded, so strings that differ only by up to 7
/// trailing NUL bytes collide (at most 8 to a family; the map tells them apart by equality).
#[derive(Clone, Copy)]
pub struct IdHash {
    seed: u64,
}

impl Default for IdHash {
    fn default() -> Self {
        static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let seed = *SEED.get_or_init(|| {
            std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u64)
        });
        IdHash { seed }
    }
}

impl std::hash::BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(self.seed)
    }
}

/// Sorts ids in their order (`Uuid`'s `Ord`, byte order), each compared as one u128 (a byte
/// array compare costs a `memcmp` call).
pub fn sort_ids(ids: &mut [Uuid]) {
    ids.sort_unstable_by_key(|id| id.as_u128());
}

/// An unseeded 64-bit hash of a byte string, by [`IdHasher`] (the store's key filters).
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = IdHasher(0);
    h.write_usize(bytes.len());
    h.write(bytes);
    h.finish()
}

/// A Bloom filter of 64-bit hashes: 16 bits per hash (at least 512), two probes, ~1.4% false
/// positives. Invariant: `may_hold(h)` is true for every hash it was built from.
#[derive(Debug, Clone, PartialEq)]
pub struct Bloom {
    bits: Vec<u64>,
    /// Bit count minus one (a power of two minus one).
    mask: u64,
}

impl Bloom {
    pub fn new(hashes: impl Iterator<Item = u64>, keys: usize) -> Bloom {
        let nbits = (keys.saturating_mul(16)).next_power_of_two().max(512);
        let mut f = Bloom {
            bits: vec![0; nbits / 64],
            mask: nbits as u64 - 1,
        };
        for h in hashes {
            for bit in f.probes(h) {
                f.bits[(bit / 64) as usize] |= 1 << (bit % 64);
            }
        }
        f
    }

    fn probes(&self, h: u64) -> [u64; 2] {
        [h & self.mask, h.rotate_left(39) & self.mask]
    }

    pub fn may_hold(&self, h: u64) -> bool {
        self.probes(h)
            .iter()
            .all(|&bit| self.bits[(bit / 64) as usize] & (1 << (bit % 64)) != 0)
    }
}

/// See [`IdHash`]. Other inputs than a UUID's bytes (a length prefix, a string's bytes) are
/// folded in too, word by word.
pub struct IdHasher(u64);

impl IdHasher {
    /// Folds one 8-byte word into the state: the 128-bit product's halves XORed.
    fn fold(&mut self, w: u64) {
        let m = u128::from(self.0 ^ w) * 0x9E37_79B9_7F4A_7C15;
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        // A uuid (the common case): two words, as the loop below folds them.
        if let Ok(id) = <&[u8; 16]>::try_from(bytes) {
            let (a, b) = id.split_at(8);
            for w in [a, b] {
                self.fold(u64::from_le_bytes(w.try_into().unwrap_or_default()));
            }
            return;
        }
        // Whole words are loaded as such (a copy of a variable length would be a `memcpy`
        // call per word); the last partial word, zero-padded, folds as one more.
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.fold(u64::from_le_bytes(w.try_into().unwrap_or_default()));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.fold(u64::from_le_bytes(w));
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 ^= n as u64;
    }
    fn finish(&self) -> u64 {
        // hashbrown takes the bucket from the low bits and a tag from the top 7: mix both.
        let h = self.0.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        h ^ (h >> 29)
    }
}

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

/// The longest property name or relationship type, in bytes (as for labels: each is part
/// of index keys).
pub const MAX_NAME_BYTES: usize = 1024;

/// Property names written are 1 to `MAX_NAME_BYTES` bytes; names starting with `__` are
/// reserved for system keys.
pub fn check_property_name(name: &str) -> crate::error::Result<()> {
    check_property_name_to_unset(name)?;
    check_name_length("property name", name)
}

/// A name about to be written (`what` names it in the error) is at most `MAX_NAME_BYTES`.
pub fn check_name_length(what: &str, name: &str) -> crate::error::Result<()> {
    if name.len() > MAX_NAME_BYTES {
        return Err(crate::error::Error::invalid(format!(
            "{what} '{}' is longer than {MAX_NAME_BYTES} bytes",
            truncate(name, 64)
        )));
    }
    Ok(())
}

/// A property name a write may remove (`null`): any but an empty or reserved one, of any
/// length, since a store may hold names written before `MAX_NAME_BYTES` bounded them.
pub fn check_property_name_to_unset(name: &str) -> crate::error::Result<()> {
    if name.is_empty() {
        return Err(crate::error::Error::invalid(
            "property name must not be empty",
        ));
    }
    if name.starts_with("__") {
        return Err(crate::error::Error::invalid(format!(
            "property name '{}' is reserved: names starting with '__' are system properties",
            truncate(name, 64)
        )));
    }
    Ok(())
}

/// Parses an id: a hyphenated UUIDv7 in any case (BEHAVIOUR.md §1). Anything else is a 400
/// naming `what`.
pub fn parse_uuid_v7(s: &str, what: &str) -> crate::error::Result<Uuid> {
    let u = Uuid::try_parse(s)
        .ok()
        .filter(|u| {
            // Hyphenated, version 7, and the RFC 9562 variant (`10` in the top bits of the
            // ninth byte): another variant is not a UUIDv7 (BEHAVIOUR.md §1).
            s.len() == 36 && u.get_version_num() == 7 && u.get_variant() == uuid::Variant::RFC4122
        })
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
    /// (source, target) of an edge in this direction from `this` end to `other`: `Out` is
    /// (this)-[]->(other). Also for anything carried per end (labels).
    pub fn orient<T>(self, this: T, other: T) -> (T, T) {
        match self {
            Direction::Out => (this, other),
            Direction::In => (other, this),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// `IdHasher::write` folds every length as zero-padded 8-byte words, one after another
    /// (the whole-word loads and the padded last word agree with that definition).
    #[test]
    fn id_hash_folds_zero_padded_words_at_every_length() {
        use std::hash::Hasher;
        let bytes: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
        for len in 0..=bytes.len() {
            let mut want = IdHasher(3);
            for chunk in bytes[..len].chunks(8) {
                let mut w = [0u8; 8];
                w[..chunk.len()].copy_from_slice(chunk);
                want.fold(u64::from_le_bytes(w));
            }
            let mut got = IdHasher(3);
            got.write(&bytes[..len]);
            assert_eq!(got.finish(), want.finish(), "length {len}");
        }
    }

    /// The 16-byte shortcut of `IdHasher::write` folds as the general loop does (two 8-byte
    /// writes), and `sort_ids` orders as `Uuid`'s `Ord`.
    #[test]
    fn id_hash_shortcut_and_id_sort_agree_with_the_general_forms() {
        use std::hash::Hasher;
        let mut ids: Vec<Uuid> = (0..500).map(|_| Uuid::now_v7()).collect();
        ids.extend((0..500).map(|i: u128| {
            Uuid::from_u128(i.wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835))
        }));
        for id in &ids {
            let (mut a, mut b) = (IdHasher(7), IdHasher(7));
            a.write(id.as_bytes());
            b.write(&id.as_bytes()[..8]);
            b.write(&id.as_bytes()[8..]);
            assert_eq!(a.finish(), b.finish());
        }
        let mut want = ids.clone();
        want.sort();
        sort_ids(&mut ids);
        assert_eq!(ids, want);
    }

    /// Ids made one after another (same time prefix) land in as many buckets as random
    /// values would, and the set keeps them apart.
    #[test]
    fn id_hashes_spread_ids_made_in_a_row() {
        let ids: Vec<Uuid> = (0..4096).map(|_| Uuid::now_v7()).collect();
        let h = IdHash::default();
        let low: std::collections::HashSet<u64> =
            ids.iter().map(|id| h.hash_one(id) & 0xFFF).collect();
        let top: std::collections::HashSet<u64> =
            ids.iter().map(|id| h.hash_one(id) >> 57).collect();
        // 4096 random 12-bit values hit ~2,590 distinct ones; all 128 top-7-bit tags appear.
        assert!(low.len() > 2300, "{} distinct low bits", low.len());
        assert_eq!(top.len(), 128);
        let set: IdSet = ids.iter().copied().collect();
        assert_eq!(set.len(), ids.len());
        assert!(ids.iter().all(|id| set.contains(id)));
        assert!(!set.contains(&Uuid::now_v7()));
    }
}
