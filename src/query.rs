//! The search engine: the where-DSL (SearchDto / Protocol v1 QueryDocument) lowered into a
//! plan (label set, filter tree, ordering, paging, aggregation) and run over one read view.

pub mod aggregate;
pub mod exec;
pub mod filter;
pub mod order;
pub mod traverse;

use crate::error::{Error, Result};
use crate::protocol::QueryDocument;
use serde_json::Value;

/// Default and largest `limit` of record search (BEHAVIOUR.md §2).
pub const DEFAULT_LIMIT: i64 = 100;
pub const MAX_LIMIT: i64 = 1000;
/// Longest label accepted.
pub const MAX_LABEL_BYTES: usize = 1024;

/// Threads one large scan or walk may use: the machine's cores, at most 8. Read once: asking
/// the OS reads cgroup and sysfs files (measured at ~30% of a small search's CPU when asked
/// per search).
pub fn scan_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(8)))
}

/// Runs `work` on every part, each on its own scoped thread, and returns the results in the
/// parts' order (so a caller that concatenates them sees what one thread would).
pub fn on_threads<P: Sync, T: Send>(
    parts: &[P],
    work: &(dyn Fn(&P) -> Result<T> + Sync),
) -> Result<Vec<T>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = parts.iter().map(|p| scope.spawn(move || work(p))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::internal("a query worker thread panicked")))
            })
            .collect()
    })
}

pub fn check_label(label: &str) -> Result<()> {
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

/// Validated paging: (offset, limit).
pub fn paging(
    offset: Option<i64>,
    limit: Option<i64>,
    default_limit: i64,
) -> Result<(usize, usize)> {
    let offset = offset.unwrap_or(0);
    if offset < 0 {
        // REST names it `skip`, Protocol v1 `offset`: the message names both.
        return Err(Error::invalid("skip (offset): must be zero or more"));
    }
    let limit = limit.unwrap_or(default_limit);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(Error::invalid(format!(
            "limit: must be between 1 and {MAX_LIMIT}"
        )));
    }
    Ok((offset as usize, limit as usize))
}

/// A parsed query document.
#[derive(Debug, Clone)]
pub struct Query {
    pub spec: exec::SearchSpec,
    /// Present when the document asks for `aggregate`/`select` (and optionally `groupBy`).
    pub aggregation: Option<aggregate::Aggregation>,
    /// `relatedTo`: the record the search is among the neighbours of. It must exist: a
    /// search related to an unknown record is not found, like a read of it.
    pub anchor: Option<uuid::Uuid>,
}

impl Query {
    /// Not found when the search is related to a record `kv` does not hold.
    pub fn check_anchor<R: crate::store::kv::KvRead>(&self, kv: &R, tenant: u64) -> Result<()> {
        let Some(id) = self.anchor else {
            return Ok(());
        };
        match crate::store::records::get_label(kv, tenant, &id)? {
            Some(_) => Ok(()),
            None => Err(Error::not_found(format!("record {id} not found"))),
        }
    }
}

fn labels_of(doc: &QueryDocument) -> Result<Vec<String>> {
    let mut labels = doc.labels.clone().unwrap_or_default();
    for l in &labels {
        check_label(l)?;
    }
    labels.sort();
    labels.dedup();
    Ok(labels)
}

/// Whether an optional `aggregate` / `select` object names anything (`{}` is SearchDto's
/// default, naming nothing).
pub fn present(v: &Option<Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Object(m)) => !m.is_empty(),
        Some(_) => true,
    }
}

/// Lowers a QueryDocument. `paged`: false for operations over every match (bulk delete),
/// which ignore `limit` and `offset`.
pub fn lower(doc: &QueryDocument, paged: bool) -> Result<Query> {
    let labels = labels_of(doc)?;
    let mut filter = filter::parse(doc.predicate.as_ref(), "where")?;
    let anchor = doc
        .related_to
        .as_deref()
        .map(|id| crate::model::parse_uuid_v7(id, "record id"))
        .transpose()?;
    if let Some(id) = anchor {
        let related = filter::Filter::Related(Box::new(filter::Related {
            label: None,
            edges: Default::default(),
            hops: (1, 1),
            alias: None,
            filter: filter::Filter::Id(filter::IdPred::In(vec![id])),
            resolved: None,
        }));
        filter = match filter {
            filter::Filter::True => related,
            f => filter::Filter::And(vec![f, related]),
        };
    }
    let (offset, limit) = paging(doc.offset, doc.limit, DEFAULT_LIMIT)?;
    if present(&doc.aggregate) && present(&doc.select) {
        return Err(Error::invalid(
            "aggregate and select: send one of them, not both",
        ));
    }
    let agg_doc = if present(&doc.aggregate) {
        Some((doc.aggregate.as_ref(), false))
    } else if present(&doc.select) {
        Some((doc.select.as_ref(), true))
    } else {
        None
    };
    let group_by = doc.group_by.clone().unwrap_or_default();
    let aggregation = match agg_doc {
        Some((Some(v), select_form)) => Some(aggregate::parse(
            v,
            select_form,
            &group_by,
            doc.order.as_ref(),
            offset,
            limit,
        )?),
        _ => None,
    };
    if let Some(agg) = &aggregation {
        for a in aggregate::aliases(agg) {
            if !filter.alias_chain(&a, &mut Vec::new()) {
                return Err(Error::invalid(format!(
                    "alias {}: not declared by any $alias in where",
                    crate::model::truncate(&a, 40)
                )));
            }
        }
    }
    if aggregation.is_none() && !group_by.is_empty() {
        // SPEC.md: groupBy has an effect only with at least one aggregation.
        aggregate::check_group_by(&group_by)?;
    }
    let mut aggregation = aggregation;
    let order = match &mut aggregation {
        // Rows without grouping are records: unless the order names a computed output, they
        // follow the record ordering rules, applied by the search itself.
        Some(agg)
            if agg.dims.is_empty()
                && !agg
                    .order
                    .iter()
                    .any(|(k, _)| agg.defs.iter().any(|d| d.name == *k)) =>
        {
            agg.order.clear();
            order::parse(doc.order.as_ref(), "orderBy")?
        }
        // Grouped rows (or rows ordered by a computed output) are ordered after aggregation.
        Some(_) => vec![order::OrderKey {
            field: None,
            desc: true,
        }],
        None => order::parse(doc.order.as_ref(), "orderBy")?,
    };
    Ok(Query {
        spec: exec::SearchSpec {
            labels,
            filter,
            order,
            offset: if paged && aggregation.is_none() {
                offset
            } else {
                0
            },
            limit: if paged && aggregation.is_none() {
                Some(limit)
            } else {
                None
            },
        },
        aggregation,
        anchor,
    })
}
