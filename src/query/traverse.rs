//! Traversal blocks of the where tree (BEHAVIOUR.md §2), evaluated over adjacency.
//!
//! Semantics: a record r satisfies a block when some record t != r that has the block's
//! label and satisfies the block's filter lies at distance d from r with min <= d <= max,
//! where d counts the fewest relationships on a path from r to t that uses only the block's
//! types, each hop in the block's direction (`out`: r -> ... -> t; none: either way).
//!
//! Two plans answer the same question, and the planner picks per block:
//! - **from the related side** ([`prepare`]): find the block's targets through the planner
//!   (an indexed filter is an index lookup), then walk backwards from all of them at once
//!   breadth-first. Every record whose nearest target is within [min, max] satisfies the
//!   block ("sure"); one whose nearest target is closer than min may still reach another
//!   target within range, so it is checked from its own side ("maybe").
//! - **from the record's side** ([`Walker::related`]): breadth-first from one record,
//!   stopping at the first target.
//!
//! The side is chosen by estimated cost in B-tree descents ([`Costs`]).

use super::exec::{self, Explain, KEY_COST};
use super::filter::{Filter, Graph, Related, Resolved};
use crate::error::{Error, Result};
use crate::model::{IdSet, Record};
use crate::store::codec;
use crate::store::kv::KvRead;
use crate::store::records as rstore;
use crate::store::relationships::{self as rels, EdgeFilter};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use uuid::Uuid;

/// Evaluates blocks from a record's side over one read view. A store error met during a
/// check is kept and reported by [`Walker::finish`] (the check itself answers false).
pub struct Walker<'a, R: KvRead + ?Sized> {
    kv: &'a R,
    tenant: u64,
    error: RefCell<Option<Error>>,
}

impl<'a, R: KvRead + ?Sized> Walker<'a, R> {
    pub fn new(kv: &'a R, tenant: u64) -> Self {
        Walker {
            kv,
            tenant,
            error: RefCell::new(None),
        }
    }

    pub fn finish(&self) -> Result<()> {
        match self.error.borrow_mut().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The value of `r`, or `default` with the error kept for [`Walker::finish`].
    pub fn keep<T>(&self, r: Result<T>, default: T) -> T {
        r.unwrap_or_else(|e| {
            self.error.borrow_mut().get_or_insert(e);
            default
        })
    }

    /// Whether record `id` is a target of the block (label and filter).
    fn is_target(&self, rel: &Related, id: &Uuid) -> Result<bool> {
        if let Some(res) = &rel.resolved {
            return Ok(res.targets.contains(id));
        }
        let Some(v) = self.kv.get(&rstore::record_key(self.tenant, id))? else {
            return Ok(false);
        };
        let mut fields = Vec::new();
        rel.filter.fields(&mut fields);
        let r = codec::decode_record_fields(*id, &v, Some(&fields))?;
        Ok(rel.label.as_ref().is_none_or(|l| *l == r.label) && rel.filter.eval(&r, self))
    }

    /// Breadth-first from `start` over the block's edges; calls `hit` for every target at a
    /// distance within the block's range until it returns false.
    fn walk(&self, rel: &Related, start: &Uuid, hit: &mut dyn FnMut(Uuid) -> bool) -> Result<()> {
        let (min, max) = rel.hops;
        let mut seen = IdSet::default();
        seen.insert(*start);
        let mut frontier = vec![*start];
        for depth in 1..=max {
            let mut next = Vec::new();
            for n in &frontier {
                rels::others(self.kv, self.tenant, n, &rel.edges, &mut |other| {
                    if seen.insert(other) {
                        next.push(other);
                    }
                    Ok(true)
                })?;
            }
            if depth >= min {
                for t in &next {
                    if self.is_target(rel, t)? && !hit(*t) {
                        return Ok(());
                    }
                }
            }
            if next.is_empty() {
                break;
            }
            frontier = next;
        }
        Ok(())
    }

    /// Every target of the block from `start`.
    pub fn targets(&self, rel: &Related, start: &Uuid) -> Result<Vec<Uuid>> {
        let mut out = Vec::new();
        self.walk(rel, start, &mut |t| {
            out.push(t);
            true
        })?;
        Ok(out)
    }

    /// The records an alias names for one root record: the targets of each block down the
    /// chain, level by level.
    pub fn bound(&self, chain: &[&Related], root: &Uuid) -> Result<Vec<Record>> {
        let mut level = vec![*root];
        for rel in chain {
            let mut next = Vec::new();
            let mut seen = IdSet::default();
            for n in &level {
                for t in self.targets(rel, n)? {
                    if seen.insert(t) {
                        next.push(t);
                    }
                }
            }
            level = next;
        }
        level
            .iter()
            .filter_map(|id| rstore::get_record(self.kv, self.tenant, id).transpose())
            .collect()
    }
}

impl<R: KvRead + ?Sized> Graph for Walker<'_, R> {
    fn related(&self, rel: &Related, id: &Uuid) -> bool {
        let mut found = false;
        let r = self.walk(rel, id, &mut |_| {
            found = true;
            false
        });
        self.keep(r, ());
        found
    }
}

