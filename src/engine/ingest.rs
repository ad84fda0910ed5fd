//! Bulk writes: `ingest` documents and CSV (REST JSON and CSV import), upsert options, and
//! `query exportCsv`. A whole ingest is one write batch: it applies entirely or not at all.

use super::{Engine, Outcome, Sink};
use crate::bulk::{self, csv as bulk_csv, FlattenOptions};
use crate::error::{Error, Result};
use crate::model::infer::InferOptions;
use crate::model::{parse_uuid_v7, Record};
use crate::protocol::{IngestOp, QueryDocument, WriteOptions};
use crate::store::records::{
    MergeStrategy, PutMode, PutRecord, UpsertRecord, WriteOp, WriteOutcome,
};
use crate::store::relationships::LinkRel;
use crate::store::Tenant;
use serde_json::Value;

/// Imports answer with the records they wrote only up to this many (SPEC.md `returnResult`).
pub const MAX_RETURNED_RECORDS: usize = 1000;

/// Upsert settings from `mergeBy` / `mergeStrategy` (SPEC.md upsert rule 1: either triggers it).
#[derive(Debug, Clone)]
pub(super) struct Upsert {
    pub match_on: Vec<String>,
    pub strategy: MergeStrategy,
}

/// Write options, validated once for create and imports.
pub(super) struct Options {
    pub flatten: FlattenOptions,
    pub upsert: Option<Upsert>,
    pub relationship_type: String,
    pub return_result: bool,
}

impl Options {
    pub fn parse(o: Option<&WriteOptions>) -> Result<Options> {
        let d = WriteOptions::default();
        let o = o.unwrap_or(&d);
        let strategy = match o.merge_strategy.as_deref() {
            None | Some("append") => MergeStrategy::Append,
            Some("rewrite") => MergeStrategy::Rewrite,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "options.mergeStrategy: '{}' is not one of append, rewrite",
                    crate::model::truncate(other, 64)
                )))
            }
        };
        let upsert = (o.merge_by.is_some() || o.merge_strategy.is_some()).then(|| Upsert {
            match_on: o.merge_by.clone().unwrap_or_default(),
            strategy,
        });
        let relationship_type = super::relationships::new_rel_type(
            o.relationship_type.as_deref(),
            "options.relationshipType",
        )?;
        Ok(Options {
            flatten: FlattenOptions {
                infer: InferOptions {
                    suggest_types: o.suggest_types.unwrap_or(true),
                    convert_numeric: o.convert_numeric_values_to_numbers.unwrap_or(false),
                },
                capitalize_labels: o.capitalize_labels.unwrap_or(false),
                skip_empty_values: o.skip_empty_values.unwrap_or(false),
            },
            upsert,
            relationship_type,
            return_result: o.return_result.unwrap_or(false),
        })
    }
}

/// The write of one planned record: a create, or an upsert when the options ask for one.
/// `id` is one the engine has just generated (UUIDv7), so the create is not probed for it.
pub(super) fn record_op(
    id: uuid::Uuid,
    label: String,
    props: crate::model::infer::PropWrites,
    upsert: Option<&Upsert>,
) -> WriteOp {
    match upsert {
        Some(u) => WriteOp::Upsert(UpsertRecord {
            id,
            label,
            props,
            match_on: u.match_on.clone(),
            strategy: u.strategy,
        }),
        None => WriteOp::Put(PutRecord {
            id,
            mode: PutMode::CreateNew,
            label: Some(label),
            props,
        }),
    }
}

/// The writes storing a record's inline vectors.
pub(super) fn vector_ops(
    id: uuid::Uuid,
    vectors: Vec<bulk::InlineVector>,
) -> impl Iterator<Item = WriteOp> {
    vectors
        .into_iter()
        .map(move |(property, values)| WriteOp::SetVector {
            id,
            property,
            values,
        })
}

