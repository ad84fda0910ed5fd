//! Record writes as the writer applies them, and record reads. Every write keeps the
//! secondary state exact in the same redb transaction: the label index, the property value
//! index, property metadata, and the label and (property, label) counters.

use super::codec;
use super::keys::{self, Key};
use super::kv::{KvRead, Overlay};
use super::relationships::{LinkRel, UnlinkRel};
use crate::error::{Error, Result};
use crate::model::{infer::PropWrites, PropType, PropValue, Record};
use std::collections::{BTreeSet, HashMap};
use uuid::Uuid;

/// How a put treats the record's existing properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutMode {
    /// A new record; its id must not exist yet.
    Create,
    /// Keep unspecified properties; null unsets.
    Merge,
    /// Remove every property, then write the given ones.
    Replace,
}

#[derive(Debug, Clone)]
pub struct PutRecord {
    pub id: Uuid,
    pub mode: PutMode,
    /// Required for create; for merge/replace a different label retypes the record.
    pub label: Option<String>,
    pub props: PropWrites,
}

/// Whether a create may apply over `kv`: its id is new (`tenant` None: the tenant does not
/// exist yet, so nothing does) and it has a label. Nothing else can refuse a create.
fn check_create<R: KvRead>(kv: &R, tenant: Option<u64>, p: &PutRecord) -> Result<()> {
    if let Some(t) = tenant {
        if kv.get(&record_key(t, &p.id))?.is_some() {
            return Err(Error::conflict(format!("record {} already exists", p.id)));
        }
    }
    if p.label.is_none() {
        return Err(Error::invalid("label is required"));
    }
    Ok(())
}

/// The record a checked create makes (properties set to nothing are left out).
fn created_record(p: PutRecord, row: u64, version: u64) -> Record {
    Record {
        id: p.id,
        label: p.label.unwrap_or_default(),
        row,
        version,
        props: p
            .props
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect(),
    }
}

/// A create as a transaction stages it, checked against `kv` exactly as the writer will check
/// it, without the index and counter work (which commit does). Only for a create that no
/// other staged write can affect (a new id). The row number is assigned at commit: 0 here.
pub fn stage_create<R: KvRead>(
    kv: &R,
    tenant: Option<u64>,
    p: PutRecord,
    version: u64,
) -> Result<Record> {
    check_create(kv, tenant, &p)?;
    Ok(created_record(p, 0, version))
}

/// How an upsert changes the record it matched (SPEC.md upsert rules 4 and 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeStrategy {
    /// Incoming properties are added or updated; the others are kept.
    Append,
    /// Every property is replaced; those not given are removed.
    Rewrite,
}

/// Create a record unless one of the same label already holds equal values for the match
/// properties; then update the oldest such record instead. Matching runs in the writer, so
/// two concurrent upserts of one key make one record.
#[derive(Debug, Clone)]
pub struct UpsertRecord {
    /// The id a new record gets. When a record matched, later ops of the batch that name this
    /// id (links from a nested import) are redirected to the matched record.
    pub id: Uuid,
    pub label: String,
    pub props: PropWrites,
    /// Property names compared; empty: every incoming property. A name the incoming record
    /// does not hold is not compared; with nothing to compare the record is created.
    pub match_on: Vec<String>,
    pub strategy: MergeStrategy,
}

/// One logical write. A batch of them is validated and applied atomically.
#[derive(Debug, Clone)]
pub enum WriteOp {
    Put(PutRecord),
    Upsert(UpsertRecord),
    Retype {
        id: Uuid,
        from: String,
        to: String,
    },
    Delete {
        id: Uuid,
    },
    /// Bulk delete by a search's result: ids deleted meanwhile are skipped, not an error.
    DeleteMany {
        ids: Vec<Uuid>,
    },
    DeleteProperty {
        id: Uuid,
    },
    Link(LinkRel),
    Unlink(UnlinkRel),
    /// Installs (Some) or removes (None) the tenant's data-access policy.
    SetPolicy(Option<Vec<u8>>),
    /// Makes the batch's tenant invisible at once: its name no longer resolves (a later write
    /// under the name starts a new, empty tenant) and it is marked for reclamation.
    PurgeTenant,
    /// Deletes up to `max` keys of a purged tenant (`Tenant::Purged`); the last chunk also
    /// removes the reclamation mark. Answers the number of keys deleted.
    Reclaim {
        max: usize,
    },
    /// Fails the batch with a conflict unless the record exists with exactly this version
    /// (a client transaction's read and write set, checked at commit).
    Check {
        id: Uuid,
        version: u64,
    },
    /// Stores an inline vector with a record (replacing one of the same property name).
    SetVector {
        id: Uuid,
        property: String,
        values: Vec<f64>,
    },
}

