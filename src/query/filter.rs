//! The where tree (BEHAVIOUR.md §2): parsing client JSON into a [`Filter`], and evaluating it
//! on a record.
//!
//! Semantics, stated once here and relied on by the planner:
//! - "any element": a scalar is a one-element list; a value predicate holds if any element
//!   satisfies it. `$ne` and `$nin` are the exception: they hold when no element equals.
//! - A record lacking the field never satisfies a value predicate (`$ne`, `$nin` included);
//!   `field: null` and `$exists: false` match records lacking it; `$not` is plain negation.
//! - Equality and `$in` are type-strict, except that a string operand that parses as a
//!   datetime also matches datetime properties at the same instant. Numbers compare as one
//!   numeric order across integers and floats.
//! - Ranges compare numbers numerically and datetimes as instants; other operands are a 400.

use crate::error::{Error, Result};
use crate::model::datetime::{self, Instant};
use crate::model::infer::number_scalar;
use crate::model::{hash_bytes, Bloom, IdSet, PropType, PropValue, Record, Scalar};
use crate::store::relationships::EdgeFilter;
use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::sync::atomic::{AtomicU32, Ordering as AtomicOrdering};
use std::sync::Arc;
use uuid::Uuid;

/// A comparison operand.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    /// A string, with its instant when it parses as a datetime.
    Str(String, Option<Instant>),
    Num(Scalar),
    Bool(bool),
    /// A datetime component object: an exact instant.
    Instant(Instant),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOp {
    Gt,
    Gte,
    Lt,
    Lte,
}

/// A range bound: a number, or an instant (from a datetime string or a component object).
#[derive(Debug, Clone, PartialEq)]
pub enum Bound {
    Num(Scalar),
    Instant(Instant),
}

#[derive(Debug, Clone, PartialEq)]
pub enum FieldPred {
    Eq(Operand),
    Ne(Operand),
    In(Vec<Operand>),
    Nin(Vec<Operand>),
    Range(RangeOp, Bound),
    Contains(String),
    StartsWith(String),
    EndsWith(String),
    Exists(bool),
    Type(PropType),
}

#[derive(Debug, Clone, PartialEq)]
pub enum IdPred {
    In(Vec<Uuid>),
    Nin(Vec<Uuid>),
}

/// A related-label block (BEHAVIOUR.md §2 traversal): "at least one record reachable from
/// this one over `edges` in `hops` (fewest relationships) that has `label` and satisfies
/// `filter`". The record itself is never its own related record.
#[derive(Debug, Clone, PartialEq)]
pub struct Related {
    /// The block's key; None (engine-internal, `relatedTo`) admits any label.
    pub label: Option<String>,
    /// Direction as seen from the current record (`Out`: current -> related) and types.
    pub edges: EdgeFilter,
    /// Inclusive distance range, 1 <= min <= max <= the hop cap.
    pub hops: (u32, u32),
    pub alias: Option<String>,
    pub filter: Filter,
    /// Set when the planner evaluates the block from the related side (query/traverse.rs).
    pub resolved: Option<Arc<Resolved>>,
}

/// A block evaluated from the related side: the records that certainly satisfy it, the ones
/// that need a check from their own side, and the block's targets.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Resolved {
    /// Records that satisfy the block (no check needed).
    pub sure: IdSet,
    pub maybe: IdSet,
    pub targets: IdSet,
    /// The label every record of `sure` has, when the relationship counters imply one.
    pub label: Option<String>,
    /// When set, holds the `hash_bytes` of every id in `sure` and `maybe` (built once both
    /// are final): most records outside both are ruled out without probing either set.
    pub reached: Option<Bloom>,
}

impl Resolved {
    /// Builds `reached` from the final `sure` and `maybe`.
    pub fn seal(&mut self) {
        let ids = self.sure.iter().chain(&self.maybe);
        self.reached = Some(Bloom::new(
            ids.map(|id| hash_bytes(id.as_bytes())),
            self.sure.len() + self.maybe.len(),
        ));
    }

    /// Some(true) when `id` surely satisfies the block, Some(false) when it must be checked
    /// from its own side, None when it does not satisfy it.
    pub fn reaches(&self, id: &Uuid) -> Option<bool> {
        if let Some(b) = &self.reached {
            if !b.may_hold(hash_bytes(id.as_bytes())) {
                return None;
            }
        }
        if self.sure.contains(id) {
            Some(true)
        } else if self.maybe.contains(id) {
            Some(false)
        } else {
            None
        }
    }
}

