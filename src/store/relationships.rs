//! Relationships: their stored form, adjacency in both directions, counts per
//! (source label, type, target label), and the writer's relationship operations.
//!
//! Tenant keys (docs/design.md "Storage format"):
//! - `RELATIONSHIP` + relationship id -> type, source id, target id, properties.
//! - `ADJACENCY` + node + direction byte + type + other node + relationship id -> the other
//!   node's label and the relationship's body (`codec::encode_adjacency`), written for both
//!   endpoints: `(source, Out, type, target, id)` and `(target, In, type, source, id)`. A
//!   self-loop has both entries under one node. A node's relationships, with the labels at
//!   their other ends, are one range scan.
//! - `REL_COUNT` + source label + type + target label -> number of relationships.
//!
//! Invariants, kept in the same write transaction as the records: a relationship's value
//! exists iff both its adjacency entries exist and both its endpoints exist (deleting a record
//! deletes its relationships); both adjacency values carry the relationship's current body
//! (a re-prop rewrites them) and the current label of their other end (a retype rewrites the
//! entries under the record's neighbours); the counters equal the relationships by their
//! endpoints' current labels (a retype moves them).

use super::codec;
use super::keys::{self, Key};
use super::kv::{KvRead, Visit};
use super::records::{self, RecordWriter};
use crate::error::{Error, Result};
use crate::model::{Direction, IdSet, PropValue, Relationship};
use std::collections::{BTreeMap, HashSet};
use uuid::Uuid;

/// Bytes before the node id in an adjacency key: keyspace, tenant, kind.
const ADJ_NODE_AT: usize = 1 + 8 + 1;

pub fn rel_key(tenant: u64, id: &Uuid) -> Vec<u8> {
    Key::tenant(tenant, keys::RELATIONSHIP).uuid(id).0
}

fn adj_key(tenant: u64, node: &Uuid, dir: Direction, ty: &str, other: &Uuid, id: &Uuid) -> Vec<u8> {
    Key::tenant(tenant, keys::ADJACENCY)
        .uuid(node)
        .u8(dir as u8)
        .str(ty)
        .uuid(other)
        .uuid(id)
        .0
}

fn count_key(tenant: u64, source_label: &str, ty: &str, target_label: &str) -> Vec<u8> {
    Key::tenant(tenant, keys::REL_COUNT)
        .str(source_label)
        .str(ty)
        .str(target_label)
        .0
}

pub fn get_relationship<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    id: &Uuid,
) -> Result<Option<Relationship>> {
    kv.get(&rel_key(tenant, id))?
        .map(|v| codec::decode_relationship(*id, &v))
        .transpose()
}

/// One adjacency entry, seen from its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub rel: Uuid,
    pub rel_type: String,
    /// `Out`: (node)-[rel]->(other).
    pub dir: Direction,
    pub other: Uuid,
}

/// The prefix of every adjacency entry under `node` (both directions, every type).
pub fn adjacency_prefix(tenant: u64, node: &Uuid) -> Vec<u8> {
    Key::tenant(tenant, keys::ADJACENCY).uuid(node).0
}

/// The fixed parts of an adjacency key: (direction, other end, relationship id). The key is
/// keyspace byte, tenant, kind byte, node (16 bytes), direction, escaped type (at least its
/// two-byte terminator), other end (16 bytes), relationship id (16 bytes).
fn edge_ends(k: &[u8]) -> Result<(Direction, Uuid, Uuid)> {
    let corrupt = || Error::internal("corrupt adjacency key");
    let d = *k.get(ADJ_NODE_AT + 16).ok_or_else(corrupt)?;
    let at = k
        .len()
        .checked_sub(32)
        .filter(|at| *at >= ADJ_NODE_AT + 16 + 1 + 2)
        .ok_or_else(corrupt)?;
    let dir = if d == Direction::Out as u8 {
        Direction::Out
    } else {
        Direction::In
    };
    let uuid = |b: &[u8]| <[u8; 16]>::try_from(b).map(Uuid::from_bytes);
    Ok((
        dir,
        uuid(&k[at..at + 16]).map_err(|_| corrupt())?,
        uuid(&k[at + 16..]).map_err(|_| corrupt())?,
    ))
}

