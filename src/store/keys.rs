//! Key layout and the order-preserving key encoding. See docs/design.md "Storage format".
//!
//! Every key starts with a keyspace byte: [`SYSTEM`] (outside every tenant) or [`TENANT`]
//! followed by the tenant's numeric id (u64, big-endian). Inside a tenant the next byte is
//! the kind of key. Invariant: bytewise order of encoded keys equals the logical order of
//! what they encode (ids by time, numbers numerically across integers and floats, strings by
//! code point), so prefix ranges serve equality, ranges and ordering.
//!
//! Adding a new kind byte is not a format change; changing an existing layout is.

use crate::model::{datetime, PropType, Scalar};
use uuid::Uuid;

pub const SYSTEM: u8 = 0x00;
pub const TENANT: u8 = 0x01;

// Tenant key kinds.
pub const RECORD: u8 = 0x10; // + id -> record value
pub const LABEL_INDEX: u8 = 0x11; // + label + id -> marker
pub const PROP_INDEX: u8 = 0x12; // + property id + label + value + record id -> marker
pub const PROP_BY_NAME: u8 = 0x20; // + name + type tag -> property id
pub const PROP_BY_ID: u8 = 0x21; // + property id -> (name, type)
pub const LABEL_COUNT: u8 = 0x30; // + label -> count
pub const PROP_LABEL_COUNT: u8 = 0x31; // + property id + label -> (count, array count)
pub const ROW_SEQ: u8 = 0x40; // -> last row number handed out
pub const RELATIONSHIP: u8 = 0x50; // + relationship id -> type, source, target, properties
pub const ADJACENCY: u8 = 0x51; // + node + direction + type + other node + relationship id -> other label, relationship body
pub const REL_COUNT: u8 = 0x52; // + source label + type + target label -> count
/// Reserved for vector and text index data.
pub const VECTOR_INDEX: u8 = 0x60;
pub const TEXT_INDEX: u8 = 0x61;
/// Inline vectors given with a record (imports, create): + record id + property name ->
/// f64 values, little-endian. Vector indexes are built from these.
pub const INLINE_VECTOR: u8 = 0x62;
/// The tenant's data-access policy (JSON).
pub const POLICY: u8 = 0x70;

// System key kinds.
pub const SYS_FORMAT: u8 = b'F'; // -> storage format version (u64)
pub const SYS_MODE: u8 = b'M'; // -> tenancy mode byte
pub const SYS_COMMIT_SEQ: u8 = b'S'; // -> last commit sequence number
pub const SYS_NEXT_TENANT: u8 = b'N'; // -> next tenant id
pub const SYS_TENANT_BY_NAME: u8 = b't'; // + name -> tenant id
pub const SYS_TENANT_BY_ID: u8 = b'i'; // + id -> name
/// Reserved: OAuth clients, signing keys, consents, API keys.
pub const SYS_AUTH: u8 = b'a';
pub const SYS_PURGING: u8 = b'p'; // + tenant id -> marker: a purged tenant whose keys are being reclaimed

/// Tenant 0 is the single-tenant keyspace.
pub const SINGLE_TENANT: u64 = 0;

/// A key under construction.
#[derive(Debug, Clone, Default)]
pub struct Key(pub Vec<u8>);

