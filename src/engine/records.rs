//! Record operations: reads straight from a snapshot on the calling task (point reads need
//! no thread hop), writes as batches for the store's writer.

use super::ingest::{record_op, vector_ops, Options};
use super::{Engine, Outcome, Sink};
use crate::bulk;
use crate::error::{Error, Result};
use crate::model::infer::{apply_explicit, infer_map};
use crate::model::parse_uuid_v7;
use crate::protocol::{PutMode, PutRecordOp, RecordRef};
use crate::store::records::{self as rstore, PutRecord, WriteOp, WriteOutcome};
use crate::store::Tenant;
use uuid::Uuid;

use crate::query::check_label;

/// The record an op names by `id` or `record: {id}`; both given must name the same record.
fn ref_id(id: Option<String>, record: Option<RecordRef>) -> Result<Uuid> {
    match (id, record) {
        (Some(id), Some(r)) => {
            let (a, b) = (
                parse_uuid_v7(&id, "id")?,
                parse_uuid_v7(&r.id, "record.id")?,
            );
            if a != b {
                return Err(Error::invalid(
                    "id and record.id name different records: give one of them",
                ));
            }
            Ok(a)
        }
        (Some(id), None) => parse_uuid_v7(&id, "id"),
        (None, Some(RecordRef { id })) => parse_uuid_v7(&id, "record.id"),
        (None, None) => Err(Error::invalid("id is required")),
    }
}

/// The outcome of a batch's first op (the record write; vector writes follow it).
fn first(out: Vec<WriteOutcome>) -> Result<Outcome> {
    single(out.into_iter().take(1).collect())
}

fn single(mut out: Vec<WriteOutcome>) -> Result<Outcome> {
    match out.pop() {
        Some(WriteOutcome::Record(r)) => Ok(Outcome::Record(r)),
        Some(WriteOutcome::Affected(n)) => Ok(Outcome::Affected(n)),
        None => Err(Error::internal("write produced no outcome")),
    }
}

impl Engine {
    pub(super) fn get_record(&self, tenant: &Tenant, id: &str) -> Result<Outcome> {
        let id = parse_uuid_v7(id, "id")?;
        let not_found = || Error::not_found(format!("record {id} not found"));
        let t = self.store.tenant_id(tenant).ok_or_else(not_found)?;
        let snap = self.store.snapshot()?;
        let rec = rstore::get_record(&snap, t, &id)?.ok_or_else(not_found)?;
        Ok(Outcome::Record(Box::new(rec)))
    }

    pub(super) fn describe_property(&self, tenant: &Tenant, id: &str) -> Result<Outcome> {
        let id = parse_uuid_v7(id, "property id")?;
        let not_found = || Error::not_found(format!("property {id} not found"));
        let t = self.store.tenant_id(tenant).ok_or_else(not_found)?;
        let info = rstore::property(&self.store.snapshot()?, t, &id)?.ok_or_else(not_found)?;
        Ok(Outcome::Property(info))
    }

