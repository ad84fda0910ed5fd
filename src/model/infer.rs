//! Turning client JSON into typed property values (BEHAVIOUR.md §1): inference for `data`
//! maps, and conversion with validation for explicit `properties: [{name, type, value}]`.

use super::{
    check_property_name, check_property_name_to_unset, datetime, PropType, PropValue, Scalar,
};
use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::BTreeMap;

/// Write options that steer inference.
#[derive(Debug, Clone, Copy)]
pub struct InferOptions {
    pub suggest_types: bool,
    pub convert_numeric: bool,
}

impl Default for InferOptions {
    fn default() -> Self {
        InferOptions {
            suggest_types: true,
            convert_numeric: false,
        }
    }
}

/// A property write: `None` unsets the property (JSON null).
pub type PropWrites = BTreeMap<String, Option<PropValue>>;

/// Converts a JSON number, keeping integral values within ±2^63 as integers.
pub fn number_scalar(n: &serde_json::Number) -> Result<Scalar> {
    if let Some(i) = n.as_i64() {
        return Ok(Scalar::Int(i));
    }
    let f = n
        .as_f64()
        .filter(|f| f.is_finite())
        .ok_or_else(|| Error::invalid(format!("number {n} is not representable")))?;
    Ok(float_scalar(f))
}

/// A finite float that is integral and inside the i64 range is stored as an integer.
pub fn float_scalar(f: f64) -> Scalar {
    // ±2^63: the i64 range, exactly representable as f64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f.fract() == 0.0 && (-TWO_63..TWO_63).contains(&f) {
        Scalar::Int(f as i64)
    } else {
        Scalar::Float(f)
    }
}

fn is_numeric_text(s: &str) -> bool {
    let b = s.strip_prefix('-').unwrap_or(s).as_bytes();
    let int_end = b
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(b.len());
    if int_end == 0 {
        return false;
    }
    match &b[int_end..] {
        [] => true,
        [b'.', rest @ ..] => !rest.is_empty() && rest.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

fn parse_number_text(s: &str) -> Option<Scalar> {
    if let Ok(i) = s.parse::<i64>() {
        return Some(Scalar::Int(i));
    }
    s.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(float_scalar)
}

/// Infers one scalar's type and value.
fn infer_scalar(v: &Value, opts: InferOptions, name: &str) -> Result<(PropType, Scalar)> {
    if !opts.suggest_types {
        return Ok((PropType::String, Scalar::Str(scalar_text(v, name)?)));
    }
    match v {
        Value::Bool(b) => Ok((PropType::Boolean, Scalar::Bool(*b))),
        Value::Number(n) => Ok((PropType::Number, number_scalar(n)?)),
        Value::String(s) => {
            if opts.convert_numeric && is_numeric_text(s) {
                if let Some(n) = parse_number_text(s) {
                    return Ok((PropType::Number, n));
                }
            }
            if datetime::parse(s).is_some() {
                Ok((PropType::Datetime, Scalar::Str(s.clone())))
            } else {
                Ok((PropType::String, Scalar::Str(s.clone())))
            }
        }
        _ => Err(nested_error(name)),
    }
}

fn nested_error(name: &str) -> Error {
    Error::invalid(format!(
        "property '{name}': nested objects and arrays are not property values (use import/json for nested data)"
    ))
}

/// The text of a scalar, for string typing.
fn scalar_text(v: &Value, name: &str) -> Result<String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(nested_error(name)),
    }
}