/// Evaluates traversal blocks that were not resolved from the related side.
pub trait Graph {
    fn related(&self, rel: &Related, id: &Uuid) -> bool;
}

/// For filters without traversal (relationship property filters): no record is related.
pub struct NoGraph;

impl Graph for NoGraph {
    fn related(&self, _: &Related, _: &Uuid) -> bool {
        false
    }
}

/// Largest `hops` a traversal may ask for (BEHAVIOUR.md §2: 10 unless configured higher).
static MAX_HOPS: AtomicU32 = AtomicU32::new(10);

pub fn set_max_hops(n: u32) {
    MAX_HOPS.store(n.max(1), AtomicOrdering::Relaxed);
}

pub fn max_hops() -> u32 {
    MAX_HOPS.load(AtomicOrdering::Relaxed)
}

#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    True,
    Related(Box<Related>),
    And(Vec<Filter>),
    Or(Vec<Filter>),
    Not(Box<Filter>),
    Nor(Vec<Filter>),
    Xor(Vec<Filter>),
    Id(IdPred),
    Field(String, FieldPred),
}

const COMPONENTS: [&str; 9] = [
    "$year",
    "$month",
    "$day",
    "$hour",
    "$minute",
    "$second",
    "$millisecond",
    "$microsecond",
    "$nanosecond",
];

/// Upper bound on the nodes of one where tree.
pub const MAX_NODES: usize = 10_000;

struct Parser {
    nodes: usize,
}

fn bad(path: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{path}: {msg}"))
}

