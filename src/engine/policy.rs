//! The data-access policy of a tenant (SPEC.md "Data-access policy", BEHAVIOUR.md §7).
//!
//! Invariants:
//! - A policy binds capability tokens only, and only in `PolicyEnforced` mode; the bootstrap
//!   token and `BoundaryOnly` tenants are bound by the tenant boundary alone.
//! - Enforcement happens once, in `Engine::execute`: an operation is admitted (possibly with
//!   its labels narrowed to the allowed ones) or refused with `unauthorized` before it runs,
//!   and its outcome is filtered (hidden properties removed, rows capped) before it leaves.
//! - Anything the policy cannot be applied to fails closed with `unauthorized`.

use super::Outcome;
use crate::error::{Error, ErrorCode, Result};
use crate::model::Record;
use crate::protocol::{
    DescribeOp, IngestOp, Mutation, Operation, PolicyDocument, QueryDocument, QueryOp,
};
use crate::query::filter::Filter;
use crate::store::keys::{self, Key};
use crate::store::kv::KvRead;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    BoundaryOnly,
    PolicyEnforced,
}

/// An installed policy, stored under the tenant's POLICY key as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Installed {
    pub mode: Mode,
    /// None or `["*"]`: every label.
    #[serde(default)]
    pub allowed_labels: Option<Vec<String>>,
    #[serde(default)]
    pub denied_relationship_types: Vec<String>,
    /// label -> the properties its records show; labels not listed show every property.
    #[serde(default)]
    pub visible_properties: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub max_results: Option<u64>,
}

pub fn policy_key(tenant: u64) -> Vec<u8> {
    Key::tenant(tenant, keys::POLICY).0
}

/// The tenant's installed policy, if any.
pub fn load<R: KvRead + ?Sized>(kv: &R, tenant: u64) -> Result<Option<Installed>> {
    match kv.get(&policy_key(tenant))? {
        None => Ok(None),
        Some(v) => serde_json::from_slice(&v)
            .map(Some)
            .map_err(|e| Error::internal(format!("stored policy unreadable: {e}"))),
    }
}

/// Validates a `policy set` into what is stored.
pub fn from_request(mode: &str, doc: Option<&PolicyDocument>) -> Result<Installed> {
    let mode = match mode {
        "BoundaryOnly" => Mode::BoundaryOnly,
        "PolicyEnforced" => Mode::PolicyEnforced,
        other => {
            return Err(Error::invalid(format!(
                "policy.mode: '{}' is not one of BoundaryOnly, PolicyEnforced",
                crate::model::truncate(other, 40)
            )))
        }
    };
    let mut out = Installed {
        mode,
        allowed_labels: None,
        denied_relationship_types: vec![],
        visible_properties: BTreeMap::new(),
        max_results: None,
    };
    let Some(d) = doc else { return Ok(out) };
    // Every name must be one a record or relationship could carry.
    for (i, l) in d.allowed_labels.iter().flatten().enumerate() {
        if l != "*" {
            crate::query::check_label(l)
                .map_err(|e| Error::invalid(format!("policy.allowedLabels[{i}]: {}", e.message)))?;
        }
    }
    for (i, t) in d.denied_relationship_types.iter().flatten().enumerate() {
        super::relationships::rel_type(Some(t), &format!("policy.deniedRelationshipTypes[{i}]"))?;
    }
    for (label, _) in d.visible_properties.iter().flatten() {
        crate::query::check_label(label)
            .map_err(|e| Error::invalid(format!("policy.visibleProperties: {}", e.message)))?;
    }
    out.allowed_labels = d
        .allowed_labels
        .clone()
        .filter(|l| !l.iter().any(|x| x == "*"));
    out.denied_relationship_types = d
        .denied_relationship_types
        .iter()
        .flatten()
        .map(|t| crate::model::canonical_type(t).to_string())
        .collect();
    for (label, props) in d.visible_properties.iter().flatten() {
        let list =
            crate::protocol::string_list(props, &format!("policy.visibleProperties.{label}"))?;
        out.visible_properties.insert(label.clone(), list);
    }
    if d.max_results == Some(0) {
        return Err(Error::invalid("policy.maxResults: must be at least 1"));
    }
    out.max_results = d.max_results;
    Ok(out)
}

