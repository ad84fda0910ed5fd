//! Record operations: reads straight from a snapshot on the calling task (point reads need
//! no thread hop), writes as batches for the store's writer.

use super::{Engine, Outcome};
use crate::error::{Error, Result};
use crate::model::infer::{apply_explicit, infer_map, InferOptions};
use crate::model::{parse_uuid_v7, Record};
use crate::protocol::{PutMode, PutRecordOp, QueryDocument, RecordRef};
use crate::store::keys::{self, Key};
use crate::store::kv::KvRead;
use crate::store::records::{self as rstore, PutRecord, WriteOp, WriteOutcome};
use crate::store::Tenant;
use serde_json::Value;
use uuid::Uuid;

/// Default and largest `limit` of record search (BEHAVIOUR.md §2).
pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 1000;
/// Longest label accepted.
pub const MAX_LABEL_BYTES: usize = 1024;

fn check_label(label: &str) -> Result<()> {
    if label.is_empty() {
        return Err(Error::invalid("label must not be empty"));
    }
    if label.len() > MAX_LABEL_BYTES {
        return Err(Error::invalid(format!(
            "label is longer than {MAX_LABEL_BYTES} bytes"
        )));
    }
    Ok(())
}

fn ref_id(id: Option<String>, record: Option<RecordRef>) -> Result<Uuid> {
    let id = id
        .or(record.map(|r| r.id))
        .ok_or_else(|| Error::invalid("id is required"))?;
    parse_uuid_v7(&id, "id")
}

fn single(mut out: Vec<WriteOutcome>) -> Result<Outcome> {
    match out.pop() {
        Some(WriteOutcome::Record(r)) => Ok(Outcome::Record(r)),
        Some(WriteOutcome::Affected(n)) => Ok(Outcome::Affected(n)),
        None => Err(Error::internal("write produced no outcome")),
    }
}

/// Parses `order`: "asc" | "desc" | {"id"|"__id": "asc"|"desc"}. Returns true for descending.
fn order_desc(order: Option<&Value>) -> Result<bool> {
    let dir = |v: &Value, path: &str| match v.as_str() {
        Some("asc") => Ok(false),
        Some("desc") => Ok(true),
        _ => Err(Error::invalid(format!(
            "{path}: order direction must be \"asc\" or \"desc\""
        ))),
    };
    match order {
        None | Some(Value::Null) => Ok(true),
        Some(v @ Value::String(_)) => dir(v, "orderBy"),
        Some(Value::Object(m)) if m.is_empty() => Ok(true),
        Some(Value::Object(m)) if m.len() == 1 => {
            let (field, v) = m
                .iter()
                .next()
                .ok_or_else(|| Error::invalid("orderBy is empty"))?;
            if field == "id" || field == "__id" {
                dir(v, &format!("orderBy.{field}"))
            } else {
                Err(Error::unsupported(
                    "ordering by a property (orderBy on a field)",
                ))
            }
        }
        Some(Value::Object(_)) => Err(Error::unsupported("ordering by several fields")),
        Some(_) => Err(Error::invalid(
            "orderBy must be \"asc\", \"desc\" or an object of field to direction",
        )),
    }
}

fn is_empty_predicate(p: Option<&Value>) -> bool {
    match p {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        _ => false,
    }
}