/// Numeric comparison across integers and floats (one numeric order).
pub fn num_cmp(a: &Scalar, b: &Scalar) -> Ordering {
    match (a, b) {
        (Scalar::Int(x), Scalar::Int(y)) => x.cmp(y),
        (Scalar::Float(x), Scalar::Float(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        (Scalar::Int(i), Scalar::Float(f)) => int_float_cmp(*i, *f),
        (Scalar::Float(f), Scalar::Int(i)) => int_float_cmp(*i, *f).reverse(),
        _ => Ordering::Equal,
    }
}

fn int_float_cmp(i: i64, f: f64) -> Ordering {
    let fi = i as f64;
    match fi.partial_cmp(&f).unwrap_or(Ordering::Equal) {
        // Same nearest f64: f is integral here; compare exactly in i128.
        Ordering::Equal => (i as i128).cmp(&(f as i128)),
        o => o,
    }
}

/// The instant of a stored datetime element.
pub fn instant_of(s: &Scalar) -> Option<Instant> {
    match s {
        Scalar::Str(t) => datetime::parse(t),
        _ => None,
    }
}

/// Keys that only a where tree (not a field's operator object) holds.
const TREE_KEYS: [&str; 7] = ["$alias", "$relation", "$id", "$and", "$or", "$nor", "$xor"];

/// An operator object has only `$operator` keys. Anything else (a plain key, the traversal
/// markers `$alias` / `$relation`, `$id` or a logical list) makes it a related-label block.
/// `$not` is both a field operator (`{age: {$not: {$gt: 5}}}`) and a logical one inside a
/// block (`{Order: {$not: {amount: 5}}}`): its argument decides.
fn is_operator_object(m: &Map<String, Value>) -> bool {
    !m.is_empty()
        && m.iter().all(|(k, v)| {
            k.starts_with('$')
                && !TREE_KEYS.contains(&k.as_str())
                && (k != "$not"
                    || match v {
                        Value::Object(inner) => {
                            is_operator_object(inner) || is_component_object(inner)
                        }
                        _ => true,
                    })
        })
}

fn is_component_object(m: &Map<String, Value>) -> bool {
    !m.is_empty() && m.keys().all(|k| COMPONENTS.contains(&k.as_str()))
}

/// Builds the exact instant a component object names (missing parts at their minimum).
fn component_instant(m: &Map<String, Value>, path: &str) -> Result<Instant> {
    let get = |k: &str, min: i64, max: i64| -> Result<i64> {
        match m.get(k) {
            None => Ok(min),
            Some(v) => match v.as_i64() {
                Some(x) if (min..=max).contains(&x) => Ok(x),
                _ => Err(bad(
                    &format!("{path}.{k}"),
                    format!("must be an integer from {min} to {max}"),
                )),
            },
        }
    };
    let year = match m.get("$year") {
        Some(v) => v
            .as_i64()
            .filter(|y| (0..=9999).contains(y))
            .ok_or_else(|| {
                bad(
                    &format!("{path}.$year"),
                    "must be an integer from 0 to 9999",
                )
            })?,
        None => 1970,
    };
    let (month, day) = (get("$month", 1, 12)?, get("$day", 1, 31)?);
    if day > datetime::days_in_month(year, month) {
        return Err(bad(
            &format!("{path}.$day"),
            format!(
                "{year:04}-{month:02} has {} days",
                datetime::days_in_month(year, month)
            ),
        ));
    }
    let (h, mi, s) = (
        get("$hour", 0, 23)?,
        get("$minute", 0, 59)?,
        get("$second", 0, 59)?,
    );
    let (ms, us, ns) = (
        get("$millisecond", 0, 999)?,
        get("$microsecond", 0, 999)?,
        get("$nanosecond", 0, 999)?,
    );
    let days = datetime::days_from_civil(year, month, day);
    Ok(Instant {
        secs: days * 86400 + h * 3600 + mi * 60 + s,
        nanos: (ms * 1_000_000 + us * 1000 + ns) as u32,
    })
}

impl Parser {
    fn count(&mut self, path: &str) -> Result<()> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(bad(
                path,
                format!("the where tree has more than {MAX_NODES} nodes"),
            ));
        }
        Ok(())
    }

    fn operand(&self, v: &Value, path: &str) -> Result<Operand> {
        match v {
            Value::String(s) => Ok(Operand::Str(s.clone(), datetime::parse(s))),
            Value::Number(n) => Ok(Operand::Num(
                number_scalar(n).map_err(|e| bad(path, e.message))?,
            )),
            Value::Bool(b) => Ok(Operand::Bool(*b)),
            Value::Object(m) if is_component_object(m) => {
                Ok(Operand::Instant(component_instant(m, path)?))
            }
            _ => Err(bad(
                path,
                "expected a string, number, boolean or datetime component object",
            )),
        }
    }

    fn bound(&self, v: &Value, path: &str) -> Result<Bound> {
        match v {
            Value::Number(n) => Ok(Bound::Num(
                number_scalar(n).map_err(|e| bad(path, e.message))?,
            )),
            Value::String(s) => datetime::parse(s)
                .map(Bound::Instant)
                .ok_or_else(|| bad(path, "a range bound must be a number or a datetime")),
            Value::Object(m) if is_component_object(m) => {
                Ok(Bound::Instant(component_instant(m, path)?))
            }
            _ => Err(bad(path, "a range bound must be a number or a datetime")),
        }
    }

    fn operands(&self, v: &Value, path: &str, allow_empty: bool) -> Result<Vec<Operand>> {
        let Value::Array(items) = v else {
            return Err(bad(path, "expected an array"));
        };
        if items.is_empty() && !allow_empty {
            return Err(bad(path, "must not be an empty array"));
        }
        items
            .iter()
            .enumerate()
            .map(|(i, x)| self.operand(x, &format!("{path}[{i}]")))
            .collect()
    }

    fn text(v: &Value, path: &str) -> Result<String> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| bad(path, "expected a string"))
    }

    /// A field's value: a plain operand (equality), null, or an operator object.
    fn field(&mut self, name: &str, v: &Value, path: &str) -> Result<Filter> {
        self.count(path)?;
        let f = |p| Filter::Field(name.to_string(), p);
        match v {
            Value::Null => Ok(f(FieldPred::Exists(false))),
            Value::Object(m) if is_component_object(m) => {
                Ok(f(FieldPred::Eq(self.operand(v, path)?)))
            }
            Value::Object(m) if is_operator_object(m) => {
                let mut parts = Vec::with_capacity(m.len());
                for (op, arg) in m {
                    let p = format!("{path}.{op}");
                    parts.push(self.operator(name, op, arg, &p)?);
                }
                Ok(if parts.len() == 1 {
                    parts.remove(0)
                } else {
                    Filter::And(parts)
                })
            }
            Value::Object(m) => self.block(name, m, path),
            Value::Array(_) => Err(bad(
                path,
                "an array is not a value to compare with; use $in",
            )),
            _ => Ok(f(FieldPred::Eq(self.operand(v, path)?))),
        }
    }

    fn operator(&mut self, name: &str, op: &str, arg: &Value, path: &str) -> Result<Filter> {
        self.count(path)?;
        let f = |p| Ok(Filter::Field(name.to_string(), p));
        match op {
            "$eq" if arg.is_null() => f(FieldPred::Exists(false)),
            "$eq" => f(FieldPred::Eq(self.operand(arg, path)?)),
            "$ne" if arg.is_null() => f(FieldPred::Exists(true)),
            "$ne" => f(FieldPred::Ne(self.operand(arg, path)?)),
            "$in" => f(FieldPred::In(self.operands(arg, path, false)?)),
            "$nin" => f(FieldPred::Nin(self.operands(arg, path, true)?)),
            "$gt" => f(FieldPred::Range(RangeOp::Gt, self.bound(arg, path)?)),
            "$gte" => f(FieldPred::Range(RangeOp::Gte, self.bound(arg, path)?)),
            "$lt" => f(FieldPred::Range(RangeOp::Lt, self.bound(arg, path)?)),
            "$lte" => f(FieldPred::Range(RangeOp::Lte, self.bound(arg, path)?)),
            "$contains" => f(FieldPred::Contains(Self::text(arg, path)?)),
            "$startsWith" => f(FieldPred::StartsWith(Self::text(arg, path)?)),
            "$endsWith" => f(FieldPred::EndsWith(Self::text(arg, path)?)),
            "$exists" => match arg {
                Value::Bool(b) => f(FieldPred::Exists(*b)),
                _ => Err(bad(path, "expected true or false")),
            },
            "$type" => {
                let t = Self::text(arg, path)?;
                let ty = PropType::parse(&t).ok_or_else(|| {
                    bad(path, "expected one of string, number, boolean, datetime")
                })?;
                f(FieldPred::Type(ty))
            }
            "$not" => Ok(Filter::Not(Box::new(self.field(name, arg, path)?))),
            _ => Err(bad(
                path,
                format!("unknown operator {}", crate::model::truncate(op, 40)),
            )),
        }
    }

    fn list(&mut self, v: &Value, path: &str) -> Result<Vec<Filter>> {
        logical_operands(v, path)?
            .iter()
            .map(|(x, p)| self.tree(x, p))
            .collect()
    }

    fn ids(&self, v: &Value, path: &str) -> Result<Vec<Uuid>> {
        let one = |x: &Value, p: &str| -> Result<Uuid> {
            let s = x
                .as_str()
                .ok_or_else(|| bad(p, "expected a record id string"))?;
            crate::model::parse_uuid_v7(s, p)
        };
        match v {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, x)| one(x, &format!("{path}[{i}]")))
                .collect(),
            _ => Ok(vec![one(v, path)?]),
        }
    }

    fn id_filter(&mut self, v: &Value, path: &str) -> Result<Filter> {
        match v {
            Value::Object(m) => {
                let mut parts = Vec::new();
                for (op, arg) in m {
                    let p = format!("{path}.{op}");
                    parts.push(match op.as_str() {
                        "$eq" => Filter::Id(IdPred::In(self.ids(arg, &p)?)),
                        "$in" => {
                            if arg.as_array().is_some_and(|a| a.is_empty()) {
                                return Err(bad(&p, "must not be an empty array"));
                            }
                            Filter::Id(IdPred::In(self.ids(arg, &p)?))
                        }
                        "$ne" | "$nin" => Filter::Id(IdPred::Nin(self.ids(arg, &p)?)),
                        _ => {
                            return Err(bad(
                                &p,
                                format!("unknown operator {}", crate::model::truncate(op, 40)),
                            ))
                        }
                    });
                }
                Ok(if parts.len() == 1 {
                    parts.remove(0)
                } else {
                    Filter::And(parts)
                })
            }
            _ => Ok(Filter::Id(IdPred::In(self.ids(v, path)?))),
        }
    }

    /// A related-label block: `$alias`, `$relation` and the where tree of the related record.
    fn block(&mut self, label: &str, m: &Map<String, Value>, path: &str) -> Result<Filter> {
        crate::query::check_label(label).map_err(|e| bad(path, e.message))?;
        let mut rel = Related {
            label: Some(label.to_string()),
            edges: EdgeFilter::default(),
            hops: (1, 1),
            alias: None,
            filter: Filter::True,
            resolved: None,
        };
        let mut rest = Map::new();
        for (k, v) in m {
            let p = format!("{path}.{k}");
            match k.as_str() {
                "$alias" => match v.as_str() {
                    Some(a) if a.len() > 1 && a.starts_with('$') && a != "$record" => {
                        rel.alias = Some(a.to_string())
                    }
                    _ => return Err(bad(&p, "expected a name like \"$order\" (not $record)")),
                },
                "$relation" => self.relation(v, &p, &mut rel)?,
                _ => {
                    rest.insert(k.clone(), v.clone());
                }
            }
        }
        rel.filter = self.tree(&Value::Object(rest), path)?;
        Ok(Filter::Related(Box::new(rel)))
    }

    fn relation(&mut self, v: &Value, path: &str, rel: &mut Related) -> Result<()> {
        let rel_type = |v: &Value, p: &str| -> Result<String> {
            match v.as_str() {
                Some(t) if !t.is_empty() => Ok(crate::model::canonical_type(t).to_string()),
                _ => Err(bad(p, "expected a non-empty relationship type string")),
            }
        };
        let m = match v {
            Value::String(_) => {
                rel.edges.types = vec![rel_type(v, path)?];
                return Ok(());
            }
            Value::Object(m) => m,
            _ => {
                return Err(bad(
                    path,
                    "expected a type string or {type, direction, hops}",
                ))
            }
        };
        for (k, x) in m {
            let p = format!("{path}.{k}");
            match k.as_str() {
                "type" => {
                    rel.edges.types = match x {
                        Value::Array(ts) if !ts.is_empty() => ts
                            .iter()
                            .enumerate()
                            .map(|(i, t)| rel_type(t, &format!("{p}[{i}]")))
                            .collect::<Result<_>>()?,
                        _ => vec![rel_type(x, &p)?],
                    }
                }
                "direction" => {
                    rel.edges.dir = Some(crate::model::Direction::parse(
                        x.as_str().unwrap_or(""),
                        &p,
                    )?)
                }
                "hops" => rel.hops = Self::hops(x, &p)?,
                _ => {
                    return Err(bad(
                        &p,
                        "unknown $relation key (expected type, direction, hops)",
                    ))
                }
            }
        }
        Ok(())
    }

    fn hops(v: &Value, path: &str) -> Result<(u32, u32)> {
        let cap = max_hops();
        let one = |x: &Value, p: &str| -> Result<u32> {
            match x.as_u64() {
                Some(n) if n >= 1 && n <= u64::from(cap) => Ok(n as u32),
                _ => Err(bad(p, format!("must be an integer from 1 to {cap}"))),
            }
        };
        match v {
            Value::Object(m) => {
                for k in m.keys() {
                    if k != "min" && k != "max" {
                        return Err(bad(&format!("{path}.{k}"), "expected min or max"));
                    }
                }
                let min = m
                    .get("min")
                    .map(|x| one(x, &format!("{path}.min")))
                    .transpose()?
                    .unwrap_or(1);
                let max = m
                    .get("max")
                    .map(|x| one(x, &format!("{path}.max")))
                    .transpose()?
                    .unwrap_or(cap);
                if min > max {
                    return Err(bad(path, "min must not exceed max"));
                }
                Ok((min, max))
            }
            _ => {
                let n = one(v, path)?;
                Ok((n, n))
            }
        }
    }

    fn tree(&mut self, v: &Value, path: &str) -> Result<Filter> {
        self.count(path)?;
        let m = match v {
            Value::Object(m) => m,
            Value::Null => return Ok(Filter::True),
            _ => return Err(bad(path, "expected an object")),
        };
        let mut parts = Vec::with_capacity(m.len());
        for (k, v) in m {
            let p = format!("{path}.{k}");
            parts.push(match k.as_str() {
                "$and" => Filter::And(self.list(v, &p)?),
                "$or" => Filter::Or(self.list(v, &p)?),
                "$nor" => Filter::Nor(self.list(v, &p)?),
                "$xor" => Filter::Xor(self.list(v, &p)?),
                "$not" => Filter::Not(Box::new(self.tree(v, &p)?)),
                "$id" => self.id_filter(v, &p)?,
                "$alias" | "$relation" => {
                    return Err(bad(
                        &p,
                        "allowed only inside a related-label block (e.g. {\"Order\": {\"$relation\": ...}})",
                    ))
                }
                op if op.starts_with('$') => {
                    return Err(bad(
                        &p,
                        format!("unknown operator {}", crate::model::truncate(op, 40)),
                    ))
                }
                field => self.field(field, v, &p)?,
            });
        }
        Ok(match parts.len() {
            0 => Filter::True,
            1 => parts.remove(0),
            _ => Filter::And(parts),
        })
    }
}