fn parse_edge(k: &[u8]) -> Result<Edge> {
    let corrupt = || Error::internal("corrupt adjacency key");
    let (dir, other, rel) = edge_ends(k)?;
    let (ty, rest) = keys::read_escaped(&k[ADJ_NODE_AT + 17..]).ok_or_else(corrupt)?;
    if rest.len() != 32 {
        return Err(corrupt());
    }
    Ok(Edge {
        rel,
        rel_type: String::from_utf8(ty).map_err(|_| corrupt())?,
        dir,
        other,
    })
}

/// Which edges of a node to walk: a direction (None: both) and types (empty: any).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EdgeFilter {
    pub dir: Option<Direction>,
    pub types: Vec<String>,
}

/// An adjacency entry with its value: the relationship and the label of the record at the
/// other end, as of the snapshot read.
#[derive(Debug, Clone)]
pub struct Adjacent {
    /// `Out`: (node)-[rel]->(other).
    pub dir: Direction,
    pub other: Uuid,
    /// Its type comes from the value (the key's copy of it is not decoded).
    pub rel: Relationship,
    pub other_label: String,
}

/// Visits the adjacency entries (key, value) of `node` that `f` admits, in key order per
/// direction and type; `visit` returns false to stop. With `keys_only` the values are not
/// read (`visit` gets `&[]` or the value, and must not look at it): the view may answer from
/// its key memo.
fn scan_adjacency<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    node: &Uuid,
    f: &EdgeFilter,
    keys_only: bool,
    visit: Visit,
) -> Result<()> {
    let scan = |p: &[u8], visit: Visit| match keys_only {
        true => kv.scan_prefix_keys(p, false, visit),
        false => kv.scan_prefix(p, false, visit),
    };
    let dirs: &[Direction] = match f.dir {
        Some(Direction::Out) => &[Direction::Out],
        Some(Direction::In) => &[Direction::In],
        None => &[Direction::Out, Direction::In],
    };
    let mut go = true;
    if f.dir.is_none() && f.types.is_empty() {
        // Both directions, every type: one range (out entries sort before in entries).
        let p = adjacency_prefix(tenant, node);
        return scan(&p, visit);
    }
    // One buffer for every prefix: node + direction, then each type in turn.
    let mut p = adjacency_prefix(tenant, node);
    let node_end = p.len();
    for d in dirs {
        p.truncate(node_end);
        p.push(*d as u8);
        let dir_end = p.len();
        let types: &[String] = &f.types;
        for i in 0..types.len().max(1) {
            if !go {
                return Ok(());
            }
            p.truncate(dir_end);
            if let Some(t) = types.get(i) {
                keys::push_escaped(&mut p, t.as_bytes());
            }
            scan(&p, &mut |k, v| {
                go = visit(k, v)?;
                Ok(go)
            })?;
        }
    }
    Ok(())
}

/// Visits the edges of `node` that `f` admits (keys only) as (other end, relationship id),
/// in key order per direction and type; `visit` returns false to stop. The type is not
/// decoded: the filter's scan prefixes already chose it.
fn edges<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    node: &Uuid,
    f: &EdgeFilter,
    visit: &mut dyn FnMut(Uuid, Uuid) -> Result<bool>,
) -> Result<()> {
    scan_adjacency(kv, tenant, node, f, true, &mut |k, _| {
        let (_, other, rel) = edge_ends(k)?;
        visit(other, rel)
    })
}

/// Visits the other ends of the edges of `node` that `f` admits (keys only), in key order
/// per direction and type; `visit` returns false to stop.
pub fn others<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    node: &Uuid,
    f: &EdgeFilter,
    visit: &mut dyn FnMut(Uuid) -> Result<bool>,
) -> Result<()> {
    scan_adjacency(kv, tenant, node, f, true, &mut |k, _| {
        let (_, other, _) = edge_ends(k)?;
        visit(other)
    })
}

