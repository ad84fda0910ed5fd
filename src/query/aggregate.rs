//! Aggregation and grouping (BEHAVIOUR.md §2).
//!
//! Two spellings: `aggregate: {out: {fn, alias?, field?, ...}}` and the newer `select:
//! {out: {$count: "*"}, ...}`; both at once is a 400. Without `groupBy` there is one row per
//! matching record (the record plus the computed keys, over that record). With `groupBy`
//! (`$record.<property>`, or the name of a `timeBucket` output) there is one row per distinct
//! key combination holding the bare dimension names and the computed keys. A grouping key on
//! an array property makes one group per element. Rows are ordered, then skipped and limited.

use super::filter::{instant_of, num_cmp};
use super::order::elem_cmp;
use crate::error::{Error, Result};
use crate::model::datetime::{self, Instant};
use crate::model::{PropType, PropValue, Record, Scalar};
use crate::store::codec::{FieldRef, ScalarRef};
use serde_json::{json, Map, Value};
use std::cmp::Ordering;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Quarter,
    Year,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AggFn {
    Count,
    Sum,
    Avg {
        precision: Option<u32>,
    },
    Min,
    Max,
    Collect {
        unique: bool,
        desc: Option<bool>,
        /// Collected records are ordered by this property (missing last); without it, by id.
        by: Option<String>,
        skip: usize,
        limit: Option<usize>,
    },
    TimeBucket {
        granularity: Granularity,
        size: i64,
    },
}

#[derive(Debug, Clone)]
pub struct AggDef {
    pub name: String,
    pub func: AggFn,
    pub field: Option<String>,
    /// A traversal alias (`$order`): the aggregate runs over the records it names for each
    /// root record. None: the root record (`$record`).
    pub alias: Option<String>,
}

#[derive(Debug, Clone)]
pub enum Dim {
    Prop(String),
    /// A property of the records an alias names: (alias, property).
    AliasProp(String, String),
    Bucket(usize),
}

#[derive(Debug, Clone)]
pub struct Aggregation {
    pub defs: Vec<AggDef>,
    pub dims: Vec<(String, Dim)>,
    pub select_form: bool,
    pub order: Vec<(String, bool)>,
    pub offset: usize,
    pub limit: usize,
}

fn bad(path: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("{path}: {msg}"))
}

/// A field reference: `*`, `name`, `$record.name`, `$alias.name` or `$alias` (the records
/// themselves). Returns (alias, field).
fn field_name(s: &str, path: &str) -> Result<(Option<String>, Option<String>)> {
    if s == "*" {
        return Ok((None, None));
    }
    if s.is_empty() {
        return Err(bad(path, "empty field name"));
    }
    let Some(rest) = s.strip_prefix('$') else {
        return Ok((None, Some(s.to_string())));
    };
    let (alias, field) = match rest.split_once('.') {
        Some((a, f)) => (a, Some(f)),
        None => (rest, None),
    };
    if alias.is_empty() || field == Some("") {
        return Err(bad(path, "expected \"$alias.property\""));
    }
    let alias = (alias != "record").then(|| format!("${alias}"));
    if alias.is_none() && field.is_none() {
        return Ok((None, None));
    }
    Ok((alias, field.map(str::to_string)))
}

fn granularity(s: &str, path: &str) -> Result<(Granularity, bool)> {
    let (base, plural) = match s.strip_suffix('s') {
        Some(b) => (b, true),
        None => (s, false),
    };
    let g = match base {
        "second" => Granularity::Second,
        "minute" => Granularity::Minute,
        "hour" => Granularity::Hour,
        "day" => Granularity::Day,
        "week" => Granularity::Week,
        "month" => Granularity::Month,
        "quarter" => Granularity::Quarter,
        "year" => Granularity::Year,
        _ => return Err(bad(path, "granularity must be one of second, minute, hour, day, week, month, quarter, year (or plural with size)")),
    };
    Ok((g, plural))
}

fn opt_usize(m: &Map<String, Value>, k: &str, path: &str) -> Result<Option<usize>> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|x| Some(x as usize))
            .ok_or_else(|| bad(&format!("{path}.{k}"), "expected a non-negative integer")),
    }
}

fn opt_bool(m: &Map<String, Value>, k: &str, path: &str) -> Result<Option<bool>> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(bad(&format!("{path}.{k}"), "expected true or false")),
    }
}

/// Builds one aggregate from its function name and option object.
fn build(
    name: &str,
    func: &str,
    m: &Map<String, Value>,
    (alias, field): (Option<String>, Option<String>),
    path: &str,
) -> Result<AggDef> {
    let needs_field = |f: &Option<String>| {
        if f.is_none() {
            Err(bad(path, format!("{func} needs a field")))
        } else {
            Ok(())
        }
    };
    let f = match func {
        "count" => AggFn::Count,
        "sum" => {
            needs_field(&field)?;
            AggFn::Sum
        }
        "avg" => {
            needs_field(&field)?;
            let precision = opt_usize(m, "precision", path)?.map(|p| p.min(15) as u32);
            AggFn::Avg { precision }
        }
        "min" => {
            needs_field(&field)?;
            AggFn::Min
        }
        "max" => {
            needs_field(&field)?;
            AggFn::Max
        }
        "collect" => {
            // Without a field it collects the records themselves (the root's, `$record`, or
            // an alias's).
            // `orderBy`: "asc" / "desc" (values by value, records by id), or the general
            // form {name: direction}: for values, name is the collected field; for records,
            // the property they are ordered by.
            let dir = crate::query::order::direction;
            let opath = format!("{path}.orderBy");
            let (desc, by) = match m.get("orderBy") {
                None | Some(Value::Null) => (None, None),
                Some(d @ Value::String(_)) => (Some(dir(d, &opath)?), None),
                Some(Value::Object(o)) if o.len() == 1 => {
                    let (k, d) = o.iter().next().expect("one key");
                    let desc = dir(d, &format!("{opath}.{k}"))?;
                    let name = field_name(k, &format!("{opath}.{k}"))?.1;
                    match (&field, name) {
                        (None, Some(n)) => (Some(desc), Some(n)),
                        (Some(f), Some(n)) if *f == n => (Some(desc), None),
                        _ => {
                            return Err(bad(
                                &format!("{opath}.{k}"),
                                "a collect of values is ordered by the collected field; of records, by one of their properties",
                            ))
                        }
                    }
                }
                Some(_) => {
                    return Err(bad(
                        &opath,
                        "expected \"asc\", \"desc\" or {\"<property>\": \"asc\" | \"desc\"}",
                    ))
                }
            };
            AggFn::Collect {
                unique: opt_bool(m, "unique", path)?.unwrap_or(true),
                desc,
                by,
                skip: opt_usize(m, "skip", path)?.unwrap_or(0),
                limit: opt_usize(m, "limit", path)?,
            }
        }
        "timeBucket" => {
            needs_field(&field)?;
            let g = m
                .get("granularity")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(&format!("{path}.granularity"), "required"))?;
            let (granularity, plural) = granularity(g, &format!("{path}.granularity"))?;
            let size = match m.get("size") {
                None | Some(Value::Null) if !plural => 1,
                None | Some(Value::Null) => {
                    return Err(bad(
                        &format!("{path}.size"),
                        "plural granularities need a size",
                    ))
                }
                Some(v) => v
                    .as_i64()
                    .filter(|s| (1..=MAX_BUCKET_SIZE).contains(s))
                    .ok_or_else(|| {
                        bad(
                            &format!("{path}.size"),
                            format!("expected a whole number from 1 to {MAX_BUCKET_SIZE}"),
                        )
                    })?,
            };
            AggFn::TimeBucket { granularity, size }
        }
        other => {
            return Err(bad(
                &format!("{path}.fn"),
                format!(
                    "unknown aggregate function {}",
                    crate::model::truncate(other, 40)
                ),
            ))
        }
    };
    Ok(AggDef {
        name: name.to_string(),
        func: f,
        field,
        alias,
    })
}