/// The operands of `$and`, `$or`, `$nor` or `$xor`, each with its path: an array of where
/// objects, or an object whose keys are the operands one each (`{"$or": {"a": 1, "b": 2}}` is
/// a = 1 or b = 2, as `{"$or": [{"a": 1}, {"b": 2}]}` would say it). Record and relationship
/// where trees read them alike.
pub fn logical_operands<'a>(
    v: &'a Value,
    path: &str,
) -> Result<Vec<(std::borrow::Cow<'a, Value>, String)>> {
    use std::borrow::Cow;
    match v {
        Value::Array(items) => Ok(items
            .iter()
            .enumerate()
            .map(|(i, x)| (Cow::Borrowed(x), format!("{path}[{i}]")))
            .collect()),
        Value::Object(m) => Ok(m
            .iter()
            .map(|(k, x)| {
                let one = serde_json::Map::from_iter([(k.clone(), x.clone())]);
                (Cow::Owned(Value::Object(one)), path.to_string())
            })
            .collect()),
        _ => Err(bad(
            path,
            "expected an array of where objects, or an object",
        )),
    }
}

/// Parses a where tree; `path` names its root in error messages (e.g. `where`).
pub fn parse(v: Option<&Value>, path: &str) -> Result<Filter> {
    match v {
        None => Ok(Filter::True),
        Some(v) => Parser { nodes: 0 }.tree(v, path),
    }
}

