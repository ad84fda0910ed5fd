//! Relationship operations: link and unlink by id, bulk link and unlink by key match
//! (SPEC.md "Bulk relationship selector"), and relationship search and listing. Validation
//! follows SPEC.md "Relationship validation rules"; BEHAVIOUR.md §3 decides the rest.

use super::{Engine, Outcome, Sink};
use crate::error::{Error, Result};
use crate::model::infer::{infer_value, InferOptions};
use crate::model::{
    canonical_type, parse_uuid_v7, Direction, PropValue, Record, Relationship,
    DEFAULT_RELATION_TYPE, RESERVED_RELATIONSHIP_NAMES,
};
use crate::protocol::{
    self, render, LinkByIdCommand, LinkCommand, LinkSide, OneOrMany, RelationshipQuery,
    UnlinkByIdCommand,
};
use crate::query::exec;
use crate::query::filter::{self, Filter, NoGraph};
use crate::query::order::{self, OrderKey};
use crate::query::traverse::Walker;
use crate::query::{check_label, paging};
use crate::store::keys::Key;
use crate::store::kv::{KvRead, Snapshot};
use crate::store::records::{self as rstore, WriteOp, WriteOutcome};
use crate::store::relationships::{self as rels, EdgeFilter, LinkRel, SeenLabels, UnlinkRel};
use crate::store::{codec, keys, Tenant};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use uuid::Uuid;

/// Most relationships one bulk link or unlink may touch (a cartesian product grows fast).
pub const MAX_BULK_PAIRS: usize = 1_000_000;
/// Default page of relationship list and search (SPEC.md "Limits").
const DEFAULT_REL_LIMIT: i64 = 1000;
/// A record with fewer relationships than this has them listed on the calling task.
const INLINE_DEGREE: usize = 256;

fn ids(v: &OneOrMany, what: &str) -> Result<Vec<Uuid>> {
    let list: Vec<&String> = match v {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v.iter().collect(),
    };
    if list.is_empty() {
        return Err(Error::invalid(format!("{what} must not be empty")));
    }
    list.iter()
        .enumerate()
        .map(|(i, s)| {
            let p = format!("{what}[{i}]");
            if s.is_empty() {
                return Err(Error::invalid(format!("{p} must not be an empty string")));
            }
            parse_uuid_v7(s, &p)
        })
        .collect()
}

/// A relationship type as given (canonical spelling of the default type), the default when
/// absent; empty is a 400 naming `what`. For types that are looked up (search, unlink, a
/// policy's denied types): any length, as a store may hold.
pub(super) fn rel_type(t: Option<&str>, what: &str) -> Result<String> {
    match t {
        None => Ok(DEFAULT_RELATION_TYPE.to_string()),
        Some("") => Err(Error::invalid(format!(
            "{what} must not be an empty string"
        ))),
        Some(t) => Ok(canonical_type(t).to_string()),
    }
}

/// A relationship type about to be written: `rel_type`, and at most `MAX_NAME_BYTES`.
pub(super) fn new_rel_type(t: Option<&str>, what: &str) -> Result<String> {
    if let Some(t) = t {
        crate::model::check_name_length(what, t)?;
    }
    rel_type(t, what)
}

fn direction(d: Option<&str>, what: &str) -> Result<Option<Direction>> {
    d.map(|d| Direction::parse(d, what)).transpose()
}

/// Relationship properties: scalars or homogeneous scalar arrays; reserved names are a 400.
fn rel_props(m: Option<&Map<String, Value>>) -> Result<BTreeMap<String, PropValue>> {
    let mut out = BTreeMap::new();
    for (k, v) in m.into_iter().flatten() {
        let p = format!("properties.{k}");
        if RESERVED_RELATIONSHIP_NAMES.contains(&k.as_str()) {
            return Err(Error::invalid(format!(
                "{p}: '{k}' is a reserved relationship field"
            )));
        }
        crate::model::check_property_name(k)
            .map_err(|e| Error::invalid(format!("{p}: {}", e.message)))?;
        if let Value::Array(items) = v {
            let kind = |x: &Value| match x {
                Value::String(_) => 0,
                Value::Number(_) => 1,
                Value::Bool(_) => 2,
                _ => 3,
            };
            if items.iter().any(|x| kind(x) == 3)
                || items.windows(2).any(|w| kind(&w[0]) != kind(&w[1]))
            {
                return Err(Error::invalid(format!(
                    "{p}: arrays must hold scalars of one type"
                )));
            }
        }
        if let Some(pv) = infer_value(k, v, InferOptions::default())
            .map_err(|e| Error::invalid(format!("{p}: {}", e.message)))?
        {
            out.insert(k.clone(), pv);
        }
    }
    Ok(out)
}

fn affected(out: Vec<WriteOutcome>) -> Outcome {
    Outcome::Affected(
        out.iter()
            .map(|o| match o {
                WriteOutcome::Affected(n) => *n,
                WriteOutcome::Record(_) => 0,
            })
            .sum(),
    )
}

/// The parsed selector of one side of a bulk link. Messages name a field by its REST name with
/// its Protocol v1 name beside it (`key`/`property`, `where`/`predicate`,
/// `manyToMany`/`allowCartesian`): both front-ends send this command.
struct Side {
    label: String,
    key: Option<String>,
    filter: Filter,
}

