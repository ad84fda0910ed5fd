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
//!   stopping at the first target. Chosen when the records to check are fewer than the
//!   block's targets.

use super::exec::{self, Explain};
use super::filter::{Filter, Graph, Related, Resolved};
use crate::error::{Error, Result};
use crate::model::Record;
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
        let mut seen: HashSet<Uuid> = HashSet::from([*start]);
        let mut frontier = vec![*start];
        for depth in 1..=max {
            let mut next = Vec::new();
            for n in &frontier {
                rels::edges(self.kv, self.tenant, n, &rel.edges, &mut |e| {
                    if seen.insert(e.other) {
                        next.push(e.other);
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
            let mut seen = HashSet::new();
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
/// operators) whose estimated targets are at most `root_rows`, the records the root would
/// otherwise check. Returns the filter with those blocks resolved; `notes` says what was
/// chosen for each block (explain).
pub fn prepare<R: KvRead>(
    kv: &R,
    tenant: u64,
    filter: &Filter,
    root_rows: u64,
    notes: &mut Vec<String>,
) -> Result<Filter> {
    Ok(match filter {
        Filter::Related(rel) => {
            let labels: Vec<String> = rel.label.iter().cloned().collect();
            let est = block_targets(kv, tenant, &labels, &rel.filter)?;
            let what = rel.label.as_deref().unwrap_or("any label");
            if est > root_rows {
                notes.push(format!(
                    "{what}: from each record's side (about {root_rows} records to check, about {est} targets)"
                ));
                return Ok(filter.clone());
            }
            let mut targets = HashSet::new();
            let e: Explain = exec::for_each_id(kv, tenant, &labels, &rel.filter, &mut |id| {
                targets.insert(id);
                Ok(())
            })?;
            let res = reach_back(kv, tenant, rel, targets)?;
            notes.push(format!(
                "{what}: from the related side ({} targets via {}, {} records reached)",
                res.targets.len(),
                e.access,
                res.sure.len() + res.maybe.len()
            ));
            notes.extend(e.traversal.into_iter().map(|n| format!("  {n}")));
            let mut rel = rel.clone();
            rel.resolved = Some(Arc::new(res));
            Filter::Related(rel)
        }
        Filter::And(fs) => Filter::And(prep_all(kv, tenant, fs, root_rows, notes)?),
        Filter::Or(fs) => Filter::Or(prep_all(kv, tenant, fs, root_rows, notes)?),
        Filter::Nor(fs) => Filter::Nor(prep_all(kv, tenant, fs, root_rows, notes)?),
        Filter::Xor(fs) => Filter::Xor(prep_all(kv, tenant, fs, root_rows, notes)?),
        Filter::Not(f) => Filter::Not(Box::new(prepare(kv, tenant, f, root_rows, notes)?)),
        other => other.clone(),
    })
}

/// Estimated matches of (labels, filter) bounded by its one-hop blocks: a block over label B
/// whose own matches are estimated at e(B) leaves at most e(B) x (relationships between the
/// two labels, of the block's types and direction) / (records of B), from the counters.
fn block_targets<R: KvRead>(
    kv: &R,
    tenant: u64,
    labels: &[String],
    filter: &Filter,
) -> Result<u64> {
    let mut est = exec::estimate(kv, tenant, labels, filter)?;
    let mut conj = Vec::new();
    exec::flatten(filter, &mut conj);
    let mut counts = None;
    for f in conj {
        let Filter::Related(b) = f else { continue };
        let (Some(bl), [l]) = (&b.label, labels) else {
            continue;
        };
        if b.hops != (1, 1) {
            continue;
        }
        let of_b = crate::store::records::label_count(kv, tenant, bl)?;
        if of_b == 0 {
            return Ok(0);
        }
        let e_b = block_targets(kv, tenant, std::slice::from_ref(bl), &b.filter)?;
        if counts.is_none() {
            counts = Some(rels::rel_counts(kv, tenant)?);
        }
        let typed = |t: &String| b.edges.types.is_empty() || b.edges.types.contains(t);
        let (out, inn) = (
            b.edges.dir != Some(crate::model::Direction::In),
            b.edges.dir != Some(crate::model::Direction::Out),
        );
        let edges: u64 = counts
            .iter()
            .flatten()
            .filter(|(s, ty, t, _)| {
                typed(ty) && ((out && s == l && t == bl) || (inn && s == bl && t == l))
            })
            .map(|c| c.3)
            .sum();
        let bound = (e_b as u128 * edges as u128).div_ceil(of_b as u128);
        est = est.min(bound.min(u64::MAX as u128) as u64);
    }
    Ok(est)
}

fn prep_all<R: KvRead>(
    kv: &R,
    tenant: u64,
    fs: &[Filter],
    root_rows: u64,
    notes: &mut Vec<String>,
) -> Result<Vec<Filter>> {
    fs.iter()
        .map(|f| prepare(kv, tenant, f, root_rows, notes))
        .collect()
}

/// Multi-source breadth-first walk backwards from the targets.
fn reach_back<R: KvRead>(
    kv: &R,
    tenant: u64,
    rel: &Related,
    targets: HashSet<Uuid>,
) -> Result<Resolved> {
    let (min, max) = rel.hops;
    let back = EdgeFilter {
        dir: rel.edges.dir.map(|d| d.reverse()),
        types: rel.edges.types.clone(),
    };
    let mut dist: HashMap<Uuid, u32> = targets.iter().map(|t| (*t, 0)).collect();
    let mut frontier: Vec<Uuid> = targets.iter().copied().collect();
    let mut res = Resolved::default();
    for depth in 1..=max {
        let mut next = Vec::new();
        for n in &frontier {
            rels::edges(kv, tenant, n, &back, &mut |e| {
                if let std::collections::hash_map::Entry::Vacant(v) = dist.entry(e.other) {
                    v.insert(depth);
                    next.push(e.other);
                }
                Ok(true)
            })?;
        }
        if depth >= min {
            res.sure.extend(next.iter().copied());
        } else {
            res.maybe.extend(next.iter().copied());
        }
        if next.is_empty() {
            break;
        }
        frontier = next;
    }
    // A target itself (distance 0) satisfies the block only through another target.
    res.maybe.extend(targets.iter().copied());
    res.targets = targets;
    Ok(res)
}