#[derive(Debug, Clone)]
pub enum WriteOutcome {
    Record(Box<Record>),
    Affected(u64),
}

/// Property metadata as reads report it.
#[derive(Debug, Clone)]
pub struct PropertyInfo {
    pub id: Uuid,
    pub name: String,
    pub ty: PropType,
    pub records_count: u64,
    pub is_array: bool,
}

pub fn record_key(tenant: u64, id: &Uuid) -> Vec<u8> {
    Key::tenant(tenant, keys::RECORD).uuid(id).0
}

pub fn get_record<R: KvRead + ?Sized>(kv: &R, tenant: u64, id: &Uuid) -> Result<Option<Record>> {
    kv.get(&record_key(tenant, id))?
        .map(|v| codec::decode_record(*id, &v))
        .transpose()
}

/// Label -> record count, in label order.
pub fn label_counts<R: KvRead + ?Sized>(kv: &R, tenant: u64) -> Result<Vec<(String, u64)>> {
    let prefix = Key::tenant(tenant, keys::LABEL_COUNT).0;
    let mut out = Vec::new();
    kv.scan_prefix(&prefix, false, &mut |k, v| {
        let (label, _) = keys::read_escaped(&k[prefix.len()..])
            .ok_or_else(|| Error::internal("corrupt label count key"))?;
        out.push((
            String::from_utf8_lossy(&label).into_owned(),
            codec::decode_u64(v)?,
        ));
        Ok(true)
    })?;
    Ok(out)
}

pub fn label_count<R: KvRead + ?Sized>(kv: &R, tenant: u64, label: &str) -> Result<u64> {
    kv.get(&Key::tenant(tenant, keys::LABEL_COUNT).str(label).0)?
        .map(|v| codec::decode_u64(&v))
        .unwrap_or(Ok(0))
}

fn property_info<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    id: Uuid,
    meta: &[u8],
) -> Result<PropertyInfo> {
    let (name, ty) = codec::decode_prop_meta(meta)?;
    let (mut records_count, mut arrays) = (0, 0);
    kv.scan_prefix(
        &Key::tenant(tenant, keys::PROP_LABEL_COUNT).uuid(&id).0,
        false,
        &mut |_, v| {
            let (c, a) = codec::decode_u64_pair(v)?;
            records_count += c;
            arrays += a;
            Ok(true)
        },
    )?;
    Ok(PropertyInfo {
        id,
        name,
        ty,
        records_count,
        is_array: arrays > 0,
    })
}

pub fn property<R: KvRead + ?Sized>(
    kv: &R,
    tenant: u64,
    id: &Uuid,
) -> Result<Option<PropertyInfo>> {
    match kv.get(&Key::tenant(tenant, keys::PROP_BY_ID).uuid(id).0)? {
        Some(meta) => property_info(kv, tenant, *id, &meta).map(Some),
        None => Ok(None),
    }
}

/// Every property of the tenant, ordered by (name, type).
pub fn properties<R: KvRead + ?Sized>(kv: &R, tenant: u64) -> Result<Vec<PropertyInfo>> {
    let mut ids = Vec::new();
    kv.scan_prefix(
        &Key::tenant(tenant, keys::PROP_BY_NAME).0,
        false,
        &mut |_, v| {
            ids.push(codec::decode_uuid(v)?);
            Ok(true)
        },
    )?;
    ids.iter()
        .filter_map(|id| property(kv, tenant, id).transpose())
        .collect()
}