fn side(s: &LinkSide, what: &str, cartesian: bool) -> Result<Side> {
    check_label(&s.label).map_err(|e| Error::invalid(format!("{what}.label: {}", e.message)))?;
    let non_empty = matches!(&s.predicate, Some(Value::Object(m)) if !m.is_empty());
    if cartesian && !non_empty {
        return Err(Error::invalid(format!(
            "{what}.where ({what}.predicate): manyToMany (allowCartesian) requires a non-empty where on both source and target"
        )));
    }
    let key = s.property.clone().filter(|k| !k.is_empty());
    if !cartesian && key.is_none() {
        return Err(Error::invalid(format!(
            "{what}.key ({what}.property) is required unless manyToMany (allowCartesian) is true"
        )));
    }
    Ok(Side {
        label: s.label.clone(),
        key,
        filter: filter::parse(s.predicate.as_ref(), &format!("{what}.where"))?,
    })
}

impl Engine {
    pub(super) async fn link_by_id(
        &self,
        tenant: Tenant,
        c: LinkByIdCommand,
        sink: &mut Sink<'_>,
    ) -> Result<Outcome> {
        let sources = ids(&c.source_ids, "sourceIds")?;
        let targets = ids(&c.target_ids, "targetIds")?;
        let ty = new_rel_type(c.relation_type.as_deref(), "type")?;
        let dir = direction(c.direction.as_deref(), "direction")?.unwrap_or(Direction::Out);
        let props = rel_props(c.properties.as_ref())?;
        self.require_tenant(&tenant, sources[0], sink)?;
        let mut ops = Vec::with_capacity(sources.len() * targets.len());
        for s in &sources {
            for t in &targets {
                let (source, target) = dir.orient(*s, *t);
                ops.push(WriteOp::Link(LinkRel {
                    id: Uuid::now_v7(),
                    seen: None,
                    source,
                    target,
                    rel_type: ty.clone(),
                    props: props.clone(),
                    unique: true,
                }));
            }
        }
        Ok(affected(self.apply_writes(tenant, ops, sink).await?))
    }

    pub(super) async fn unlink_by_id(
        &self,
        tenant: Tenant,
        c: UnlinkByIdCommand,
        sink: &mut Sink<'_>,
    ) -> Result<Outcome> {
        let sources = ids(&c.source_ids, "sourceIds")?;
        let targets = ids(&c.target_ids, "targetIds")?;
        let types = c
            .relation_types
            .unwrap_or_default()
            .iter()
            .map(|t| rel_type(Some(t), "typeOrTypes"))
            .collect::<Result<Vec<_>>>()?;
        let dir = direction(c.direction.as_deref(), "direction")?;
        if self.store.tenant_id(&tenant).is_none() && matches!(sink, Sink::Store) {
            // A tenant that has never written holds none of the records named.
            return Err(Error::not_found(format!("record {} not found", sources[0])));
        }
        let ops = sources
            .into_iter()
            .map(|node| {
                WriteOp::Unlink(UnlinkRel {
                    node,
                    others: targets.clone(),
                    filter: EdgeFilter {
                        dir,
                        types: types.clone(),
                    },
                    named: true,
                })
            })
            .collect();
        Ok(affected(self.apply_writes(tenant, ops, sink).await?))
    }

    /// Bulk link (or unlink) by key match or, with `allowCartesian`, every pair.
    pub(super) async fn link_many(
        &self,
        tenant: Tenant,
        c: LinkCommand,
        unlink: bool,
    ) -> Result<Outcome> {
        let cartesian = c.allow_cartesian.unwrap_or(false);
        let src = side(&c.source, "source", cartesian)?;
        let tgt = side(&c.target, "target", cartesian)?;
        let dir = direction(c.direction.as_deref(), "direction")?.unwrap_or(Direction::Out);
        let ty = match (&c.relation_type, unlink) {
            (None, true) => None,
            (t, true) => Some(rel_type(t.as_deref(), "type")?),
            (t, false) => Some(new_rel_type(t.as_deref(), "type")?),
        };
        let props = rel_props(c.properties.as_ref())?;
        let Some(t) = self.store.tenant_id(&tenant) else {
            return Ok(Outcome::Affected(0));
        };
        let store = self.store.clone();
        let labels = (src.label.clone(), tgt.label.clone());
        let (pairs, as_of) =
            tokio::task::spawn_blocking(move || -> Result<(Vec<(Uuid, Uuid)>, u64)> {
                let snap = store.snapshot()?;
                let as_of = rstore::commit_seq(&snap)?;
                Ok((bulk_pairs(&snap, t, &src, &tgt)?, as_of))
            })
            .await
            .map_err(|e| Error::internal(format!("bulk link task failed: {e}")))??;
        if pairs.is_empty() {
            return Ok(Outcome::Affected(0));
        }
        let ops: Vec<WriteOp> = if unlink {
            let mut by_source: BTreeMap<Uuid, Vec<Uuid>> = BTreeMap::new();
            for (s, g) in pairs {
                by_source.entry(s).or_default().push(g);
            }
            let filter = EdgeFilter {
                dir: Some(dir),
                types: ty.into_iter().collect(),
            };
            by_source
                .into_iter()
                .map(|(node, others)| {
                    WriteOp::Unlink(UnlinkRel {
                        node,
                        others,
                        filter: filter.clone(),
                        named: false,
                    })
                })
                .collect()
        } else {
            let ty = ty.unwrap_or_else(|| DEFAULT_RELATION_TYPE.to_string());
            // Every pair's endpoints carry their side's label (the selectors are per label);
            // the batch is links alone (`SeenLabels`).
            let (sl, gl): (Arc<str>, Arc<str>) = (labels.0.into(), labels.1.into());
            pairs
                .into_iter()
                .map(|(s, g)| {
                    let (source, target) = dir.orient(s, g);
                    let seen = dir.orient(sl.clone(), gl.clone());
                    WriteOp::Link(LinkRel {
                        id: Uuid::now_v7(),
                        seen: Some(SeenLabels {
                            source: seen.0,
                            target: seen.1,
                            as_of,
                        }),
                        source,
                        target,
                        rel_type: ty.clone(),
                        props: props.clone(),
                        unique: true,
                    })
                })
                .collect()
        };
        Ok(affected(self.store.write(tenant, ops).await?))
    }

