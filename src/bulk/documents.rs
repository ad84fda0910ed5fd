//! Nested JSON documents -> records and links (BEHAVIOUR.md §6, JSON import).
//!
//! A document is an object. Its primitive values and arrays of primitives are the record's
//! properties; an object under key K is a child record labelled K, an array of objects under
//! K one child per element; every child is linked parent -> child. Without a label a document
//! is a *container*: each key holds the root record(s) labelled by that key.

use crate::error::{Error, Result};
use crate::model::infer::{infer_value, InferOptions, PropWrites};
use crate::model::{check_property_name, check_property_name_to_unset};
use crate::query::check_label;
use serde_json::{Map, Value};
use uuid::Uuid;

#[derive(Debug, Clone, Copy, Default)]
pub struct FlattenOptions {
    pub infer: InferOptions,
    /// Uppercase labels taken from keys (`capitalizeLabels`); a given label is kept as given.
    pub capitalize_labels: bool,
    /// Empty strings and empty arrays are left out (`skipEmptyValues`, what the SDK sends).
    pub skip_empty_values: bool,
}

/// One record to write. `doc` is the index of the document it came from.
#[derive(Debug, Clone)]
pub struct Planned {
    pub id: Uuid,
    pub label: String,
    pub props: PropWrites,
    pub doc: usize,
    /// Inline vectors (`$vectors`), stored with the record.
    pub vectors: Vec<super::InlineVector>,
}

/// Records in document order, each parent before its children, and the links between them.
#[derive(Debug, Default)]
pub struct Plan {
    pub records: Vec<Planned>,
    /// (parent, child) pairs.
    pub links: Vec<(Uuid, Uuid)>,
    /// The records that are no document's child (what `parentId` attaches to).
    pub roots: Vec<Uuid>,
}

/// Prefixes a validation error with the JSON path it concerns.
fn at(path: &str, e: Error) -> Error {
    Error::new(e.code, format!("{path}: {}", e.message))
}

/// What `options.skipEmptyValues` leaves out: an empty string or an empty array.
pub(crate) fn is_empty_value(v: &Value) -> bool {
    matches!(v, Value::String(s) if s.is_empty()) || matches!(v, Value::Array(a) if a.is_empty())
}

struct Flattener<'a> {
    opts: &'a FlattenOptions,
    plan: Plan,
    doc: usize,
}

impl Flattener<'_> {
    fn child_label(&self, key: &str, path: &str) -> Result<String> {
        let label = if self.opts.capitalize_labels {
            key.to_uppercase()
        } else {
            key.to_string()
        };
        check_label(&label).map_err(|e| at(path, e))?;
        Ok(label)
    }

    /// Plans one record and, depth first, its children; returns its id.
    fn record(&mut self, label: String, obj: &Map<String, Value>, path: &str) -> Result<Uuid> {
        let id = Uuid::now_v7();
        let mut props = PropWrites::new();
        let mut vectors = Vec::new();
        let mut children: Vec<(&str, Vec<&Map<String, Value>>)> = Vec::new();
        for (k, v) in obj {
            let kpath = format!("{path}.{k}");
            match v {
                _ if k == "$vectors" => vectors = super::inline_vectors(v, &kpath)?,
                Value::Object(child) => children.push((k, vec![child])),
                Value::Array(items) if items.iter().any(Value::is_object) => {
                    let objs: Vec<_> = items.iter().filter_map(Value::as_object).collect();
                    if objs.len() != items.len() {
                        return Err(Error::invalid(format!(
                            "{kpath}: an array mixes objects with other values (objects become records, values properties)"
                        )));
                    }
                    children.push((k, objs));
                }
                _ if self.opts.skip_empty_values && is_empty_value(v) => {}
                // "Unset" (BEHAVIOUR.md §1): nothing on a new record, removes the property
                // from a record an upsert matches.
                Value::Null => {
                    check_property_name_to_unset(k).map_err(|e| at(&kpath, e))?;
                    props.insert(k.clone(), None);
                }
                _ => {
                    check_property_name(k).map_err(|e| at(&kpath, e))?;
                    let value = infer_value(k, v, self.opts.infer).map_err(|e| at(path, e))?;
                    props.insert(k.clone(), value);
                }
            }
        }
        self.plan.records.push(Planned {
            id,
            label,
            props,
            doc: self.doc,
            vectors,
        });
        for (k, objs) in children {
            let kpath = format!("{path}.{k}");
            let label = self.child_label(k, &kpath)?;
            let many = objs.len() > 1;
            for (i, o) in objs.into_iter().enumerate() {
                let cpath = if many {
                    format!("{kpath}[{i}]")
                } else {
                    kpath.clone()
                };
                let child = self.record(label.clone(), o, &cpath)?;
                self.plan.links.push((id, child));
            }
        }
        Ok(id)
    }

    fn root(&mut self, label: String, obj: &Map<String, Value>, path: &str) -> Result<()> {
        let id = self.record(label, obj, path)?;
        self.plan.roots.push(id);
        Ok(())
    }
}