/// Applies write ops for one tenant on an overlay. Reads see the overlay, so later ops of a
/// batch see earlier ones.
pub struct RecordWriter<'o, 'b, R: KvRead> {
    pub ov: &'o mut Overlay<'b, R>,
    pub tenant: u64,
    /// The commit sequence this batch is stamped with: the version of every record it writes.
    pub seq: u64,
    /// Properties that lost holders in this batch; their metadata goes if nothing holds them.
    touched: BTreeSet<Uuid>,
    /// Upserts that matched an existing record: their provisional id -> the matched id.
    remap: HashMap<Uuid, Uuid>,
    /// Counter deltas (label, relationship counts; (count, array count) pairs), applied once
    /// in `finish`: a bulk write touches the same few counters once per record.
    counts: HashMap<Vec<u8>, i64>,
    pairs: HashMap<Vec<u8>, (i64, i64)>,
    /// The last row number handed out, once read; stored in `finish`.
    row: Option<u64>,
    /// Labels of records this batch wrote, so links between them need not decode them.
    pub(super) labels: HashMap<Uuid, String>,
    /// The tenant name a `PurgeTenant` removed from the directory.
    pub dropped: Option<String>,
    /// Property ids resolved in this batch (metadata is only dropped in `finish`).
    prop_ids: HashMap<(String, PropType), Uuid>,
}

impl<'o, 'b, R: KvRead> RecordWriter<'o, 'b, R> {
    pub fn new(ov: &'o mut Overlay<'b, R>, tenant: u64, seq: u64) -> Self {
        RecordWriter {
            ov,
            tenant,
            seq,
            touched: BTreeSet::new(),
            remap: HashMap::new(),
            counts: HashMap::new(),
            pairs: HashMap::new(),
            row: None,
            labels: HashMap::new(),
            dropped: None,
            prop_ids: HashMap::new(),
        }
    }

    fn key(&self, kind: u8) -> Key {
        Key::tenant(self.tenant, kind)
    }

    /// Adds to a counter; the stored value changes in `finish` (nothing in a batch reads
    /// counters before then).
    pub(super) fn add_count(&mut self, key: Vec<u8>, delta: i64) -> Result<()> {
        *self.counts.entry(key).or_default() += delta;
        Ok(())
    }

    fn add_pair(&mut self, key: Vec<u8>, delta: i64, array_delta: i64) -> Result<()> {
        let p = self.pairs.entry(key).or_default();
        p.0 += delta;
        p.1 += array_delta;
        Ok(())
    }

    /// Applies the counter deltas and the row counter to the overlay.
    fn flush_counters(&mut self) -> Result<()> {
        for (key, delta) in std::mem::take(&mut self.counts) {
            if delta == 0 {
                continue;
            }
            let cur = self
                .ov
                .get(&key)?
                .map(|v| codec::decode_u64(&v))
                .transpose()?
                .unwrap_or(0);
            match cur.saturating_add_signed(delta) {
                0 => self.ov.delete(key),
                next => self.ov.put(key, codec::encode_u64(next)),
            }
        }
        for (key, (delta, array_delta)) in std::mem::take(&mut self.pairs) {
            if delta == 0 && array_delta == 0 {
                continue;
            }
            let (c, a) = self
                .ov
                .get(&key)?
                .map(|v| codec::decode_u64_pair(&v))
                .transpose()?
                .unwrap_or((0, 0));
            let (c, a) = (
                c.saturating_add_signed(delta),
                a.saturating_add_signed(array_delta),
            );
            if c == 0 {
                self.ov.delete(key);
            } else {
                self.ov.put(key, codec::encode_u64_pair(c, a));
            }
        }
        if let Some(row) = self.row {
            self.ov
                .put(self.key(keys::ROW_SEQ).0, codec::encode_u64(row));
        }
        Ok(())
    }

    fn prop_id(&mut self, name: &str, ty: PropType, create: bool) -> Result<Option<Uuid>> {
        if let Some(id) = self.prop_ids.get(&(name.to_string(), ty)) {
            return Ok(Some(*id));
        }
        let by_name = self.key(keys::PROP_BY_NAME).str(name).u8(ty as u8).0;
        if let Some(v) = self.ov.get(&by_name)? {
            let id = codec::decode_uuid(&v)?;
            self.prop_ids.insert((name.to_string(), ty), id);
            return Ok(Some(id));
        }
        if !create {
            return Ok(None);
        }
        let id = Uuid::now_v7();
        self.prop_ids.insert((name.to_string(), ty), id);
        self.ov.put(by_name, codec::encode_uuid(&id));
        self.ov.put(
            self.key(keys::PROP_BY_ID).uuid(&id).0,
            codec::encode_prop_meta(name, ty),
        );
        Ok(Some(id))
    }

