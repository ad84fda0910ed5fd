//! Ordering (BEHAVIOUR.md §2): `"asc" | "desc"` by id, or field keys. Across types, numbers
//! sort before datetimes (by instant), then strings (by code point), then booleans
//! (false < true). Records lacking the field come last in both directions. An array sorts
//! by its smallest element ascending and by its largest descending. Records with equal
//! keys are ordered by id descending, so paging is stable.

use super::filter::{instant_of, num_cmp};
use crate::error::{Error, Result};
use crate::model::{PropType, PropValue, Record, Scalar};
use serde_json::Value;
use std::cmp::Ordering;

#[derive(Debug, Clone, PartialEq)]
pub struct OrderKey {
    /// None orders by record id.
    pub field: Option<String>,
    pub desc: bool,
}

/// An order direction, `"asc"` or `"desc"` in any case: whether it is descending. The one
/// reading of a direction, for records, grouped rows and `collect` alike.
pub fn direction(v: &Value, path: &str) -> Result<bool> {
    match v.as_str().map(str::to_ascii_lowercase).as_deref() {
        Some("asc") => Ok(false),
        Some("desc") => Ok(true),
        _ => Err(Error::invalid(format!(
            "{path}: order direction must be \"asc\" or \"desc\""
        ))),
    }
}

/// Parses `orderBy`; the default is id descending (newest first).
pub fn parse(v: Option<&Value>, path: &str) -> Result<Vec<OrderKey>> {
    let dir = direction;
    let key = |f: &str, v: &Value, p: &str| -> Result<OrderKey> {
        if f.is_empty() {
            return Err(Error::invalid(format!("{p}: field name must not be empty")));
        }
        let field = match f {
            "id" | "__id" | "$id" => None,
            f => Some(f.to_string()),
        };
        Ok(OrderKey {
            field,
            desc: dir(v, p)?,
        })
    };
    let mut keys = Vec::new();
    match v {
        None | Some(Value::Null) => {}
        Some(s @ Value::String(_)) => keys.push(OrderKey { field: None, desc: dir(s, path)? }),
        Some(Value::Object(m)) => {
            for (f, d) in m {
                keys.push(key(f, d, &format!("{path}.{f}"))?);
            }
        }
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let Value::Object(m) = item else {
                    return Err(Error::invalid(format!("{path}[{i}]: expected an object of field to direction")));
                };
                for (f, d) in m {
                    keys.push(key(f, d, &format!("{path}[{i}].{f}"))?);
                }
            }
        }
        Some(_) => {
            return Err(Error::invalid(format!(
                "{path}: expected \"asc\", \"desc\", an object of field to direction, or an array of them"
            )))
        }
    }
    if keys.is_empty() {
        keys.push(OrderKey {
            field: None,
            desc: true,
        });
    }
    Ok(keys)
}

fn type_rank(t: PropType) -> u8 {
    match t {
        PropType::Number => 0,
        PropType::Datetime => 1,
        PropType::String => 2,
        PropType::Boolean => 3,
    }
}

/// Compares two elements of possibly different property types in the cross-type order.
pub fn elem_cmp(ta: PropType, a: &Scalar, tb: PropType, b: &Scalar) -> Ordering {
    type_rank(ta)
        .cmp(&type_rank(tb))
        .then_with(|| match (ta, a, b) {
            (PropType::Number, _, _) => num_cmp(a, b),
            (PropType::Datetime, _, _) => instant_of(a).cmp(&instant_of(b)),
            (_, Scalar::Str(x), Scalar::Str(y)) => x.cmp(y),
            (_, Scalar::Bool(x), Scalar::Bool(y)) => x.cmp(y),
            _ => Ordering::Equal,
        })
}

/// The element a value sorts by: smallest ascending, largest descending.
pub fn sort_elem(v: &PropValue, desc: bool) -> Option<&Scalar> {
    let pick = |best: &Scalar, e: &Scalar| {
        let o = elem_cmp(v.ty, e, v.ty, best);
        if desc {
            o == Ordering::Greater
        } else {
            o == Ordering::Less
        }
    };
    let mut it = v.items.iter();
    let mut best = it.next()?;
    for e in it {
        if pick(best, e) {
            best = e;
        }
    }
    Some(best)
}