fn parse_defs(v: &Value, select_form: bool) -> Result<Vec<AggDef>> {
    let root = if select_form { "select" } else { "aggregate" };
    let Value::Object(m) = v else {
        return Err(bad(root, "expected an object of output name to aggregate"));
    };
    let mut defs = Vec::new();
    for (name, spec) in m {
        let path = format!("{root}.{name}");
        // Output names sit beside the record's keys in a row: `__` names are the record's
        // identity (`__id`, `__label`, ...), reserved as for properties (BEHAVIOUR §1).
        if name.starts_with("__") {
            return Err(bad(&path, "output names starting with __ are reserved"));
        }
        if name.is_empty() {
            return Err(bad(root, "an output name must not be empty"));
        }
        if select_form {
            let Value::Object(sm) = spec else {
                return Err(bad(&path, "expected an object like {\"$count\": \"*\"}"));
            };
            if sm.len() != 1 {
                return Err(bad(&path, "expected exactly one $function"));
            }
            let (fk, arg) = sm.iter().next().ok_or_else(|| bad(&path, "empty"))?;
            let func = fk
                .strip_prefix('$')
                .ok_or_else(|| bad(&path, "expected a $function key"))?;
            let p = format!("{path}.{fk}");
            let (field, opts) = match arg {
                Value::String(s) => (field_name(s, &p)?, Map::new()),
                Value::Object(o) => {
                    let field = match o.get("field") {
                        Some(Value::String(s)) => field_name(s, &format!("{p}.field"))?,
                        None | Some(Value::Null) => (None, None),
                        Some(_) => return Err(bad(&format!("{p}.field"), "expected a string")),
                    };
                    (field, o.clone())
                }
                _ => return Err(bad(&p, "expected a field name or an options object")),
            };
            defs.push(build(name, func, &opts, field, &p)?);
        } else {
            let Value::Object(am) = spec else {
                return Err(bad(&path, "expected an object with fn"));
            };
            let func = am
                .get("fn")
                .and_then(Value::as_str)
                .ok_or_else(|| bad(&format!("{path}.fn"), "required"))?;
            let alias = match am.get("alias") {
                None | Some(Value::Null) => None,
                Some(Value::String(a)) if a == "$record" => None,
                Some(Value::String(a)) if a.len() > 1 && a.starts_with('$') => Some(a.clone()),
                Some(_) => {
                    return Err(bad(
                        &format!("{path}.alias"),
                        "expected \"$record\" or a declared $alias",
                    ))
                }
            };
            let field = match am.get("field") {
                Some(Value::String(s)) => match field_name(s, &format!("{path}.field"))? {
                    (None, f) => (alias, f),
                    (a, f) => (a, f),
                },
                None | Some(Value::Null) => (alias, None),
                Some(_) => return Err(bad(&format!("{path}.field"), "expected a string")),
            };
            defs.push(build(name, func, am, field, &path)?);
        }
    }
    if defs.is_empty() {
        return Err(bad(root, "names no aggregate"));
    }
    Ok(defs)
}

/// Validates groupBy keys (`$record.<property>` or a bare output name).
pub fn check_group_by(keys: &[String]) -> Result<()> {
    for (i, k) in keys.iter().enumerate() {
        let aliased = k
            .strip_prefix('$')
            .and_then(|r| r.split_once('.'))
            .is_some_and(|(a, f)| !a.is_empty() && !f.is_empty());
        if k.is_empty() || (k.starts_with('$') && !aliased) {
            return Err(bad(
                &format!("groupBy[{i}]"),
                "expected \"$record.<property>\", \"$alias.<property>\" or an aggregate output name",
            ));
        }
    }
    Ok(())
}

pub fn parse(
    v: &Value,
    select_form: bool,
    group_by: &[String],
    order: Option<&Value>,
    offset: usize,
    limit: usize,
) -> Result<Aggregation> {
    let defs = parse_defs(v, select_form)?;
    check_group_by(group_by)?;
    let mut dims = Vec::new();
    for (i, k) in group_by.iter().enumerate() {
        if let Some(p) = k.strip_prefix("$record.") {
            dims.push((p.to_string(), Dim::Prop(p.to_string())));
        } else if let Some((a, p)) = k.strip_prefix('$').and_then(|r| r.split_once('.')) {
            dims.push((
                p.to_string(),
                Dim::AliasProp(format!("${a}"), p.to_string()),
            ));
        } else if let Some(pos) = defs
            .iter()
            .position(|d| d.name == *k && matches!(d.func, AggFn::TimeBucket { .. }))
        {
            dims.push((k.clone(), Dim::Bucket(pos)));
        } else {
            return Err(bad(
                &format!("groupBy[{i}]"),
                format!("{k} is neither \"$record.<property>\" nor a timeBucket output"),
            ));
        }
    }
    if !dims.is_empty() {
        // With grouping, time buckets are dimensions whether or not groupBy names them.
        for (i, d) in defs.iter().enumerate() {
            if matches!(d.func, AggFn::TimeBucket { .. })
                && !dims
                    .iter()
                    .any(|(_, x)| matches!(x, Dim::Bucket(j) if *j == i))
            {
                dims.push((d.name.clone(), Dim::Bucket(i)));
            }
        }
    }
    // `orderBy`: an object of name to direction, or a list of such objects for several keys
    // (SPEC.md SearchDto). Grouped rows are ordered by outputs: another name is refused.
    let mut row_order = Vec::new();
    let mut push_keys = |m: &serde_json::Map<String, Value>, path: &str| -> Result<()> {
        for (k, d) in m {
            let desc = crate::query::order::direction(d, &format!("{path}.{k}"))?;
            // `$record.genre` and `$c.country` name the dimensions `genre` and `country`.
            let name = match k.strip_prefix('$').and_then(|r| r.split_once('.')) {
                Some((_, p)) if !p.is_empty() => p,
                _ => k.as_str(),
            };
            // Without groupBy the rows are the records: any of their fields orders them.
            let known = defs.iter().any(|d| d.name == name) || dims.iter().any(|(n, _)| n == name);
            if !dims.is_empty() && !known {
                let mut outputs: Vec<&str> = Vec::new();
                // A timeBucket output is a dimension too: named once.
                for n in defs
                    .iter()
                    .map(|d| d.name.as_str())
                    .chain(dims.iter().map(|(n, _)| n.as_str()))
                {
                    if !outputs.contains(&n) {
                        outputs.push(n);
                    }
                }
                return Err(bad(
                    &format!("{path}.{k}"),
                    format!(
                        "not an output of this aggregation (outputs: {})",
                        outputs.join(", ")
                    ),
                ));
            }
            row_order.push((name.to_string(), desc));
        }
        Ok(())
    };
    match order {
        None | Some(Value::Null) => {}
        Some(v @ Value::String(_)) => {
            crate::query::order::direction(v, "orderBy")?;
        }
        Some(Value::Object(m)) => push_keys(m, "orderBy")?,
        Some(Value::Array(items)) => {
            for (i, x) in items.iter().enumerate() {
                let path = format!("orderBy[{i}]");
                match x {
                    Value::Object(m) => push_keys(m, &path)?,
                    _ => return Err(bad(&path, "expected an object of output name to direction")),
                }
            }
        }
        Some(_) => {
            return Err(bad(
                "orderBy",
                "expected an object of output name to direction, or a list of them",
            ))
        }
    }
    Ok(Aggregation {
        defs,
        dims,
        select_form,
        order: row_order,
        offset,
        limit,
    })
}