    pub(super) async fn put_record(
        &self,
        tenant: Tenant,
        p: PutRecordOp,
        sink: &mut Sink<'_>,
    ) -> Result<Outcome> {
        let o = &p.options.clone().unwrap_or_default();
        let opts = Options::parse(Some(o))?;
        let vectors = p
            .vectors
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, v)| {
                let name = bulk::vector_property_name(
                    v.property_name.as_deref(),
                    &format!("vectors[{i}]"),
                )?;
                bulk::check_vector(&v.vector, &format!("vectors[{i}].vector"))?;
                Ok((name, v.vector.clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        // A replace removes every property not given: one that gives none at all is more
        // likely a client's omission than a request to empty the record (`{}` says that).
        if p.mode == PutMode::Replace && p.properties.is_none() && p.typed_properties.is_none() {
            return Err(Error::invalid(
                "properties is required to replace a record (send {} to remove every property)",
            ));
        }
        let mut data = p.properties.unwrap_or_default();
        if opts.flatten.skip_empty_values {
            data.retain(|_, v| !bulk::documents::is_empty_value(v));
        }
        let mut props = infer_map(&data, opts.flatten.infer)?;
        apply_explicit(
            &mut props,
            p.typed_properties.as_deref().unwrap_or_default(),
        )?;
        let mut label = p
            .label
            .filter(|l| !(l.is_empty() && p.mode != PutMode::Create));
        if let Some(l) = &label {
            check_label(l)?;
        }
        if let (PutMode::Create, Some(u)) = (p.mode, &opts.upsert) {
            sink.refuse("an upsert (options.mergeBy / options.mergeStrategy)")?;
            let label = label
                .filter(|l| !l.is_empty())
                .ok_or_else(|| Error::invalid("label is required to upsert a record"))?;
            let id = Uuid::now_v7();
            let mut ops = vec![record_op(id, label, props, Some(u))];
            ops.extend(vector_ops(id, vectors));
            return first(self.apply_writes(tenant, ops, sink).await?);
        }
        let (id, mode) = match p.mode {
            PutMode::Create => {
                let l = label
                    .as_mut()
                    .ok_or_else(|| Error::invalid("label is required to create a record"))?;
                if o.capitalize_labels.unwrap_or(false) {
                    *l = l.to_uppercase();
                }
                match &p.id {
                    Some(id) => (parse_uuid_v7(id, "id")?, rstore::PutMode::Create),
                    None => (Uuid::now_v7(), rstore::PutMode::CreateNew),
                }
            }
            PutMode::Merge | PutMode::Replace => {
                let id = parse_uuid_v7(
                    p.id.as_deref()
                        .ok_or_else(|| Error::invalid("id is required"))?,
                    "id",
                )?;
                let mode = if p.mode == PutMode::Merge {
                    rstore::PutMode::Merge
                } else {
                    rstore::PutMode::Replace
                };
                (id, mode)
            }
        };
        let mut ops = vec![WriteOp::Put(PutRecord {
            id,
            mode,
            label,
            props,
        })];
        ops.extend(vector_ops(id, vectors));
        first(self.apply_writes(tenant, ops, sink).await?)
    }

    pub(super) async fn retype_record(
        &self,
        tenant: Tenant,
        id: Option<String>,
        record: Option<RecordRef>,
        from: String,
        to: String,
        sink: &mut Sink<'_>,
    ) -> Result<Outcome> {
        let id = ref_id(id, record)?;
        check_label(&from)?;
        check_label(&to)?;
        self.require_tenant(&tenant, id, sink)?;
        single(
            self.apply_writes(tenant, vec![WriteOp::Retype { id, from, to }], sink)
                .await?,
        )
    }

    pub(super) async fn delete_record(
        &self,
        tenant: Tenant,
        id: Option<String>,
        record: Option<RecordRef>,
        sink: &mut Sink<'_>,
    ) -> Result<Outcome> {
        let id = ref_id(id, record)?;
        self.require_tenant(&tenant, id, sink)?;
        single(
            self.apply_writes(tenant, vec![WriteOp::Delete { id }], sink)
                .await?,
        )
    }

    /// Deletes a property (by id, or every property of that name) from every record.
    pub(super) async fn delete_property(
        &self,
        tenant: Tenant,
        name: Option<String>,
        id: Option<String>,
    ) -> Result<Outcome> {
        let ids = match (id, name) {
            (Some(id), _) => vec![parse_uuid_v7(&id, "property id")?],
            (None, Some(name)) => match self.store.tenant_id(&tenant) {
                Some(t) => rstore::properties(&self.store.snapshot()?, t)?
                    .into_iter()
                    .filter(|p| p.name == name)
                    .map(|p| p.id)
                    .collect(),
                None => vec![],
            },
            (None, None) => return Err(Error::invalid("deleteProperty needs an id or a name")),
        };
        if ids.is_empty() || self.store.tenant_id(&tenant).is_none() {
            return Err(Error::not_found("property not found"));
        }
        // The holders are found on a snapshot, off the runtime's workers; the writer then
        // looks only for holders written since (it would otherwise scan, holding every other
        // write, each label with a holder the value index misses: an empty array).
        let t = self.store.tenant_id(&tenant);
        let snap = self.store.snapshot()?;
        let ops = tokio::task::spawn_blocking(move || -> Result<Vec<WriteOp>> {
            let mut ops = Vec::new();
            for id in ids {
                let known = match (t, rstore::property(&snap, t.unwrap_or_default(), &id)?) {
                    (Some(t), Some(p)) => {
                        rstore::property_holders(&snap, t, &id, &p.name, p.ty, &[])?
                            .into_iter()
                            .map(|(r, _)| r)
                            .collect()
                    }
                    _ => Vec::new(),
                };
                ops.push(WriteOp::DeleteProperty { id, known });
            }
            Ok(ops)
        })
        .await
        .map_err(|e| Error::internal(format!("property delete task failed: {e}")))??;
        let out = self.store.write(tenant, ops).await?;
        let affected = out
            .iter()
            .map(|o| match o {
                WriteOutcome::Affected(n) => *n,
                WriteOutcome::Record(_) => 0,
            })
            .sum();
        Ok(Outcome::Affected(affected))
    }

    /// A write naming a record of a tenant that was never written cannot succeed; answer
    /// not-found without creating the tenant. (Staged writes are checked by their replay: the
    /// transaction may have created the tenant.)
    pub(super) fn require_tenant(&self, tenant: &Tenant, id: Uuid, sink: &Sink<'_>) -> Result<()> {
        match (self.store.tenant_id(tenant), sink) {
            (Some(_), _) | (None, Sink::Staged(_)) => Ok(()),
            (None, Sink::Store) => Err(Error::not_found(format!("record {id} not found"))),
        }
    }
}
