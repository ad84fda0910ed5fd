//! Planning and execution of record searches over one read view.
//!
//! The planner looks at the top-level conjuncts of the filter and picks the cheapest access
//! path by estimated rows: an id set, property-index point lookups (`=`, `$in`), an index
//! range (`$gt/$gte/$lt/$lte`, merged per field), an index prefix (`$startsWith`), a label
//! scan, or a full scan. Candidates from the path are a superset of the matches; the whole
//! filter is re-checked on each ("residual"), except when the path alone answers it
//! ("covered"): then `total` is a count of index keys and no record is read but the page.

use super::filter::{Bound, FieldPred, Filter, Graph, IdPred, Operand, RangeOp, Resolved};
use super::order::{self, OrderKey};
use super::traverse::{self, Walker};
use crate::error::{Error, Result};
use crate::model::{PropType, PropValue, Record, Scalar};
use crate::store::codec;
use crate::store::keys::{self, Key};
use crate::store::kv::KvRead;
use crate::store::records as rstore;
use std::borrow::Cow;
use std::collections::HashSet;
use uuid::Uuid;

/// Index ranges are counted up to this many keys when estimating.
const ESTIMATE_CAP: u64 = 20_000;
/// A value-filtered index walk examines at most this many keys when estimating.
const EXAMINE_CAP: u64 = 50_000;
/// The cost of reading one more key along a run, relative to reading a record (a descent).
pub(crate) const KEY_COST: f64 = 0.1;

