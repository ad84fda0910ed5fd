//! Relationships: their stored form, adjacency in both directions, counts per
//! (source label, type, target label), and the writer's relationship operations.
//!
//! Tenant keys (docs/design.md "Storage format"):
//! - `RELATIONSHIP` + relationship id -> type, source id, target id, properties.
//! - `ADJACENCY` + node + direction byte + type + other node + relationship id -> marker,
//!   written for both endpoints: `(source, Out, type, target, id)` and
//!   `(target, In, type, source, id)`. A self-loop has both entries under one node.
//! - `REL_COUNT` + source label + type + target label -> number of relationships.
//!
//! Invariants, kept in the same write transaction as the records: a relationship's value
//! exists iff both its adjacency entries exist and both its endpoints exist (deleting a record
//! deletes its relationships); the counters equal the relationships by their endpoints'
//! current labels (a retype moves them).

use super::codec;
use super::keys::{self, Key};
use super::kv::KvRead;
use super::records::{record_key, RecordWriter};
use crate::error::{Error, Result};
use crate::model::{Direction, PropValue, Relationship};
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

fn parse_edge(k: &[u8]) -> Result<Edge> {
    let corrupt = || Error::internal("corrupt adjacency key");
    let rest = k.get(ADJ_NODE_AT + 16..).ok_or_else(corrupt)?;
    let (&d, rest) = rest.split_first().ok_or_else(corrupt)?;
    let dir = if d == Direction::Out as u8 {
        Direction::Out
    } else {
        Direction::In
    };
    let (ty, rest) = keys::read_escaped(rest).ok_or_else(corrupt)?;
    if rest.len() != 32 {
        return Err(corrupt());
    }
    Ok(Edge {
        rel: Uuid::from_slice(&rest[16..]).map_err(|_| corrupt())?,
        rel_type: String::from_utf8(ty).map_err(|_| corrupt())?,
        dir,
        other: Uuid::from_slice(&rest[..16]).map_err(|_| corrupt())?,
    })
}

/// Which edges of a node to walk: a direction (None: both) and types (empty: any).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EdgeFilter {
    pub dir: Option<Direction>,
    pub types: Vec<String>,
}

/// Visits the edges of `node` that `f` admits, in key order per direction and type; `visit`
/// returns false to stop.
pub fn edges<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    node: &Uuid,
    f: &EdgeFilter,
    visit: &mut dyn FnMut(Edge) -> Result<bool>,
) -> Result<()> {
    let dirs: &[Direction] = match f.dir {
        Some(Direction::Out) => &[Direction::Out],
        Some(Direction::In) => &[Direction::In],
        None => &[Direction::Out, Direction::In],
    };
    let mut go = true;
    for d in dirs {
        let base = Key::tenant(tenant, keys::ADJACENCY).uuid(node).u8(*d as u8);
        let prefixes: Vec<Vec<u8>> = if f.types.is_empty() {
            vec![base.0]
        } else {
            f.types.iter().map(|t| base.clone().str(t).0).collect()
        };
        for p in prefixes {
            if !go {
                return Ok(());
            }
            kv.scan_prefix(&p, false, &mut |k, _| {
                go = visit(parse_edge(k)?)?;
                Ok(go)
            })?;
        }
    }
    Ok(())
}

/// Every relationship of `node`, once each (a self-loop has two adjacency entries).
pub fn node_edges<R: KvRead + ?Sized>(kv: &R, tenant: u64, node: &Uuid) -> Result<Vec<Edge>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    edges(kv, tenant, node, &EdgeFilter::default(), &mut |e| {
        if seen.insert(e.rel) {
            out.push(e);
        }
        Ok(true)
    })?;
    Ok(out)
}