/// Checks a stored policy (a restored snapshot's policy line): it must be exactly the JSON
/// the engine stores for a policy (no field unknown, misspelt or given by position: serde
/// would read a struct from an array), with `maxResults` at least 1 and no empty name. Names
/// are not held to the limits on new names again: the store may hold labels from before
/// them, and a policy naming them with it.
pub fn check_stored(bytes: &[u8]) -> Result<()> {
    let p: Installed = serde_json::from_slice(bytes)
        .map_err(|e| Error::invalid(format!("not a data-access policy ({e})")))?;
    let given: Option<Value> = serde_json::from_slice(bytes).ok();
    if given != serde_json::to_value(&p).ok() {
        return Err(Error::invalid(
            "not a data-access policy the engine stores (set it again with policy set)",
        ));
    }
    if p.max_results == Some(0) {
        return Err(Error::invalid("policy.maxResults: must be at least 1"));
    }
    // Labels and types as `policy set` refuses them empty (property lists take any text).
    let names = p
        .allowed_labels
        .iter()
        .flatten()
        .chain(&p.denied_relationship_types);
    if names
        .chain(p.visible_properties.keys())
        .any(String::is_empty)
    {
        return Err(Error::invalid(
            "policy: a label or relationship type is empty",
        ));
    }
    Ok(())
}

pub fn to_json(p: Option<&Installed>) -> Value {
    match p {
        None => json!({"kind": "policy", "mode": "BoundaryOnly"}),
        Some(p) => {
            let mode = match p.mode {
                Mode::BoundaryOnly => "BoundaryOnly",
                Mode::PolicyEnforced => "PolicyEnforced",
            };
            json!({"kind": "policy", "mode": mode, "policy": {
                "allowedLabels": p.allowed_labels.clone().unwrap_or_else(|| vec!["*".into()]),
                "deniedRelationshipTypes": p.denied_relationship_types,
                "visibleProperties": p.visible_properties,
                "maxResults": p.max_results,
            }})
        }
    }
}

/// Looks up the label of a stored record by id (None: unknown).
pub type LabelOf<'a> = &'a dyn Fn(&str) -> Result<Option<String>>;

fn ids(v: &crate::protocol::OneOrMany) -> Vec<String> {
    match v {
        crate::protocol::OneOrMany::One(s) => vec![s.clone()],
        crate::protocol::OneOrMany::Many(v) => v.clone(),
    }
}

fn refuse(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::Unauthorized, msg)
}

/// An enforced policy applied to one request.
pub struct Guard {
    p: Installed,
}

impl Guard {
    pub fn new(p: Installed) -> Option<Guard> {
        (p.mode == Mode::PolicyEnforced).then_some(Guard { p })
    }

    fn label_allowed(&self, label: &str) -> bool {
        self.p
            .allowed_labels
            .as_ref()
            .is_none_or(|l| l.iter().any(|x| x == label))
    }

    fn check_label(&self, label: &str) -> Result<()> {
        if self.label_allowed(label) {
            Ok(())
        } else {
            Err(refuse(format!("the policy does not allow label '{label}'")))
        }
    }

    fn hidden(&self, label: &str, prop: &str) -> bool {
        self.p
            .visible_properties
            .get(label)
            .is_some_and(|v| !v.iter().any(|x| x == prop))
    }

    fn check_prop(&self, labels: &[String], prop: &str) -> Result<()> {
        match labels.iter().find(|l| self.hidden(l, prop)) {
            Some(l) => Err(refuse(format!(
                "the policy hides property '{prop}' of label '{l}'"
            ))),
            None => Ok(()),
        }
    }

    fn check_type(&self, t: &str) -> Result<()> {
        if self.p.denied_relationship_types.iter().any(|d| d == t) {
            return Err(refuse(format!("the policy denies relationship type '{t}'")));
        }
        Ok(())
    }