impl Engine {
    pub(super) async fn ingest(
        &self,
        tenant: Tenant,
        op: IngestOp,
        sink: &mut Sink<'_>,
    ) -> Result<Outcome> {
        let mut row_vectors = Vec::new();
        let (label, docs, options, parent, what) = match op {
            IngestOp::Documents(d) => (d.label, d.documents, d.options, d.parent_id, "documents"),
            IngestOp::Csv(c) => {
                for (i, v) in c.vectors.iter().flatten().enumerate() {
                    row_vectors.push(bulk::inline_vectors(v, &format!("vectors[{i}]"))?);
                }
                let label = c.label.filter(|l| !l.is_empty()).ok_or_else(|| {
                    Error::invalid("label is required: every CSV row becomes a record of it")
                })?;
                let cfg = bulk_csv::ParseConfig::from_json(c.parse_config.as_ref())?;
                let rows = bulk_csv::parse(&c.data, &cfg)?;
                if row_vectors.len() > rows.len() {
                    return Err(Error::invalid(format!(
                        "vectors has {} entries but the CSV has {} rows",
                        row_vectors.len(),
                        rows.len()
                    )));
                }
                let docs = rows.into_iter().map(Value::Object).collect();
                (Some(label), docs, c.options, c.parent_id, "rows")
            }
        };
        let o = Options::parse(options.as_ref())?;
        let parent = parent
            .filter(|p| !p.is_empty())
            .map(|p| parse_uuid_v7(&p, "parentId"))
            .transpose()?;
        if let Some(p) = parent {
            self.require_tenant(&tenant, p, sink)?;
        }
        if o.upsert.is_some() {
            sink.refuse("an upsert (options.mergeBy / options.mergeStrategy)")?;
        }
        let plan = tokio::task::spawn_blocking(move || {
            bulk::flatten(label.as_deref(), &docs, what, &o.flatten).map(|p| (p, o))
        })
        .await
        .map_err(|e| Error::internal(format!("import task: {e}")))??;
        let (mut plan, o) = plan;
        // CSV rows are flat: record i is row i.
        for (r, v) in plan.records.iter_mut().zip(row_vectors) {
            r.vectors = v;
        }
        let records = plan.records.len();
        if records == 0 {
            return Ok(Outcome::Ingested {
                count: 0,
                relationships: 0,
                records: o.return_result.then(Vec::new),
            });
        }
        let link = |source, target, unique| {
            WriteOp::Link(LinkRel {
                id: uuid::Uuid::now_v7(),
                seen: None,
                source,
                target,
                rel_type: o.relationship_type.clone(),
                props: Default::default(),
                unique,
            })
        };
        // Links go after every record, so an upsert's match is known when a link names it.
        // With upserts, a link may already exist between two matched records: keep one.
        let unique = o.upsert.is_some();
        let mut ops = Vec::with_capacity(records + plan.links.len() + plan.roots.len());
        let mut vectors = Vec::new();
        let links: Vec<WriteOp> = plan
            .links
            .iter()
            .map(|&(p, c)| link(p, c, unique))
            .chain(
                parent
                    .iter()
                    .flat_map(|p| plan.roots.iter().map(|&r| link(*p, r, true))),
            )
            .collect();
        for r in plan.records {
            vectors.extend(vector_ops(r.id, r.vectors));
            ops.push(record_op(r.id, r.label, r.props, o.upsert.as_ref()));
        }
        let linked = records + links.len();
        ops.extend(links);
        ops.extend(vectors);
        let out = self.apply_writes(tenant, ops, sink).await?;
        let mut written: Vec<Record> = Vec::new();
        let mut relationships = 0;
        let keep = o.return_result && records <= MAX_RETURNED_RECORDS;
        // Outcomes follow the ops: records, then links, then vectors.
        for (i, w) in out.into_iter().enumerate() {
            match w {
                WriteOutcome::Record(r) if keep => written.push(*r),
                WriteOutcome::Affected(n) if i < linked => relationships += n,
                _ => {}
            }
        }
        Ok(Outcome::Ingested {
            count: records as u64,
            relationships,
            records: keep.then_some(written),
        })
    }

    /// `query exportCsv`: the records a search finds (limit up to 1000), as CSV text.
    pub(super) async fn export_csv(&self, tenant: &Tenant, doc: &QueryDocument) -> Result<Outcome> {
        if doc.asks_for_rows() {
            return Err(Error::invalid(
                "CSV export takes where, orderBy, skip, limit and labels; aggregate, select and groupBy are not exported",
            ));
        }
        let records = match self.find_records(tenant, doc).await? {
            Outcome::Records { records, .. } => records,
            other => return Err(Error::internal(format!("export got {other:?}"))),
        };
        let count = records.len() as u64;
        let content = bulk_csv::render(&records)?;
        Ok(Outcome::Csv { content, count })
    }
}