#[derive(Debug, Clone)]
pub struct SearchSpec {
    pub labels: Vec<String>,
    pub filter: Filter,
    pub order: Vec<OrderKey>,
    pub offset: usize,
    /// None: every match (bulk delete, aggregation).
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, Default)]
pub struct Explain {
    pub access: String,
    pub estimated_rows: u64,
    pub examined_rows: u64,
    pub matched_rows: u64,
    pub covered: bool,
    pub index_order: bool,
    /// How each traversal block is evaluated (from which side), in tree order.
    pub traversal: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct SearchOutput {
    pub records: Vec<Record>,
    pub total: u64,
    pub explain: Explain,
}

/// Key ranges of one property index (one property id, one or more labels).
#[derive(Debug, Clone)]
struct IndexAccess {
    describe: String,
    field: String,
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
    /// Records may appear once per array element, so ids need de-duplication.
    arrays: bool,
    /// How many top-level conjuncts the ranges answer exactly.
    answers: usize,
    /// All ranges lie in one label's part of one property index, in value order.
    single_run: bool,
    /// A string predicate the index cannot seek (`$contains`, `$endsWith`): the ranges cover
    /// the property's whole string run and only keys whose value passes are visited.
    test: Option<FieldPred>,
}

/// A value-filtered walk skips the rest of a failing value's run (one B-tree descent) after
/// this many of its keys; shorter runs are cheaper to read through.
const SKIP_AFTER: u32 = 8;

impl IndexAccess {
    /// Visits the keys of `[s, e)` (a range of this access) in order or reverse, leaving out
    /// keys whose value fails `test` (each distinct value is tested once). At most `budget`
    /// keys are examined; returns (keys examined, whether the range was finished).
    fn scan_range<R: KvRead>(
        &self,
        kv: &R,
        (s, e): (&[u8], &[u8]),
        reverse: bool,
        budget: u64,
        visit: &mut dyn FnMut(&[u8]) -> Result<bool>,
    ) -> Result<(u64, bool)> {
        let (mut examined, mut exhausted) = (0u64, false);
        let Some(test) = &self.test else {
            kv.scan_keys(s, e, reverse, &mut |k, _| {
                examined += 1;
                if !visit(k)? {
                    return Ok(false);
                }
                exhausted = examined >= budget;
                Ok(!exhausted)
            })?;
            return Ok((examined, !exhausted));
        };
        // Invariant: the range starts with the value's tag byte (see `Planner::text_walk`).
        let at = s.len() - 1;
        let (mut lo, mut hi) = (s.to_vec(), e.to_vec());
        loop {
            let (mut last, mut pass, mut rejected) = (Vec::new(), false, 0u32);
            let (mut skip, mut stopped) = (None::<Vec<u8>>, false);
            kv.scan(&lo, &hi, reverse, &mut |k, _| {
                examined += 1;
                let value = k
                    .get(at..k.len().saturating_sub(16))
                    .ok_or_else(|| Error::internal("corrupt index key"))?;
                if value != last.as_slice() {
                    last = value.to_vec();
                    pass = keys::read_string_value(value)
                        .and_then(|b| String::from_utf8(b).ok())
                        .is_some_and(|s| {
                            test.eval(Some(&PropValue::scalar(PropType::String, Scalar::Str(s))))
                        });
                    rejected = 0;
                }
                if pass && !visit(k)? {
                    stopped = true;
                    return Ok(false);
                }
                if examined >= budget {
                    exhausted = true;
                    return Ok(false);
                }
                if !pass {
                    rejected += 1;
                    if rejected >= SKIP_AFTER {
                        skip = Some(value.to_vec());
                        return Ok(false);
                    }
                }
                Ok(true)
            })?;
            match skip {
                Some(v) if !stopped && !exhausted => {
                    // The value's keys are `prefix ++ value ++ id`: all lie in
                    // [prefix ++ value, prefix_end(prefix ++ value)).
                    let mut vk = s[..at].to_vec();
                    vk.extend_from_slice(&v);
                    if reverse {
                        hi = vk;
                    } else {
                        lo = keys::prefix_end(&vk);
                    }
                }
                _ => return Ok((examined, !exhausted)),
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Access {
    Ids(Vec<Uuid>),
    Index(IndexAccess),
    Labels(Vec<String>),
    All,
}

impl Access {
    fn describe(&self) -> String {
        match self {
            Access::Ids(ids) => format!("id set ({} ids)", ids.len()),
            Access::Index(ia) => ia.describe.clone(),
            Access::Labels(ls) => format!("label scan ({})", ls.join(", ")),
            Access::All => "full scan".into(),
        }
    }
}

pub(crate) fn flatten<'a>(f: &'a Filter, out: &mut Vec<&'a Filter>) {
    match f {
        Filter::True => {}
        Filter::And(fs) => fs.iter().for_each(|f| flatten(f, out)),
        f => out.push(f),
    }
}

/// The top-level traversal blocks of a conjunction, as gates on the root's candidates.
struct Gates<'a> {
    /// Blocks resolved from the related side: a candidate outside one fails the filter.
    sets: Vec<&'a Resolved>,
    /// Some top-level block is evaluated from each record's side.
    unresolved: bool,
    /// Top-level conditions that are not blocks.
    others: usize,
    /// No label scope.
    unscoped: bool,
    /// No label scope, or some block's surely-matching records all carry a label in scope.
    implied: bool,
}

impl<'a> Gates<'a> {
    fn of(conj: &[&'a Filter], labels: &[String]) -> Self {
        let mut g = Gates {
            sets: Vec::new(),
            unresolved: false,
            others: 0,
            unscoped: labels.is_empty(),
            implied: labels.is_empty(),
        };
        for f in conj {
            match f {
                Filter::Related(rel) => match &rel.resolved {
                    Some(res) => {
                        g.implied |= res.label.as_ref().is_some_and(|l| labels.contains(l));
                        g.sets.push(res);
                    }
                    None => g.unresolved = true,
                },
                _ => g.others += 1,
            }
        }
        g
    }

    /// Some(sure) when every resolved block reached `id` (sure: no check is left), None when
    /// one did not (not a match).
    fn admit(&self, id: &Uuid) -> Option<bool> {
        let mut sure = true;
        for g in &self.sets {
            sure &= g.reaches(id)?;
        }
        Some(sure)
    }

    /// Whether a key path (index or label scan) answering `answers` of the other conditions
    /// leaves only the blocks to decide, from ids.
    fn keys_decide(&self, answers: usize) -> bool {
        !self.unresolved && answers == self.others
    }

    /// Whether the id set of a block decides every candidate: nothing else to check, and the
    /// label scope known.
    fn ids_decide(&self) -> bool {
        !self.unresolved && self.others == 0 && self.implied
    }

    /// Whether the candidates of `access` (answering `answers` conditions) are decided from
    /// ids (see [`ids_by_gates`]).
    fn decide(&self, access: &Access, answers: usize) -> bool {
        match access {
            Access::Index(_) | Access::Labels(_) => self.keys_decide(answers),
            // An id set chosen from a block (answers 0), not an `$id` condition.
            Access::Ids(_) => answers == 0 && self.ids_decide(),
            Access::All => !self.unresolved && self.others == 0 && self.unscoped,
        }
    }
}

/// The record id that ends an index key.
pub(crate) fn id_from_key(k: &[u8]) -> Result<Uuid> {
    k.len()
        .checked_sub(16)
        .and_then(|s| Uuid::from_slice(&k[s..]).ok())
        .ok_or_else(|| Error::internal("corrupt index key"))
}

struct Planner<'a, R: KvRead> {
    kv: &'a R,
    tenant: u64,
    labels: &'a [String],
}

impl<R: KvRead> Planner<'_, R> {
    fn prop_id(&self, name: &str, ty: PropType) -> Result<Option<Uuid>> {
        self.kv
            .get(
                &Key::tenant(self.tenant, keys::PROP_BY_NAME)
                    .str(name)
                    .u8(ty as u8)
                    .0,
            )?
            .map(|v| codec::decode_uuid(&v))
            .transpose()
    }

    /// Labels in scope that hold the property, with whether any holds it as an array.
    fn prop_labels(&self, pid: &Uuid) -> Result<(Vec<String>, bool)> {
        let prefix = Key::tenant(self.tenant, keys::PROP_LABEL_COUNT).uuid(pid).0;
        let (mut out, mut arrays) = (Vec::new(), false);
        self.kv.scan_prefix(&prefix, false, &mut |k, v| {
            let (label, _) = keys::read_escaped(&k[prefix.len()..])
                .ok_or_else(|| Error::internal("corrupt count key"))?;
            let label = String::from_utf8_lossy(&label).into_owned();
            if self.labels.is_empty() || self.labels.contains(&label) {
                arrays |= codec::decode_u64_pair(v)?.1 > 0;
                out.push(label);
            }
            Ok(true)
        })?;
        Ok((out, arrays))
    }

    fn base(&self, pid: &Uuid, label: &str) -> Vec<u8> {
        Key::tenant(self.tenant, keys::PROP_INDEX)
            .uuid(pid)
            .str(label)
            .0
    }

    /// Point ranges for equality with each operand, over every property type it can match.
    fn points(&self, field: &str, ops: &[&Operand]) -> Result<Option<IndexAccess>> {
        let mut ranges = Vec::new();
        let mut arrays = false;
        let mut labels_seen = HashSet::new();
        for op in ops {
            let targets: Vec<(PropType, Vec<u8>)> = match op {
                Operand::Str(s, inst) => {
                    let mut t = vec![(
                        PropType::String,
                        Key::default()
                            .scalar(PropType::String, &Scalar::Str(s.clone()))
                            .0,
                    )];
                    if let Some(i) = inst {
                        let mut v = Vec::new();
                        keys::push_instant(&mut v, *i);
                        t.push((PropType::Datetime, v));
                    }
                    t
                }
                Operand::Num(n) => vec![(
                    PropType::Number,
                    Key::default().scalar(PropType::Number, n).0,
                )],
                Operand::Bool(b) => vec![(
                    PropType::Boolean,
                    Key::default()
                        .scalar(PropType::Boolean, &Scalar::Bool(*b))
                        .0,
                )],
                Operand::Instant(i) => {
                    let mut v = Vec::new();
                    keys::push_instant(&mut v, *i);
                    vec![(PropType::Datetime, v)]
                }
            };
            for (ty, enc) in targets {
                let Some(pid) = self.prop_id(field, ty)? else {
                    continue;
                };
                let (labels, arr) = self.prop_labels(&pid)?;
                arrays |= arr;
                for l in labels {
                    labels_seen.insert((pid, l.clone()));
                    let mut start = self.base(&pid, &l);
                    start.extend_from_slice(&enc);
                    let end = keys::prefix_end(&start);
                    ranges.push((start, end));
                }
            }
        }
        ranges.sort();
        ranges.dedup();
        Ok(Some(IndexAccess {
            describe: format!("index point lookup on {field} ({} range(s))", ranges.len()),
            field: field.to_string(),
            single_run: labels_seen.len() <= 1,
            ranges,
            arrays,
            answers: 1,
            test: None,
        }))
    }

    /// One range per label for the merged bounds on one field (numbers or datetimes).
    fn range(&self, field: &str, bounds: &[(RangeOp, &Bound)]) -> Result<Option<IndexAccess>> {
        let ty = match bounds.first() {
            Some((_, Bound::Num(_))) => PropType::Number,
            Some((_, Bound::Instant(_))) => PropType::Datetime,
            None => return Ok(None),
        };
        let enc = |b: &Bound| {
            let mut v = Vec::new();
            match b {
                Bound::Num(n) => keys::push_scalar(&mut v, PropType::Number, n),
                Bound::Instant(i) => keys::push_instant(&mut v, *i),
            }
            v
        };
        let Some(pid) = self.prop_id(field, ty)? else {
            return Ok(Some(IndexAccess {
                describe: format!("index range on {field} (no such property)"),
                field: field.into(),
                ranges: vec![],
                arrays: false,
                answers: bounds.len(),
                single_run: true,
                test: None,
            }));
        };
        let (labels, arrays) = self.prop_labels(&pid)?;
        // "Any element" holds per operator: on arrays, `$gt: a` and `$lt: b` may be met by
        // different elements, so one merged range would miss matches. Use one bound there
        // and leave the others to the residual filter.
        let (bounds, answers) = if arrays && bounds.len() > 1 {
            (&bounds[..1], 0)
        } else {
            (bounds, bounds.len())
        };
        let mut ranges = Vec::new();
        for l in &labels {
            let base = self.base(&pid, l);
            let (mut start, mut end) = (base.clone(), keys::prefix_end(&base));
            for (op, b) in bounds {
                let mut at = base.clone();
                at.extend_from_slice(&enc(b));
                let candidate = match op {
                    RangeOp::Gte => at,
                    RangeOp::Gt => keys::prefix_end(&at),
                    RangeOp::Lt => at,
                    RangeOp::Lte => keys::prefix_end(&at),
                };
                match op {
                    RangeOp::Gt | RangeOp::Gte if candidate > start => start = candidate,
                    RangeOp::Lt | RangeOp::Lte if candidate < end => end = candidate,
                    _ => {}
                }
            }
            if start < end {
                ranges.push((start, end));
            }
        }
        Ok(Some(IndexAccess {
            describe: format!("index range on {field}"),
            field: field.into(),
            single_run: labels.len() <= 1,
            ranges,
            arrays,
            answers,
            test: None,
        }))
    }

    fn prefix(&self, field: &str, s: &str) -> Result<Option<IndexAccess>> {
        // Datetime text can also start with s, and the index holds instants, not text.
        if self.prop_id(field, PropType::Datetime)?.is_some() {
            return Ok(None);
        }
        let Some(pid) = self.prop_id(field, PropType::String)? else {
            return Ok(Some(IndexAccess {
                describe: format!("index prefix on {field} (no such property)"),
                field: field.into(),
                ranges: vec![],
                arrays: false,
                answers: 1,
                single_run: true,
                test: None,
            }));
        };
        let (labels, arrays) = self.prop_labels(&pid)?;
        let ranges = labels
            .iter()
            .map(|l| {
                let mut start = self.base(&pid, l);
                keys::push_string_prefix(&mut start, s);
                let end = keys::prefix_end(&start);
                (start, end)
            })
            .collect::<Vec<_>>();
        Ok(Some(IndexAccess {
            describe: format!("index prefix on {field}"),
            field: field.into(),
            single_run: labels.len() <= 1,
            ranges,
            arrays,
            answers: 1,
            test: None,
        }))
    }

    /// A walk of the property's whole string run in each label, keeping the keys whose value
    /// passes `pred` (an exact answer for string predicates the index cannot seek).
    fn text_walk(&self, field: &str, pred: &FieldPred) -> Result<Option<IndexAccess>> {
        // Datetime values match text predicates by their text, and the index holds instants.
        if self.prop_id(field, PropType::Datetime)?.is_some() {
            return Ok(None);
        }
        let (ranges, labels, arrays) = match self.prop_id(field, PropType::String)? {
            None => (vec![], vec![], false),
            Some(pid) => {
                let (labels, arrays) = self.prop_labels(&pid)?;
                let ranges = labels
                    .iter()
                    .map(|l| {
                        let mut start = self.base(&pid, l);
                        keys::push_string_prefix(&mut start, "");
                        let end = keys::prefix_end(&start);
                        (start, end)
                    })
                    .collect();
                (ranges, labels, arrays)
            }
        };
        Ok(Some(IndexAccess {
            describe: format!("index value walk on {field}"),
            field: field.into(),
            single_run: labels.len() <= 1,
            ranges,
            arrays,
            answers: 1,
            test: Some(pred.clone()),
        }))
    }

    /// Counts the keys an access visits, up to `cap`. A value-filtered walk examines at most
    /// `EXAMINE_CAP` keys and extrapolates from the share that passed.
    fn count_keys(&self, ia: &IndexAccess, cap: u64) -> Result<u64> {
        let (mut n, mut examined, mut finished) = (0u64, 0u64, true);
        for (s, e) in &ia.ranges {
            let budget = if ia.test.is_some() {
                EXAMINE_CAP - examined
            } else {
                u64::MAX
            };
            let (x, done) = ia.scan_range(self.kv, (s, e), false, budget, &mut |_| {
                n += 1;
                Ok(n < cap)
            })?;
            examined += x;
            if n >= cap {
                return Ok(n);
            }
            if !done {
                finished = false;
                break;
            }
        }
        if finished || examined == 0 {
            return Ok(n);
        }
        let total = self.label_total()?.max(examined);
        Ok(((n as f64 / examined as f64) * total as f64).ceil() as u64)
    }

    fn label_total(&self) -> Result<u64> {
        rstore::labels_count(self.kv, self.tenant, self.labels)
    }

    /// Chooses the access path by estimated cost: (path, estimated rows, conjuncts it
    /// answers). A record read costs 1, a key read along a run [`KEY_COST`]; candidates that
    /// resolved traversal blocks decide from their ids (see [`ids_by_gates`]) cost no read.
    fn plan(&self, conj: &[&Filter]) -> Result<(Access, u64, usize)> {
        let scan_rows = self.label_total()?;
        // Resolved blocks gate every path: a candidate outside one is skipped on its key.
        let gates = Gates::of(conj, self.labels);
        let gate_rows = gates
            .sets
            .iter()
            .map(|g| (g.sure.len() + g.maybe.len()) as u64)
            .min();
        let by_ids = |answers: usize| !gates.sets.is_empty() && gates.keys_decide(answers);
        // Records read after `keys` candidate keys, for a path answering `answers` conditions.
        let cost = |keys: u64, answers: usize| -> f64 {
            let reads = match gate_rows {
                _ if by_ids(answers) => 0,
                Some(g) => keys.min(g),
                None => keys,
            };
            keys as f64 * KEY_COST + reads as f64
        };
        // Keys after which a path answering `answers` conditions costs at least `best`.
        let keys_within = |best: f64, answers: usize| -> u64 {
            let keys = match gate_rows {
                _ if by_ids(answers) => best / KEY_COST,
                Some(g) if best > g as f64 * (1.0 + KEY_COST) => (best - g as f64) / KEY_COST,
                _ => best / (1.0 + KEY_COST),
            };
            keys.ceil() as u64
        };
        let mut best = if self.labels.is_empty() {
            (Access::All, scan_rows, 0)
        } else {
            (Access::Labels(self.labels.to_vec()), scan_rows, 0)
        };
        let mut best_cost = cost(scan_rows, 0);
        let mut options: Vec<IndexAccess> = Vec::new();
        let mut range_fields: Vec<&str> = Vec::new();
        for f in conj {
            match f {
                Filter::Id(IdPred::In(ids)) => {
                    let ids: Vec<Uuid> = ids
                        .iter()
                        .copied()
                        .collect::<HashSet<_>>()
                        .into_iter()
                        .collect();
                    // The ids are read (they may not exist, and may have any label).
                    let c = ids.len() as f64 * (1.0 + KEY_COST);
                    if c <= best_cost {
                        let n = ids.len() as u64;
                        (best, best_cost) = ((Access::Ids(ids), n, 1), c);
                    }
                }
                Filter::Related(rel) => {
                    if let Some(res) = &rel.resolved {
                        let n = (res.sure.len() + res.maybe.len()) as u64;
                        let c = if gates.ids_decide() {
                            n as f64 * KEY_COST
                        } else {
                            n as f64 * (1.0 + KEY_COST)
                        };
                        if c <= best_cost {
                            let ids = res.sure.iter().chain(&res.maybe).copied().collect();
                            (best, best_cost) = ((Access::Ids(ids), n, 0), c);
                        }
                    }
                }
                Filter::Field(name, FieldPred::Eq(o)) => options.extend(self.points(name, &[o])?),
                Filter::Field(name, FieldPred::In(os)) => {
                    options.extend(self.points(name, &os.iter().collect::<Vec<_>>())?)
                }
                Filter::Field(name, FieldPred::StartsWith(s)) => {
                    options.extend(self.prefix(name, s)?)
                }
                Filter::Field(name, p @ (FieldPred::Contains(_) | FieldPred::EndsWith(_))) => {
                    options.extend(self.text_walk(name, p)?)
                }
                Filter::Field(name, FieldPred::Range(..))
                    if !range_fields.contains(&name.as_str()) =>
                {
                    range_fields.push(name);
                    // All range conjuncts on this field with the first one's bound kind.
                    let mut bounds: Vec<(RangeOp, &Bound)> = Vec::new();
                    for g in conj {
                        if let Filter::Field(n2, FieldPred::Range(op, b)) = g {
                            if n2 == name {
                                bounds.push((*op, b));
                            }
                        }
                    }
                    let first_kind = std::mem::discriminant(bounds[0].1);
                    let same: Vec<_> = bounds
                        .iter()
                        .filter(|(_, b)| std::mem::discriminant(*b) == first_kind)
                        .cloned()
                        .collect();
                    if let Some(mut ia) = self.range(name, &same)? {
                        // Mixed bound kinds on one field leave the others to the residual.
                        if same.len() != bounds.len() {
                            ia.answers = 0;
                        }
                        options.push(ia);
                    }
                }
                _ => {}
            }
        }
        for ia in options {
            // Count only as far as could still beat the best path.
            let cap = keys_within(best_cost, ia.answers);
            let est = self.count_keys(&ia, ESTIMATE_CAP.min(cap.saturating_add(1)).max(1))?;
            let c = cost(est, ia.answers);
            if c < best_cost || (c == best_cost && !matches!(best.0, Access::Ids(_))) {
                let answers = ia.answers;
                (best, best_cost) = ((Access::Index(ia), est, answers), c);
            }
        }
        Ok(best)
    }
}

/// Keeps the best `k` of a stream under an order, in amortized O(n log k).
struct TopK<'o> {
    keys: &'o [OrderKey],
    k: usize,
    items: Vec<Record>,
}

impl<'o> TopK<'o> {
    fn new(keys: &'o [OrderKey], k: usize) -> Self {
        TopK {
            keys,
            k,
            items: Vec::new(),
        }
    }
    fn push(&mut self, r: Record) {
        self.items.push(r);
        if self.items.len() >= self.k.saturating_mul(2).max(64) {
            self.shrink();
        }
    }
    fn shrink(&mut self) {
        let keys = self.keys;
        if self.items.len() > self.k {
            self.items
                .select_nth_unstable_by(self.k, |a, b| order::compare(keys, a, b));
            self.items.truncate(self.k);
        }
    }
    fn finish(mut self) -> Vec<Record> {
        self.shrink();
        let keys = self.keys;
        self.items.sort_by(|a, b| order::compare(keys, a, b));
        self.items
    }
}

fn wanted_fields<'a>(filter: &'a Filter, order: &'a [OrderKey]) -> Vec<&'a str> {
    let mut f = Vec::new();
    filter.fields(&mut f);
    f.extend(order.iter().filter_map(|k| k.field.as_deref()));
    f.sort_unstable();
    f.dedup();
    f
}

/// Orders ids (time order) and cuts the page `[offset, want)`; `want` None keeps the rest.
fn id_page(mut ids: Vec<Uuid>, desc: bool, offset: usize, want: Option<usize>) -> Vec<Uuid> {
    crate::model::sort_ids(&mut ids);
    if desc {
        ids.reverse();
    }
    let n = want.map_or(usize::MAX, |w| w.saturating_sub(offset));
    ids.into_iter().skip(offset).take(n).collect()
}

/// A filter with its traversal blocks resolved (see query/traverse.rs) and its access path.
struct Planned<'f> {
    filter: Cow<'f, Filter>,
    traversal: Vec<String>,
    access: Access,
    estimated: u64,
    /// Top-level conjuncts the access path answers exactly.
    answers: usize,
}