    /// Relationship search and the relationships of one record: answered here when a few
    /// point reads answer it, otherwise handed back to run on the blocking pool.
    pub(super) fn find_relationships(
        &self,
        tenant: &Tenant,
        q: RelationshipQuery,
    ) -> Result<Listing> {
        let spec = RelSpec::parse(q)?;
        let Some(t) = self.store.tenant_id(tenant) else {
            if let Some(id) = spec.record {
                return Err(Error::not_found(format!("record {id} not found")));
            }
            return Ok(Listing::Answered(Outcome::Relationships {
                relationships: vec![],
                total: 0,
            }));
        };
        // The relationships of one record with a modest degree are a few point reads: answer
        // on the calling task, like a read by id. Everything else runs on the blocking pool.
        if let Some(id) = &spec.record {
            self.store.prefetch_listing(t, id);
        }
        let snap = self.store.snapshot()?;
        let few = match spec.record {
            Some(id) => rels::node_edges_below(&snap, t, &id, INLINE_DEGREE)?,
            None => None,
        };
        Ok(match few {
            Some(edges) => {
                let (relationships, total) = spec.run(&snap, t, Some(edges))?;
                Listing::Answered(Outcome::Relationships {
                    relationships,
                    total,
                })
            }
            None => Listing::Blocking(Box::new(BlockingListing { spec, snap, t })),
        })
    }
}

/// A `query relationships`, answered or to be run on the blocking pool. Moved once, to its
/// caller: boxing the common answer to even out the variants would cost an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Listing {
    Answered(Outcome),
    /// Boxed: the rarer case.
    Blocking(Box<BlockingListing>),
}

/// A relationship search too large for the calling task, on the snapshot it started on.
pub(super) struct BlockingListing {
    spec: RelSpec,
    snap: Snapshot,
    t: u64,
}

impl BlockingListing {
    pub(super) async fn run(self: Box<Self>) -> Result<Outcome> {
        let BlockingListing { spec, snap, t } = *self;
        let (relationships, total) = tokio::task::spawn_blocking(move || spec.run(&snap, t, None))
            .await
            .map_err(|e| Error::internal(format!("relationship search task failed: {e}")))??;
        Ok(Outcome::Relationships {
            relationships,
            total,
        })
    }
}

/// A side's key values from the property index, without reading records: (encoded value,
/// record id) in value order within each property type (one entry per array element). The
/// encoding is the index key's (`Key::scalar`): type-strict, one numeric order.
fn key_entries<R: KvRead>(kv: &R, t: u64, label: &str, key: &str) -> Result<Vec<(Vec<u8>, Uuid)>> {
    let mut pids = Vec::new();
    kv.scan_prefix(
        &Key::tenant(t, keys::PROP_BY_NAME).str(key).0,
        false,
        // The escaped name ends with its terminator: only this exact name, any type.
        &mut |_, v| {
            pids.push(codec::decode_uuid(v)?);
            Ok(true)
        },
    )?;
    let mut out = Vec::new();
    for pid in pids {
        let prefix = Key::tenant(t, keys::PROP_INDEX).uuid(&pid).str(label).0;
        kv.scan_prefix(&prefix, false, &mut |k, _| {
            let id = exec::id_from_key(k)?;
            let value = k
                .get(prefix.len()..k.len() - 16)
                .ok_or_else(|| Error::internal("corrupt index key"))?;
            out.push((value.to_vec(), id));
            Ok(true)
        })?;
    }
    Ok(out)
}