/// Infers a property value from JSON. `Ok(None)` means null (unset).
pub fn infer_value(name: &str, v: &Value, opts: InferOptions) -> Result<Option<PropValue>> {
    match v {
        Value::Null => Ok(None),
        Value::Array(items) => {
            let mut typed = Vec::with_capacity(items.len());
            for item in items {
                if item.is_null() {
                    return Err(Error::invalid(format!(
                        "property '{name}': arrays must not contain null"
                    )));
                }
                typed.push(infer_scalar(item, opts, name)?);
            }
            let ty = typed.first().map(|t| t.0).unwrap_or(PropType::String);
            if typed.iter().all(|t| t.0 == ty) {
                return Ok(Some(PropValue {
                    ty,
                    array: true,
                    items: typed.into_iter().map(|t| t.1).collect(),
                }));
            }
            // Mixed types: an array of strings holding each element's text.
            let items = items
                .iter()
                .map(|i| scalar_text(i, name).map(Scalar::Str))
                .collect::<Result<_>>()?;
            Ok(Some(PropValue {
                ty: PropType::String,
                array: true,
                items,
            }))
        }
        _ => {
            let (ty, s) = infer_scalar(v, opts, name)?;
            Ok(Some(PropValue::scalar(ty, s)))
        }
    }
}

/// Infers every entry of a flat `data` map.
pub fn infer_map(data: &serde_json::Map<String, Value>, opts: InferOptions) -> Result<PropWrites> {
    let mut out = PropWrites::new();
    for (k, v) in data {
        match v {
            Value::Null => check_property_name_to_unset(k)?,
            _ => check_property_name(k)?,
        }
        out.insert(k.clone(), infer_value(k, v, opts)?);
    }
    Ok(out)
}

/// Converts one value to a declared type, or explains why it does not fit.
fn convert_scalar(name: &str, ty: PropType, v: &Value) -> Result<Scalar> {
    let bad = || {
        Error::invalid(format!(
            "property '{name}': value {} is not a valid {}",
            crate::model::truncate(&v.to_string(), 64),
            ty.name()
        ))
    };
    match (ty, v) {
        (PropType::String, _) => scalar_text(v, name).map(Scalar::Str),
        (PropType::Number, Value::Number(n)) => number_scalar(n),
        (PropType::Number, Value::String(s)) => {
            let t = s.trim();
            if is_numeric_text(t) || t.parse::<f64>().is_ok_and(f64::is_finite) {
                parse_number_text(t).ok_or_else(bad)
            } else {
                Err(bad())
            }
        }
        (PropType::Boolean, Value::Bool(b)) => Ok(Scalar::Bool(*b)),
        (PropType::Boolean, Value::String(s)) => match s.trim() {
            "true" => Ok(Scalar::Bool(true)),
            "false" => Ok(Scalar::Bool(false)),
            _ => Err(bad()),
        },
        (PropType::Datetime, Value::String(s)) if datetime::parse(s).is_some() => {
            Ok(Scalar::Str(s.clone()))
        }
        _ => Err(bad()),
    }
}

/// An explicit property input object (SPEC.md "Property input object").
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PropertyInput {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    #[serde(default)]
    pub value: Value,
    #[serde(default)]
    pub value_separator: Option<String>,
}