fn plan_filter<'f, R: KvRead>(
    kv: &R,
    tenant: u64,
    labels: &[String],
    filter: &'f Filter,
) -> Result<Planned<'f>> {
    let planner = Planner { kv, tenant, labels };
    // Only a filter with traversal blocks is rewritten (and copied).
    let (filter, traversal) = match resolve_traversals(&planner, filter)? {
        Some((f, notes)) => (Cow::Owned(f), notes),
        None => (Cow::Borrowed(filter), vec![]),
    };
    let mut conj = Vec::new();
    flatten(&filter, &mut conj);
    let (access, estimated, answers) = planner.plan(&conj)?;
    Ok(Planned {
        filter,
        traversal,
        access,
        estimated,
        answers,
    })
}

/// Whether `r` is a match: under one of `labels` (any label when empty) and passing `filter`.
pub fn matches(labels: &[String], filter: &Filter, graph: &dyn Graph, r: &Record) -> bool {
    (labels.is_empty() || labels.contains(&r.label)) && filter.eval(r, graph)
}

/// Runs a search on one tenant's keyspace.
pub fn search<R: KvRead>(kv: &R, tenant: u64, spec: &SearchSpec) -> Result<SearchOutput> {
    let Planned {
        filter,
        traversal,
        access,
        estimated,
        answers,
    } = plan_filter(kv, tenant, &spec.labels, &spec.filter)?;
    let filter: &Filter = &filter;
    let mut conj = Vec::new();
    flatten(filter, &mut conj);
    let covered = matches!(access, Access::Index(_) | Access::Labels(_) | Access::All)
        && answers == conj.len()
        && !filter.has_related();
    let mut explain = Explain {
        access: access.describe(),
        estimated_rows: estimated,
        covered,
        traversal,
        ..Default::default()
    };
    let want = spec.limit.map(|l| spec.offset.saturating_add(l));
    let fetch_full = |ids: &[Uuid]| -> Result<Vec<Record>> {
        ids.iter()
            .filter_map(|id| rstore::get_record(kv, tenant, id).transpose())
            .collect()
    };

    // Covered label or full scans: counters give the total, the id-ordered walk the page.
    if covered
        && matches!(access, Access::Labels(_) | Access::All)
        && order::by_id_only(&spec.order).is_some()
    {
        let desc = order::by_id_only(&spec.order).unwrap_or(true);
        let total = estimated;
        let take = want.unwrap_or(usize::MAX);
        let mut ids = Vec::new();
        let prefixes: Vec<Vec<u8>> = match &access {
            Access::Labels(ls) => {
                let mut seen = HashSet::new();
                ls.iter()
                    .filter(|l| seen.insert(*l))
                    .map(|l| Key::tenant(tenant, keys::LABEL_INDEX).str(l).0)
                    .collect()
            }
            _ => vec![Key::tenant(tenant, keys::RECORD).0],
        };
        for p in &prefixes {
            let mut n = 0usize;
            kv.scan_prefix(p, desc, &mut |k, _| {
                ids.push(id_from_key(k)?);
                n += 1;
                Ok(n < take)
            })?;
        }
        let page = id_page(ids, desc, spec.offset, want);
        explain.examined_rows = page.len() as u64;
        explain.matched_rows = total;
        explain.index_order = true;
        return Ok(SearchOutput {
            records: fetch_full(&page)?,
            total,
            explain,
        });
    }

    // Covered index paths: the keys alone give the matches.
    if covered {
        if let Access::Index(ia) = &access {
            let order_on_field = matches!(spec.order.as_slice(), [OrderKey { field: Some(f), .. }] if *f == ia.field);
            // On arrays the sort element (smallest or largest of all elements) may lie outside
            // the matched range, so index order is the result order only without arrays.
            if order_on_field && ia.single_run && !ia.arrays && want.is_some() {
                let desc = spec.order[0].desc;
                return index_ordered(
                    kv,
                    tenant,
                    ia,
                    desc,
                    spec.offset,
                    want.unwrap_or(0),
                    explain,
                );
            }
            // Ordered by id: the keys give the matches (below, with any resolved blocks).
            // Ordered by another field: the residual path below reads the candidates once
            // more and keeps the top k (the filter check it repeats is cheap next to reading).
        }
    }

    // The access path answers every condition but resolved traversal blocks (or all of
    // them): ids decide, and only the page is read.
    if let Some(desc) = order::by_id_only(&spec.order) {
        if let Some((ids, examined)) = ids_by_gates(
            kv,
            tenant,
            &spec.labels,
            filter,
            &access,
            (estimated, answers),
        )? {
            let total = ids.len() as u64;
            explain.examined_rows = examined;
            explain.matched_rows = total;
            let page = id_page(ids, desc, spec.offset, want);
            return Ok(SearchOutput {
                records: fetch_full(&page)?,
                total,
                explain,
            });
        }
    }

    // Residual evaluation over the candidates.
    let fields = wanted_fields(filter, &spec.order);
    let mut top = TopK::new(&spec.order, want.unwrap_or(usize::MAX));
    let (examined, total) = visit_candidates(
        kv,
        tenant,
        &spec.labels,
        filter,
        &access,
        Some(&fields),
        &mut |r| {
            top.push(r);
            Ok(())
        },
    )?;
    explain.examined_rows = examined;
    explain.matched_rows = total;
    let page: Vec<Uuid> = top
        .finish()
        .into_iter()
        .skip(spec.offset)
        .map(|r| r.id)
        .collect();
    Ok(SearchOutput {
        records: fetch_full(&page)?,
        total,
        explain,
    })
}

