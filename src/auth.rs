//! Capability tokens (SPEC.md "Capability tokens", BEHAVIOUR.md §7): `<claims>.<signature>`,
//! both base64url without padding; the signature is HMAC-SHA256 keyed with the operator's
//! secret over the claims segment exactly as sent. Minting is for the operator's control
//! plane (`engine token mint`); the server only verifies.
//!
//! Invariants: a token is accepted only if its signature verifies (constant-time), both
//! segments are canonical base64url (no padding, no stray bits), the claims are a JSON object
//! with a known scope word list and an `exp` in the future. Anything else is rejected with a
//! reason that never echoes the token.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Longest token accepted (bytes), so verification work is bounded.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// The permissions a token grants (`scope` claim).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scopes {
    pub read: bool,
    pub write: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub sub: Option<String>,
    pub scopes: Scopes,
    pub tenant: Option<String>,
    pub iat: Option<i64>,
    pub exp: i64,
}

fn sign(secret: &[u8], claims_segment: &str) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(claims_segment.as_bytes());
    mac
}

/// The shortest capability secret `serve` takes (128 bits).
pub const MIN_SECRET_BYTES: usize = 16;

/// The capability secret from its hex text, as `engine serve` and `engine token mint` take
/// it: an even-length hex string of at least `MIN_SECRET_BYTES` bytes (a short key can be
/// found by trying them all, and with it any token forged).
pub fn capability_secret(hex: &str) -> Result<Vec<u8>, String> {
    let secret =
        decode_hex(hex).ok_or("the capability secret must be an even-length hex string")?;
    if secret.len() < MIN_SECRET_BYTES {
        return Err(format!(
            "the capability secret is {} bytes; it must be at least {MIN_SECRET_BYTES} (generate one with `openssl rand -hex 32`)",
            secret.len()
        ));
    }
    Ok(secret)
}

/// A token for these claims (the operator's helper; the server issues none).
pub fn mint(secret: &[u8], claims: &Value) -> String {
    let segment = URL_SAFE_NO_PAD.encode(claims.to_string());
    let sig = sign(secret, &segment).finalize().into_bytes();
    format!("{segment}.{}", URL_SAFE_NO_PAD.encode(sig))
}

/// Parses a `scope` claim: space-separated `read`, `write`, `*`; an unknown word is invalid.
pub fn parse_scopes(s: &str) -> Result<Scopes, &'static str> {
    let mut out = Scopes::default();
    for w in s.split(' ').filter(|w| !w.is_empty()) {
        match w {
            "read" => out.read = true,
            "write" => out.write = true,
            "*" => {
                out.read = true;
                out.write = true;
            }
            _ => return Err("unknown scope word"),
        }
    }
    if out == Scopes::default() {
        return Err("empty scope");
    }
    Ok(out)
}

/// Verifies a token at `now` (Unix seconds). The reason is for logs and messages.
pub fn verify(secret: &[u8], token: &str, now: i64) -> Result<Claims, &'static str> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err("token too long");
    }
    let (segment, sig) = token.split_once('.').ok_or("not a capability token")?;
    if sig.contains('.') {
        return Err("malformed token");
    }
    let sig = URL_SAFE_NO_PAD
        .decode(sig)
        .map_err(|_| "malformed signature")?;
    sign(secret, segment)
        .verify_slice(&sig)
        .map_err(|_| "bad signature")?;
    let raw = URL_SAFE_NO_PAD
        .decode(segment)
        .map_err(|_| "malformed claims")?;
    // A claim given twice is refused: a reader that takes the first would see other claims
    // than this one, which takes the last.
    let UniqueKeys(m) = serde_json::from_slice(&raw).map_err(|_| "malformed claims")?;
    let m = &m;
    let text = |k: &str| -> Result<Option<String>, &'static str> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err("malformed claims"),
        }
    };
    let int = |k: &str| -> Result<Option<i64>, &'static str> {
        match m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or("malformed claims"),
        }
    };
    let exp = int("exp")?.ok_or("missing exp")?;
    if exp <= now {
        return Err("expired");
    }
    Ok(Claims {
        sub: text("sub")?,
        scopes: parse_scopes(&text("scope")?.ok_or("missing scope")?)?,
        tenant: text("tenant")?,
        iat: int("iat")?,
        exp,
    })
}