fn eq_elem(ty: PropType, e: &Scalar, o: &Operand) -> bool {
    match (ty, o) {
        (PropType::String, Operand::Str(s, _)) => matches!(e, Scalar::Str(x) if x == s),
        (PropType::Datetime, Operand::Str(s, inst)) => match (e, inst) {
            (Scalar::Str(x), _) if x == s => true,
            (_, Some(i)) => instant_of(e) == Some(*i),
            _ => false,
        },
        (PropType::Datetime, Operand::Instant(i)) => instant_of(e) == Some(*i),
        (PropType::Number, Operand::Num(n)) => num_cmp(e, n) == Ordering::Equal,
        (PropType::Boolean, Operand::Bool(b)) => matches!(e, Scalar::Bool(x) if x == b),
        _ => false,
    }
}

fn range_elem(ty: PropType, e: &Scalar, op: RangeOp, b: &Bound) -> bool {
    let ord = match (ty, b) {
        (PropType::Number, Bound::Num(n)) => num_cmp(e, n),
        (PropType::Datetime, Bound::Instant(i)) => match instant_of(e) {
            Some(x) => x.cmp(i),
            None => return false,
        },
        _ => return false,
    };
    match op {
        RangeOp::Gt => ord == Ordering::Greater,
        RangeOp::Gte => ord != Ordering::Less,
        RangeOp::Lt => ord == Ordering::Less,
        RangeOp::Lte => ord != Ordering::Greater,
    }
}