/// `edges` with each entry's value decoded: the relationship and the other end's label.
pub fn adjacent<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    node: &Uuid,
    f: &EdgeFilter,
    visit: &mut dyn FnMut(Adjacent) -> Result<bool>,
) -> Result<()> {
    scan_adjacency(kv, tenant, node, f, false, &mut |k, v| {
        let (dir, other, id) = edge_ends(k)?;
        let (source, target) = dir.orient(*node, other);
        let (other_label, rel) = codec::decode_adjacency(id, source, target, v)?;
        visit(Adjacent {
            dir,
            other,
            rel,
            other_label,
        })
    })
}

/// The relationships a client transaction read or wrote, as a part of the adjacency
/// entries: what its commit checks are unchanged (`WriteOp::CheckAdjacency`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AdjScope {
    /// Every relationship of a record (its listing was read, or it is deleted).
    Node(Uuid),
    /// The relationships between two records, any type or direction (a detach).
    Pair(Uuid, Uuid),
    /// The relationships of one type from a source to a target (an attach, a search hit).
    Triple {
        source: Uuid,
        target: Uuid,
        rel_type: String,
    },
}

/// A digest of the adjacency entries in `scope`, keys and values: it changes whenever one of
/// those relationships is added, removed or rewritten, or an end relabelled. SipHash keyed at
/// random once per process: the same entries give the same digest for the process's lifetime
/// (no transaction outlives it, and nothing is persisted), and a client cannot choose
/// property values whose digests collide.
pub fn adjacency_digest<R: KvRead + ?Sized>(kv: &R, tenant: u64, scope: &AdjScope) -> Result<u64> {
    use std::hash::{BuildHasher, Hasher};
    static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let mut h = KEYS.get_or_init(Default::default).build_hasher();
    let (prefix, other) = match scope {
        AdjScope::Node(n) => (adjacency_prefix(tenant, n), None),
        AdjScope::Pair(n, o) => (adjacency_prefix(tenant, n), Some(o)),
        AdjScope::Triple {
            source,
            target,
            rel_type,
        } => {
            let k = Key::tenant(tenant, keys::ADJACENCY)
                .uuid(source)
                .u8(Direction::Out as u8)
                .str(rel_type)
                .uuid(target);
            (k.0, None)
        }
    };
    kv.scan_prefix(&prefix, false, &mut |k, v| {
        // The key ends with the other end and the relationship id.
        let at = k.len().saturating_sub(32);
        if other.is_none_or(|o| k.get(at..at + 16) == Some(o.as_bytes().as_slice())) {
            h.write_usize(k.len());
            h.write(k);
            h.write_usize(v.len());
            h.write(v);
        }
        Ok(true)
    })?;
    Ok(h.finish())
}

/// Every relationship of `node`, once each (a self-loop has two adjacency entries).
pub fn node_edges<R: KvRead + ?Sized>(kv: &R, tenant: u64, node: &Uuid) -> Result<Vec<Adjacent>> {
    let edges = node_edges_below(kv, tenant, node, usize::MAX)?.unwrap_or_default();
    edges.entries().iter().map(|e| edges.adjacent(e)).collect()
}

/// One relationship of a `NodeEdges` listing: what its adjacency key holds.
#[derive(Debug, Clone, Copy)]
pub struct EdgeRef {
    /// The relationship's id.
    pub id: Uuid,
    /// `Out`: (node)-[rel]->(other).
    pub dir: Direction,
    pub other: Uuid,
    /// Its value's place in `NodeEdges::values`.
    at: u32,
    len: u32,
}

impl EdgeRef {
    /// (source, target) of the relationship, seen from `node`.
    pub fn ends(&self, node: &Uuid) -> (Uuid, Uuid) {
        self.dir.orient(*node, self.other)
    }
}