impl Key {
    pub fn system(kind: u8) -> Key {
        Key(vec![SYSTEM, kind])
    }
    /// The prefix of every key of one tenant.
    pub fn tenant_space(tenant: u64) -> Key {
        let mut v = Vec::with_capacity(9);
        v.push(TENANT);
        v.extend_from_slice(&tenant.to_be_bytes());
        Key(v)
    }
    pub fn tenant(tenant: u64, kind: u8) -> Key {
        let mut v = Vec::with_capacity(48);
        v.push(TENANT);
        v.extend_from_slice(&tenant.to_be_bytes());
        v.push(kind);
        Key(v)
    }
    pub fn u64(mut self, x: u64) -> Key {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }
    pub fn u8(mut self, x: u8) -> Key {
        self.0.push(x);
        self
    }
    pub fn uuid(mut self, id: &Uuid) -> Key {
        self.0.extend_from_slice(id.as_bytes());
        self
    }
    /// An escaped, terminated string: 0x00 becomes 0x00 0xFF and the end is 0x00 0x01, so
    /// a string sorts before its extensions and the next key part cannot be confused with it.
    pub fn str(mut self, s: &str) -> Key {
        push_escaped(&mut self.0, s.as_bytes());
        self
    }
    pub fn scalar(mut self, ty: PropType, v: &Scalar) -> Key {
        push_scalar(&mut self.0, ty, v);
        self
    }
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// Appends `s` escaped (each 0 byte as 0x00 0xFF) and terminated by 0x00 0x01: escaped
/// strings sort as their bytes do, and a prefix never sorts after a longer string.
pub fn push_escaped(out: &mut Vec<u8>, s: &[u8]) {
    let mut rest = s;
    while let Some(z) = rest.iter().position(|&c| c == 0) {
        out.extend_from_slice(&rest[..=z]);
        out.push(0xFF);
        rest = &rest[z + 1..];
    }
    out.extend_from_slice(rest);
    out.extend_from_slice(&[0x00, 0x01]);
}

/// Reads an escaped string at the start of `b`; returns it and the bytes after it.
pub fn read_escaped(b: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut rest = b;
    // Runs between escape bytes are copied whole.
    loop {
        let z = rest.iter().position(|&c| c == 0)?;
        out.extend_from_slice(&rest[..z]);
        match *rest.get(z + 1)? {
            0xFF => out.push(0),
            0x01 => return Some((out, &rest[z + 2..])),
            _ => return None,
        }
        rest = &rest[z + 2..];
    }
}

/// Type tags in index order: numbers, then datetimes, then strings, then booleans
/// (the cross-type sort order of BEHAVIOUR.md §2).
const TAG_NUMBER: u8 = 0x10;
const TAG_DATETIME: u8 = 0x20;
const TAG_STRING: u8 = 0x30;
const TAG_BOOL: u8 = 0x40;

fn ordered_f64(f: f64) -> [u8; 8] {
    let bits = f.to_bits();
    let o = if bits >> 63 == 1 {
        !bits
    } else {
        bits ^ (1 << 63)
    };
    o.to_be_bytes()
}

fn ordered_i64(i: i64) -> [u8; 8] {
    ((i as u64) ^ (1 << 63)).to_be_bytes()
}

/// Numbers share one order: the nearest f64, then the exact integer's distance from it, so
/// integers beyond 2^53 still order exactly and `2` (int) equals `2.0`.
pub fn push_scalar(out: &mut Vec<u8>, ty: PropType, v: &Scalar) {
    match (ty, v) {
        (PropType::Number, Scalar::Int(i)) => {
            let f = *i as f64;
            out.push(TAG_NUMBER);
            out.extend_from_slice(&ordered_f64(f));
            let residual = (*i as i128 - f as i128) as i64;
            out.extend_from_slice(&ordered_i64(residual));
        }
        (PropType::Number, Scalar::Float(f)) => {
            out.push(TAG_NUMBER);
            out.extend_from_slice(&ordered_f64(if *f == 0.0 { 0.0 } else { *f }));
            out.extend_from_slice(&ordered_i64(0));
        }
        (PropType::Datetime, Scalar::Str(s)) => {
            push_instant(
                out,
                datetime::parse(s).unwrap_or(datetime::Instant { secs: 0, nanos: 0 }),
            );
        }
        (PropType::Boolean, Scalar::Bool(b)) => {
            out.push(TAG_BOOL);
            out.push(u8::from(*b));
        }
        (_, s) => {
            out.push(TAG_STRING);
            let text = match s {
                Scalar::Str(s) => s.clone(),
                Scalar::Int(i) => i.to_string(),
                Scalar::Float(f) => f.to_string(),
                Scalar::Bool(b) => b.to_string(),
            };
            push_escaped(out, text.as_bytes());
        }
    }
}

/// A datetime index value: the instant (secs, nanos), so equal instants written differently
/// share one key.
pub fn push_instant(out: &mut Vec<u8>, inst: datetime::Instant) {
    out.push(TAG_DATETIME);
    out.extend_from_slice(&ordered_i64(inst.secs));
    out.extend_from_slice(&inst.nanos.to_be_bytes());
}

/// A string's escaped bytes without the terminator: the key prefix of every string that
/// starts with `s`.
pub fn push_string_prefix(out: &mut Vec<u8>, s: &str) {
    out.push(TAG_STRING);
    for &b in s.as_bytes() {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
}

/// The text of an index value written by `push_scalar` for a string (None for other types).
pub fn read_string_value(v: &[u8]) -> Option<Vec<u8>> {
    match v.split_first() {
        Some((&TAG_STRING, rest)) => read_escaped(rest).map(|(s, _)| s),
        _ => None,
    }
}

/// The smallest key strictly greater than every key starting with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xFF; prefix.len() + 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(v: &Scalar) -> Vec<u8> {
        let mut o = Vec::new();
        push_scalar(&mut o, PropType::Number, v);
        o
    }

