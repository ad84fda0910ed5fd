//! Graph record database engine. See docs/design.md for the map of modules.

pub mod error;
pub mod log;
pub mod model;
pub mod store;
pub mod engine;
pub mod protocol;
pub mod config;
pub mod metrics;
pub mod wire;
pub mod cli;
pub mod server;