fn text_elem(ty: PropType, e: &Scalar) -> Option<&str> {
    match (ty, e) {
        (PropType::String | PropType::Datetime, Scalar::Str(s)) => Some(s),
        _ => None,
    }
}

/// Case-insensitive substring test on the literal text.
fn contains_ci(hay: &str, needle_lower: &str) -> bool {
    if hay.is_ascii() && needle_lower.is_ascii() {
        let (h, n) = (hay.as_bytes(), needle_lower.as_bytes());
        return n.is_empty()
            || h.windows(n.len())
                .any(|w| w.iter().zip(n).all(|(a, b)| a.to_ascii_lowercase() == *b));
    }
    hay.to_lowercase().contains(needle_lower)
}

impl FieldPred {
    /// Evaluates on the field's value (None: the record lacks the field).
    pub fn eval(&self, v: Option<&PropValue>) -> bool {
        let Some(v) = v else {
            return matches!(self, FieldPred::Exists(false));
        };
        let any = |f: &dyn Fn(&Scalar) -> bool| v.items.iter().any(f);
        match self {
            FieldPred::Exists(b) => *b,
            FieldPred::Type(t) => v.ty == *t,
            FieldPred::Eq(o) => any(&|e| eq_elem(v.ty, e, o)),
            FieldPred::Ne(o) => !any(&|e| eq_elem(v.ty, e, o)),
            FieldPred::In(os) => any(&|e| os.iter().any(|o| eq_elem(v.ty, e, o))),
            FieldPred::Nin(os) => !any(&|e| os.iter().any(|o| eq_elem(v.ty, e, o))),
            FieldPred::Range(op, b) => any(&|e| range_elem(v.ty, e, *op, b)),
            FieldPred::Contains(s) => {
                let n = s.to_lowercase();
                any(&|e| text_elem(v.ty, e).is_some_and(|t| contains_ci(t, &n)))
            }
            FieldPred::StartsWith(s) => {
                any(&|e| text_elem(v.ty, e).is_some_and(|t| t.starts_with(s.as_str())))
            }
            FieldPred::EndsWith(s) => {
                any(&|e| text_elem(v.ty, e).is_some_and(|t| t.ends_with(s.as_str())))
            }
        }
    }
}

