//! Rust integration tests: the real `engine` binary, started on port 0 with a temporary data
//! directory. One test binary (modules below) so the engine links once.

/// `engine serve` on port 0 (HTTP and gRPC) with `dir` as its data directory, stdin closed.
pub fn serve_command(dir: &std::path::Path) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_engine"));
    c.args([
        "serve",
        "--http-addr",
        "127.0.0.1:0",
        "--grpc-addr",
        "127.0.0.1:0",
        "--data-dir",
    ])
    .arg(dir)
    .stdin(std::process::Stdio::null());
    c
}

mod grpc;
mod ingest;
mod search;
mod startup;
mod store;
mod transactions;