/// Matching (source, target) pairs of a bulk selector, never a record with itself.
fn bulk_pairs<R: KvRead>(kv: &R, t: u64, src: &Side, tgt: &Side) -> Result<Vec<(Uuid, Uuid)>> {
    let too_many = || {
        Error::invalid(format!(
            "the selectors match more than {MAX_BULK_PAIRS} pairs; narrow source.where or target.where"
        ))
    };
    // A key join without filters is a join of two property index runs: no record is read.
    if let (Some(sk), Some(tk), Filter::True, Filter::True) =
        (&src.key, &tgt.key, &src.filter, &tgt.filter)
    {
        let mut a = key_entries(kv, t, &src.label, sk)?;
        let mut b = key_entries(kv, t, &tgt.label, tk)?;
        a.sort_unstable();
        b.sort_unstable();
        let mut pairs = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            match a[i].0.cmp(&b[j].0) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    let v = &a[i].0;
                    let j_end = j + b[j..].iter().take_while(|e| e.0 == *v).count();
                    while i < a.len() && a[i].0 == *v {
                        for e in &b[j..j_end] {
                            if a[i].1 != e.1 {
                                pairs.push((a[i].1, e.1));
                                // Array elements can repeat a pair: count distinct ones.
                                if pairs.len() > MAX_BULK_PAIRS * 2 {
                                    pairs.sort_unstable();
                                    pairs.dedup();
                                    if pairs.len() > MAX_BULK_PAIRS {
                                        return Err(too_many());
                                    }
                                }
                            }
                        }
                        i += 1;
                    }
                    j = j_end;
                }
            }
        }
        pairs.sort_unstable();
        pairs.dedup();
        if pairs.len() > MAX_BULK_PAIRS {
            return Err(too_many());
        }
        return Ok(pairs);
    }
    let collect = |s: &Side| -> Result<Vec<Record>> {
        let fields: Vec<&str> = s.key.iter().map(String::as_str).collect();
        let mut out = Vec::new();
        exec::for_each_match(
            kv,
            t,
            std::slice::from_ref(&s.label),
            &s.filter,
            Some(&fields),
            &mut |r| {
                out.push(r);
                Ok(())
            },
        )?;
        Ok(out)
    };
    let (sources, targets) = (collect(src)?, collect(tgt)?);
    let mut pairs = Vec::new();
    match (&src.key, &tgt.key) {
        (Some(sk), Some(tk)) => {
            // Key values by their order-preserving encoding: type-strict, one numeric order.
            let enc = |ty, v| keys::Key(vec![]).scalar(ty, v).0;
            let mut by_value: HashMap<Vec<u8>, Vec<Uuid>> = HashMap::new();
            for r in &targets {
                if let Some(v) = r.props.get(tk) {
                    for e in &v.items {
                        by_value.entry(enc(v.ty, e)).or_default().push(r.id);
                    }
                }
            }
            for r in &sources {
                let Some(v) = r.props.get(sk) else { continue };
                let mut seen = HashSet::new();
                for e in &v.items {
                    for g in by_value.get(&enc(v.ty, e)).into_iter().flatten() {
                        if *g != r.id && seen.insert(*g) {
                            pairs.push((r.id, *g));
                            if pairs.len() > MAX_BULK_PAIRS {
                                return Err(too_many());
                            }
                        }
                    }
                }
            }
        }
        _ => {
            if sources.len().saturating_mul(targets.len()) > MAX_BULK_PAIRS * 2 {
                return Err(too_many());
            }
            for s in &sources {
                for g in &targets {
                    if s.id != g.id {
                        pairs.push((s.id, g.id));
                    }
                }
            }
            if pairs.len() > MAX_BULK_PAIRS {
                return Err(too_many());
            }
        }
    }
    Ok(pairs)
}

/// A parsed relationship query. The top-level conditions of `where` are folded into the
/// selectors they narrow (every condition is AND-ed: adding one never widens the answer);
/// conditions under `$and/$or/$not/$nor/$xor` stay a tree (`cond`) checked on each candidate.
pub(super) struct RelSpec {
    /// The source's label must be one of these; `None`: any label.
    source_labels: Option<Vec<String>>,
    target_labels: Option<Vec<String>>,
    source: Filter,
    target: Filter,
    /// The relationship's type must be one of these; `None`: any type.
    types: Option<Vec<String>>,
    props: Filter,
    cond: Option<RelCond>,
    dir: Option<Direction>,
    order: Vec<OrderKey>,
    offset: usize,
    limit: usize,
    record: Option<Uuid>,
}

/// A type list of relationship search: what `protocol::string_list` takes, or `{$in: [...]}`.
fn string_list(v: &Value, what: &str) -> Result<Vec<String>> {
    match v {
        Value::Object(m) => match m.iter().next().filter(|(k, _)| *k == "$in" || *k == "$eq") {
            // As in record filters (BEHAVIOUR §2): `$in: []` would match nothing.
            Some((op, Value::Array(a))) if m.len() == 1 && a.is_empty() => Err(Error::invalid(
                format!("{what}.{op}: must list at least one value"),
            )),
            Some((_, x)) if m.len() == 1 => string_list(x, what),
            _ => Err(Error::invalid(format!(
                "{what}: expected a string, an array of strings or {{$in: [...]}}"
            ))),
        },
        _ => protocol::string_list(v, what),
    }
}

/// A relationship search `where` subtree under a logical operator: the operators mean what
/// they mean in record where trees (BEHAVIOUR.md §2), over the keys relationship search gives
/// a meaning (`type`, `sourceLabel`, `targetLabel`, `sourceRecord`, `targetRecord`) and
/// relationship property filters (every other key).
enum RelCond {
    And(Vec<RelCond>),
    Or(Vec<RelCond>),
    Nor(Vec<RelCond>),
    Xor(Vec<RelCond>),
    Not(Box<RelCond>),
    Type(Vec<String>),
    SourceLabel(Vec<String>),
    TargetLabel(Vec<String>),
    SourceRecord(Filter),
    TargetRecord(Filter),
    Props(Filter),
}