/// Converts explicit property inputs, which win over inferred `data` entries of the same name.
pub fn apply_explicit(out: &mut PropWrites, inputs: &[PropertyInput]) -> Result<()> {
    let mut declared: BTreeMap<&str, PropType> = BTreeMap::new();
    for p in inputs {
        check_property_name(&p.name)?;
        let ty = PropType::parse(&p.ty).ok_or_else(|| {
            Error::invalid(format!(
                "property '{}': unknown type '{}' (expected string, number, boolean or datetime)",
                p.name,
                crate::model::truncate(&p.ty, 32)
            ))
        })?;
        if let Some(prev) = declared.insert(&p.name, ty) {
            if prev != ty {
                return Err(Error::invalid(format!(
                    "property '{}' is declared twice with different types ({} and {})",
                    p.name,
                    prev.name(),
                    ty.name()
                )));
            }
        }
        let value = match (&p.value, &p.value_separator) {
            (Value::Null, _) => None,
            (Value::String(s), Some(sep)) if !sep.is_empty() => Some(PropValue {
                ty,
                array: true,
                items: s
                    .split(sep.as_str())
                    .map(|part| convert_scalar(&p.name, ty, &Value::String(part.to_string())))
                    .collect::<Result<_>>()?,
            }),
            (Value::Array(items), _) => Some(PropValue {
                ty,
                array: true,
                items: items
                    .iter()
                    .map(|i| convert_scalar(&p.name, ty, i))
                    .collect::<Result<_>>()?,
            }),
            (v, _) => Some(PropValue::scalar(ty, convert_scalar(&p.name, ty, v)?)),
        };
        out.insert(p.name.clone(), value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inf(v: Value) -> PropValue {
        infer_value("p", &v, InferOptions::default())
            .unwrap()
            .unwrap()
    }

    #[test]
    fn infers_each_type() {
        assert_eq!(inf(json!(204)).items, vec![Scalar::Int(204)]);
        assert_eq!(inf(json!(204.0)).items, vec![Scalar::Int(204)]);
        assert_eq!(inf(json!(2.5)).items, vec![Scalar::Float(2.5)]);
        assert_eq!(inf(json!(true)).ty, PropType::Boolean);
        assert_eq!(inf(json!("2024-01-02")).ty, PropType::Datetime);
        assert_eq!(inf(json!("2024-01-02T10:00:00Z")).ty, PropType::Datetime);
        assert_eq!(inf(json!("hello")).ty, PropType::String);
        assert_eq!(inf(json!("42")).ty, PropType::String);
        let mixed = inf(json!([1, "a", true]));
        assert_eq!(mixed.ty, PropType::String);
        assert_eq!(mixed.items[0], Scalar::Str("1".into()));
        let empty = inf(json!([]));
        assert!(empty.array && empty.items.is_empty() && empty.ty == PropType::String);
        assert!(infer_value("p", &json!(null), InferOptions::default())
            .unwrap()
            .is_none());
        assert!(infer_value("p", &json!({"a": 1}), InferOptions::default()).is_err());
    }

    #[test]
    fn options_change_inference() {
        let conv = InferOptions {
            suggest_types: true,
            convert_numeric: true,
        };
        let v = infer_value("p", &json!("-12.5"), conv).unwrap().unwrap();
        assert_eq!(
            (v.ty, v.items[0].clone()),
            (PropType::Number, Scalar::Float(-12.5))
        );
        let v = infer_value("p", &json!("1e5"), conv).unwrap().unwrap();
        assert_eq!(v.ty, PropType::String);
        let off = InferOptions {
            suggest_types: false,
            convert_numeric: false,
        };
        let v = infer_value("p", &json!(7), off).unwrap().unwrap();
        assert_eq!(
            (v.ty, v.items[0].clone()),
            (PropType::String, Scalar::Str("7".into()))
        );
    }

    #[test]
    fn explicit_types_validate() {
        let mut out = PropWrites::new();
        let inputs: Vec<PropertyInput> = serde_json::from_value(json!([
            {"name": "n", "type": "number", "value": "12"},
            {"name": "tags", "type": "string", "value": "a,b", "valueSeparator": ","}
        ]))
        .unwrap();
        apply_explicit(&mut out, &inputs).unwrap();
        assert_eq!(out["n"].as_ref().unwrap().items, vec![Scalar::Int(12)]);
        assert_eq!(out["tags"].as_ref().unwrap().items.len(), 2);
        for bad in [
            json!([{"name": "n", "type": "number", "value": "abc"}]),
            json!([{"name": "d", "type": "datetime", "value": "yesterday"}]),
            json!([{"name": "x", "type": "blob", "value": 1}]),
            json!([{"name": "x", "type": "number", "value": 1}, {"name": "x", "type": "string", "value": "a"}]),
            json!([{"name": "__x", "type": "string", "value": "a"}]),
        ] {
            let inputs: Vec<PropertyInput> = serde_json::from_value(bad.clone()).unwrap();
            assert!(
                apply_explicit(&mut PropWrites::new(), &inputs).is_err(),
                "{bad}"
            );
        }
    }
}