    pub(super) fn next_row(&mut self) -> Result<u64> {
        let last = match self.row {
            Some(r) => r,
            None => self
                .ov
                .get(&self.key(keys::ROW_SEQ).0)?
                .map(|v| codec::decode_u64(&v))
                .transpose()?
                .unwrap_or(0),
        };
        self.row = Some(last + 1);
        Ok(last + 1)
    }

    fn index(&mut self, rec: &Record, add: bool) -> Result<()> {
        let delta = if add { 1 } else { -1 };
        let label_key = self.key(keys::LABEL_INDEX).str(&rec.label).uuid(&rec.id).0;
        if add {
            self.ov.put(label_key, codec::MARKER.to_vec());
        } else {
            self.ov.delete(label_key);
        }
        self.add_count(self.key(keys::LABEL_COUNT).str(&rec.label).0, delta)?;
        for (name, value) in &rec.props {
            let Some(pid) = self.prop_id(name, value.ty, add)? else {
                continue;
            };
            for item in &value.items {
                let k = self
                    .key(keys::PROP_INDEX)
                    .uuid(&pid)
                    .str(&rec.label)
                    .scalar(value.ty, item)
                    .uuid(&rec.id)
                    .0;
                if add {
                    self.ov.put(k, codec::MARKER.to_vec());
                } else {
                    self.ov.delete(k);
                }
            }
            let count_key = self
                .key(keys::PROP_LABEL_COUNT)
                .uuid(&pid)
                .str(&rec.label)
                .0;
            self.add_pair(count_key, delta, if value.array { delta } else { 0 })?;
            if !add {
                self.touched.insert(pid);
            }
        }
        Ok(())
    }

    fn store(&mut self, rec: &Record) {
        self.labels.insert(rec.id, rec.label.clone());
        self.ov
            .put(record_key(self.tenant, &rec.id), codec::encode_record(rec));
    }

    fn load(&self, id: &Uuid) -> Result<Record> {
        get_record(&*self.ov, self.tenant, id)?
            .ok_or_else(|| Error::not_found(format!("record {id} not found")))
    }

    /// Replaces `old` by `new` in the store and every index.
    fn rewrite(&mut self, old: &Record, new: &Record) -> Result<()> {
        self.index(old, false)?;
        self.index(new, true)?;
        self.store(new);
        Ok(())
    }