/// Reads every candidate of an access path (decoding only `fields` and the label), keeps the
/// ones in the label scope that satisfy the filter, and hands them to `visit`. Returns
/// (candidates examined, matches).
fn visit_candidates<R: KvRead>(
    kv: &R,
    tenant: u64,
    labels: &[String],
    filter: &Filter,
    access: &Access,
    fields: Option<&[&str]>,
    visit: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<(u64, u64)> {
    let rec_key = |id: &Uuid| rstore::record_key(tenant, id);
    let (mut examined, mut total) = (0u64, 0u64);
    // Top-level traversal blocks resolved from the related side admit only the records they
    // reached (sure or maybe): any other candidate fails the filter, so it is skipped before
    // its record is read (an index scan then costs key reads, not record reads).
    let mut conj = Vec::new();
    flatten(filter, &mut conj);
    let gates = Gates::of(&conj, labels);
    let admitted = |id: &Uuid| gates.admit(id).is_some();
    let walker = Walker::new(kv, tenant);
    let graph: &dyn Graph = &walker;
    let mut check = |r: Record| -> Result<()> {
        examined += 1;
        if matches(labels, filter, graph, &r) {
            total += 1;
            visit(r)?;
        }
        Ok(())
    };
    match access {
        Access::All => {
            kv.scan_prefix(&Key::tenant(tenant, keys::RECORD).0, false, &mut |k, v| {
                let id = id_from_key(k)?;
                if admitted(&id) {
                    check(codec::decode_record_fields(id, v, fields)?)?;
                }
                Ok(true)
            })?;
        }
        Access::Labels(ls) if sequential_label_scan(kv, tenant, ls)? => {
            kv.scan_prefix(&Key::tenant(tenant, keys::RECORD).0, false, &mut |k, v| {
                if !label_in(ls, codec::record_label(v)?) {
                    return Ok(true);
                }
                let id = id_from_key(k)?;
                if admitted(&id) {
                    check(codec::decode_record_fields(id, v, fields)?)?;
                }
                Ok(true)
            })?;
        }
        keyed => {
            access_ids(kv, tenant, keyed, &mut |id| {
                if admitted(&id) {
                    if let Some(v) = kv.get(&rec_key(&id))? {
                        check(codec::decode_record_fields(id, &v, fields)?)?;
                    }
                }
                Ok(())
            })?;
        }
    }
    walker.finish()?;
    Ok((examined, total))
}

/// Visits the ids of an access path's candidates from keys alone (index keys, label index
/// keys, record keys, or the id set), each once, without reading a record.
fn access_ids<R: KvRead>(
    kv: &R,
    tenant: u64,
    access: &Access,
    visit: &mut dyn FnMut(Uuid) -> Result<()>,
) -> Result<()> {
    match access {
        Access::All => kv.scan_prefix(&Key::tenant(tenant, keys::RECORD).0, false, &mut |k, _| {
            visit(id_from_key(k)?)?;
            Ok(true)
        }),
        Access::Labels(ls) => {
            let mut seen = HashSet::new();
            for l in ls.iter().filter(|l| seen.insert(*l)) {
                let prefix = Key::tenant(tenant, keys::LABEL_INDEX).str(l).0;
                kv.scan_prefix(&prefix, false, &mut |k, _| {
                    visit(id_from_key(k)?)?;
                    Ok(true)
                })?;
            }
            Ok(())
        }
        Access::Ids(ids) => ids.iter().try_for_each(|id| visit(*id)),
        Access::Index(ia) => {
            let mut seen = HashSet::new();
            for (s, e) in &ia.ranges {
                ia.scan_range(kv, (s, e), false, u64::MAX, &mut |k| {
                    let id = id_from_key(k)?;
                    if !ia.arrays || seen.insert(id) {
                        visit(id)?;
                    }
                    Ok(true)
                })?;
            }
            Ok(())
        }
    }
}

/// The matches that the access path and the resolved traversal blocks decide from ids, for a
/// filter that is a conjunction of conditions the access path answers exactly (`answers` of
/// them) and of blocks resolved from the related side (none, for a covered path), when the
/// access path also implies the label scope (an index or label scan of the scope; or, for
/// the id set of a block, a block whose surely-matching records all carry a label in scope,
/// known from the counters): [`Gates::decide`].
/// A candidate in every block's `sure` set matches without its record being read; one in a
/// block's `maybe` set only is read and checked in full; any other is not a match.
/// Returns (matches in access order, candidates examined), or None when the shape differs.
fn ids_by_gates<R: KvRead>(
    kv: &R,
    tenant: u64,
    labels: &[String],
    filter: &Filter,
    access: &Access,
    (estimated, answers): (u64, usize),
) -> Result<Option<(Vec<Uuid>, u64)>> {
    let mut conj = Vec::new();
    flatten(filter, &mut conj);
    let gates = Gates::of(&conj, labels);
    if !gates.decide(access, answers) {
        return Ok(None);
    }
    let admit = |id: &Uuid| gates.admit(id);
    let (candidates, examined) = match gated_index_parallel(kv, access, estimated, &admit)? {
        Some(found) => found,
        None => {
            let (mut found, mut examined) = (Vec::new(), 0u64);
            access_ids(kv, tenant, access, &mut |id| {
                examined += 1;
                if let Some(sure) = admit(&id) {
                    found.push((id, sure));
                }
                Ok(())
            })?;
            (found, examined)
        }
    };
    let mut fields = Vec::new();
    filter.fields(&mut fields);
    let walker = Walker::new(kv, tenant);
    let mut out = Vec::with_capacity(candidates.len());
    for (id, sure) in candidates {
        if !sure {
            let Some(v) = kv.get(&rstore::record_key(tenant, &id))? else {
                continue;
            };
            let r = codec::decode_record_fields(id, &v, Some(&fields))?;
            if !matches(labels, filter, &walker, &r) {
                continue;
            }
        }
        out.push(id);
    }
    walker.finish()?;
    Ok(Some((out, examined)))
}

/// The keys of an index access whose ids `admit` lets through, read on one thread per core
/// over disjoint slices of each range (or, for runs the view's key memo holds, read on this
/// thread and decided on one thread per core), in key order: (id, sure) and keys examined. None when
/// the view cannot be shared, the machine has one core, the access is not a plain index
/// scan, or the planner counted fewer than [`ESTIMATE_CAP`] keys (`estimated`): then the
/// caller reads them on its own thread.
#[allow(clippy::type_complexity)]
fn gated_index_parallel<R: KvRead>(
    kv: &R,
    access: &Access,
    estimated: u64,
    admit: &(dyn Fn(&Uuid) -> Option<bool> + Sync),
) -> Result<Option<(Vec<(Uuid, bool)>, u64)>> {
    let threads = crate::query::scan_threads();
    let (Some(shared), Access::Index(ia)) = (kv.shared(), access) else {
        return Ok(None);
    };
    // A value-filtered walk seeks by value runs from its range start: not split.
    if threads < 2 || ia.test.is_some() || estimated < ESTIMATE_CAP {
        return Ok(None);
    }
    // Each part: the (id, sure) it admitted, in key order, and the keys it examined.
    let parts = if ia.ranges.iter().all(|(s, e)| kv.memoizes(s, e)) {
        // Runs the key memo holds (or fills on this read) are read on this thread, faster
        // than redb on several; deciding each id (the set probes) is then shared out.
        let mut ids = Vec::with_capacity(usize::try_from(estimated).unwrap_or(0));
        for (s, e) in &ia.ranges {
            kv.scan_keys(s, e, false, &mut |k, _| {
                ids.push(id_from_key(k)?);
                Ok(true)
            })?;
        }
        let chunks: Vec<&[Uuid]> = ids.chunks(ids.len().div_ceil(threads).max(1)).collect();
        crate::query::on_threads(&chunks, &|chunk| {
            let found = chunk
                .iter()
                .filter_map(|id| admit(id).map(|sure| (*id, sure)));
            Ok((found.collect(), chunk.len() as u64))
        })?
    } else {
        let mut slices: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for (s, e) in &ia.ranges {
            match crate::store::kv::range_ends(shared, s, e)? {
                Some((first, last)) if first < last => {
                    let mut at = s.clone();
                    for cut in split_keys(&first, &last, threads) {
                        slices.push((at, cut.clone()));
                        at = cut;
                    }
                    slices.push((at, e.clone()));
                }
                _ => slices.push((s.clone(), e.clone())),
            }
        }
        if slices.len() < 2 {
            return Ok(None);
        }
        crate::query::on_threads(&slices, &|(s, e)| {
            let (mut found, mut examined) = (Vec::new(), 0u64);
            shared.scan(s, e, false, &mut |k, _| {
                examined += 1;
                let id = id_from_key(k)?;
                if let Some(sure) = admit(&id) {
                    found.push((id, sure));
                }
                Ok(true)
            })?;
            Ok((found, examined))
        })?
    };
    let examined = parts.iter().map(|p| p.1).sum();
    let mut found: Vec<(Uuid, bool)> = parts.into_iter().flat_map(|p| p.0).collect();
    if ia.arrays {
        // A record appears once per array element, possibly in two parts.
        let mut seen = HashSet::new();
        found.retain(|(id, _)| seen.insert(*id));
    }
    Ok(Some((found, examined)))
}

/// `n - 1` keys strictly between `first` and `last` (first < last), evenly spaced over the 8
/// bytes after their common prefix, in order: cut points that split [first, last] into `n`
/// slices holding about equal numbers of keys when the keys spread evenly over those bytes
/// (record ids, which lead with their time, do).
fn split_keys(first: &[u8], last: &[u8], n: usize) -> Vec<Vec<u8>> {
    let common = first.iter().zip(last).take_while(|(a, b)| a == b).count();
    let word = |k: &[u8]| {
        let mut b = [0u8; 8];
        for (i, x) in k.iter().skip(common).take(8).enumerate() {
            b[i] = *x;
        }
        u64::from_be_bytes(b)
    };
    let (a, b) = (word(first) as u128, word(last) as u128);
    let mut cuts: Vec<Vec<u8>> = (1..n as u128)
        .map(|i| {
            let mut k = first[..common].to_vec();
            k.extend_from_slice(&((a + (b - a) * i / n as u128) as u64).to_be_bytes());
            k
        })
        .filter(|k| k.as_slice() > first && k.as_slice() <= last)
        .collect();
    cuts.dedup();
    cuts
}

/// Reads every record of `labels` (all labels when empty) front to back through the record
/// table, on up to `threads` threads over disjoint id ranges, and gives each worker's own
/// state the record's `fields` (borrowed from the stored bytes, nothing decoded or
/// allocated). Returns the workers' states; which records each saw is unspecified, so the
/// caller merges states that do not depend on order (counts, sums, extremes).
pub fn scan_fields_parallel<R: KvRead + Sync, S: Send>(
    kv: &R,
    tenant: u64,
    labels: &[String],
    fields: &[&str],
    threads: usize,
    init: &(dyn Fn() -> S + Sync),
    visit: &(dyn Fn(&mut S, &[Option<codec::FieldRef<'_>>]) + Sync),
) -> Result<Vec<S>> {
    let prefix = Key::tenant(tenant, keys::RECORD).0;
    let end = keys::prefix_end(&prefix);
    let Some((first, last)) = crate::store::kv::range_ends(kv, &prefix, &end)? else {
        return Ok(vec![]);
    };
    let (first, last) = (
        id_from_key(&first)?.as_u128(),
        id_from_key(&last)?.as_u128(),
    );
    // Ids are time-ordered: equal slices of the id span hold roughly equal numbers of records
    // when writes were steady; more chunks than threads evens out the rest.
    let threads = threads.max(1);
    let chunks: u128 = if threads == 1 {
        1
    } else {
        16 * threads as u128
    };
    let bound = |i: u128| -> Vec<u8> {
        if i == 0 {
            return prefix.clone();
        }
        if i >= chunks {
            return end.clone();
        }
        let at = first + (last - first) / chunks * i;
        let mut k = prefix.clone();
        k.extend_from_slice(&at.to_be_bytes());
        k
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> Result<S> {
        let mut state = init();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as u128;
            if i >= chunks {
                return Ok(state);
            }
            kv.scan(&bound(i), &bound(i + 1), false, &mut |_, v| {
                // The refs borrow this value: a stack buffer per record, no allocation.
                let mut stack = [None; STACK_FIELDS];
                let mut heap;
                let refs = if fields.len() <= STACK_FIELDS {
                    &mut stack[..fields.len()]
                } else {
                    heap = vec![None; fields.len()];
                    &mut heap[..]
                };
                if !labels.is_empty() && !label_in(labels, codec::record_label(v)?) {
                    return Ok(true);
                }
                codec::record_fields(v, fields, refs)?;
                visit(&mut state, refs);
                Ok(true)
            })?;
        }
    };
    std::thread::scope(|scope| {
        let others: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut out = vec![work()?];
        for h in others {
            out.push(
                h.join()
                    .map_err(|_| Error::internal("scan worker panicked"))??,
            );
        }
        Ok(out)
    })
}

/// Fields read per record without a heap buffer (see `scan_fields_parallel`).
const STACK_FIELDS: usize = 16;

/// Whether a stored record's label (its bytes) is one of `labels`.
fn label_in(labels: &[String], label: &[u8]) -> bool {
    labels.iter().any(|l| codec::short_eq(l.as_bytes(), label))
}

/// Whether a label scan reads the record table front to back (testing each record's label)
/// rather than looking up each id of the label index: a lookup is a B-tree descent, several
/// times the cost of stepping to the next record, so a large share of the records is read
/// faster in sequence.
pub fn sequential_label_scan<R: KvRead>(kv: &R, tenant: u64, labels: &[String]) -> Result<bool> {
    // One counter per label: a label named twice in `labels` counts once.
    let counts = rstore::label_counts(kv, tenant)?;
    let all: u64 = counts.iter().map(|(_, n)| n).sum();
    let wanted: u64 = counts
        .iter()
        .filter(|(l, _)| labels.contains(l))
        .map(|(_, n)| n)
        .sum();
    Ok(wanted.saturating_mul(SEQUENTIAL_SHARE) >= all)
}

/// A label scan reads the records in sequence when its labels hold at least 1/N of them.
const SEQUENTIAL_SHARE: u64 = 6;

/// Streams every record in `labels` (all labels when empty) matching `filter`, decoded with
/// only `fields` (None: all) and the label, in no particular order. For aggregation, bulk
/// delete and counting: nothing is sorted or held.
pub fn for_each_match<R: KvRead>(
    kv: &R,
    tenant: u64,
    labels: &[String],
    filter: &Filter,
    fields: Option<&[&str]>,
    visit: &mut dyn FnMut(Record) -> Result<()>,
) -> Result<Explain> {
    let p = plan_filter(kv, tenant, labels, filter)?;
    let (examined, matched) = p.visit(kv, tenant, labels, fields, visit)?;
    Ok(p.explain(examined, matched))
}

impl Planned<'_> {
    /// [`visit_candidates`] with the filter's own fields decoded as well as `fields`.
    fn visit<R: KvRead>(
        &self,
        kv: &R,
        tenant: u64,
        labels: &[String],
        fields: Option<&[&str]>,
        visit: &mut dyn FnMut(Record) -> Result<()>,
    ) -> Result<(u64, u64)> {
        let with_filter: Option<Vec<&str>> = fields.map(|f| {
            let mut all: Vec<&str> = f.to_vec();
            self.filter.fields(&mut all);
            all.sort_unstable();
            all.dedup();
            all
        });
        visit_candidates(
            kv,
            tenant,
            labels,
            &self.filter,
            &self.access,
            with_filter.as_deref(),
            visit,
        )
    }

    fn explain(self, examined: u64, matched: u64) -> Explain {
        Explain {
            access: self.access.describe(),
            estimated_rows: self.estimated,
            examined_rows: examined,
            matched_rows: matched,
            traversal: self.traversal,
            ..Default::default()
        }
    }
}

/// Resolves the filter's traversal blocks that are cheaper from the related side (see
/// query/traverse.rs), against the rows the root's own conditions leave.
fn resolve_traversals<R: KvRead>(
    planner: &Planner<'_, R>,
    filter: &Filter,
) -> Result<Option<(Filter, Vec<String>)>> {
    if !filter.has_related() {
        return Ok(None);
    }
    let root_rows = estimate(planner.kv, planner.tenant, planner.labels, filter)?;
    let mut notes = Vec::new();
    let f = traverse::prepare(
        planner.kv,
        planner.tenant,
        planner.labels,
        filter,
        root_rows,
        &mut notes,
    )?;
    Ok(Some((f, notes)))
}

/// Estimated matches of (labels, filter) by the planner's chosen access path, ignoring
/// traversal blocks (the rows the root's own conditions leave).
pub fn estimate<R: KvRead>(kv: &R, tenant: u64, labels: &[String], filter: &Filter) -> Result<u64> {
    let planner = Planner { kv, tenant, labels };
    let mut conj = Vec::new();
    flatten(filter, &mut conj);
    conj.retain(|f| !matches!(f, Filter::Related(_)));
    Ok(planner.plan(&conj)?.1)
}

/// Streams the ids of every match of (labels, filter), reading as little as it can.
pub fn for_each_id<R: KvRead>(
    kv: &R,
    tenant: u64,
    labels: &[String],
    filter: &Filter,
    visit: &mut dyn FnMut(Uuid) -> Result<()>,
) -> Result<Explain> {
    let p = plan_filter(kv, tenant, labels, filter)?;
    if let Some((ids, examined)) = ids_by_gates(
        kv,
        tenant,
        labels,
        &p.filter,
        &p.access,
        (p.estimated, p.answers),
    )? {
        let matched = ids.len() as u64;
        ids.into_iter().try_for_each(&mut *visit)?;
        return Ok(p.explain(examined, matched));
    }
    let (examined, matched) = p.visit(kv, tenant, labels, Some(&[]), &mut |r| visit(r.id))?;
    Ok(p.explain(examined, matched))
}

/// Walks one label's run of a property index in value order, stopping after the page, and
/// counts the rest for `total`. Equal values come out by id descending (ties).
fn index_ordered<R: KvRead>(
    kv: &R,
    tenant: u64,
    ia: &IndexAccess,
    desc: bool,
    offset: usize,
    want: usize,
    mut explain: Explain,
) -> Result<SearchOutput> {
    let mut ranges = ia.ranges.clone();
    ranges.sort();
    if desc {
        ranges.reverse();
    }
    let mut seen = HashSet::new();
    let mut page: Vec<Uuid> = Vec::new();
    let mut group: Vec<Uuid> = Vec::new();
    let mut group_value: Vec<u8> = Vec::new();
    let mut total = 0u64;
    let flush = |group: &mut Vec<Uuid>, page: &mut Vec<Uuid>| {
        // Ascending walks see equal values by id ascending; ties are ordered id descending.
        if !desc {
            group.reverse();
        }
        page.append(group);
    };
    for (s, e) in &ranges {
        ia.scan_range(kv, (s, e), desc, u64::MAX, &mut |k| {
            let id = id_from_key(k)?;
            if ia.arrays && !seen.insert(id) {
                return Ok(true);
            }
            total += 1;
            if page.len() < want {
                let value = &k[..k.len() - 16];
                if value != group_value.as_slice() {
                    flush(&mut group, &mut page);
                    group_value = value.to_vec();
                }
                group.push(id);
            }
            Ok(true)
        })?;
    }
    flush(&mut group, &mut page);
    page.truncate(want);
    let page: Vec<Uuid> = page.into_iter().skip(offset).collect();
    explain.examined_rows = total;
    explain.matched_rows = total;
    explain.index_order = true;
    let records = page
        .iter()
        .filter_map(|id| rstore::get_record(kv, tenant, id).transpose())
        .collect::<Result<Vec<_>>>()?;
    Ok(SearchOutput {
        records,
        total,
        explain,
    })
}

/// Labels holding a property, with (records, records holding an array), from the counters.
pub fn property_labels<R: KvRead>(
    kv: &R,
    tenant: u64,
    pid: &Uuid,
) -> Result<Vec<(String, u64, u64)>> {
    let prefix = Key::tenant(tenant, keys::PROP_LABEL_COUNT).uuid(pid).0;
    let mut out = Vec::new();
    kv.scan_prefix(&prefix, false, &mut |k, v| {
        let (label, _) = keys::read_escaped(&k[prefix.len()..])
            .ok_or_else(|| Error::internal("corrupt count key"))?;
        let (n, arrays) = codec::decode_u64_pair(v)?;
        out.push((String::from_utf8_lossy(&label).into_owned(), n, arrays));
        Ok(true)
    })?;
    Ok(out)
}

/// Record ids at the low end (up to `n`, in value order) and the high end of one label's run
/// of a property index: samples, and the holders of the smallest and largest values.
pub fn index_ends<R: KvRead>(
    kv: &R,
    tenant: u64,
    pid: &Uuid,
    label: &str,
    n: usize,
) -> Result<(Vec<Uuid>, Option<Uuid>)> {
    let prefix = Key::tenant(tenant, keys::PROP_INDEX).uuid(pid).str(label).0;
    let mut low = Vec::new();
    kv.scan_prefix(&prefix, false, &mut |k, _| {
        let id = id_from_key(k)?;
        if !low.contains(&id) {
            low.push(id);
        }
        Ok(low.len() < n)
    })?;
    let mut high = None;
    kv.scan_prefix(&prefix, true, &mut |k, _| {
        high = Some(id_from_key(k)?);
        Ok(false)
    })?;
    Ok((low, high))
}

#[cfg(test)]
mod tests {
    use super::split_keys;

    #[test]
    fn split_keys_cut_inside_the_run_in_order() {
        let first = [1, 2, 3, 0x10, 0, 0];
        let last = [1, 2, 3, 0xf0, 9];
        for n in 2..6 {
            let cuts = split_keys(&first, &last, n);
            assert_eq!(cuts.len(), n - 1);
            let mut prev = first.to_vec();
            for c in &cuts {
                assert!(
                    c.as_slice() > prev.as_slice() && c.as_slice() <= &last[..],
                    "{cuts:?}"
                );
                assert_eq!(&c[..3], &[1, 2, 3]);
                prev = c.clone();
            }
        }
        // Keys a prefix apart, and equal words: the cuts still lie inside the run, ascending.
        for (first, last) in [
            (&[1u8, 2][..], &[1u8, 2, 0][..]),
            (&[7], &[7, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
        ] {
            let cuts = split_keys(first, last, 4);
            assert!(cuts.windows(2).all(|w| w[0] < w[1]), "{cuts:?}");
            assert!(
                cuts.iter()
                    .all(|c| c.as_slice() > first && c.as_slice() <= last),
                "{cuts:?}"
            );
        }
    }
}