impl Filter {
    /// Evaluates on a record; `g` answers traversal blocks not resolved beforehand.
    pub fn eval(&self, r: &Record, g: &dyn Graph) -> bool {
        match self {
            Filter::True => true,
            Filter::Related(rel) => match &rel.resolved {
                Some(res) => {
                    res.sure.contains(&r.id) || (res.maybe.contains(&r.id) && g.related(rel, &r.id))
                }
                None => g.related(rel, &r.id),
            },
            Filter::And(fs) => fs.iter().all(|f| f.eval(r, g)),
            Filter::Or(fs) => fs.iter().any(|f| f.eval(r, g)),
            Filter::Nor(fs) => !fs.iter().any(|f| f.eval(r, g)),
            Filter::Xor(fs) => fs.iter().filter(|f| f.eval(r, g)).count() == 1,
            Filter::Not(f) => !f.eval(r, g),
            Filter::Id(IdPred::In(ids)) => ids.contains(&r.id),
            Filter::Id(IdPred::Nin(ids)) => !ids.contains(&r.id),
            Filter::Field(name, p) => p.eval(r.props.get(name)),
        }
    }

    /// The fields the filter reads (for partial decoding).
    pub fn fields<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Filter::And(fs) | Filter::Or(fs) | Filter::Nor(fs) | Filter::Xor(fs) => {
                fs.iter().for_each(|f| f.fields(out))
            }
            Filter::Not(f) => f.fields(out),
            Filter::Field(n, _) => out.push(n),
            Filter::True | Filter::Id(_) | Filter::Related(_) => {}
        }
    }

    /// Whether the tree holds a traversal block.
    pub fn has_related(&self) -> bool {
        match self {
            Filter::Related(_) => true,
            Filter::And(fs) | Filter::Or(fs) | Filter::Nor(fs) | Filter::Xor(fs) => {
                fs.iter().any(Filter::has_related)
            }
            Filter::Not(f) => f.has_related(),
            _ => false,
        }
    }

    /// The chain of blocks from the root down to the block declaring `alias`.
    pub fn alias_chain<'a>(&'a self, alias: &str, out: &mut Vec<&'a Related>) -> bool {
        match self {
            Filter::Related(rel) => {
                out.push(rel);
                if rel.alias.as_deref() == Some(alias) || rel.filter.alias_chain(alias, out) {
                    return true;
                }
                out.pop();
                false
            }
            Filter::And(fs) | Filter::Or(fs) | Filter::Nor(fs) | Filter::Xor(fs) => {
                fs.iter().any(|f| f.alias_chain(alias, out))
            }
            Filter::Not(f) => f.alias_chain(alias, out),
            _ => false,
        }
    }
}
