//! Bulk data formats (BEHAVIOUR.md §6): nested JSON documents flattened into records and
//! parent -> child links, CSV parsed into flat documents, records rendered as CSV. Pure
//! translation: nothing here touches the store; `engine::ingest` writes what this plans.

pub mod csv;
pub mod documents;

pub use documents::{flatten, FlattenOptions, Plan, Planned};

use crate::error::{Error, Result};
use serde_json::Value;

/// Most dimensions an inline vector may have.
pub const MAX_VECTOR_DIMENSIONS: usize = 65_536;

/// An inline vector: the property it embeds and its values.
pub type InlineVector = (String, Vec<f64>);

/// Inline vector entries `[{propertyName, vector, index?, similarityFunction?}]` (null or `[]`:
/// none), as the SDK sends them with `$vectors` and CSV `vectors[i]`.
pub fn inline_vectors(v: &Value, path: &str) -> Result<Vec<InlineVector>> {
    let entries = match v {
        Value::Null => return Ok(vec![]),
        Value::Array(a) => a,
        _ => {
            return Err(Error::invalid(format!(
                "{path}: expected an array of vector entries"
            )))
        }
    };
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let at = format!("{path}[{i}]");
            let name = vector_property_name(e.get("propertyName").and_then(Value::as_str), &at)?;
            let values = vector_values(e.get("vector"), &format!("{at}.vector"))?;
            Ok((name, values))
        })
        .collect()
}

/// An inline vector entry's `propertyName` (`at`: the entry's path): a property name like
/// any other (non-empty, not reserved, at most `MAX_NAME_BYTES`).
pub fn vector_property_name(name: Option<&str>, at: &str) -> Result<String> {
    let name = name.filter(|n| !n.is_empty()).ok_or_else(|| {
        Error::invalid(format!("{at}.propertyName: a non-empty string is required"))
    })?;
    crate::model::check_property_name(name)
        .map_err(|e| Error::invalid(format!("{at}.propertyName: {}", e.message)))?;
    Ok(name.to_string())
}

/// A vector's values: 1 to [`MAX_VECTOR_DIMENSIONS`] finite numbers.
pub fn vector_values(v: Option<&Value>, path: &str) -> Result<Vec<f64>> {
    let values: Vec<f64> = v
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect())
        .unwrap_or_default();
    check_vector(&values, path)?;
    Ok(values)
}

pub fn check_vector(values: &[f64], path: &str) -> Result<()> {
    if values.is_empty()
        || values.len() > MAX_VECTOR_DIMENSIONS
        || !values.iter().all(|f| f.is_finite())
    {
        return Err(Error::invalid(format!(
            "{path}: expected 1 to {MAX_VECTOR_DIMENSIONS} finite numbers"
        )));
    }
    Ok(())
}