/// Resolves, from the related side, every block (at any depth of the root's logical
/// operators) for which that side is estimated cheaper than checking the `root_rows`
/// records of `root_labels` from their own side (see [`Costs`]). Returns the filter with
/// those blocks resolved; `notes` says what was chosen for each block (explain).
pub fn prepare<R: KvRead>(
    kv: &R,
    tenant: u64,
    root_labels: &[String],
    filter: &Filter,
    root_rows: u64,
    notes: &mut Vec<String>,
) -> Result<Filter> {
    let mut costs = Costs::new(kv, tenant);
    prepare_with(&mut costs, root_labels, filter, root_rows, notes)
}

fn prepare_with<R: KvRead>(
    costs: &mut Costs<'_, R>,
    root_labels: &[String],
    filter: &Filter,
    root_rows: u64,
    notes: &mut Vec<String>,
) -> Result<Filter> {
    let mut all = |fs: &[Filter], notes: &mut Vec<String>| -> Result<Vec<Filter>> {
        fs.iter()
            .map(|f| prepare_with(costs, root_labels, f, root_rows, notes))
            .collect()
    };
    Ok(match filter {
        Filter::Related(rel) => {
            let (kv, tenant) = (costs.kv, costs.tenant);
            let labels: Vec<String> = rel.label.iter().cloned().collect();
            let est = costs.targets(&labels, &rel.filter)?;
            let what = rel.label.as_deref().unwrap_or("any label");
            let record_side = costs.walk(root_labels, rel)?.map(|w| root_rows as f64 * w);
            let related_side = costs.related(rel)?;
            let from_related = match (record_side, related_side) {
                (Some(own), Some(related)) => related <= own,
                // Without fan-out estimates (multi-hop blocks, unlabelled roots): compare rows.
                _ => est <= root_rows,
            };
            let cost = match (record_side, related_side) {
                (Some(own), Some(related)) => {
                    format!("; cost about {related:.0} against {own:.0} from each record")
                }
                _ => String::new(),
            };
            if !from_related {
                notes.push(format!(
                    "{what}: from each record's side (about {root_rows} records to check, about {est} targets{cost})"
                ));
                return Ok(filter.clone());
            }
            let mut targets = IdSet::with_capacity_and_hasher(
                usize::try_from(est).unwrap_or(0).min(1 << 16),
                Default::default(),
            );
            let e: Explain = exec::for_each_id(kv, tenant, &labels, &rel.filter, &mut |id| {
                targets.insert(id);
                Ok(())
            })?;
            let res = reach_back(costs, root_labels, rel, targets)?;
            notes.push(format!(
                "{what}: from the related side ({} targets via {}, {} records reached{cost})",
                res.targets.len(),
                e.access,
                res.sure.len() + res.maybe.len()
            ));
            notes.extend(e.traversal.into_iter().map(|n| format!("  {n}")));
            let mut rel = rel.clone();
            rel.resolved = Some(Arc::new(res));
            Filter::Related(rel)
        }
        Filter::And(fs) => Filter::And(all(fs, notes)?),
        Filter::Or(fs) => Filter::Or(all(fs, notes)?),
        Filter::Nor(fs) => Filter::Nor(all(fs, notes)?),
        Filter::Xor(fs) => Filter::Xor(all(fs, notes)?),
        Filter::Not(f) => Filter::Not(Box::new(prepare_with(
            costs,
            root_labels,
            f,
            root_rows,
            notes,
        )?)),
        other => other.clone(),
    })
}