/// Every relationship of `node` when it has fewer than `cap` adjacency entries; None (after
/// reading `cap` entries) when it has more.
pub fn node_edges_below<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    node: &Uuid,
    cap: usize,
) -> Result<Option<Vec<Edge>>> {
    let (mut out, mut seen, mut entries) = (Vec::new(), HashSet::new(), 0);
    edges(kv, tenant, node, &EdgeFilter::default(), &mut |e| {
        entries += 1;
        if seen.insert(e.rel) {
            out.push(e);
        }
        Ok(entries < cap)
    })?;
    Ok((entries < cap).then_some(out))
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

/// A relationship to create (`unique`: reuse an existing one of the same source, target and
/// type, replacing its properties: the REST attach rule of BEHAVIOUR.md §3).
#[derive(Debug, Clone)]
pub struct LinkRel {
    pub source: Uuid,
    pub target: Uuid,
    pub rel_type: String,
    pub props: BTreeMap<String, PropValue>,
    pub unique: bool,
}

/// Relationships to remove between one record and others: `dir` as seen from `node`
/// (None: both ways), `types` empty: any type.
#[derive(Debug, Clone)]
pub struct UnlinkRel {
    pub node: Uuid,
    pub others: Vec<Uuid>,
    pub filter: EdgeFilter,
}

impl<R: KvRead> RecordWriter<'_, '_, R> {
    fn label_of(&self, id: &Uuid) -> Result<String> {
        if let Some(l) = self.labels.get(id) {
            return Ok(l.clone());
        }
        self.ov
            .get(&record_key(self.tenant, id))?
            .map(|v| codec::decode_record_fields(*id, &v, Some(&[])))
            .transpose()?
            .map(|r| r.label)
            .ok_or_else(|| Error::not_found(format!("record {id} not found")))
    }

    fn put_relationship(
        &mut self,
        rel: &Relationship,
        labels: (&str, &str),
        new: bool,
    ) -> Result<()> {
        let t = self.tenant;
        self.ov
            .put(rel_key(t, &rel.id), codec::encode_relationship(rel));
        if new {
            let m = codec::MARKER.to_vec();
            self.ov.put(
                adj_key(
                    t,
                    &rel.source,
                    Direction::Out,
                    &rel.rel_type,
                    &rel.target,
                    &rel.id,
                ),
                m.clone(),
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
                m,
            );
            self.add_count(count_key(t, labels.0, &rel.rel_type, labels.1), 1)?;
        }
        Ok(())
    }

    /// Removes a relationship, its adjacency entries and its count.
    fn remove_relationship(&mut self, rel: &Relationship) -> Result<()> {
        let t = self.tenant;
        let (sl, tl) = (self.label_of(&rel.source)?, self.label_of(&rel.target)?);
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
        self.add_count(count_key(t, &sl, &rel.rel_type, &tl), -1)
    }

    /// Creates (or, when unique and present, re-props) one relationship. Returns 1.
    pub(super) fn link(&mut self, l: LinkRel) -> Result<u64> {
        let (sl, tl) = (self.label_of(&l.source)?, self.label_of(&l.target)?);
        if l.unique {
            let mut existing = None;
            edges(
                &*self.ov,
                self.tenant,
                &l.source,
                &EdgeFilter {
                    dir: Some(Direction::Out),
                    types: vec![l.rel_type.clone()],
                },
                &mut |e| {
                    if e.other == l.target {
                        existing = Some(e.rel);
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
                self.put_relationship(&rel, (&sl, &tl), false)?;
                return Ok(1);
            }
        }
        let rel = Relationship {
            id: Uuid::now_v7(),
            row: self.next_row()?,
            version: self.seq,
            rel_type: l.rel_type,
            source: l.source,
            target: l.target,
            props: l.props,
        };
        self.put_relationship(&rel, (&sl, &tl), true)?;
        Ok(1)
    }

    /// Removes the relationships between `node` and each of `others` that the filter admits.
    pub(super) fn unlink(&mut self, u: UnlinkRel) -> Result<u64> {
        let others: HashSet<Uuid> = u.others.into_iter().collect();
        let mut ids = Vec::new();
        edges(&*self.ov, self.tenant, &u.node, &u.filter, &mut |e| {
            if others.contains(&e.other) {
                ids.push(e.rel);
            }
            Ok(true)
        })?;
        self.remove_by_ids(ids)
    }

    fn remove_by_ids(&mut self, ids: Vec<Uuid>) -> Result<u64> {
        let mut n = 0;
        let mut seen = HashSet::new();
        for id in ids {
            if !seen.insert(id) {
                continue;
            }
            if let Some(rel) = get_relationship(&*self.ov, self.tenant, &id)? {
                self.remove_relationship(&rel)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Removes every relationship of a record (before the record itself goes).
    pub(super) fn detach_all(&mut self, node: &Uuid) -> Result<u64> {
        let ids = node_edges(&*self.ov, self.tenant, node)?;
        self.remove_by_ids(ids.into_iter().map(|e| e.rel).collect())
    }

    /// Moves the relationship counters of a record from its old label to its new one.
    pub(super) fn relabel_edges(&mut self, node: &Uuid, from: &str, to: &str) -> Result<()> {
        let rels = node_edges(&*self.ov, self.tenant, node)?;
        for e in rels {
            let other = if e.other == *node {
                None
            } else {
                Some(self.label_of(&e.other)?)
            };
            let (o_from, o_to) = match &other {
                Some(l) => (l.as_str(), l.as_str()),
                None => (from, to),
            };
            let t = self.tenant;
            let (old, new) = match e.dir {
                Direction::Out => (
                    count_key(t, from, &e.rel_type, o_from),
                    count_key(t, to, &e.rel_type, o_to),
                ),
                Direction::In => (
                    count_key(t, o_from, &e.rel_type, from),
                    count_key(t, o_to, &e.rel_type, to),
                ),
            };
            self.add_count(old, -1)?;
            self.add_count(new, 1)?;
        }
        Ok(())
    }
}