/// When the order's first key is the id: whether it is descending (ids are unique, so the id
/// decides alone). None when a property comes first.
pub fn by_id_only(order: &[OrderKey]) -> Option<bool> {
    match order {
        [OrderKey { field: None, desc }, ..] => Some(*desc),
        _ => None,
    }
}

/// When ids alone decide the order, whether it is descending: no keys (id descending,
/// `compare`'s tie-break) or the id first. None when a property comes first.
pub fn id_order(keys: &[OrderKey]) -> Option<bool> {
    if keys.is_empty() {
        Some(true)
    } else {
        by_id_only(keys)
    }
}

/// The positions `0..n` in the order `compare` gives the records `rec(i)`; positions, since
/// what they index may be large to move.
pub fn sorted_positions<'a>(
    keys: &[OrderKey],
    n: usize,
    rec: impl Fn(usize) -> &'a Record,
) -> Vec<usize> {
    let mut at: Vec<usize> = (0..n).collect();
    match id_order(keys) {
        Some(true) => at.sort_unstable_by_key(|&i| std::cmp::Reverse(rec(i).id.as_u128())),
        Some(false) => at.sort_unstable_by_key(|&i| rec(i).id.as_u128()),
        None => at.sort_unstable_by(|&a, &b| compare(keys, rec(a), rec(b))),
    }
    at
}

/// Compares two records under the order keys, ties by id descending. Ids compare as u128
/// (the order of their bytes, without a `memcmp` call).
pub fn compare(keys: &[OrderKey], a: &Record, b: &Record) -> Ordering {
    for k in keys {
        let o = match &k.field {
            None => {
                let o = a.id.as_u128().cmp(&b.id.as_u128());
                if k.desc {
                    o.reverse()
                } else {
                    o
                }
            }
            Some(f) => {
                let ea = a
                    .props
                    .get(f)
                    .and_then(|v| sort_elem(v, k.desc).map(|e| (v.ty, e)));
                let eb = b
                    .props
                    .get(f)
                    .and_then(|v| sort_elem(v, k.desc).map(|e| (v.ty, e)));
                match (ea, eb) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Greater,
                    (Some(_), None) => Ordering::Less,
                    (Some((ta, x)), Some((tb, y))) => {
                        let o = elem_cmp(ta, x, tb, y);
                        if k.desc {
                            o.reverse()
                        } else {
                            o
                        }
                    }
                }
            }
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    b.id.as_u128().cmp(&a.id.as_u128())
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    /// `sorted_positions` (with its id-first shortcut) orders as `compare` does.
    #[test]
    fn sorted_positions_agree_with_compare() {
        let records: Vec<Record> = (0..40)
            .map(|i| {
                let mut props = std::collections::BTreeMap::new();
                if i % 3 != 0 {
                    props.insert(
                        "n".to_string(),
                        PropValue::scalar(PropType::Number, Scalar::Int(i % 4)),
                    );
                }
                Record {
                    // Ids whose byte order differs from their creation order.
                    id: uuid::Uuid::from_u128(((i as u128 * 7919) % 97) << 64 | i as u128),
                    label: "L".into(),
                    row: i as u64,
                    version: 1,
                    props,
                }
            })
            .collect();
        let key = |field: Option<&str>, desc| OrderKey {
            field: field.map(str::to_string),
            desc,
        };
        for keys in [
            vec![],
            vec![key(None, true)],
            vec![key(None, false)],
            vec![key(None, false), key(Some("n"), true)],
            vec![key(Some("n"), false)],
            vec![key(Some("n"), true), key(None, false)],
        ] {
            let got: Vec<Uuid> = sorted_positions(&keys, records.len(), |i| &records[i])
                .into_iter()
                .map(|i| records[i].id)
                .collect();
            let mut want = records.clone();
            want.sort_by(|a, b| compare(&keys, a, b));
            let want: Vec<Uuid> = want.iter().map(|r| r.id).collect();
            assert_eq!(got, want, "keys {keys:?}");
        }
    }
}