/// The blocks directly under a filter's logical operators (not inside other blocks).
fn blocks<'f>(f: &'f Filter, out: &mut Vec<&'f Related>) {
    match f {
        Filter::Related(r) => out.push(r),
        Filter::And(fs) | Filter::Or(fs) | Filter::Nor(fs) | Filter::Xor(fs) => {
            fs.iter().for_each(|f| blocks(f, out))
        }
        Filter::Not(f) => blocks(f, out),
        _ => {}
    }
}

/// Estimates from the label and relationship counters of one read view: a block's targets,
/// and the cost of each side a block can be evaluated from, in B-tree descents (an adjacency
/// read or a record read is one; reading on along an index run costs [`KEY_COST`] per key,
/// as in the planner). Costs are estimated for one-hop blocks between labelled records only;
/// for others the planner compares row counts.
struct Costs<'a, R: KvRead> {
    kv: &'a R,
    tenant: u64,
    /// (source label, type, target label, relationships), read on first use.
    counts: Option<Vec<(String, String, String, u64)>>,
    /// Estimates already made, by (filter address, labels): the filters are borrowed from
    /// one tree for the whole planning, so an address names one filter.
    estimates: HashMap<(usize, Vec<String>), (u64, u64)>,
}

impl<'a, R: KvRead> Costs<'a, R> {
    fn new(kv: &'a R, tenant: u64) -> Self {
        Costs {
            kv,
            tenant,
            counts: None,
            estimates: HashMap::new(),
        }
    }

    /// (the planner's estimate of (labels, filter) ignoring blocks, [`Costs::targets`]),
    /// made once per filter.
    fn estimates(&mut self, labels: &[String], filter: &Filter) -> Result<(u64, u64)> {
        let key = (filter as *const Filter as usize, labels.to_vec());
        if let Some(e) = self.estimates.get(&key) {
            return Ok(*e);
        }
        let own = exec::estimate(self.kv, self.tenant, labels, filter)?;
        let e = (own, self.bounded(own, labels, filter)?);
        self.estimates.insert(key, e);
        Ok(e)
    }

    fn targets(&mut self, labels: &[String], filter: &Filter) -> Result<u64> {
        Ok(self.estimates(labels, filter)?.1)
    }

    /// Estimated matches of (labels, filter): `own` (blocks ignored) bounded by its one-hop
    /// blocks. A block over label B whose own matches are estimated at e(B) leaves at most
    /// e(B) x (relationships between the two labels, of the block's types and direction) /
    /// (records of B).
    fn bounded(&mut self, own: u64, labels: &[String], filter: &Filter) -> Result<u64> {
        let mut est = own;
        let mut conj = Vec::new();
        exec::flatten(filter, &mut conj);
        for f in conj {
            let Filter::Related(b) = f else { continue };
            let (Some(bl), [_]) = (&b.label, labels) else {
                continue;
            };
            if b.hops != (1, 1) {
                continue;
            }
            let of_b = rstore::label_count(self.kv, self.tenant, bl)?;
            if of_b == 0 {
                return Ok(0);
            }
            let e_b = self.targets(std::slice::from_ref(bl), &b.filter)?;
            let edges = self.edges_between(labels, b, Some(bl))?;
            let bound = (e_b as u128 * edges as u128).div_ceil(of_b as u128);
            est = est.min(bound.min(u64::MAX as u128) as u64);
        }
        Ok(est)
    }