/// One candidate relationship in one orientation, as a `RelCond` sees it.
struct Candidate<'a> {
    rel_type: &'a str,
    probe: &'a Record,
    /// (id, label) of the end taken as the source, and of the one taken as the target.
    source: (&'a Uuid, &'a str),
    target: (&'a Uuid, &'a str),
}

/// What one relationship query reads as it runs: the store, the walker that answers traversal
/// blocks of endpoint filters, and what it has already read of the endpoints (each endpoint
/// is read at most once per side selector and once for the `RelCond` filters).
struct Reads<'a, R: KvRead> {
    kv: &'a R,
    t: u64,
    w: &'a Walker<'a, R>,
    /// (record, taken as the source) -> whether it passes that side's selector, and its label.
    sides: HashMap<(Uuid, bool), Option<(bool, Label)>>,
    /// The endpoints' labels, shared.
    labels: Strings,
    /// Endpoint records read for `RelCond::SourceRecord` / `TargetRecord`.
    records: HashMap<Uuid, Option<Record>>,
}

impl<R: KvRead> Reads<'_, R> {
    /// Whether the record `id` passes `f` (a record that does not exist passes nothing).
    fn record_passes(&mut self, id: &Uuid, f: &Filter) -> Result<bool> {
        if !self.records.contains_key(id) {
            let r = rstore::get_record(self.kv, self.t, id)?;
            self.records.insert(*id, r);
        }
        let ok = match self.records.get(id) {
            Some(Some(r)) => exec::matches(&[], f, self.w, r),
            _ => false,
        };
        self.w.finish()?;
        Ok(ok)
    }
}

impl RelCond {
    fn eval<R: KvRead>(&self, c: &Candidate<'_>, ends: &mut Reads<'_, R>) -> Result<bool> {
        // How many operands hold, counting no further than `enough`.
        let holding = |cs: &[RelCond], enough: usize, ends: &mut Reads<'_, R>| -> Result<usize> {
            let mut n = 0;
            for x in cs {
                if n == enough {
                    break;
                }
                n += x.eval(c, ends)? as usize;
            }
            Ok(n)
        };
        Ok(match self {
            RelCond::And(cs) => cs
                .iter()
                .try_fold(true, |all, x| Ok::<_, Error>(all && x.eval(c, ends)?))?,
            RelCond::Or(cs) => holding(cs, 1, ends)? == 1,
            RelCond::Nor(cs) => holding(cs, 1, ends)? == 0,
            RelCond::Xor(cs) => holding(cs, 2, ends)? == 1,
            RelCond::Not(x) => !x.eval(c, ends)?,
            RelCond::Type(ts) => ts.iter().any(|t| t == c.rel_type),
            RelCond::SourceLabel(ls) => ls.iter().any(|l| l == c.source.1),
            RelCond::TargetLabel(ls) => ls.iter().any(|l| l == c.target.1),
            RelCond::SourceRecord(f) => ends.record_passes(c.source.0, f)?,
            RelCond::TargetRecord(f) => ends.record_passes(c.target.0, f)?,
            RelCond::Props(f) => f.eval(c.probe, &NoGraph),
        })
    }
}

/// A label or type in an answer's relationships: one allocation per distinct string
/// (`Strings`).
type Label = Arc<str>;

/// Shares equal strings among the relationships of an answer: its types and labels mostly
/// repeat, so each distinct one is allocated once (up to `Strings::KEPT` of them).
#[derive(Default)]
struct Strings(Vec<Label>);

impl Strings {
    const KEPT: usize = 8;

    fn get(&mut self, s: &str) -> Label {
        if let Some(a) = self.0.iter().find(|a| ***a == *s) {
            return a.clone();
        }
        let a: Label = s.into();
        if self.0.len() < Self::KEPT {
            self.0.push(a.clone());
        }
        a
    }
}

/// The parts of a relationship search `where` object, its top-level keys sorted by meaning.
#[derive(Default)]
struct RelWhere {
    types: Vec<Vec<String>>,
    source_labels: Vec<Vec<String>>,
    target_labels: Vec<Vec<String>>,
    source_records: Vec<Filter>,
    target_records: Vec<Filter>,
    /// `direction` (top level only).
    direction: Option<String>,
    /// Relationship property filters (every other key), as one where object.
    props: Map<String, Value>,
    /// Logical operators over relationship search keys.
    logical: Vec<RelCond>,
}

/// A list of names in a relationship search `where` (`type`, `sourceLabel`, `targetLabel`):
/// as a record filter's `$in`, an empty list would match nothing, so it is refused.
fn where_names(v: &Value, what: &str) -> Result<Vec<String>> {
    let names = string_list(v, what)?;
    if names.is_empty() {
        return Err(Error::invalid(format!(
            "{what}: must list at least one value"
        )));
    }
    Ok(names)
}

/// Relationship types as stored (the SDK's default type read as the engine's).
fn types_of(names: Vec<String>, what: &str) -> Result<Vec<String>> {
    names.iter().map(|t| rel_type(Some(t), what)).collect()
}