    pub fn apply(&mut self, op: WriteOp) -> Result<WriteOutcome> {
        match op {
            WriteOp::Put(p) => self.put(p).map(|r| WriteOutcome::Record(Box::new(r))),
            WriteOp::Upsert(u) => self.upsert(u).map(|r| WriteOutcome::Record(Box::new(r))),
            WriteOp::Retype { id, from, to } => {
                let old = self.load(&id)?;
                if old.label != from {
                    return Err(Error::conflict(format!(
                        "record {id} has label '{}', not '{from}'",
                        old.label
                    )));
                }
                let new = Record {
                    label: to,
                    version: self.seq,
                    ..old.clone()
                };
                self.relabel_edges(&id, &old.label, &new.label)?;
                self.rewrite(&old, &new)?;
                Ok(WriteOutcome::Record(Box::new(new)))
            }
            WriteOp::Delete { id } => {
                let old = self.load(&id)?;
                self.remove(&old)?;
                Ok(WriteOutcome::Affected(1))
            }
            WriteOp::DeleteMany { ids } => {
                let mut n = 0;
                for id in ids {
                    if let Some(old) = get_record(&*self.ov, self.tenant, &id)? {
                        self.remove(&old)?;
                        n += 1;
                    }
                }
                Ok(WriteOutcome::Affected(n))
            }
            WriteOp::DeleteProperty { id } => self.delete_property(&id).map(WriteOutcome::Affected),
            WriteOp::Link(mut l) => {
                l.source = self.resolve(l.source);
                l.target = self.resolve(l.target);
                self.link(l).map(WriteOutcome::Affected)
            }
            WriteOp::Unlink(u) => self.unlink(u).map(WriteOutcome::Affected),
            WriteOp::SetPolicy(p) => {
                let key = self.key(keys::POLICY).0;
                match p {
                    Some(v) => self.ov.put(key, v),
                    None => self.ov.delete(key),
                }
                Ok(WriteOutcome::Affected(1))
            }
            WriteOp::PurgeTenant => {
                let by_id = Key::system(keys::SYS_TENANT_BY_ID).u64(self.tenant).0;
                let name = self
                    .ov
                    .get(&by_id)?
                    .map(|v| codec::decode_str(&v))
                    .transpose()?
                    .ok_or_else(|| Error::not_found("tenant not found"))?;
                self.ov
                    .delete(Key::system(keys::SYS_TENANT_BY_NAME).str(&name).0);
                self.ov.delete(by_id);
                self.ov.put(
                    Key::system(keys::SYS_PURGING).u64(self.tenant).0,
                    codec::MARKER.to_vec(),
                );
                self.dropped = Some(name);
                Ok(WriteOutcome::Affected(0))
            }
            WriteOp::Reclaim { max } => {
                let mut doomed = Vec::new();
                self.ov
                    .scan_prefix(&Key::tenant_space(self.tenant).0, false, &mut |k, _| {
                        doomed.push(k.to_vec());
                        Ok(doomed.len() < max)
                    })?;
                let n = doomed.len();
                for k in doomed {
                    self.ov.delete(k);
                }
                if n < max {
                    self.ov
                        .delete(Key::system(keys::SYS_PURGING).u64(self.tenant).0);
                }
                Ok(WriteOutcome::Affected(n as u64))
            }
            WriteOp::Check { id, version } => match get_record(&*self.ov, self.tenant, &id)? {
                Some(r) if r.version == version => Ok(WriteOutcome::Affected(0)),
                Some(_) => Err(Error::conflict(format!(
                    "record {id} was changed by another commit after this transaction read it"
                ))),
                None => Err(Error::conflict(format!(
                    "record {id} was deleted by another commit after this transaction read it"
                ))),
            },
            WriteOp::SetVector {
                id,
                property,
                values,
            } => {
                let id = self.resolve(id);
                self.load(&id)?;
                let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                self.ov.put(
                    self.key(keys::INLINE_VECTOR).uuid(&id).str(&property).0,
                    bytes,
                );
                Ok(WriteOutcome::Affected(1))
            }
        }
    }

    fn put(&mut self, p: PutRecord) -> Result<Record> {
        if p.mode == PutMode::Create {
            check_create(&*self.ov, Some(self.tenant), &p)?;
            let row = self.next_row()?;
            let rec = created_record(p, row, self.seq);
            self.index(&rec, true)?;
            self.store(&rec);
            return Ok(rec);
        }
        let old = self.load(&p.id)?;
        let mut new = Record {
            label: p.label.unwrap_or_else(|| old.label.clone()),
            version: self.seq,
            ..old.clone()
        };
        if p.mode == PutMode::Replace {
            new.props.clear();
        }
        for (k, v) in p.props {
            match v {
                Some(v) => new.props.insert(k, v),
                None => new.props.remove(&k),
            };
        }
        if new.label != old.label {
            self.relabel_edges(&old.id, &old.label, &new.label)?;
        }
        self.rewrite(&old, &new)?;
        Ok(new)
    }

    /// Deletes a record with its relationships, index entries and inline vectors.
    fn remove(&mut self, old: &Record) -> Result<()> {
        self.detach_all(&old.id)?;
        self.index(old, false)?;
        let mut vectors = Vec::new();
        self.ov.scan_prefix(
            &self.key(keys::INLINE_VECTOR).uuid(&old.id).0,
            false,
            &mut |k, _| {
                vectors.push(k.to_vec());
                Ok(true)
            },
        )?;
        for k in vectors {
            self.ov.delete(k);
        }
        self.ov.delete(record_key(self.tenant, &old.id));
        self.labels.remove(&old.id);
        Ok(())
    }

    /// The record an id names in this batch (an upsert's provisional id -> its match).
    fn resolve(&self, id: Uuid) -> Uuid {
        self.remap.get(&id).copied().unwrap_or(id)
    }