/// The largest `timeBucket` size: a bucket's width in seconds or months (size times at most
/// 3600 or 12) then stays far inside i64, whatever the granularity.
pub const MAX_BUCKET_SIZE: i64 = 1_000_000;

/// The start of the bucket holding `t`, as seconds since the epoch (UTC). `size` is 1 to
/// `MAX_BUCKET_SIZE` (checked when the query is parsed).
pub fn bucket_start(t: Instant, g: Granularity, size: i64) -> i64 {
    let floor = |x: i64, n: i64| x.div_euclid(n) * n;
    let days = t.secs.div_euclid(86400);
    match g {
        Granularity::Second => floor(t.secs, size),
        Granularity::Minute => floor(t.secs, 60 * size),
        Granularity::Hour => floor(t.secs, 3600 * size),
        Granularity::Day => floor(days, size) * 86400,
        // 1970-01-05 was a Monday: weeks are counted from there.
        Granularity::Week => (floor(days - 4, 7 * size) + 4) * 86400,
        Granularity::Month | Granularity::Quarter | Granularity::Year => {
            let (y, m, _) = datetime::civil_from_days(days);
            let months = match g {
                Granularity::Month => size,
                Granularity::Quarter => 3 * size,
                _ => 12 * size,
            };
            let idx = floor(y * 12 + (m - 1), months);
            datetime::days_from_civil(idx.div_euclid(12), idx.rem_euclid(12) + 1, 1) * 86400
        }
    }
}

/// An exact running sum of floats (Shewchuk's non-overlapping partials, as Python's
/// `math.fsum`), rounded once when read: below 2^1020 the result does not depend on the order
/// the values came in, so a sum split across threads and merged equals the one-pass sum, and
/// it is the correctly rounded sum (past it, see `scaled`).
///
/// Invariant: `partials` are finite, non-zero (but the last), increasing in magnitude, and
/// hold the sum times 2^-64 when `scaled`. Before a value or the running sum reaches
/// [`SCALE_AT`] (so before any intermediate sum could overflow), every partial is scaled down
/// by 2^-64 (exact, but for partials far below the sum's last bit), and later values are
/// scaled as they come: a sum past the float range is still known, and its mean too. The
/// price: once scaled, parts of the sum below about 2^-958 (which scale to subnormals) lose
/// bits or vanish, so such a sum is no longer exact below them, and whether it scales depends
/// on the order (an intermediate sum may reach `SCALE_AT` in one order only).
#[derive(Debug, Clone, Default)]
struct ExactSum {
    partials: Vec<f64>,
    scaled: bool,
}

/// 2^1020: below it two values add without overflow.
const SCALE_AT: f64 = 1.123_558_209_288_947_4e307;
/// 2^-64 and 2^64.
const DOWN: f64 = 1.0 / 18_446_744_073_709_551_616.0;
const UP: f64 = 18_446_744_073_709_551_616.0;

impl ExactSum {
    fn add(&mut self, x: f64) {
        debug_assert!(x.is_finite(), "stored floats are finite");
        let large = |v: f64| v.abs() >= SCALE_AT;
        if !self.scaled && (large(x) || self.partials.last().is_some_and(|l| large(*l))) {
            self.scale_down();
        }
        self.push(if self.scaled { x * DOWN } else { x });
    }

    fn scale_down(&mut self) {
        self.partials.iter_mut().for_each(|p| *p *= DOWN);
        self.partials.retain(|p| *p != 0.0);
        self.scaled = true;
    }

    /// Adds `x`, already in the sum's scale.
    fn push(&mut self, mut x: f64) {
        let mut kept = 0;
        for j in 0..self.partials.len() {
            let mut y = self.partials[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                self.partials[kept] = lo;
                kept += 1;
            }
            x = hi;
        }
        self.partials.truncate(kept);
        self.partials.push(x);
    }

    fn merge(&mut self, other: &ExactSum) {
        if other.scaled {
            if !self.scaled {
                self.scale_down();
            }
            other.partials.iter().for_each(|&p| self.push(p));
        } else {
            other.partials.iter().for_each(|&p| self.add(p));
        }
    }

    /// This sum with an integer sum added (exactly while it fits a double's mantissa).
    fn with_int(&self, i: i128) -> ExactSum {
        let mut s = self.clone();
        if i != 0 {
            s.add(i as f64);
            s.add((i - i as f64 as i128) as f64);
        }
        s
    }

    /// The sum: an infinity when it is beyond the float range.
    fn value(&self) -> f64 {
        self.unscaled(self.rounded())
    }

    /// The sum divided by `n`, computed in the sum's scale (so finite whenever the mean is).
    fn mean(&self, n: u64) -> f64 {
        self.unscaled(self.rounded() / n as f64)
    }

    /// `v`, a figure in the sum's scale, in the values' own.
    fn unscaled(&self, v: f64) -> f64 {
        if self.scaled {
            v * UP
        } else {
            v
        }
    }