    fn counts(&mut self) -> Result<&[(String, String, String, u64)]> {
        if self.counts.is_none() {
            self.counts = Some(rels::rel_counts(self.kv, self.tenant)?);
        }
        Ok(self.counts.as_deref().unwrap_or_default())
    }

    /// Relationships of the block's types whose (current record's label, related record's
    /// label), seen in the block's direction, `pair` admits.
    fn counted(&mut self, rel: &Related, pair: &dyn Fn(&str, &str) -> bool) -> Result<u64> {
        let mut n = 0;
        self.each_counted(rel, &mut |ends, c| {
            if ends.iter().any(|(a, b)| pair(a, b)) {
                n += c;
            }
        })?;
        Ok(n)
    }

    /// Each relationship counter of the block's types with the ways the block walks it: one
    /// or two (current record's label, other end's label) pairs, by the block's direction.
    fn each_counted(&mut self, rel: &Related, visit: &mut CounterVisit<'_>) -> Result<()> {
        let typed = |t: &String| rel.edges.types.is_empty() || rel.edges.types.contains(t);
        let out = rel.edges.dir != Some(crate::model::Direction::In);
        let inn = rel.edges.dir != Some(crate::model::Direction::Out);
        for (s, _, t, c) in self.counts()?.iter().filter(|c| typed(&c.1)) {
            let (s, t) = (s.as_str(), t.as_str());
            match (out, inn) {
                (true, true) => visit(&[(s, t), (t, s)], *c),
                (true, false) => visit(&[(s, t)], *c),
                _ => visit(&[(t, s)], *c),
            }
        }
        Ok(())
    }

    /// Relationships of the block's types and direction from a record of `from` to one of
    /// `to` (None: any label), summed over `from`.
    fn edges_between(&mut self, from: &[String], rel: &Related, to: Option<&str>) -> Result<u64> {
        self.counted(rel, &|a, b| {
            from.iter().any(|f| f == a) && to.is_none_or(|t| t == b)
        })
    }

    /// Descents to check one record of `from` against the block from its own side: its
    /// adjacency, then each neighbour's record and the nested blocks from there (an upper
    /// bound: the walk stops at the first target).
    fn walk(&mut self, from: &[String], rel: &Related) -> Result<Option<f64>> {
        let Some(to) = rel.label.clone() else {
            return Ok(None);
        };
        if from.is_empty() || rel.hops != (1, 1) {
            return Ok(None);
        }
        let records = rstore::labels_count(self.kv, self.tenant, from)?;
        if records == 0 {
            return Ok(Some(1.0));
        }
        let fanout = self.edges_between(from, rel, Some(&to))? as f64 / records as f64;
        let mut nested = Vec::new();
        blocks(&rel.filter, &mut nested);
        let mut inner = 0.0;
        for b in nested {
            match self.walk(std::slice::from_ref(&to), b)? {
                Some(c) => inner += c,
                None => return Ok(None),
            }
        }
        Ok(Some(1.0 + fanout * (1.0 + inner)))
    }

    /// Descents to resolve the block from the related side: finding its targets (their index
    /// keys, and each nested block by its cheaper side), then one adjacency read per target.
    fn related(&mut self, rel: &Related) -> Result<Option<f64>> {
        let Some(label) = rel.label.clone() else {
            return Ok(None);
        };
        let labels = std::slice::from_ref(&label);
        let (own, est) = self.estimates(labels, &rel.filter)?;
        let (own, est) = (own as f64, est as f64);
        let mut nested = Vec::new();
        blocks(&rel.filter, &mut nested);
        let mut find = KEY_COST * est;
        for b in nested {
            let related = self.related(b)?;
            let walk = self.walk(labels, b)?.map(|w| own * w);
            find += match (related, walk) {
                (Some(a), Some(b)) => a.min(b),
                (Some(c), None) | (None, Some(c)) => c,
                (None, None) => return Ok(None),
            };
        }
        Ok(Some(est + find))
    }