    /// An upsert compares the stored values of its match properties (`mergeBy`; every
    /// incoming property with a value when it is empty), so each must be visible, as in a
    /// filter. `incoming`: the names of the incoming properties that have a value.
    fn check_upsert<'a>(
        &self,
        label: &str,
        upsert: Option<&super::ingest::Upsert>,
        incoming: impl Iterator<Item = &'a str>,
    ) -> Result<()> {
        let Some(u) = upsert else {
            return Ok(());
        };
        let labels = [label.to_string()];
        match u.match_on.is_empty() {
            false => u
                .match_on
                .iter()
                .try_for_each(|f| self.check_prop(&labels, f)),
            true => incoming
                .into_iter()
                .try_for_each(|f| self.check_prop(&labels, f)),
        }
    }

    /// A bulk link's side: its label, its key property and its where tree are read.
    fn check_side(&self, side: &crate::protocol::LinkSide, what: &str) -> Result<()> {
        self.check_label(&side.label)?;
        let labels = [side.label.clone()];
        if let Some(k) = &side.property {
            self.check_prop(&labels, k)?;
        }
        let f = crate::query::filter::parse(side.predicate.as_ref(), what)?;
        self.check_filter(&f, &labels, &mut HashMap::new())
    }

    /// Labels, properties and relationship types a where tree touches; `aliases` collects
    /// the labels its `$alias` names stand for.
    fn check_filter(
        &self,
        f: &Filter,
        labels: &[String],
        aliases: &mut HashMap<String, Vec<String>>,
    ) -> Result<()> {
        match f {
            Filter::True | Filter::Id(_) => Ok(()),
            Filter::Field(name, _) => self.check_prop(labels, name),
            Filter::And(fs) | Filter::Or(fs) | Filter::Nor(fs) | Filter::Xor(fs) => fs
                .iter()
                .try_for_each(|f| self.check_filter(f, labels, aliases)),
            Filter::Not(f) => self.check_filter(f, labels, aliases),
            Filter::Related(r) => {
                let Some(label) = &r.label else {
                    if self.p.allowed_labels.is_some() {
                        return Err(refuse(
                            "the policy allows only some labels: a traversal must name its related label",
                        ));
                    }
                    return self.check_filter(&r.filter, &[], aliases);
                };
                self.check_label(label)?;
                if !self.p.denied_relationship_types.is_empty() {
                    if r.edges.types.is_empty() {
                        return Err(refuse(
                            "the policy denies some relationship types: a traversal must name its $relation type",
                        ));
                    }
                    r.edges.types.iter().try_for_each(|t| self.check_type(t))?;
                }
                let inner = vec![label.clone()];
                if let Some(a) = &r.alias {
                    aliases.insert(a.trim_start_matches('$').to_string(), inner.clone());
                }
                self.check_filter(&r.filter, &inner, aliases)
            }
        }
    }

    /// A search document: labels narrowed to (or checked against) the allowed ones, every
    /// filtered, sorted, aggregated or grouped property visible, `limit` within maxResults.
    fn admit_doc(&self, mut doc: QueryDocument) -> Result<QueryDocument> {
        match (&doc.labels, &self.p.allowed_labels) {
            (Some(ls), _) if !ls.is_empty() => ls.iter().try_for_each(|l| self.check_label(l))?,
            (_, Some(allowed)) => doc.labels = Some(allowed.clone()),
            _ => {}
        }
        let q = crate::query::lower(&doc, true)?;
        let labels = &q.spec.labels;
        let mut aliases = HashMap::new();
        self.check_filter(&q.spec.filter, labels, &mut aliases)?;
        for k in &q.spec.order {
            if let Some(f) = &k.field {
                self.check_prop(labels, f)?;
            }
        }
        if let Some(a) = &q.aggregation {
            let of = |alias: &Option<String>| -> Vec<String> {
                match alias {
                    Some(a) => aliases
                        .get(a.trim_start_matches('$'))
                        .cloned()
                        .unwrap_or_default(),
                    None => labels.clone(),
                }
            };
            for d in &a.defs {
                if let Some(f) = &d.field {
                    self.check_prop(&of(&d.alias), f)?;
                }
                // A collect of records ordered by a property reads it (its order would tell
                // a hidden value even though the answer leaves the value out).
                if let crate::query::aggregate::AggFn::Collect { by: Some(p), .. } = &d.func {
                    self.check_prop(&of(&d.alias), p)?;
                }
            }
            // Without groupBy the rows are records, ordered by any of their fields but the
            // aggregate outputs: those fields are read as a sort is.
            if a.dims.is_empty() {
                for (name, _) in &a.order {
                    if !a.defs.iter().any(|d| &d.name == name) {
                        self.check_prop(labels, name)?;
                    }
                }
            }
            for (_, dim) in &a.dims {
                match dim {
                    crate::query::aggregate::Dim::Prop(p) => self.check_prop(labels, p)?,
                    crate::query::aggregate::Dim::AliasProp(a, p) => {
                        self.check_prop(&of(&Some(a.clone())), p)?
                    }
                    crate::query::aggregate::Dim::Bucket(_) => {}
                }
            }
        }
        Ok(doc)
    }

    /// An import links its records (nested documents to their children, `parentId` to its
    /// roots) with its relationship type, which the policy must not deny; `parentId` is a
    /// record written by id, so its label must be allowed (as a 404 would tell it apart from
    /// a missing record otherwise).
    fn check_import_links(
        &self,
        o: &super::ingest::Options,
        links: bool,
        parent: Option<&String>,
        label_of: LabelOf<'_>,
    ) -> Result<()> {
        if links {
            self.check_type(&o.relationship_type)?;
        }
        if let Some(p) = parent {
            self.check_ids(std::slice::from_ref(p), label_of)?;
        }
        Ok(())
    }

    /// The stored records named by id must be of allowed labels (unknown ids pass: the
    /// operation answers them as unknown).
    fn check_ids(&self, ids: &[String], label_of: LabelOf<'_>) -> Result<()> {
        for id in ids {
            if let Some(l) = label_of(id)? {
                self.check_label(&l)?;
            }
        }
        Ok(())
    }

    /// Checks an operation before it runs, narrowing what it reads where it can.
    pub fn admit(&self, op: Operation, label_of: LabelOf<'_>) -> Result<Operation> {
        let fail_closed = |what: &str| {
            Err(refuse(format!(
                "{what} cannot apply the data-access policy and is refused under PolicyEnforced"
            )))
        };
        Ok(match op {
            Operation::Query(QueryOp::Records(mut q)) => {
                q.query = self.admit_doc(q.query)?;
                Operation::Query(QueryOp::Records(q))
            }
            Operation::Query(QueryOp::ExportCsv(mut q)) => {
                q.query = self.admit_doc(q.query)?;
                let labels = q.query.labels.clone().unwrap_or_default();
                if labels.is_empty() && !self.p.visible_properties.is_empty()
                    || labels
                        .iter()
                        .any(|l| self.p.visible_properties.contains_key(l))
                {
                    return fail_closed("a CSV export of labels with hidden properties");
                }
                if let Some(max) = self.p.max_results {
                    let limit = q.query.limit.unwrap_or(100).min(max as i64);
                    q.query.limit = Some(limit);
                }
                Operation::Query(QueryOp::ExportCsv(q))
            }
            op @ Operation::Query(QueryOp::Record(_)) => op,
            Operation::Mutate(Mutation::DeleteRecords(mut q)) => {
                q.query = self.admit_doc(q.query)?;
                Operation::Mutate(Mutation::DeleteRecords(q))
            }
            Operation::Mutate(Mutation::PutRecord(p)) => {
                if let Some(l) = p.label.as_deref().filter(|l| !l.is_empty()) {
                    self.check_label(l)?;
                    // Only a create is an upsert (edits ignore mergeBy).
                    if p.mode == crate::protocol::PutMode::Create {
                        let upsert = super::ingest::Options::parse(p.options.as_ref())?.upsert;
                        let valued = p.properties.iter().flatten().filter(|(_, v)| !v.is_null());
                        let typed = p.typed_properties.iter().flatten().map(|t| &t.name);
                        let names = valued.map(|(k, _)| k).chain(typed).map(String::as_str);
                        self.check_upsert(l, upsert.as_ref(), names)?;
                    }
                }
                self.check_ids(p.id.as_slice(), label_of)?;
                Operation::Mutate(Mutation::PutRecord(p))
            }
            Operation::Mutate(Mutation::RetypeRecord(r)) => {
                self.check_label(&r.from_label)?;
                self.check_label(&r.to_label)?;
                let id = r.id.clone().or(r.record.as_ref().map(|x| x.id.clone()));
                self.check_ids(id.as_slice(), label_of)?;
                Operation::Mutate(Mutation::RetypeRecord(r))
            }
            Operation::Mutate(Mutation::DeleteRecord(d)) => {
                let id = d.id.clone().or(d.record.as_ref().map(|x| x.id.clone()));
                self.check_ids(id.as_slice(), label_of)?;
                Operation::Mutate(Mutation::DeleteRecord(d))
            }
            Operation::Mutate(Mutation::LinkRecordsById(c)) => {
                let t = c
                    .command
                    .relation_type
                    .as_deref()
                    .unwrap_or(crate::model::DEFAULT_RELATION_TYPE);
                self.check_type(crate::model::canonical_type(t))?;
                self.check_ids(&ids(&c.command.source_ids), label_of)?;
                self.check_ids(&ids(&c.command.target_ids), label_of)?;
                Operation::Mutate(Mutation::LinkRecordsById(c))
            }
            Operation::Mutate(Mutation::UnlinkRecordsById(c)) => {
                self.check_ids(&ids(&c.command.source_ids), label_of)?;
                self.check_ids(&ids(&c.command.target_ids), label_of)?;
                Operation::Mutate(Mutation::UnlinkRecordsById(c))
            }
            Operation::Mutate(Mutation::LinkRecords(c)) => {
                self.check_side(&c.command.source, "source.where")?;
                self.check_side(&c.command.target, "target.where")?;
                if let Some(t) = &c.command.relation_type {
                    self.check_type(crate::model::canonical_type(t))?;
                }
                Operation::Mutate(Mutation::LinkRecords(c))
            }
            Operation::Mutate(Mutation::UnlinkRecords(c)) => {
                self.check_side(&c.command.source, "source.where")?;
                self.check_side(&c.command.target, "target.where")?;
                Operation::Mutate(Mutation::UnlinkRecords(c))
            }
            op @ Operation::Transaction(_) => op,
            Operation::Ingest(i) => {
                match &i {
                    IngestOp::Documents(d) => {
                        // Every label the import would write, as the import itself plans it.
                        let o = super::ingest::Options::parse(d.options.as_ref())?;
                        let plan = crate::bulk::flatten(
                            d.label.as_deref(),
                            &d.documents,
                            "documents",
                            &o.flatten,
                        )?;
                        for r in &plan.records {
                            self.check_label(&r.label)?;
                            let valued = r.props.iter().filter(|(_, v)| v.is_some());
                            let names = valued.map(|(k, _)| k.as_str());
                            self.check_upsert(&r.label, o.upsert.as_ref(), names)?;
                        }
                        let parent = d.parent_id.as_ref().filter(|p| !p.is_empty());
                        self.check_import_links(
                            &o,
                            !plan.links.is_empty() || parent.is_some(),
                            parent,
                            label_of,
                        )?;
                    }
                    IngestOp::Csv(c) => {
                        let parent = c.parent_id.as_ref().filter(|p| !p.is_empty());
                        let o = super::ingest::Options::parse(c.options.as_ref())?;
                        self.check_import_links(&o, parent.is_some(), parent, label_of)?;
                        if let Some(l) = &c.label {
                            self.check_label(l)?;
                            // The columns are not known before the file is parsed: an upsert
                            // on every column of a label with hidden properties is refused.
                            let upsert = super::ingest::Options::parse(c.options.as_ref())?.upsert;
                            let every = upsert.as_ref().is_some_and(|u| u.match_on.is_empty());
                            if every && self.p.visible_properties.contains_key(l) {
                                return fail_closed(
                                    "a CSV upsert without mergeBy on a label with hidden properties",
                                );
                            }
                            self.check_upsert(l, upsert.as_ref(), std::iter::empty())?;
                        }
                    }
                }
                Operation::Ingest(i)
            }
            Operation::Describe(DescribeOp::BuildInfo(e)) => {
                Operation::Describe(DescribeOp::BuildInfo(e))
            }
            Operation::Describe(d) => return fail_closed(&format!("describe {}", d.kind_name())),
            Operation::Query(q) => return fail_closed(&format!("query {}", q.kind_name())),
            Operation::Mutate(m) => return fail_closed(&format!("mutate {}", m.kind_name())),
            other => return fail_closed(&other.name()),
        })
    }

    fn visible(&self, mut r: Record) -> Result<Record> {
        self.check_label(&r.label)?;
        if let Some(v) = self.p.visible_properties.get(&r.label) {
            r.props.retain(|k, _| v.iter().any(|x| x == k));
        }
        Ok(r)
    }

    /// Filters an outcome: single reads of a label outside the policy are refused, records
    /// lose hidden properties, lists and totals are capped at maxResults.
    pub fn filter(&self, out: Outcome) -> Result<Outcome> {
        let cap = |n: u64| self.p.max_results.map_or(n, |m| n.min(m));
        Ok(match out {
            Outcome::Record(r) => Outcome::Record(Box::new(self.visible(*r)?)),
            Outcome::TransactionGet(r) => Outcome::TransactionGet(Box::new(self.visible(*r)?)),
            Outcome::Records { records, total } => {
                let mut records = records
                    .into_iter()
                    .map(|r| self.visible(r))
                    .collect::<Result<Vec<_>>>()?;
                records.truncate(cap(records.len() as u64) as usize);
                Outcome::Records {
                    records,
                    total: cap(total),
                }
            }
            Outcome::Rows { mut rows, total } => {
                // Per-record rows carry the record, and `collect` outputs the records they
                // gathered: hidden properties go from each. Grouped rows hold only checked
                // dimensions.
                for row in rows.iter_mut() {
                    self.visible_json(row)?;
                }
                rows.truncate(cap(rows.len() as u64) as usize);
                Outcome::Rows {
                    rows,
                    total: cap(total),
                }
            }
            Outcome::Ingested {
                count,
                relationships,
                records,
            } => Outcome::Ingested {
                count,
                relationships,
                records: records
                    .map(|rs| rs.into_iter().map(|r| self.visible(r)).collect())
                    .transpose()?,
            },
            other => other,
        })
    }

    /// Removes hidden properties from a rendered record (an object with `__label`: its
    /// properties are the keys its `__proptypes` lists) and from the records nested in it
    /// (`collect` outputs, at most maxResults of them each); refuses one of a label the
    /// policy does not allow.
    fn visible_json(&self, v: &mut Value) -> Result<()> {
        match v {
            Value::Array(items) => {
                // Records a `collect` gathered count against maxResults as rows do.
                let records = items.iter().any(|x| x.get("__label").is_some());
                if let (true, Some(max)) = (records, self.p.max_results) {
                    items.truncate(usize::try_from(max).unwrap_or(usize::MAX));
                }
                items.iter_mut().try_for_each(|x| self.visible_json(x))
            }
            Value::Object(m) => {
                if let Some(label) = m.get("__label").and_then(Value::as_str) {
                    self.check_label(label)?;
                    if let Some(visible) = self.p.visible_properties.get(label) {
                        let hidden: Vec<String> = m
                            .get("__proptypes")
                            .and_then(Value::as_object)
                            .map(|t| {
                                t.keys()
                                    .filter(|k| !visible.iter().any(|v| v == *k))
                                    .cloned()
                                    .collect()
                            })
                            .unwrap_or_default();
                        for k in &hidden {
                            m.remove(k);
                            if let Some(Value::Object(t)) = m.get_mut("__proptypes") {
                                t.remove(k);
                            }
                        }
                    }
                }
                m.values_mut().try_for_each(|x| self.visible_json(x))
            }
            _ => Ok(()),
        }
    }
}