    /// The correctly rounded sum of the partials (the final step of `math.fsum`).
    fn rounded(&self) -> f64 {
        let p = &self.partials;
        let Some(mut n) = p.len().checked_sub(1) else {
            return 0.0;
        };
        let mut hi = p[n];
        let mut lo = 0.0;
        while n > 0 {
            let x = hi;
            n -= 1;
            let y = p[n];
            hi = x + y;
            lo = y - (hi - x);
            if lo != 0.0 {
                break;
            }
        }
        // Round half to even across the partials below: if the rest has the sign of `lo`,
        // the true sum is past the halfway point `lo` stands for.
        if n > 0 && ((lo < 0.0 && p[n - 1] < 0.0) || (lo > 0.0 && p[n - 1] > 0.0)) {
            let y = lo * 2.0;
            let x = hi + y;
            if y == x - hi {
                hi = x;
            }
        }
        hi
    }
}

/// A record a `collect` gathered: its id, its JSON, and the value it is ordered by.
type Collected = (uuid::Uuid, Value, Option<(PropType, Scalar)>);

/// Running state of one aggregate over a set of records.
#[derive(Debug, Clone, Default)]
struct Acc {
    count: u64,
    int_sum: i128,
    float_sum: ExactSum,
    any_float: bool,
    n: u64,
    best: Option<(PropType, Scalar)>,
    items: Vec<(PropType, Scalar)>,
    /// `collect` of an alias without a field: the records themselves (id, JSON, and the
    /// value they are ordered by: the smallest element ascending, the largest descending).
    records: Vec<Collected>,
}

impl Acc {
    fn add(&mut self, def: &AggDef, r: &Record) {
        if let (None, AggFn::Collect { by, desc, .. }) = (&def.field, &def.func) {
            self.count += 1;
            let key = by.as_ref().and_then(|b| r.props.get(b)).and_then(|v| {
                let pick = |a: &&Scalar, b: &&Scalar| elem_cmp(v.ty, a, v.ty, b);
                let e = match desc {
                    Some(true) => v.items.iter().max_by(pick),
                    _ => v.items.iter().min_by(pick),
                };
                e.map(|e| (v.ty, e.clone()))
            });
            self.records
                .push((r.id, crate::protocol::render::flat_record(r), key));
            return;
        }
        let v = def.field.as_ref().and_then(|f| r.props.get(f));
        self.add_value(def, v.as_ref());
    }

    /// Counts one record and folds in the elements of its value of the aggregate's field.
    fn add_value(&mut self, def: &AggDef, v: Option<&impl FieldView>) {
        self.count += 1;
        let Some(v) = v else {
            return;
        };
        let ty = v.ty();
        v.for_each(&mut |e| match &def.func {
            AggFn::Sum | AggFn::Avg { .. } if ty == PropType::Number => {
                self.n += 1;
                match e {
                    ScalarRef::Int(i) => self.int_sum += i as i128,
                    ScalarRef::Float(f) => {
                        self.float_sum.add(f);
                        self.any_float = true;
                    }
                    _ => {}
                }
            }
            AggFn::Min | AggFn::Max => self.offer(def, ty, e.to_owned()),
            AggFn::Collect { .. } => self.items.push((ty, e.to_owned())),
            _ => {}
        });
    }

    /// Keeps `e` when it beats the current min (or max).
    fn offer(&mut self, def: &AggDef, ty: PropType, e: Scalar) {
        let better = match &self.best {
            None => true,
            Some((bt, b)) => {
                let o = elem_cmp(ty, &e, *bt, b);
                if def.func == AggFn::Min {
                    o == Ordering::Less
                } else {
                    o == Ordering::Greater
                }
            }
        };
        if better {
            self.best = Some((ty, e));
        }
    }

    /// Folds in another accumulator of the same aggregate over other records (parallel
    /// partitions). Only the mergeable functions use it: count, sum, avg, min and max.
    fn merge(&mut self, def: &AggDef, other: Acc) {
        self.count += other.count;
        self.int_sum += other.int_sum;
        self.float_sum.merge(&other.float_sum);
        self.any_float |= other.any_float;
        self.n += other.n;
        if let Some((ty, e)) = other.best {
            self.offer(def, ty, e);
        }
    }

    /// The aggregate's answer. A float sum beyond the 64-bit float range has no JSON number:
    /// it is refused naming the output (an average of the same values is still answered).
    fn value(&self, def: &AggDef) -> Result<Value> {
        Ok(match &def.func {
            AggFn::Count => json!(self.count),
            AggFn::Sum => {
                if self.any_float {
                    let s = self.float_sum.with_int(self.int_sum).value();
                    if !s.is_finite() {
                        return Err(Error::invalid(format!(
                            "aggregate {}: the sum is beyond the 64-bit float range (about ±1.8e308)",
                            def.name
                        )));
                    }
                    json!(s)
                } else if let Ok(i) = i64::try_from(self.int_sum) {
                    json!(i)
                } else {
                    json!(self.int_sum as f64)
                }
            }
            AggFn::Avg { precision } => {
                if self.n == 0 {
                    return Ok(Value::Null);
                }
                let avg = self.float_sum.with_int(self.int_sum).mean(self.n);
                let avg = match precision {
                    // A value too large to scale is already whole at that precision.
                    Some(p) if (avg * 10f64.powi(*p as i32)).is_finite() => {
                        let m = 10f64.powi(*p as i32);
                        (avg * m).round() / m
                    }
                    _ => avg,
                };
                serde_json::Number::from_f64(avg)
                    .map(Value::Number)
                    .unwrap_or(Value::Null)
            }
            AggFn::Min | AggFn::Max => self
                .best
                .as_ref()
                .map(|(_, e)| e.to_json())
                .unwrap_or(Value::Null),
            AggFn::Collect {
                unique,
                desc,
                by,
                skip,
                limit,
            } => {
                if !self.records.is_empty() {
                    let mut records: Vec<&Collected> = self.records.iter().collect();
                    if let Some(d) = desc {
                        // By the property (missing last in both directions), then by id; by
                        // id alone without one.
                        records.sort_by(|a, b| {
                            let by_value = match (&a.2, &b.2) {
                                (Some((ta, x)), Some((tb, y))) => {
                                    let o = elem_cmp(*ta, x, *tb, y);
                                    if *d {
                                        o.reverse()
                                    } else {
                                        o
                                    }
                                }
                                (Some(_), None) => Ordering::Less,
                                (None, Some(_)) => Ordering::Greater,
                                (None, None) => Ordering::Equal,
                            };
                            let by_id = if *d { b.0.cmp(&a.0) } else { a.0.cmp(&b.0) };
                            match by {
                                Some(_) => by_value.then(by_id),
                                None => by_id,
                            }
                        });
                    }
                    let mut seen = std::collections::HashSet::new();
                    let it = records
                        .into_iter()
                        .filter(|(id, _, _)| !*unique || seen.insert(*id))
                        .skip(*skip)
                        .map(|(_, v, _)| v.clone());
                    return Ok(Value::Array(match limit {
                        Some(l) => it.take(*l).collect(),
                        None => it.collect(),
                    }));
                }
                let mut items = self.items.clone();
                if let Some(d) = desc {
                    items.sort_by(|(ta, a), (tb, b)| {
                        let o = elem_cmp(*ta, a, *tb, b);
                        if *d {
                            o.reverse()
                        } else {
                            o
                        }
                    });
                }
                if *unique {
                    let mut seen: Vec<(PropType, Scalar)> = Vec::new();
                    items.retain(|(t, e)| {
                        let dup = seen
                            .iter()
                            .any(|(st, s)| st == t && elem_cmp(*st, s, *t, e) == Ordering::Equal);
                        if !dup {
                            seen.push((*t, e.clone()));
                        }
                        !dup
                    });
                }
                let it = items.into_iter().skip(*skip).map(|(_, e)| e.to_json());
                Value::Array(match limit {
                    Some(l) => it.take(*l).collect(),
                    None => it.collect(),
                })
            }
            AggFn::TimeBucket { .. } => Value::Null,
        })
    }
}