/// Flattens `docs` (named `what[i]` in errors). With a non-empty `label` every document is a
/// record of that label; without one every document must be a container object.
pub fn flatten(
    label: Option<&str>,
    docs: &[Value],
    what: &str,
    opts: &FlattenOptions,
) -> Result<Plan> {
    let label = label.filter(|l| !l.is_empty());
    if let Some(l) = label {
        check_label(l)?;
    }
    let mut f = Flattener {
        opts,
        plan: Plan::default(),
        doc: 0,
    };
    for (i, doc) in docs.iter().enumerate() {
        f.doc = i;
        let path = format!("{what}[{i}]");
        let Value::Object(obj) = doc else {
            return Err(Error::invalid(format!(
                "{path}: a document must be a JSON object"
            )));
        };
        match label {
            Some(l) => f.root(l.to_string(), obj, &path)?,
            None => {
                for (k, v) in obj {
                    let kpath = format!("{path}.{k}");
                    let objs: Vec<&Map<String, Value>> = match v {
                        Value::Object(o) => vec![o],
                        Value::Array(items) if items.iter().all(Value::is_object) => {
                            items.iter().filter_map(Value::as_object).collect()
                        }
                        _ => {
                            return Err(Error::invalid(format!(
                                "{kpath}: without `label` the data must be a container object whose keys hold objects or arrays of objects (give `label` to import properties)"
                            )))
                        }
                    };
                    let l = f.child_label(k, &kpath)?;
                    for (j, o) in objs.into_iter().enumerate() {
                        f.root(l.clone(), o, &format!("{kpath}[{j}]"))?;
                    }
                }
            }
        }
    }
    Ok(f.plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(label: Option<&str>, docs: Value) -> Result<Plan> {
        let docs = match docs {
            Value::Array(a) => a,
            d => vec![d],
        };
        flatten(label, &docs, "data", &FlattenOptions::default())
    }

    #[test]
    fn nested_objects_and_arrays_become_linked_children() {
        let p = plan(
            Some("ORDER"),
            json!({"n": 1, "customer": {"name": "a"}, "items": [{"sku": "x", "product": {"p": 1}}, {"sku": "y"}], "tags": ["t"]}),
        )
        .unwrap();
        let labels: Vec<_> = p.records.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["ORDER", "customer", "items", "product", "items"]);
        assert_eq!(p.links.len(), 4);
        assert_eq!(p.roots, vec![p.records[0].id]);
        assert!(p.records[0].props.contains_key("tags"));
        assert!(!p.records[0].props.contains_key("items"));
    }

    #[test]
    fn container_objects_need_objects_and_errors_name_the_path() {
        let p = plan(None, json!({"A": [{"x": 1}, {"x": 2}], "B": {"y": 1}})).unwrap();
        assert_eq!(p.roots.len(), 3);
        let e = plan(None, json!({"A": 1})).unwrap_err();
        assert!(e.message.starts_with("data[0].A:"), "{}", e.message);
        let e = plan(Some("L"), json!([{"a": 1}, {"b": [1, {"c": 1}]}])).unwrap_err();
        assert!(e.message.starts_with("data[1].b:"), "{}", e.message);
        let e = plan(Some("L"), json!([{"a": 1}, {"__id": 1}])).unwrap_err();
        assert!(e.message.starts_with("data[1].__id:"), "{}", e.message);
        let e = plan(Some("L"), json!([1])).unwrap_err();
        assert!(e.message.contains("data[0]"), "{}", e.message);
    }
}