    fn upsert(&mut self, u: UpsertRecord) -> Result<Record> {
        let incoming: Vec<(&String, &PropValue)> = u
            .props
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
            .filter(|(k, _)| u.match_on.is_empty() || u.match_on.contains(k))
            .collect();
        if let Some(old) = self.find_match(&u.label, &incoming)? {
            self.remap.insert(u.id, old.id);
            return self.put(PutRecord {
                id: old.id,
                mode: match u.strategy {
                    MergeStrategy::Append => PutMode::Merge,
                    MergeStrategy::Rewrite => PutMode::Replace,
                },
                label: None,
                props: u.props,
            });
        }
        self.put(PutRecord {
            id: u.id,
            mode: PutMode::Create,
            label: Some(u.label),
            props: u.props,
        })
    }

    /// The oldest record of `label` whose values equal every given one (type, arrayness and
    /// elements), found through the property index of the most specific value.
    fn find_match(&self, label: &str, want: &[(&String, &PropValue)]) -> Result<Option<Record>> {
        if want.is_empty() {
            return Ok(None);
        }
        let mut prefix = None;
        for (name, v) in want {
            let by_name = self.key(keys::PROP_BY_NAME).str(name).u8(v.ty as u8).0;
            let Some(pid) = self.ov.get(&by_name)? else {
                return Ok(None); // nobody holds this (name, type)
            };
            if let Some(first) = v.items.first() {
                let pid = codec::decode_uuid(&pid)?;
                prefix = Some(
                    self.key(keys::PROP_INDEX)
                        .uuid(&pid)
                        .str(label)
                        .scalar(v.ty, first)
                        .0,
                );
                break;
            }
        }
        let prefix = prefix.unwrap_or_else(|| self.key(keys::LABEL_INDEX).str(label).0);
        let mut candidates = BTreeSet::new();
        self.ov.scan_prefix(&prefix, false, &mut |k, _| {
            let id = Uuid::from_slice(&k[k.len() - 16..])
                .map_err(|_| Error::internal("corrupt index key"))?;
            candidates.insert(id);
            Ok(true)
        })?;
        let mut best: Option<Record> = None;
        for id in candidates {
            let Some(rec) = get_record(&*self.ov, self.tenant, &id)? else {
                continue;
            };
            let equal =
                rec.label == label && want.iter().all(|(k, v)| rec.props.get(*k) == Some(*v));
            if equal && best.as_ref().is_none_or(|b| rec.row < b.row) {
                best = Some(rec);
            }
        }
        Ok(best)
    }

    fn delete_property(&mut self, pid: &Uuid) -> Result<u64> {
        let meta = self
            .ov
            .get(&self.key(keys::PROP_BY_ID).uuid(pid).0)?
            .ok_or_else(|| Error::not_found(format!("property {pid} not found")))?;
        let (name, ty) = codec::decode_prop_meta(&meta)?;
        let prefix = self.key(keys::PROP_INDEX).uuid(pid).0;
        let mut holders = BTreeSet::new();
        self.ov.scan_prefix(&prefix, false, &mut |k, _| {
            let id = Uuid::from_slice(&k[k.len() - 16..])
                .map_err(|_| Error::internal("corrupt index key"))?;
            holders.insert(id);
            Ok(true)
        })?;
        for id in &holders {
            let old = self.load(id)?;
            let mut new = Record {
                version: self.seq,
                ..old.clone()
            };
            if new.props.get(&name).is_some_and(|v| v.ty == ty) {
                new.props.remove(&name);
                self.rewrite(&old, &new)?;
            }
        }
        self.touched.insert(*pid);
        Ok(holders.len() as u64)
    }

    /// Drops metadata of properties no record holds any more. Runs once per batch, after all
    /// ops, so a property rewritten within the batch keeps its id.
    pub fn finish(&mut self) -> Result<()> {
        self.flush_counters()?;
        for pid in std::mem::take(&mut self.touched) {
            if self
                .ov
                .has_prefix(&self.key(keys::PROP_LABEL_COUNT).uuid(&pid).0)?
            {
                continue;
            }
            let by_id = self.key(keys::PROP_BY_ID).uuid(&pid).0;
            if let Some(meta) = self.ov.get(&by_id)? {
                let (name, ty) = codec::decode_prop_meta(&meta)?;
                self.ov
                    .delete(self.key(keys::PROP_BY_NAME).str(&name).u8(ty as u8).0);
                self.ov.delete(by_id);
            }
        }
        Ok(())
    }
}