fn bucket_value(def: &AggDef, r: &Record, select_form: bool) -> Vec<Value> {
    let AggFn::TimeBucket { granularity, size } = def.func else {
        return vec![];
    };
    let Some(v) = def.field.as_ref().and_then(|f| r.props.get(f)) else {
        return vec![Value::Null];
    };
    if v.ty != PropType::Datetime {
        return vec![Value::Null];
    }
    v.items
        .iter()
        .filter_map(instant_of)
        .map(|i| {
            let s = bucket_start(i, granularity, size);
            if select_form {
                json!(s * 1000)
            } else {
                json!(datetime::iso(s))
            }
        })
        .collect()
}

/// Compares JSON values as row keys: numbers, then strings, then booleans; null last.
fn value_cmp(a: &Value, b: &Value) -> Ordering {
    let rank = |v: &Value| match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) | Value::Object(_) => 3,
        Value::Null => 4,
    };
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let s = |n: &serde_json::Number| {
                n.as_i64()
                    .map(Scalar::Int)
                    .unwrap_or(Scalar::Float(n.as_f64().unwrap_or(0.0)))
            };
            num_cmp(&s(x), &s(y))
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        _ => rank(a).cmp(&rank(b)),
    }
}

/// The order of a time bucket's values: its texts by year, then the rest (`-0001-12-31T...`,
/// `+10000-01-01T...`: as texts `+10000` would come first and `-0002` after `-0001`); a text
/// of another shape after every bucket text, by text. A total order (the year and rest of a
/// bucket text determine it). Other values as `value_cmp`.
fn bucket_cmp(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::String(x), Value::String(y)) => {
            let key = |s: &str| match iso_year(s) {
                Some((year, rest)) => (0, year, rest.to_string()),
                None => (1, 0, s.to_string()),
            };
            key(x).cmp(&key(y)).then_with(|| x.cmp(y))
        }
        _ => value_cmp(a, b),
    }
}

/// The year and the rest of an ISO 8601 date-time text (`2024-05-01T...`, and the expanded
/// years of time buckets).
fn iso_year(s: &str) -> Option<(i64, &str)> {
    let (sign, body) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => (1, s),
    };
    let digits = body.bytes().take_while(u8::is_ascii_digit).count();
    let rest = &body[digits..];
    let shaped = rest.len() >= 7
        && rest.as_bytes()[0] == b'-'
        && rest.as_bytes()[3] == b'-'
        && rest.as_bytes()[6] == b'T';
    if !(4..=18).contains(&digits) || !shaped {
        return None;
    }
    Some((sign * body[..digits].parse::<i64>().ok()?, rest))
}

/// Orders rows by `order`'s keys; a key that names a time bucket in `agg` orders by time.
fn sort_rows(agg: &Aggregation, rows: &mut [Map<String, Value>], order: &[(String, bool)]) {
    if order.is_empty() {
        return;
    }
    let bucket: Vec<bool> = order
        .iter()
        .map(|(k, _)| {
            agg.defs
                .iter()
                .any(|d| &d.name == k && matches!(d.func, AggFn::TimeBucket { .. }))
        })
        .collect();
    rows.sort_by(|a, b| {
        for ((k, desc), bucket) in order.iter().zip(&bucket) {
            let (x, y) = (
                a.get(k).unwrap_or(&Value::Null),
                b.get(k).unwrap_or(&Value::Null),
            );
            let o = match (x.is_null(), y.is_null()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                _ => {
                    let o = if *bucket {
                        bucket_cmp(x, y)
                    } else {
                        value_cmp(x, y)
                    };
                    if *desc {
                        o.reverse()
                    } else {
                        o
                    }
                }
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    });
}

/// The fields grouped aggregation reads: dimensions and aggregate inputs; None (every field)
/// when it collects the root records themselves.
pub fn fields(agg: &Aggregation) -> Option<Vec<String>> {
    let whole = |d: &AggDef| {
        d.alias.is_none() && d.field.is_none() && matches!(d.func, AggFn::Collect { .. })
    };
    if agg.defs.iter().any(whole) {
        return None;
    }
    let mut f: Vec<String> = agg
        .defs
        .iter()
        .filter(|d| d.alias.is_none())
        .filter_map(|d| d.field.clone())
        .collect();
    f.extend(agg.dims.iter().filter_map(|(_, d)| match d {
        Dim::Prop(p) => Some(p.clone()),
        Dim::Bucket(_) | Dim::AliasProp(..) => None,
    }));
    f.sort();
    f.dedup();
    Some(f)
}

fn page(agg: &Aggregation, mut rows: Vec<Map<String, Value>>) -> (Vec<Value>, u64) {
    sort_rows(agg, &mut rows, &agg.order);
    let total = rows.len() as u64;
    let page = rows
        .into_iter()
        .skip(agg.offset)
        .take(agg.limit)
        .map(Value::Object)
        .collect();
    (page, total)
}

/// The records an alias names for one root record (query/traverse.rs computes them).
pub type Bind<'a> = dyn Fn(&str, &Record) -> Vec<Record> + 'a;

/// The aliases the aggregation reads.
pub fn aliases(agg: &Aggregation) -> Vec<String> {
    let mut a: Vec<String> = agg.defs.iter().filter_map(|d| d.alias.clone()).collect();
    a.extend(agg.dims.iter().filter_map(|(_, d)| match d {
        Dim::AliasProp(a, _) => Some(a.clone()),
        _ => None,
    }));
    a.sort();
    a.dedup();
    a
}

/// Bound records of one root, computed once per alias.
struct Bound<'b> {
    bind: &'b Bind<'b>,
    cache: BTreeMap<String, Vec<Record>>,
}

impl Bound<'_> {
    fn get(&mut self, alias: &str, r: &Record) -> &[Record] {
        let bind = self.bind;
        self.cache
            .entry(alias.to_string())
            .or_insert_with(|| bind(alias, r))
    }
}

