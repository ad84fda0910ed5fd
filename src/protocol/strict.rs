//! A JSON value as a serde `Deserializer` that refuses an array where a struct is expected.
//!
//! serde's derived structs also accept a sequence, read by position (`{"options": [false,
//! true]}` would set the first two options). A payload field documented as an object must be
//! one: every payload decodes through [`Strict`], which answers an array given for a struct
//! with the same "invalid type" error as any other wrong type, so the 400 names its path.
//!
//! Everything else decodes exactly as through `serde_json::Value`'s own deserializer: the same
//! visitor calls for every value kind, nested values wrapped again so the rule holds at every
//! depth.

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    Unexpected, VariantAccess, Visitor,
};
use serde_json::{Map, Number, Value};

/// A value deserialized with the rule above.
pub struct Strict(pub Value);

type Error = serde_json::Error;

fn visit_number<'de, V: Visitor<'de>>(n: Number, visitor: V) -> Result<V::Value, Error> {
    if let Some(u) = n.as_u64() {
        visitor.visit_u64(u)
    } else if let Some(i) = n.as_i64() {
        visitor.visit_i64(i)
    } else if let Some(f) = n.as_f64() {
        visitor.visit_f64(f)
    } else {
        Err(de::Error::custom("number out of range"))
    }
}

fn unexpected(v: &Value) -> Unexpected<'_> {
    match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Unexpected::Unsigned(u),
            (_, Some(i), _) => Unexpected::Signed(i),
            (_, _, Some(f)) => Unexpected::Float(f),
            _ => Unexpected::Other("number"),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    }
}

impl<'de> Deserializer<'de> for Strict {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(n) => visit_number(n, visitor),
            Value::String(s) => visitor.visit_string(s),
            Value::Array(a) => visitor.visit_seq(Seq(a.into_iter())),
            Value::Object(m) => visitor.visit_map(Obj::new(m)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            v => visitor.visit_some(Strict(v)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(m) => visitor.visit_map(Obj::new(m)),
            // The rule: a struct is never read from an array (or anything else).
            other => Err(de::Error::invalid_type(unexpected(&other), &visitor)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(Variant {
                name: s,
                value: None,
            }),
            Value::Object(m) if m.len() == 1 => {
                let (name, value) = m.into_iter().next().expect("one entry");
                visitor.visit_enum(Variant {
                    name,
                    value: Some(value),
                })
            }
            other => Err(de::Error::invalid_type(
                unexpected(&other),
                &"string or map",
            )),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

struct Seq(std::vec::IntoIter<Value>);

impl<'de> SeqAccess<'de> for Seq {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0
            .next()
            .map(|v| seed.deserialize(Strict(v)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Obj {
    entries: <Map<String, Value> as IntoIterator>::IntoIter,
    value: Option<Value>,
}

impl Obj {
    fn new(m: Map<String, Value>) -> Obj {
        Obj {
            entries: m.into_iter(),
            value: None,
        }
    }
}

impl<'de> MapAccess<'de> for Obj {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.entries.next() {
            Some((k, v)) => {
                self.value = Some(v);
                let key: de::value::StringDeserializer<Error> = k.into_deserializer();
                seed.deserialize(key).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let v = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("a map value was asked for before its key"))?;
        seed.deserialize(Strict(v))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An enum variant: its name, and its content when given as `{name: content}`.
struct Variant {
    name: String,
    value: Option<Value>,
}

impl<'de> EnumAccess<'de> for Variant {
    type Error = Error;
    type Variant = Content;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Content), Error> {
        let name: de::value::StringDeserializer<Error> = self.name.into_deserializer();
        Ok((seed.deserialize(name)?, Content(self.value)))
    }
}

struct Content(Option<Value>);

impl<'de> VariantAccess<'de> for Content {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.0 {
            None | Some(Value::Null) => Ok(()),
            Some(v) => Err(de::Error::invalid_type(unexpected(&v), &"a unit variant")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        match self.0 {
            Some(v) => seed.deserialize(Strict(v)),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"a newtype variant",
            )),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Some(Value::Array(a)) => visitor.visit_seq(Seq(a.into_iter())),
            Some(v) => Err(de::Error::invalid_type(unexpected(&v), &"a tuple variant")),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"a tuple variant",
            )),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Some(Value::Object(m)) => visitor.visit_map(Obj::new(m)),
            Some(v) => Err(de::Error::invalid_type(unexpected(&v), &"a struct variant")),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"a struct variant",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    struct Opts {
        #[serde(default)]
        a: Option<bool>,
        #[serde(default)]
        b: Option<bool>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase")]
    enum Mode {
        Create,
        Merge,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Body {
        opts: Option<Opts>,
        list: Vec<Opts>,
        mode: Mode,
        n: i64,
        x: f64,
        s: String,
        any: Value,
    }

    fn strict<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, Error> {
        T::deserialize(Strict(v))
    }

    #[test]
    fn decodes_as_a_value_does() {
        let v = json!({"opts": {"a": true}, "list": [{"b": false}, {}], "mode": "merge", "n": -3,
                       "x": 1.5, "s": "t", "any": [1, {"k": [2]}], "extra": [1]});
        let a: Body = strict(v.clone()).unwrap();
        let b: Body = serde_json::from_value(v).unwrap();
        assert_eq!(a, b);
        let none: Body = strict(
            json!({"opts": null, "list": [], "mode": "create", "n": 1, "x": 2,
                                       "s": "", "any": null}),
        )
        .unwrap();
        assert_eq!((none.opts, none.x), (None, 2.0));
    }

    #[test]
    fn an_array_is_not_a_struct_at_any_depth() {
        let base = json!({"list": [], "mode": "create", "n": 1, "x": 2, "s": "", "any": null});
        let mut top = base.clone();
        top["opts"] = json!([true, false]);
        let e = strict::<Body>(top).unwrap_err().to_string();
        assert!(e.contains("invalid type: sequence"), "{e}");
        let mut nested = base.clone();
        nested["list"] = json!([[true]]);
        assert!(strict::<Body>(nested).is_err());
        assert!(strict::<Body>(json!([null, [], "create", 1, 2.0, "", null])).is_err());
        // What serde alone does: reads the array by position.
        let mut lenient = base;
        lenient["opts"] = json!([true, false]);
        let read: Body = serde_json::from_value(lenient).unwrap();
        assert_eq!(
            read.opts,
            Some(Opts {
                a: Some(true),
                b: Some(false)
            })
        );
    }

    #[test]
    fn wrong_types_fail_as_they_do_through_a_value() {
        for bad in [
            json!({"mode": "sideways"}),
            json!({"n": "1"}),
            json!({"s": 1}),
            json!({"mode": 1}),
        ] {
            let mut v = json!({"list": [], "mode": "create", "n": 1, "x": 2, "s": "", "any": null});
            for (k, x) in bad.as_object().unwrap() {
                v[k] = x.clone();
            }
            let ours = strict::<Body>(v.clone()).unwrap_err().to_string();
            let theirs = serde_json::from_value::<Body>(v).unwrap_err().to_string();
            assert_eq!(ours, theirs);
        }
    }
}