fn labels_of(names: Vec<String>) -> Result<Vec<String>> {
    names.iter().try_for_each(|l| check_label(l))?;
    Ok(names)
}

/// Upper bound on the logical nodes of one relationship search `where` (each property part
/// is bounded by `filter::MAX_NODES` on its own).
const MAX_REL_COND_NODES: usize = filter::MAX_NODES;

impl RelWhere {
    fn parse(v: &Value, path: &str, top: bool, nodes: &mut usize) -> Result<RelWhere> {
        *nodes += 1;
        if *nodes > MAX_REL_COND_NODES {
            return Err(Error::invalid(format!(
                "{path}: a where tree holds at most {MAX_REL_COND_NODES} nodes"
            )));
        }
        let m = match v {
            Value::Object(m) => m,
            Value::Null => return Ok(RelWhere::default()),
            _ => return Err(Error::invalid(format!("{path}: expected an object"))),
        };
        let mut w = RelWhere::default();
        for (k, v) in m {
            let p = format!("{path}.{k}");
            match k.as_str() {
                "type" => w.types.push(types_of(where_names(v, &p)?, &p)?),
                "sourceLabel" => w.source_labels.push(labels_of(where_names(v, &p)?)?),
                "targetLabel" => w.target_labels.push(labels_of(where_names(v, &p)?)?),
                "sourceRecord" => w.source_records.push(filter::parse(Some(v), &p)?),
                "targetRecord" => w.target_records.push(filter::parse(Some(v), &p)?),
                "direction" if top => {
                    w.direction = Some(
                        v.as_str()
                            .ok_or_else(|| {
                                Error::invalid(format!("{p}: expected \"in\" or \"out\""))
                            })?
                            .to_string(),
                    )
                }
                "direction" => {
                    return Err(Error::invalid(format!(
                        "{p}: direction applies to the whole search; give it at the top of where (or as the body's direction)"
                    )))
                }
                "$and" | "$or" | "$nor" | "$xor" => {
                    let parts = filter::logical_operands(v, &p)?
                        .iter()
                        .map(|(x, q)| RelWhere::parse(x, q, false, nodes)?.cond(q))
                        .collect::<Result<Vec<_>>>()?;
                    w.logical.push(match k.as_str() {
                        "$and" => RelCond::And(parts),
                        "$or" => RelCond::Or(parts),
                        "$nor" => RelCond::Nor(parts),
                        _ => RelCond::Xor(parts),
                    });
                }
                "$not" => {
                    let inner = RelWhere::parse(v, &p, false, nodes)?.cond(&p)?;
                    w.logical.push(RelCond::Not(Box::new(inner)));
                }
                _ => {
                    w.props.insert(k.clone(), v.clone());
                }
            }
        }
        Ok(w)
    }

    /// The relationship property filter of the object's other keys.
    fn props_filter(&self, path: &str) -> Result<Filter> {
        if self.props.is_empty() {
            return Ok(Filter::True); // what `filter::parse` answers for `{}`, without a copy
        }
        let props = filter::parse(Some(&Value::Object(self.props.clone())), path)?;
        if props.has_related() {
            return Err(Error::invalid(format!(
                "{path}: relationship property filters cannot hold related-label blocks (use source.where / target.where, or sourceRecord / targetRecord)"
            )));
        }
        Ok(props)
    }

    /// The whole object as one condition (all its keys AND-ed).
    fn cond(self, path: &str) -> Result<RelCond> {
        let mut parts = Vec::new();
        if !self.props.is_empty() {
            parts.push(RelCond::Props(self.props_filter(path)?));
        }
        parts.extend(self.types.into_iter().map(RelCond::Type));
        parts.extend(self.source_labels.into_iter().map(RelCond::SourceLabel));
        parts.extend(self.target_labels.into_iter().map(RelCond::TargetLabel));
        parts.extend(self.source_records.into_iter().map(RelCond::SourceRecord));
        parts.extend(self.target_records.into_iter().map(RelCond::TargetRecord));
        parts.extend(self.logical);
        Ok(match parts.len() {
            1 => parts.remove(0),
            _ => RelCond::And(parts),
        })
    }
}

/// `a` narrowed by every list of `more` (each a condition AND-ed with it): the names in all.
fn narrow(a: Option<Vec<String>>, more: Vec<Vec<String>>) -> Option<Vec<String>> {
    more.into_iter().fold(a, |acc, b| match acc {
        None => Some(b),
        Some(a) => Some(a.into_iter().filter(|x| b.contains(x)).collect()),
    })
}

fn and(a: Filter, b: Filter) -> Filter {
    match (a, b) {
        (Filter::True, f) | (f, Filter::True) => f,
        (a, b) => Filter::And(vec![a, b]),
    }
}