/// Validated paging: (offset, limit).
pub fn paging(offset: Option<i64>, limit: Option<i64>) -> Result<(usize, usize)> {
    let offset = offset.unwrap_or(0);
    if offset < 0 {
        return Err(Error::invalid("skip must be zero or more"));
    }
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(Error::invalid(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    Ok((offset as usize, limit as usize))
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

    /// Record search by labels in id order. Filters (`predicate`), property ordering and
    /// aggregation belong to the search engine and answer `unsupported` until it lands.
    pub(super) fn find_records(&self, tenant: &Tenant, q: &QueryDocument) -> Result<Outcome> {
        if !is_empty_predicate(q.predicate.as_ref()) {
            return Err(Error::unsupported("record search with a where predicate"));
        }
        if q.select.is_some()
            || q.aggregate.is_some()
            || q.group_by.as_ref().is_some_and(|g| !g.is_empty())
        {
            return Err(Error::unsupported(
                "aggregation and grouping (select, aggregate, groupBy)",
            ));
        }
        let desc = order_desc(q.order.as_ref())?;
        let (offset, limit) = paging(q.offset, q.limit)?;
        let labels: Vec<String> = q.labels.clone().unwrap_or_default();
        for l in &labels {
            check_label(l)?;
        }
        let Some(t) = self.store.tenant_id(tenant) else {
            return Ok(Outcome::Records {
                records: vec![],
                total: 0,
            });
        };
        let snap = self.store.snapshot()?;
        let want = offset + limit;
        // Ids of the first `want` matches in order, per source; a record has one label, so the
        // union of per-label prefixes holds the first `want` of the union.
        let mut ids: Vec<Uuid> = Vec::new();
        let mut total = 0u64;
        let mut take_ids = |prefix: Vec<u8>| -> Result<()> {
            let mut n = 0;
            snap.scan_prefix(&prefix, desc, &mut |k, _| {
                ids.push(
                    Uuid::from_slice(&k[k.len() - 16..])
                        .map_err(|_| Error::internal("corrupt key"))?,
                );
                n += 1;
                Ok(n < want)
            })
        };
        if labels.is_empty() {
            take_ids(Key::tenant(t, keys::RECORD).0)?;
            total = rstore::label_counts(&snap, t)?.iter().map(|(_, c)| c).sum();
        } else {
            let mut seen = std::collections::BTreeSet::new();
            for l in labels.iter().filter(|l| seen.insert(l.as_str())) {
                take_ids(Key::tenant(t, keys::LABEL_INDEX).str(l).0)?;
                total += rstore::label_count(&snap, t, l)?;
            }
            ids.sort_unstable();
            if desc {
                ids.reverse();
            }
        }
        let records = ids
            .iter()
            .skip(offset)
            .take(limit)
            .filter_map(|id| rstore::get_record(&snap, t, id).transpose())
            .collect::<Result<Vec<Record>>>()?;
        Ok(Outcome::Records { records, total })
    }

    pub(super) fn describe_labels(
        &self,
        tenant: &Tenant,
        q: Option<&QueryDocument>,
    ) -> Result<Outcome> {
        if !is_empty_predicate(q.and_then(|q| q.predicate.as_ref())) {
            return Err(Error::unsupported("describe labels with a where predicate"));
        }
        let Some(t) = self.store.tenant_id(tenant) else {
            return Ok(Outcome::Labels(vec![]));
        };
        let mut labels = rstore::label_counts(&self.store.snapshot()?, t)?;
        if let Some(only) = q.and_then(|q| q.labels.as_ref()).filter(|l| !l.is_empty()) {
            labels.retain(|(l, _)| only.contains(l));
        }
        Ok(Outcome::Labels(labels))
    }

    pub(super) fn describe_properties(
        &self,
        tenant: &Tenant,
        q: Option<&QueryDocument>,
    ) -> Result<Outcome> {
        if !is_empty_predicate(q.and_then(|q| q.predicate.as_ref())) {
            return Err(Error::unsupported(
                "describe properties with a where predicate",
            ));
        }
        let Some(t) = self.store.tenant_id(tenant) else {
            return Ok(Outcome::Properties(vec![]));
        };
        Ok(Outcome::Properties(rstore::properties(
            &self.store.snapshot()?,
            t,
        )?))
    }

    pub(super) fn describe_property(&self, tenant: &Tenant, id: &str) -> Result<Outcome> {
        let id = parse_uuid_v7(id, "property id")?;
        let not_found = || Error::not_found(format!("property {id} not found"));
        let t = self.store.tenant_id(tenant).ok_or_else(not_found)?;
        let info = rstore::property(&self.store.snapshot()?, t, &id)?.ok_or_else(not_found)?;
        Ok(Outcome::Property(info))
    }

    pub(super) async fn put_record(&self, tenant: Tenant, p: PutRecordOp) -> Result<Outcome> {
        let o = &p.options.clone().unwrap_or_default();
        if p.mode == PutMode::Create && (o.merge_by.is_some() || o.merge_strategy.is_some()) {
            return Err(Error::unsupported(
                "upsert (options.mergeBy / options.mergeStrategy)",
            ));
        }
        if p.vectors.as_ref().is_some_and(|v| !v.is_empty()) {
            return Err(Error::unsupported("inline vectors"));
        }
        let infer = InferOptions {
            suggest_types: o.suggest_types.unwrap_or(true),
            convert_numeric: o.convert_numeric_values_to_numbers.unwrap_or(false),
        };
        let mut props = infer_map(&p.properties.unwrap_or_default(), infer)?;
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
        let (id, mode) = match p.mode {
            PutMode::Create => {
                let l = label
                    .as_mut()
                    .ok_or_else(|| Error::invalid("label is required to create a record"))?;
                if o.capitalize_labels.unwrap_or(false) {
                    *l = l.to_uppercase();
                }
                let id = match &p.id {
                    Some(id) => parse_uuid_v7(id, "id")?,
                    None => Uuid::now_v7(),
                };
                (id, rstore::PutMode::Create)
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
        let op = WriteOp::Put(PutRecord {
            id,
            mode,
            label,
            props,
        });
        single(self.store.write(tenant, vec![op]).await?)
    }

    pub(super) async fn retype_record(
        &self,
        tenant: Tenant,
        id: Option<String>,
        record: Option<RecordRef>,
        from: String,
        to: String,
    ) -> Result<Outcome> {
        let id = ref_id(id, record)?;
        check_label(&from)?;
        check_label(&to)?;
        self.require_tenant(&tenant, id)?;
        single(
            self.store
                .write(tenant, vec![WriteOp::Retype { id, from, to }])
                .await?,
        )
    }

    pub(super) async fn delete_record(
        &self,
        tenant: Tenant,
        id: Option<String>,
        record: Option<RecordRef>,
    ) -> Result<Outcome> {
        let id = ref_id(id, record)?;
        self.require_tenant(&tenant, id)?;
        single(
            self.store
                .write(tenant, vec![WriteOp::Delete { id }])
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
        let ops = ids
            .into_iter()
            .map(|id| WriteOp::DeleteProperty { id })
            .collect();
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
    /// not-found without creating the tenant.
    fn require_tenant(&self, tenant: &Tenant, id: Uuid) -> Result<()> {
        match self.store.tenant_id(tenant) {
            Some(_) => Ok(()),
            None => Err(Error::not_found(format!("record {id} not found"))),
        }
    }
}