/// The relationships of one record as its adjacency entries hold them, each once (a
/// self-loop's second entry is left out), in key order; values kept as stored, so a listing
/// orders and pages by the keys and decodes only the page.
#[derive(Debug, Default)]
pub struct NodeEdges {
    node: Uuid,
    entries: Vec<EdgeRef>,
    /// Where the entries' values are (`EdgeRef::at` and `len` index it).
    values: Values,
}

/// The buffer of a listing's values: copied one after another as a scan visits them, or the
/// key memo's run itself when the snapshot reads it from there (store/memo.rs).
#[derive(Debug)]
enum Values {
    Copied(Vec<u8>),
    Shared(std::sync::Arc<[u8]>),
}

impl Default for Values {
    fn default() -> Self {
        Values::Copied(Vec::new())
    }
}

impl Values {
    fn bytes(&self) -> &[u8] {
        match self {
            Values::Copied(v) => v,
            Values::Shared(b) => b,
        }
    }
}

impl NodeEdges {
    pub fn node(&self) -> &Uuid {
        &self.node
    }

    pub fn entries(&self) -> &[EdgeRef] {
        &self.entries
    }

    fn value(&self, e: &EdgeRef) -> &[u8] {
        let at = e.at as usize;
        &self.values.bytes()[at..at + e.len as usize]
    }

    /// The entry's value, read in place.
    pub fn view(&self, e: &EdgeRef) -> Result<codec::AdjacencyView<'_>> {
        codec::adjacency_view(self.value(e))
    }

    /// The entry decoded whole.
    pub fn adjacent(&self, e: &EdgeRef) -> Result<Adjacent> {
        let (source, target) = e.ends(&self.node);
        let (other_label, rel) = codec::decode_adjacency(e.id, source, target, self.value(e))?;
        Ok(Adjacent {
            dir: e.dir,
            other: e.other,
            rel,
            other_label,
        })
    }
}

/// Every relationship of `node` when it has fewer than `cap` adjacency entries; None (after
/// reading `cap` entries) when it has more.
pub fn node_edges_below<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    node: &Uuid,
    cap: usize,
) -> Result<Option<NodeEdges>> {
    // Only a self-loop has two entries under its node: those alone are deduplicated.
    let (mut loops, mut seen) = (IdSet::default(), 0);
    let too_long = || Error::internal("adjacency listing over 4 GiB");
    let mut keep = |entries: &mut Vec<EdgeRef>, k: &[u8], value: std::ops::Range<usize>| {
        seen += 1;
        let (dir, other, id) = edge_ends(k)?;
        if other != *node || loops.insert(id) {
            entries.push(EdgeRef {
                id,
                dir,
                other,
                at: u32::try_from(value.start).map_err(|_| too_long())?,
                len: u32::try_from(value.len()).map_err(|_| too_long())?,
            });
        }
        Ok::<_, Error>(seen < cap)
    };
    // From the key memo's run in place when the snapshot holds it there (what the scan below
    // would visit, without copying a key or value).
    let prefix = adjacency_prefix(tenant, node);
    if let Some(run) = kv.values_run(&prefix) {
        let mut entries = Vec::with_capacity(16);
        let mut key = prefix.clone();
        for (suffix, value) in run.entries() {
            key.truncate(prefix.len());
            key.extend_from_slice(suffix);
            if !keep(&mut entries, &key, value)? {
                return Ok(None);
            }
        }
        return Ok(Some(NodeEdges {
            node: *node,
            entries,
            values: Values::Shared(run.bytes().clone()),
        }));
    }
    // Room for a modest degree up front (a listing's values are ~60 bytes each).
    let (mut entries, mut values) = (Vec::with_capacity(16), Vec::with_capacity(1024));
    let mut more = true;
    scan_adjacency(
        kv,
        tenant,
        node,
        &EdgeFilter::default(),
        false,
        &mut |k, v| {
            let at = values.len();
            values.extend_from_slice(v);
            more = keep(&mut entries, k, at..values.len())?;
            Ok(more)
        },
    )?;
    Ok(more.then_some(NodeEdges {
        node: *node,
        entries,
        values: Values::Copied(values),
    }))
}