impl RelSpec {
    pub(super) fn parse(q: RelationshipQuery) -> Result<RelSpec> {
        let mut source = filter::parse(q.source_predicate.as_ref(), "source.where")?;
        let mut target = filter::parse(q.target_predicate.as_ref(), "target.where")?;
        // The selectors: an empty list (or none) means any label or type.
        let non_empty = |v: Option<Vec<String>>| v.filter(|v| !v.is_empty());
        let types = match &q.relation_type {
            None | Some(Value::Null) => None,
            Some(v) => non_empty(Some(types_of(string_list(v, "type")?, "type")?)),
        };
        let source_labels = non_empty(q.source_labels).map(labels_of).transpose()?;
        let target_labels = non_empty(q.target_labels).map(labels_of).transpose()?;
        // The predicate filters relationship properties; a few keys name other parts
        // (SPEC.md "Relationship search body"). Each narrows the selectors it names.
        let w = match &q.predicate {
            None => RelWhere::default(),
            Some(p) => {
                if !p.is_object() && !p.is_null() {
                    return Err(Error::invalid("where: expected an object"));
                }
                RelWhere::parse(p, "where", true, &mut 0)?
            }
        };
        let props = w.props_filter("where")?;
        let types = narrow(types, w.types);
        let source_labels = narrow(source_labels, w.source_labels);
        let target_labels = narrow(target_labels, w.target_labels);
        for f in w.source_records {
            source = and(source, f);
        }
        for f in w.target_records {
            target = and(target, f);
        }
        let cond = match w.logical.len() {
            0 => None,
            1 => w.logical.into_iter().next(),
            _ => Some(RelCond::And(w.logical)),
        };
        let dir_in_where = w.direction;
        if let (Some(a), Some(b)) = (&q.direction, &dir_in_where) {
            if a != b {
                return Err(Error::invalid(format!(
                    "direction {a:?} and where.direction {b:?} disagree; give one"
                )));
            }
        }
        let (offset, limit) = paging(q.offset, q.limit, DEFAULT_REL_LIMIT)?;
        Ok(RelSpec {
            source_labels,
            target_labels,
            source,
            target,
            types,
            props,
            cond,
            dir: direction(
                q.direction.as_deref().or(dir_in_where.as_deref()),
                "direction",
            )?,
            order: order::parse(q.order.as_ref(), "orderBy")?,
            offset,
            limit,
            record: q
                .record_id
                .as_deref()
                .map(|id| parse_uuid_v7(id, "record id"))
                .transpose()?,
        })
    }

    /// The record's label when it passes the source (or target) selector. `known`: the
    /// record's label when the caller has it (from an adjacency value): a side without a
    /// filter is then decided without reading the record.
    fn side_ok<R: KvRead>(
        &self,
        reads: &mut Reads<'_, R>,
        id: &Uuid,
        is_source: bool,
        known: Option<&Label>,
    ) -> Result<Option<Label>> {
        let (labels, f) = if is_source {
            (&self.source_labels, &self.source)
        } else {
            (&self.target_labels, &self.target)
        };
        let label_ok = |l: &str| labels.as_ref().is_none_or(|ls| ls.iter().any(|x| x == l));
        if let (Some(label), Filter::True) = (known, f) {
            return Ok(label_ok(label).then(|| label.clone()));
        }
        if let Some(hit) = reads.sides.get(&(*id, is_source)) {
            return Ok(hit.as_ref().filter(|(ok, _)| *ok).map(|(_, l)| l.clone()));
        }
        // Without a filter on this side only the label is needed.
        let (kv, t, w) = (reads.kv, reads.t, reads.w);
        let res = if matches!(f, Filter::True) {
            rstore::get_label(kv, t, id)?.map(|l| (label_ok(&l), l))
        } else {
            rstore::get_record(kv, t, id)?.map(|r| {
                let ok = label_ok(&r.label) && exec::matches(&[], f, w, &r);
                (ok, reads.labels.get(&r.label))
            })
        };
        w.finish()?;
        reads.sides.insert((*id, is_source), res.clone());
        Ok(res.filter(|(ok, _)| *ok).map(|(_, l)| l))
    }

    /// (source label, target label) when the relationship matches in the given orientation
    /// (`swapped`: its target taken as the source). `known`: the (source, target) labels
    /// when the caller has them; `probe`: the relationship as a record (its type as label);
    /// `ends`: its (source, target).
    fn matches<R: KvRead>(
        &self,
        reads: &mut Reads<'_, R>,
        ends: &(Uuid, Uuid),
        probe: &Record,
        swapped: bool,
        known: Option<(&Label, &Label)>,
    ) -> Result<Option<(Label, Label)>> {
        let ((a, ka), (b, kb)) = {
            let s = (&ends.0, known.map(|k| k.0));
            let g = (&ends.1, known.map(|k| k.1));
            if swapped {
                (g, s)
            } else {
                (s, g)
            }
        };
        let Some(la) = self.side_ok(reads, a, true, ka)? else {
            return Ok(None);
        };
        let Some(lb) = self.side_ok(reads, b, false, kb)? else {
            return Ok(None);
        };
        if let Some(cond) = &self.cond {
            let c = Candidate {
                rel_type: &probe.label,
                probe,
                source: (a, &la),
                target: (b, &lb),
            };
            if !cond.eval(&c, reads)? {
                return Ok(None);
            }
        }
        Ok(Some(if swapped { (lb, la) } else { (la, lb) }))
    }

    /// The record whose relationships a listing is about (None: a search).
    pub(super) fn record(&self) -> Option<Uuid> {
        self.record
    }