/// Feeds a root record to one aggregate: the record itself, or the records its alias names.
fn feed(acc: &mut Acc, d: &AggDef, r: &Record, bound: &mut Bound<'_>) {
    match &d.alias {
        None => acc.add(d, r),
        Some(a) => {
            for b in bound.get(a, r) {
                acc.add(d, b);
            }
        }
    }
}

/// Rows without grouping: one per record (the record plus the keys computed over it), in
/// the records' order, then ordered, skipped and limited as `agg` says.
pub fn per_record(
    agg: &Aggregation,
    records: &[Record],
    record_json: impl Fn(&Record) -> Value,
    bind: &Bind<'_>,
) -> Result<(Vec<Value>, u64)> {
    let mut rows = Vec::with_capacity(records.len());
    for r in records {
        let Value::Object(mut row) = record_json(r) else {
            continue;
        };
        let mut bound = Bound {
            bind,
            cache: BTreeMap::new(),
        };
        for d in &agg.defs {
            let v = match d.func {
                AggFn::TimeBucket { .. } => bucket_value(d, r, agg.select_form)
                    .into_iter()
                    .next()
                    .unwrap_or(Value::Null),
                _ => {
                    let mut acc = Acc::default();
                    feed(&mut acc, d, r, &mut bound);
                    acc.value(d)?
                }
            };
            row.insert(d.name.clone(), v);
        }
        rows.push(row);
    }
    Ok(page(agg, rows))
}

/// Grouped aggregation, fed one record at a time (records are not kept).
pub struct Grouper<'a> {
    agg: &'a Aggregation,
    /// Group key: the JSON text of each dimension value, in dimension order.
    groups: BTreeMap<Vec<String>, (Vec<Value>, Vec<Acc>)>,
}

impl<'a> Grouper<'a> {
    pub fn new(agg: &'a Aggregation) -> Self {
        Grouper {
            agg,
            groups: BTreeMap::new(),
        }
    }

    pub fn add(&mut self, r: &Record, bind: &Bind<'_>) {
        let agg = self.agg;
        let mut bound = Bound {
            bind,
            cache: BTreeMap::new(),
        };
        let mut keys: Vec<Vec<Value>> = vec![vec![]];
        for (_, dim) in &agg.dims {
            let vals: Vec<Value> = match dim {
                Dim::AliasProp(a, p) => {
                    let mut vals: Vec<Value> = Vec::new();
                    for b in bound.get(a, r) {
                        if let Some(v) = b.props.get(p) {
                            for e in &v.items {
                                let j = e.to_json();
                                if !vals.contains(&j) {
                                    vals.push(j);
                                }
                            }
                        }
                    }
                    if vals.is_empty() {
                        vals.push(Value::Null);
                    }
                    vals
                }
                Dim::Prop(p) => match r.props.get(p) {
                    Some(v) if v.array && !v.items.is_empty() => {
                        let mut vals: Vec<Value> = Vec::new();
                        for j in v.items.iter().map(Scalar::to_json) {
                            if !vals.contains(&j) {
                                vals.push(j);
                            }
                        }
                        vals
                    }
                    Some(v) if !v.array => vec![v.to_json()],
                    _ => vec![Value::Null],
                },
                Dim::Bucket(i) => bucket_value(&agg.defs[*i], r, agg.select_form),
            };
            keys = keys
                .into_iter()
                .flat_map(|k| {
                    vals.iter().map(move |v| {
                        let mut k = k.clone();
                        k.push(v.clone());
                        k
                    })
                })
                .collect();
        }
        for k in keys {
            let text: Vec<String> = k.iter().map(Value::to_string).collect();
            let entry = self
                .groups
                .entry(text)
                .or_insert_with(|| (k, vec![Acc::default(); agg.defs.len()]));
            for (acc, d) in entry.1.iter_mut().zip(&agg.defs) {
                feed(acc, d, r, &mut bound);
            }
        }
    }

    pub fn finish(self) -> Result<(Vec<Value>, u64)> {
        rows_of(self.agg, self.groups.into_values())
    }
}

/// One row per group (dimension values and aggregate results), ordered by the dimensions
/// unless the aggregation orders otherwise, then paged.
fn rows_of(
    agg: &Aggregation,
    groups: impl Iterator<Item = (Vec<Value>, Vec<Acc>)>,
) -> Result<(Vec<Value>, u64)> {
    let mut rows = Vec::new();
    for (dims, accs) in groups {
        let mut row = Map::new();
        for ((name, _), v) in agg.dims.iter().zip(dims) {
            row.insert(name.clone(), v);
        }
        for (acc, d) in accs.iter().zip(&agg.defs) {
            if !matches!(d.func, AggFn::TimeBucket { .. }) {
                row.insert(d.name.clone(), acc.value(d)?);
            }
        }
        rows.push(row);
    }
    if agg.order.is_empty() {
        let dims: Vec<(String, bool)> = agg.dims.iter().map(|(n, _)| (n.clone(), false)).collect();
        sort_rows(agg, &mut rows, &dims);
    }
    Ok(page(agg, rows))
}