/// (source label, type, target label, count), in key order.
pub fn rel_counts<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
) -> Result<Vec<(String, String, String, u64)>> {
    let prefix = Key::tenant(tenant, keys::REL_COUNT).0;
    let mut out = Vec::new();
    kv.scan_prefix(&prefix, false, &mut |k, v| {
        let corrupt = || Error::internal("corrupt relationship count key");
        let (s, rest) = keys::read_escaped(&k[prefix.len()..]).ok_or_else(corrupt)?;
        let (t, rest) = keys::read_escaped(rest).ok_or_else(corrupt)?;
        let (g, _) = keys::read_escaped(rest).ok_or_else(corrupt)?;
        let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
        out.push((text(s), text(t), text(g), codec::decode_u64(v)?));
        Ok(true)
    })?;
    Ok(out)
}

/// Visits every relationship of the tenant in id order; `visit` returns false to stop.
pub fn scan_relationships<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    visit: &mut dyn FnMut(Relationship) -> Result<bool>,
) -> Result<()> {
    let prefix = Key::tenant(tenant, keys::RELATIONSHIP).0;
    kv.scan_prefix(&prefix, false, &mut |k, v| {
        let id = Uuid::from_slice(&k[prefix.len()..])
            .map_err(|_| Error::internal("corrupt relationship key"))?;
        visit(codec::decode_relationship(id, v)?)
    })
}

/// Storage format 1 -> 2: gives every adjacency entry of every tenant (purged ones whose keys
/// are still being reclaimed included) its value, from the relationship it names and the
/// label of the record at its other end; removes an entry whose relationship or other end is
/// missing (none should be: it would break the invariant above); and recomputes the
/// relationship counters from the entries kept (the writer's link shortcut relies on them).
/// Runs inside the caller's write transaction, `chunk` entries at a time. Returns (entries
/// rewritten, entries removed).
pub fn upgrade_adjacency_from_v1(
    t: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    chunk: usize,
) -> Result<(u64, u64)> {
    let (mut done, mut dropped) = (0u64, 0u64);
    let mut from = vec![keys::TENANT];
    loop {
        // The next tenant with keys.
        let mut tenant = None;
        t.scan(&from, &[keys::TENANT + 1], false, &mut |k, _| {
            tenant = k
                .get(1..9)
                .map(|b| u64::from_be_bytes(b.try_into().unwrap()));
            Ok(false)
        })?;
        let Some(tenant) = tenant else { break };
        let prefix = Key::tenant(tenant, keys::ADJACENCY).0;
        let end = keys::prefix_end(&prefix);
        let mut start = prefix.clone();
        // Relationship counters, from the out entries kept; the last source's label.
        let mut counts: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        let mut source: Option<(Uuid, std::sync::Arc<str>)> = None;
        loop {
            let mut ops: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
            let mut last = None;
            let ro: &redb::Table<'_, &'static [u8], &'static [u8]> = t;
            let label = |id: &Uuid| records::get_label(ro, tenant, id);
            ro.scan(&start, &end, false, &mut |k, _| {
                last = Some(k.to_vec());
                let e = parse_edge(k)?;
                let node = Uuid::from_slice(&k[ADJ_NODE_AT..ADJ_NODE_AT + 16])
                    .map_err(|_| Error::internal("corrupt adjacency key"))?;
                let value = match (get_relationship(ro, tenant, &e.rel)?, label(&e.other)?) {
                    (Some(rel), Some(other)) if rel.source == node || rel.target == node => {
                        if e.dir == Direction::Out {
                            if source.as_ref().is_none_or(|(n, _)| *n != node) {
                                source = label(&node)?.map(|l| (node, l));
                            }
                            if let Some((_, sl)) = &source {
                                *counts
                                    .entry(count_key(tenant, sl, &e.rel_type, &other))
                                    .or_default() += 1;
                            }
                        }
                        Some(codec::encode_adjacency(&other, &rel))
                    }
                    _ => None,
                };
                ops.push((k.to_vec(), value));
                Ok(ops.len() < chunk)
            })?;
            for (k, v) in &ops {
                match v {
                    Some(v) => {
                        t.insert(k.as_slice(), v.as_slice())?;
                        done += 1;
                    }
                    None => {
                        t.remove(k.as_slice())?;
                        dropped += 1;
                    }
                }
            }
            match last {
                Some(mut k) if ops.len() >= chunk => {
                    k.push(0); // the next key after `k`
                    start = k;
                }
                _ => break,
            }
        }
        let count_prefix = Key::tenant(tenant, keys::REL_COUNT).0;
        let mut stale = Vec::new();
        t.scan_prefix(&count_prefix, false, &mut |k, _| {
            stale.push(k.to_vec());
            Ok(true)
        })?;
        for k in stale {
            t.remove(k.as_slice())?;
        }
        for (k, n) in counts {
            t.insert(k.as_slice(), codec::encode_u64(n).as_slice())?;
        }
        if tenant == u64::MAX {
            break;
        }
        from = Key::tenant_space(tenant + 1).0;
    }
    Ok((done, dropped))
}