/// A JSON object whose keys are all different (a repeated key fails decoding).
struct UniqueKeys(serde_json::Map<String, Value>);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = UniqueKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object with distinct keys")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<UniqueKeys, A::Error> {
                let mut m = serde_json::Map::new();
                while let Some((k, v)) = a.next_entry::<String, Value>()? {
                    if m.contains_key(&k) {
                        return Err(serde::de::Error::custom(format!("claim `{k}` given twice")));
                    }
                    m.insert(k, v);
                }
                Ok(UniqueKeys(m))
            }
        }
        d.deserialize_map(Keys)
    }
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.is_empty() || !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The published test vector of docs/security.md.
    pub const VECTOR_SECRET: &str =
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    pub const VECTOR_TOKEN: &str = "eyJzdWIiOiJ0ZXN0Iiwic2NvcGUiOiJyZWFkIHdyaXRlIiwidGVuYW50IjoiYWNtZSIsImlhdCI6MTcwMDAwMDAwMCwiZXhwIjo0MTAyNDQ0ODAwfQ.FhCdfmQZnnKa7cn4LVSOfqvhlsSUOj-aMpj1JcEPg1c";

    #[test]
    fn published_vector_verifies() {
        let secret = decode_hex(VECTOR_SECRET).unwrap();
        let c = verify(&secret, VECTOR_TOKEN, 1_800_000_000).unwrap();
        assert_eq!(c.tenant.as_deref(), Some("acme"));
        assert_eq!(
            c.scopes,
            Scopes {
                read: true,
                write: true
            }
        );
        assert_eq!(c.exp, 4_102_444_800);
        let claims = json!({"sub": "test", "scope": "read write", "tenant": "acme", "iat": 1_700_000_000, "exp": 4_102_444_800i64});
        assert_eq!(mint(&secret, &claims), VECTOR_TOKEN);
    }

    #[test]
    fn every_bit_flip_is_rejected() {
        let secret = decode_hex(VECTOR_SECRET).unwrap();
        let bytes = VECTOR_TOKEN.as_bytes();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.to_vec();
                b[i] ^= 1 << bit;
                if let Ok(t) = std::str::from_utf8(&b) {
                    assert!(
                        verify(&secret, t, 1_800_000_000).is_err(),
                        "flip {i}.{bit} accepted"
                    );
                }
            }
        }
    }

    #[test]
    fn a_claim_given_twice_is_refused() {
        let secret = decode_hex(VECTOR_SECRET).unwrap();
        let signed = |raw: &str| {
            let segment = URL_SAFE_NO_PAD.encode(raw);
            let sig = URL_SAFE_NO_PAD.encode(sign(&secret, &segment).finalize().into_bytes());
            format!("{segment}.{sig}")
        };
        let once = r#"{"sub":"t","scope":"read","tenant":"a","exp":4102444800}"#;
        assert_eq!(
            verify(&secret, &signed(once), 1_800_000_000)
                .unwrap()
                .tenant
                .as_deref(),
            Some("a")
        );
        for twice in [
            r#"{"sub":"t","scope":"read","tenant":"b","tenant":"a","exp":4102444800}"#,
            r#"{"sub":"t","scope":"read","scope":"read write","exp":4102444800}"#,
            r#"{"sub":"t","scope":"read","exp":1,"exp":4102444800}"#,
        ] {
            assert_eq!(
                verify(&secret, &signed(twice), 1_800_000_000).unwrap_err(),
                "malformed claims"
            );
        }
    }

    #[test]
    fn claims_rules() {
        let s = b"k";
        let tok = |c: Value| mint(s, &c);
        assert_eq!(
            verify(s, &tok(json!({"scope": "read", "exp": 10})), 10),
            Err("expired")
        );
        assert_eq!(
            verify(s, &tok(json!({"scope": "read"})), 1),
            Err("missing exp")
        );
        assert_eq!(
            verify(s, &tok(json!({"scope": "read admin", "exp": 10})), 1),
            Err("unknown scope word")
        );
        assert_eq!(verify(s, &tok(json!({"exp": 10})), 1), Err("missing scope"));
        assert_eq!(
            verify(b"other", &tok(json!({"scope": "*", "exp": 10})), 1),
            Err("bad signature")
        );
        assert!(verify(s, &tok(json!({"scope": "*", "exp": 10})), 1).is_ok());
        // padding or a second dot makes it malformed
        let t = tok(json!({"scope": "*", "exp": 10}));
        assert!(verify(s, &format!("{t}="), 1).is_err());
        assert!(verify(s, &format!("{t}.x"), 1).is_err());
        assert_eq!(decode_hex("0aFf"), Some(vec![10, 255]));
        assert_eq!(decode_hex("abc"), None);
    }
}