/// A property value as the aggregation reads it: decoded (`&PropValue`), or still in the
/// record's bytes (`FieldRef`).
pub trait FieldView {
    fn ty(&self) -> PropType;
    fn array(&self) -> bool;
    fn count(&self) -> usize;
    fn for_each(&self, f: &mut dyn FnMut(ScalarRef<'_>));
}

impl FieldView for &PropValue {
    fn ty(&self) -> PropType {
        self.ty
    }
    fn array(&self) -> bool {
        self.array
    }
    fn count(&self) -> usize {
        self.items.len()
    }
    fn for_each(&self, f: &mut dyn FnMut(ScalarRef<'_>)) {
        self.items.iter().for_each(|e| f(e.into()))
    }
}

impl FieldView for FieldRef<'_> {
    fn ty(&self) -> PropType {
        self.ty
    }
    fn array(&self) -> bool {
        self.array
    }
    fn count(&self) -> usize {
        self.count
    }
    fn for_each(&self, f: &mut dyn FnMut(ScalarRef<'_>)) {
        // Invariant: encoded fields come from values the store wrote and `record_fields`
        // already walked, so their elements decode.
        let _ = FieldRef::for_each(self, f);
    }
}

/// Appends a value's group-key encoding: equal exactly when the values' JSON texts are equal
/// (what `Grouper` keys by), so both groupers form the same groups.
fn push_key(key: &mut Vec<u8>, e: Option<ScalarRef<'_>>) {
    match e {
        None => key.push(b'n'),
        Some(ScalarRef::Str(s)) => {
            key.push(b's');
            key.extend_from_slice(&(s.len() as u64).to_le_bytes());
            key.extend_from_slice(s.as_bytes());
        }
        Some(ScalarRef::Int(i)) => {
            key.push(b'i');
            key.extend_from_slice(&i.to_le_bytes());
        }
        Some(ScalarRef::Float(f)) => {
            key.push(b'f');
            key.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Some(ScalarRef::Bool(b)) => {
            key.push(b'b');
            key.push(u8::from(b));
        }
    }
}

fn key_json(e: Option<ScalarRef<'_>>) -> Value {
    e.map_or(Value::Null, |e| e.to_owned().to_json())
}

/// Up to this many groups are found by comparing keys in turn rather than by hashing.
const LINEAR_GROUPS: usize = 16;

/// Grouped aggregation for the common shape: every dimension is a property of the record
/// itself and every aggregate is count, sum, avg, min or max over the record. Groups are
/// keyed by the values' bytes (no JSON per record), records are read as borrowed fields,
/// and partial results over disjoint records merge, so a scan can be split across threads.
/// Produces exactly the rows `Grouper` produces.
pub struct ScalarGroups<'a> {
    agg: &'a Aggregation,
    /// Field of each dimension, then of each aggregate (None: count without a field), as
    /// indexes into `fields`.
    dim_slots: Vec<usize>,
    def_slots: Vec<Option<usize>>,
    fields: Vec<String>,
    index: std::collections::HashMap<Vec<u8>, usize>,
    groups: Vec<(Vec<u8>, Vec<Value>, Vec<Acc>)>,
    key: Vec<u8>,
}

impl<'a> ScalarGroups<'a> {
    /// None when the aggregation has another shape (aliases, time buckets, collect, no
    /// dimensions): `Grouper` handles those.
    pub fn new(agg: &'a Aggregation) -> Option<Self> {
        if agg.dims.is_empty() {
            return None;
        }
        let mut fields: Vec<String> = Vec::new();
        let mut slot = |name: &str| match fields.iter().position(|f| f == name) {
            Some(i) => i,
            None => {
                fields.push(name.to_string());
                fields.len() - 1
            }
        };
        let mut dim_slots = Vec::new();
        for (_, d) in &agg.dims {
            match d {
                Dim::Prop(p) => dim_slots.push(slot(p)),
                _ => return None,
            }
        }
        let mut def_slots = Vec::new();
        for d in &agg.defs {
            let mergeable = matches!(
                d.func,
                AggFn::Count | AggFn::Sum | AggFn::Avg { .. } | AggFn::Min | AggFn::Max
            );
            if d.alias.is_some() || !mergeable {
                return None;
            }
            def_slots.push(d.field.as_deref().map(&mut slot));
        }
        Some(ScalarGroups {
            agg,
            dim_slots,
            def_slots,
            fields,
            index: Default::default(),
            groups: Vec::new(),
            key: Vec::new(),
        })
    }

    /// The properties to read, in slot order (`add` takes them in this order).
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// An empty accumulator for the same aggregation (one per parallel partition).
    pub fn fresh(&self) -> Self {
        ScalarGroups {
            agg: self.agg,
            dim_slots: self.dim_slots.clone(),
            def_slots: self.def_slots.clone(),
            fields: self.fields.clone(),
            index: Default::default(),
            groups: Vec::new(),
            key: Vec::new(),
        }
    }

    /// Adds a decoded record (which holds at least `fields()`).
    pub fn add_record(&mut self, r: &Record) {
        let values: Vec<Option<&PropValue>> = self.fields.iter().map(|f| r.props.get(f)).collect();
        self.add(&values);
    }

    /// Adds one record, given its values of `fields()` in order.
    pub fn add<F: FieldView>(&mut self, values: &[Option<F>]) {
        // A dimension on an array makes one group per element (an empty array: null).
        let multi = self.dim_slots.iter().any(|&i| {
            values[i]
                .as_ref()
                .is_some_and(|v| v.array() && v.count() > 1)
        });
        if !multi {
            let mut key = std::mem::take(&mut self.key);
            key.clear();
            for &i in &self.dim_slots {
                let mut first = None;
                if let Some(v) = &values[i] {
                    v.for_each(&mut |e| {
                        if first.is_none() {
                            push_key(&mut key, Some(e));
                            first = Some(());
                        }
                    });
                }
                if first.is_none() {
                    push_key(&mut key, None);
                }
            }
            let g = self.group(&key, values, &[]);
            self.key = key;
            self.feed(g, values);
            return;
        }
        // Rare: the cross product of each dimension's distinct elements.
        let mut combos: Vec<(Vec<u8>, Vec<Value>)> = vec![(Vec::new(), Vec::new())];
        for &i in &self.dim_slots {
            let mut elems: Vec<(Vec<u8>, Value)> = Vec::new();
            if let Some(v) = &values[i] {
                v.for_each(&mut |e| {
                    let mut k = Vec::new();
                    push_key(&mut k, Some(e));
                    if !elems.iter().any(|(x, _)| *x == k) {
                        elems.push((k, key_json(Some(e))));
                    }
                });
            }
            if elems.is_empty() {
                let mut k = Vec::new();
                push_key(&mut k, None);
                elems.push((k, Value::Null));
            }
            combos = combos
                .into_iter()
                .flat_map(|(k, j)| {
                    elems.iter().map(move |(ek, ej)| {
                        let (mut k, mut j) = (k.clone(), j.clone());
                        k.extend_from_slice(ek);
                        j.push(ej.clone());
                        (k, j)
                    })
                })
                .collect();
        }
        for (k, j) in combos {
            let g = self.group(&k, values, &j);
            self.feed(g, values);
        }
    }

    /// The group of `key`, made on first sight (dimension values from `json`, or from the
    /// record's first elements when `json` is empty).
    fn group<F: FieldView>(&mut self, key: &[u8], values: &[Option<F>], json: &[Value]) -> usize {
        // Few groups (the usual case): comparing short keys beats hashing them.
        if self.groups.len() <= LINEAR_GROUPS {
            if let Some(g) = self.groups.iter().position(|(k, _, _)| k == key) {
                return g;
            }
        } else if let Some(&g) = self.index.get(key) {
            return g;
        }
        let dims: Vec<Value> = if json.is_empty() {
            self.dim_slots
                .iter()
                .map(|&i| {
                    let mut first = None;
                    if let Some(v) = &values[i] {
                        v.for_each(&mut |e| {
                            if first.is_none() {
                                first = Some(key_json(Some(e)));
                            }
                        });
                    }
                    first.unwrap_or(Value::Null)
                })
                .collect()
        } else {
            json.to_vec()
        };
        self.groups.push((
            key.to_vec(),
            dims,
            vec![Acc::default(); self.agg.defs.len()],
        ));
        self.index.insert(key.to_vec(), self.groups.len() - 1);
        self.groups.len() - 1
    }

    fn feed<F: FieldView>(&mut self, g: usize, values: &[Option<F>]) {
        let accs = &mut self.groups[g].2;
        for ((acc, d), slot) in accs.iter_mut().zip(&self.agg.defs).zip(&self.def_slots) {
            acc.add_value(d, slot.and_then(|i| values[i].as_ref()));
        }
    }

    /// Folds in the groups of another partition.
    pub fn merge(&mut self, other: ScalarGroups<'_>) {
        for (key, dims, accs) in other.groups {
            let g = match self.index.get(&key) {
                Some(&g) => g,
                None => {
                    self.groups.push((
                        key.clone(),
                        dims,
                        vec![Acc::default(); self.agg.defs.len()],
                    ));
                    self.index.insert(key, self.groups.len() - 1);
                    self.groups.len() - 1
                }
            };
            for ((acc, d), o) in self.groups[g].2.iter_mut().zip(&self.agg.defs).zip(accs) {
                acc.merge(d, o);
            }
        }
    }

    pub fn finish(self) -> Result<(Vec<Value>, u64)> {
        rows_of(
            self.agg,
            self.groups.into_iter().map(|(_, dims, accs)| (dims, accs)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_sum_is_the_same_in_any_order_and_split() {
        let sum = |xs: &[f64]| {
            let mut s = ExactSum::default();
            xs.iter().for_each(|x| s.add(*x));
            s
        };
        assert_eq!(sum(&[0.1; 10]).value(), 1.0); // a plain loop gives 0.9999999999999999
        assert_eq!(sum(&[1e100, 1.0, -1e100]).value(), 1.0);
        assert_eq!(sum(&[]).value(), 0.0);
        // Pseudo-random values with two decimals, as in an audit that found the parallel
        // grouped sum differing from the one-pass sum in the last bits.
        let mut x: u64 = 1;
        let xs: Vec<f64> = (0..600)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 11) % 20001) as f64 / 100.0 - 100.0
            })
            .collect();
        let forward = sum(&xs).value();
        let mut rev = xs.clone();
        rev.reverse();
        assert_eq!(sum(&rev).value(), forward);
        for cut in [1, 7, 300, 599] {
            let mut a = sum(&xs[..cut]);
            a.merge(&sum(&xs[cut..]));
            assert_eq!(a.value(), forward, "split at {cut}");
        }
        let mut with_int = sum(&[0.5]);
        assert_eq!(with_int.with_int(3).value(), 3.5);
        with_int.add(f64::MAX);
        with_int.add(f64::MAX);
        assert_eq!(with_int.value(), f64::INFINITY);
        assert_eq!(with_int.mean(2), f64::MAX);
        // Past the float range on the way, back inside at the end, in any order.
        for xs in [
            [1e308, 1e308, -1e308],
            [1e308, -1e308, 1e308],
            [-1e308, 1e308, 1e308],
        ] {
            assert_eq!(sum(&xs).value(), 1e308);
        }
        let mut a = sum(&[1e308, 1e308]);
        a.merge(&sum(&[-1e308, 0.5]));
        assert_eq!(a.value(), 1e308);
        let mut b = sum(&[0.5, -1e308]);
        b.merge(&sum(&[1e308, 1e308]));
        assert_eq!(b.value(), 1e308);
        assert_eq!(sum(&[1e308, 1.5e308]).mean(2), 1.25e308);
    }

    #[test]
    fn bucket_texts_order_by_time() {
        let mut v: Vec<Value> = [
            "+10000-01-01T00:00:00Z",
            "2020-01-01T00:00:00Z",
            "-0001-12-31T00:00:00Z",
            "-0002-01-01T00:00:00Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T00:00:00Z",
        ]
        .iter()
        .map(|s| json!(s))
        .collect();
        v.sort_by(bucket_cmp);
        let got: Vec<&str> = v.iter().filter_map(Value::as_str).collect();
        assert_eq!(
            got,
            [
                "-0002-01-01T00:00:00Z",
                "-0001-12-31T00:00:00Z",
                "0000-01-01T00:00:00Z",
                "2020-01-01T00:00:00Z",
                "9999-12-31T00:00:00Z",
                "+10000-01-01T00:00:00Z"
            ]
        );
        assert_eq!(value_cmp(&json!("b"), &json!("a")), Ordering::Greater);
        // A total order over bucket texts and any others (a sort would panic on a cycle):
        // check transitivity and antisymmetry over a mix.
        let mix: Vec<Value> = [
            "+10000-01-01T00:00:00Z",
            "2020-01-01T00:00:00Z",
            "1",
            "02024-01-01Tx",
            "-0001x",
            "2024-05-01T0",
            "+2024-05-01T0",
            "",
            "zzz",
        ]
        .iter()
        .map(|s| json!(s))
        .collect();
        for a in &mix {
            for b in &mix {
                assert_eq!(bucket_cmp(a, b), bucket_cmp(b, a).reverse());
                for c in &mix {
                    if bucket_cmp(a, b).is_lt() && bucket_cmp(b, c).is_lt() {
                        assert!(bucket_cmp(a, c).is_lt(), "{a} < {b} < {c}");
                    }
                }
            }
        }
    }

    #[test]
    fn buckets_align_to_calendar_units() {
        let t = datetime::parse("2024-05-15T13:45:30Z").unwrap();
        assert_eq!(
            datetime::iso(bucket_start(t, Granularity::Hour, 1)),
            "2024-05-15T13:00:00Z"
        );
        assert_eq!(
            datetime::iso(bucket_start(t, Granularity::Day, 1)),
            "2024-05-15T00:00:00Z"
        );
        assert_eq!(
            datetime::iso(bucket_start(t, Granularity::Week, 1)),
            "2024-05-13T00:00:00Z"
        ); // a Monday
        assert_eq!(
            datetime::iso(bucket_start(t, Granularity::Month, 1)),
            "2024-05-01T00:00:00Z"
        );
        assert_eq!(
            datetime::iso(bucket_start(t, Granularity::Quarter, 1)),
            "2024-04-01T00:00:00Z"
        );
        assert_eq!(
            datetime::iso(bucket_start(t, Granularity::Year, 1)),
            "2024-01-01T00:00:00Z"
        );
        assert_eq!(
            datetime::iso(bucket_start(t, Granularity::Month, 6)),
            "2024-01-01T00:00:00Z"
        );
        let early = datetime::parse("1969-12-31T23:00:00Z").unwrap();
        assert_eq!(
            datetime::iso(bucket_start(early, Granularity::Week, 1)),
            "1969-12-29T00:00:00Z"
        );
    }
}