/// A relationship to create (`unique`: reuse an existing one of the same source, target and
/// type, replacing its properties: the REST attach rule of BEHAVIOUR.md §3).
#[derive(Debug, Clone)]
pub struct LinkRel {
    /// The id the relationship gets when the link creates one, chosen when the op is built:
    /// a transaction replays its staged ops for every read and then commits them, and each
    /// of those must create the same relationship (a unique link that finds its relationship
    /// already there keeps that one's id).
    pub id: Uuid,
    pub source: Uuid,
    pub target: Uuid,
    pub rel_type: String,
    pub props: BTreeMap<String, PropValue>,
    pub unique: bool,
    /// The endpoints' labels as a bulk link read them (None: the writer reads them).
    pub seen: Option<SeenLabels>,
}

/// The (source, target) labels of a link as read on the snapshot of commit sequence `as_of`.
/// The writer takes them instead of reading both records when the link's batch is stamped
/// `as_of + 1`: it then applies right on that snapshot's state (no batch committed in
/// between), so both records exist with these labels. Invariant: only batches made of links
/// alone carry them (an earlier op of the same batch could otherwise change a label).
#[derive(Debug, Clone)]
pub struct SeenLabels {
    pub source: std::sync::Arc<str>,
    pub target: std::sync::Arc<str>,
    pub as_of: u64,
}

/// Relationships to remove between one record and others: `dir` as seen from `node`
/// (None: both ways), `types` empty: any type.
#[derive(Debug, Clone)]
pub struct UnlinkRel {
    pub node: Uuid,
    pub others: Vec<Uuid>,
    pub filter: EdgeFilter,
    /// Every record named must exist (not found otherwise): a request by ids. Bulk unlinks,
    /// built from a snapshot, pass over records deleted since.
    pub named: bool,
}

impl<R: KvRead> RecordWriter<'_, '_, R> {
    fn label_of(&self, id: &Uuid) -> Result<String> {
        if let Some(l) = self.labels.get(id) {
            return Ok(l.clone());
        }
        records::get_label(&*self.ov, self.tenant, id)?
            .map(|l| l.to_string())
            .ok_or_else(|| Error::not_found(format!("record {id} not found")))
    }

    /// Writes a relationship and both its adjacency entries. `new_count`: for a new one, its
    /// counter key (`count_key` of its labels and type), which gains one.
    fn put_relationship(
        &mut self,
        rel: &Relationship,
        labels: (&str, &str),
        new_count: Option<&[u8]>,
    ) -> Result<()> {
        let t = self.tenant;
        self.ov
            .put(rel_key(t, &rel.id), codec::encode_relationship(rel));
        // Both entries carry the body, so a re-prop rewrites them too.
        self.ov.put(
            adj_key(
                t,
                &rel.source,
                Direction::Out,
                &rel.rel_type,
                &rel.target,
                &rel.id,
            ),
            codec::encode_adjacency(labels.1, rel),
        );
        self.ov.put(
            adj_key(
                t,
                &rel.target,
                Direction::In,
                &rel.rel_type,
                &rel.source,
                &rel.id,
            ),
            codec::encode_adjacency(labels.0, rel),
        );
        if let Some(ck) = new_count {
            self.add_count(ck, 1)?;
        }
        Ok(())
    }