    /// The one label every record reached backwards from the targets of a one-hop block has,
    /// when the counters name exactly one (the counters are exact in every read view).
    fn reached_label(&mut self, rel: &Related) -> Result<Option<String>> {
        let Some(t) = rel.label.clone() else {
            return Ok(None);
        };
        if rel.hops != (1, 1) {
            return Ok(None);
        }
        // The reached record is the block's current record: labels with relationships of the
        // block's types and direction to a record of the target label.
        let mut found: HashSet<String> = HashSet::new();
        self.each_counted(rel, &mut |ends, c| {
            for (a, b) in ends {
                if *b == t && c > 0 {
                    found.insert(a.to_string());
                }
            }
        })?;
        Ok(match found.len() {
            1 => found.into_iter().next(),
            _ => None,
        })
    }
}

/// A visit of one relationship counter: its (current label, other end's label) orientations
/// and its count.
type CounterVisit<'v> = dyn FnMut(&[(&str, &str)], u64) + 'v;

/// A frontier at least this large is read on several threads (when the view allows it).
const PARALLEL_FRONTIER: usize = 4096;

/// The other ends of the edges of `nodes` that `f` admits, node by node in `nodes` order
/// (the same sequence on one thread or several: the result does not depend on threads).
fn neighbours<R: KvRead>(kv: &R, tenant: u64, nodes: &[Uuid], f: &EdgeFilter) -> Result<Vec<Uuid>> {
    fn read<R: KvRead + ?Sized>(
        kv: &R,
        tenant: u64,
        nodes: &[Uuid],
        f: &EdgeFilter,
    ) -> Result<Vec<Uuid>> {
        let mut out = Vec::with_capacity(nodes.len());
        for n in nodes {
            rels::others(kv, tenant, n, f, &mut |other| {
                out.push(other);
                Ok(true)
            })?;
        }
        Ok(out)
    }
    let threads = crate::query::scan_threads();
    let shared = match kv.shared() {
        Some(s) if threads > 1 && nodes.len() >= PARALLEL_FRONTIER => s,
        _ => return read(kv, tenant, nodes, f),
    };
    let chunks: Vec<&[Uuid]> = nodes.chunks(nodes.len().div_ceil(threads)).collect();
    let parts = crate::query::on_threads(&chunks, &|chunk| read(shared, tenant, chunk, f))?;
    Ok(parts.concat())
}

/// Multi-source breadth-first walk backwards from the targets.
fn reach_back<R: KvRead>(
    costs: &mut Costs<'_, R>,
    root_labels: &[String],
    rel: &Related,
    targets: IdSet,
) -> Result<Resolved> {
    let (kv, tenant) = (costs.kv, costs.tenant);
    let (min, max) = rel.hops;
    let back = EdgeFilter {
        dir: rel.edges.dir.map(|d| d.reverse()),
        types: rel.edges.types.clone(),
    };
    // Every record reached so far (a copy of the targets' table, not a rebuild).
    let mut seen: IdSet = targets.clone();
    let mut frontier: Vec<Uuid> = targets.iter().copied().collect();
    let mut res = Resolved {
        label: costs.reached_label(rel)?,
        ..Resolved::default()
    };
    for depth in 1..=max {
        // In key order, consecutive adjacency reads share the upper pages of the B-tree.
        crate::model::sort_ids(&mut frontier);
        let mut next = Vec::new();
        let others = neighbours(kv, tenant, &frontier, &back)?;
        // Grown once, not doubling along the way.
        seen.reserve(others.len());
        for other in others {
            if seen.insert(other) {
                next.push(other);
            }
        }
        if depth >= min {
            res.sure.reserve(next.len());
            res.sure.extend(next.iter().copied());
        } else {
            res.maybe.extend(next.iter().copied());
        }
        if next.is_empty() {
            break;
        }
        frontier = next;
    }
    // A target itself (distance 0) satisfies the block only through another target; it can
    // be a root record only when its label is in the root's scope.
    let in_scope = |l: &String| root_labels.is_empty() || root_labels.contains(l);
    if rel.label.as_ref().is_none_or(in_scope) {
        res.maybe.extend(targets.iter().copied());
    }
    res.targets = targets;
    res.seal();
    Ok(res)
}