    /// Whether the query is a record's whole listing, ordered by id: nothing narrows it (a
    /// direction without side selectors narrows nothing either: every relationship then
    /// matches in its stored orientation), so the page is chosen by the adjacency keys alone.
    fn is_listing(&self) -> bool {
        self.record.is_some()
            && self.types.is_none()
            && self.source_labels.is_none()
            && self.target_labels.is_none()
            && matches!(self.source, Filter::True)
            && matches!(self.target, Filter::True)
            && matches!(self.props, Filter::True)
            && self.cond.is_none()
            && order::id_order(&self.order).is_some()
    }

    /// A record's listing (`is_listing`): its relationships in id order, only the page's
    /// values decoded.
    fn listing_page(
        &self,
        edges: &rels::NodeEdges,
        own: &Label,
    ) -> Result<(Vec<render::RelationshipView>, u64)> {
        let mut at: Vec<&rels::EdgeRef> = edges.entries().iter().collect();
        match order::id_order(&self.order) {
            Some(false) => at.sort_unstable_by_key(|e| e.id.as_u128()),
            _ => at.sort_unstable_by_key(|e| std::cmp::Reverse(e.id.as_u128())),
        }
        let (mut labels, mut types) = (Strings::default(), Strings::default());
        let on_page = at.len().saturating_sub(self.offset).min(self.limit);
        let mut page = Vec::with_capacity(on_page);
        for e in at.into_iter().skip(self.offset).take(on_page) {
            let v = edges.view(e)?;
            let other = labels.get(v.other_label);
            let (source, target) = e.ends(edges.node());
            let (source_label, target_label) = e.dir.orient(own.clone(), other);
            page.push(render::RelationshipView {
                id: e.id,
                source,
                target,
                rel_type: types.get(v.rel_type),
                props: v.props()?,
                source_label,
                target_label,
            });
        }
        Ok((page, edges.entries().len() as u64))
    }

    /// `edges`: the record's relationships when the caller already listed them.
    pub(super) fn run<R: KvRead>(
        &self,
        kv: &R,
        t: u64,
        edges: Option<rels::NodeEdges>,
    ) -> Result<(Vec<render::RelationshipView>, u64)> {
        let w = Walker::new(kv, t);
        let mut reads = Reads {
            kv,
            t,
            w: &w,
            sides: HashMap::new(),
            labels: Strings::default(),
            records: HashMap::new(),
        };
        // (the relationship as a record, source label, target label, (source, target)).
        let mut hits: Vec<(Record, Label, Label, (Uuid, Uuid))> = Vec::new();
        // `known`: the endpoints' (source, target) labels, when the caller has them.
        let mut consider = |rel: Relationship,
                            known: Option<(&Label, &Label)>,
                            reads: &mut Reads<'_, R>|
         -> Result<()> {
            if let Some(types) = &self.types {
                if !types.contains(&rel.rel_type) {
                    return Ok(());
                }
            }
            let ends = (rel.source, rel.target);
            let probe = Record {
                id: rel.id,
                label: rel.rel_type,
                row: rel.row,
                version: rel.version,
                props: rel.props,
            };
            if !self.props.eval(&probe, &NoGraph) {
                return Ok(());
            }
            let found = match self.dir {
                Some(Direction::Out) => self.matches(reads, &ends, &probe, false, known)?,
                Some(Direction::In) => self.matches(reads, &ends, &probe, true, known)?,
                None => match self.matches(reads, &ends, &probe, false, known)? {
                    Some(x) => Some(x),
                    None => self.matches(reads, &ends, &probe, true, known)?,
                },
            };
            if let Some((sl, tl)) = found {
                hits.push((probe, sl, tl, ends));
            }
            Ok(())
        };
        match self.record {
            Some(id) => {
                // Only the label is read: a side filter on this record reads it again, once.
                let label = rstore::get_label(kv, t, &id)?
                    .ok_or_else(|| Error::not_found(format!("record {id} not found")))?;
                let edges = match edges {
                    Some(e) => e,
                    None => rels::node_edges_below(kv, t, &id, usize::MAX)?.unwrap_or_default(),
                };
                if self.is_listing() {
                    return self.listing_page(&edges, &label);
                }
                // Each adjacency value carries the relationship and its other end's label.
                for e in edges.entries() {
                    let a = edges.adjacent(e)?;
                    let other = reads.labels.get(&a.other_label);
                    let known = a.dir.orient(&label, &other);
                    consider(a.rel, Some(known), &mut reads)?;
                }
            }
            None => rels::scan_relationships(kv, t, &mut |rel| {
                consider(rel, None, &mut reads)?;
                Ok(true)
            })?,
        }
        let total = hits.len() as u64;
        let at = order::sorted_positions(&self.order, hits.len(), |i| &hits[i].0);
        let mut hits: Vec<Option<_>> = hits.into_iter().map(Some).collect();
        let mut types = Strings::default();
        let page = at
            .into_iter()
            .skip(self.offset)
            .take(self.limit)
            .filter_map(|i| hits[i].take())
            .map(
                |(probe, source_label, target_label, (source, target))| render::RelationshipView {
                    id: probe.id,
                    source,
                    target,
                    rel_type: types.get(&probe.label),
                    props: probe.props,
                    source_label,
                    target_label,
                },
            )
            .collect();
        Ok((page, total))
    }
}