    /// Removes a relationship between records labelled `sl` (source) and `tl` (target), its
    /// adjacency entries and its count.
    fn remove_relationship(&mut self, rel: &Relationship, sl: &str, tl: &str) -> Result<()> {
        self.reshaped = true;
        let t = self.tenant;
        self.ov.delete(rel_key(t, &rel.id));
        self.ov.delete(adj_key(
            t,
            &rel.source,
            Direction::Out,
            &rel.rel_type,
            &rel.target,
            &rel.id,
        ));
        self.ov.delete(adj_key(
            t,
            &rel.target,
            Direction::In,
            &rel.rel_type,
            &rel.source,
            &rel.id,
        ));
        let ck = self.count_key_of(sl, &rel.rel_type, tl);
        self.add_count(&ck, -1)
    }

    /// Whether a unique link of (source, type, target) may skip its adjacency scan: no
    /// relationship of this type between these labels existed before the batch (the counter
    /// was 0; it counts by the endpoints' current labels, and no label changed in this batch),
    /// none was removed in this batch, and this batch created none for this triple. Then no
    /// such relationship exists.
    fn surely_new(&mut self, ck: &[u8], l: &LinkRel) -> Result<bool> {
        if self.reshaped {
            return Ok(false);
        }
        let zero = match self.none_before.get(ck) {
            Some(z) => *z,
            None => {
                let z = records::get_u64(&*self.ov, ck)? == 0;
                self.none_before.insert(ck.to_vec(), z);
                z
            }
        };
        Ok(zero
            && !self
                .created
                .get(&l.rel_type)
                .is_some_and(|s| s.contains(&(l.source, l.target))))
    }

    /// The counter key of (source label, type, target label), the last one kept: the links of
    /// a bulk link share it.
    fn count_key_of(&mut self, sl: &str, ty: &str, tl: &str) -> std::rc::Rc<[u8]> {
        match &self.last_count_key {
            Some((a, b, c, k)) if a == sl && b == ty && c == tl => k.clone(),
            _ => {
                let k: std::rc::Rc<[u8]> = count_key(self.tenant, sl, ty, tl).into();
                self.last_count_key = Some((sl.into(), ty.into(), tl.into(), k.clone()));
                k
            }
        }
    }

    /// Creates (or, when unique and present, re-props) one relationship. Returns the number
    /// created: 1, or 0 when it was there already.
    pub(super) fn link(&mut self, mut l: LinkRel) -> Result<u64> {
        // A bulk link's endpoints come with their labels: used in place.
        let seen = l.seen.take().filter(|s| self.seq == s.as_of + 1);
        let looked_up;
        let (sl, tl): (&str, &str) = match &seen {
            Some(s) => (&s.source, &s.target),
            None => {
                looked_up = (self.label_of(&l.source)?, self.label_of(&l.target)?);
                (&looked_up.0, &looked_up.1)
            }
        };
        let ck = self.count_key_of(sl, &l.rel_type, tl);
        if l.unique && !self.surely_new(&ck, &l)? {
            let mut existing = None;
            edges(
                &*self.ov,
                self.tenant,
                &l.source,
                &EdgeFilter {
                    dir: Some(Direction::Out),
                    types: vec![l.rel_type.clone()],
                },
                &mut |other, rel| {
                    if other == l.target {
                        existing = Some(rel);
                        return Ok(false);
                    }
                    Ok(true)
                },
            )?;
            if let Some(id) = existing {
                let mut rel = get_relationship(&*self.ov, self.tenant, &id)?
                    .ok_or_else(|| Error::internal("adjacency without relationship"))?;
                rel.props = l.props;
                rel.version = self.seq;
                self.put_relationship(&rel, (sl, tl), None)?;
                return Ok(0);
            }
        }
        let rel = Relationship {
            id: l.id,
            row: self.next_row()?,
            version: self.seq,
            rel_type: l.rel_type,
            source: l.source,
            target: l.target,
            props: l.props,
        };
        self.put_relationship(&rel, (sl, tl), Some(&ck))?;
        self.created
            .entry(rel.rel_type)
            .or_default()
            .insert((rel.source, rel.target));
        Ok(1)
    }

