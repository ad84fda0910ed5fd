//! Graph record database engine. See docs/design.md for the map of modules.

pub mod activity;
pub mod auth;
pub mod backup;
pub mod bulk;
pub mod cli;
pub mod config;
pub mod engine;
pub mod error;
pub mod loader;
pub mod log;
pub mod metrics;
pub mod model;
pub mod protocol;
pub mod query;
pub mod server;
pub mod store;
pub mod wire;