    #[test]
    fn numbers_share_one_order() {
        let vals = [
            Scalar::Float(f64::MIN),
            Scalar::Int(i64::MIN),
            Scalar::Int(-9_007_199_254_740_993),
            Scalar::Float(-2.5),
            Scalar::Int(-1),
            Scalar::Float(-0.5),
            Scalar::Int(0),
            Scalar::Float(0.25),
            Scalar::Int(1),
            Scalar::Float(1.5),
            Scalar::Int(2),
            Scalar::Float(2.5),
            Scalar::Int(9_007_199_254_740_992),
            Scalar::Int(9_007_199_254_740_993),
            Scalar::Int(i64::MAX),
            Scalar::Float(1e300),
        ];
        for w in vals.windows(2) {
            assert!(num(&w[0]) < num(&w[1]), "{:?} < {:?}", w[0], w[1]);
        }
        assert_eq!(num(&Scalar::Int(2)), num(&Scalar::Float(2.0)));
    }

    #[test]
    fn strings_and_types_order() {
        let s = |x: &str| {
            Key::default()
                .scalar(PropType::String, &Scalar::Str(x.into()))
                .0
        };
        assert!(s("a") < s("ab"));
        assert!(s("ab") < s("b"));
        assert!(s("a\0") > s("a"));
        assert!(s("") < s("\0"));
        let n = Key::default()
            .scalar(PropType::Number, &Scalar::Int(1_000_000))
            .0;
        let d = Key::default()
            .scalar(PropType::Datetime, &Scalar::Str("1900-01-01".into()))
            .0;
        let b = Key::default()
            .scalar(PropType::Boolean, &Scalar::Bool(false))
            .0;
        assert!(n < d && d < s("") && s("zzz") < b);
        let d2 = Key::default()
            .scalar(
                PropType::Datetime,
                &Scalar::Str("1900-01-01T00:00:00.000000001Z".into()),
            )
            .0;
        assert!(d < d2);
    }

    #[test]
    fn escaped_round_trip_and_prefix_end() {
        let mut o = Vec::new();
        push_escaped(&mut o, b"a\0b");
        o.extend_from_slice(b"rest");
        let (s, rest) = read_escaped(&o).unwrap();
        assert_eq!((s.as_slice(), rest), (&b"a\0b"[..], &b"rest"[..]));
        // The exact encoding, and the round trip, with zeros at either end and in runs.
        let mut o = Vec::new();
        push_escaped(&mut o, b"\0x\0\0");
        assert_eq!(o, [0, 0xFF, b'x', 0, 0xFF, 0, 0xFF, 0, 1]);
        for text in [&b""[..], b"\0", b"\0\0", b"ab", b"\0a\0", b"a\0\0b\0"] {
            let mut o = Vec::new();
            push_escaped(&mut o, text);
            o.push(7);
            let (s, rest) = read_escaped(&o).unwrap();
            assert_eq!((s.as_slice(), rest), (text, &[7u8][..]));
        }
        // Unterminated, or an escape byte other than 0xFF / 0x01: refused.
        assert_eq!(read_escaped(b"ab"), None);
        assert_eq!(read_escaped(&[b'a', 0]), None);
        assert_eq!(read_escaped(&[b'a', 0, 2, 0, 1]), None);
        assert_eq!(prefix_end(&[1, 2, 0xFF]), vec![1, 3]);
    }
}