    /// Removes the relationships between `node` and each of `others` that the filter admits.
    /// With `named`, every record named must exist (not found otherwise, as for a link).
    pub(super) fn unlink(&mut self, u: UnlinkRel) -> Result<u64> {
        let others: HashSet<Uuid> = u.others.into_iter().collect();
        if u.named {
            for id in std::iter::once(&u.node).chain(&others) {
                self.label_of(id)?;
            }
        }
        let mut found = Vec::new();
        adjacent(&*self.ov, self.tenant, &u.node, &u.filter, &mut |a| {
            if others.contains(&a.other) {
                found.push(a);
            }
            Ok(true)
        })?;
        self.remove_adjacent(&u.node, found)
    }

    /// Removes the relationships of `node` that its adjacency entries `found` hold. Each entry
    /// carries the whole relationship and its other end's label (kept current by
    /// `relabel_edges`, in this batch's overlay too), so only `node`'s own label is read, and
    /// no relationship record. A self-loop's two entries remove it once.
    fn remove_adjacent(&mut self, node: &Uuid, found: Vec<Adjacent>) -> Result<u64> {
        if found.is_empty() {
            return Ok(0);
        }
        let own = self.label_of(node)?;
        let mut seen = HashSet::new();
        let mut n = 0;
        for a in found {
            if !seen.insert(a.rel.id) {
                continue;
            }
            let (sl, tl) = a.dir.orient(own.as_str(), a.other_label.as_str());
            self.remove_relationship(&a.rel, sl, tl)?;
            n += 1;
        }
        Ok(n)
    }

    /// Removes every relationship of a record (before the record itself goes).
    pub(super) fn detach_all(&mut self, node: &Uuid) -> Result<u64> {
        let mut found = Vec::new();
        adjacent(
            &*self.ov,
            self.tenant,
            node,
            &EdgeFilter::default(),
            &mut |a| {
                found.push(a);
                Ok(true)
            },
        )?;
        self.remove_adjacent(node, found)
    }

    /// A record's label changes from `from` to `to`: moves its relationship counters, and
    /// rewrites the adjacency entries that carry its label (those under its neighbours; both
    /// of a self-loop's).
    pub(super) fn relabel_edges(&mut self, node: &Uuid, from: &str, to: &str) -> Result<()> {
        self.reshaped = true;
        let t = self.tenant;
        for a in node_edges(&*self.ov, t, node)? {
            let Adjacent {
                dir,
                other,
                rel,
                other_label,
            } = a;
            let self_loop = other == *node;
            let (o_from, o_to) = if self_loop {
                (from, to)
            } else {
                (other_label.as_str(), other_label.as_str())
            };
            let count = |(s, g): (&str, &str)| count_key(t, s, &rel.rel_type, g);
            let (old, new) = (count(dir.orient(from, o_from)), count(dir.orient(to, o_to)));
            self.add_count(&old, -1)?;
            self.add_count(&new, 1)?;
            let value = codec::encode_adjacency(to, &rel);
            if self_loop {
                for d in [Direction::Out, Direction::In] {
                    self.ov.put(
                        adj_key(t, node, d, &rel.rel_type, node, &rel.id),
                        value.clone(),
                    );
                }
            } else {
                self.ov.put(
                    adj_key(t, &other, dir.reverse(), &rel.rel_type, node, &rel.id),
                    value,
                );
            }
        }
        Ok(())
    }
}
