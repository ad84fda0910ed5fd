//! Bulk data formats (BEHAVIOUR.md §6): nested JSON documents flattened into records and
//! parent -> child links, CSV parsed into flat documents, records rendered as CSV. Pure
//! translation: nothing here touches the store; `engine::ingest` writes what this plans.

pub mod csv;
pub mod documents;

pub use documents::{flatten, FlattenOptions, Plan, Planned};
