//! Rust integration tests: the real `engine` binary, started on port 0 with a temporary data
//! directory. One test binary (modules below) so the engine links once.

mod ingest;
mod search;
mod startup;
mod store;
